"""Attacks that measure what a fitted model reveals about its training data."""
from .inversion import InversionResult, MIFace
from .membership import MembershipResult, lira_offline_attack, loss_threshold_attack
from .scoring import score_reconstructions
from .torch_model import TorchUnavailableError, torch_model

__all__ = ["InversionResult", "MIFace", "MembershipResult", "TorchUnavailableError", "lira_offline_attack",
           "loss_threshold_attack", "score_reconstructions", "torch_model"]
