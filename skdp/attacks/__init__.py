"""Attacks that measure what a fitted model reveals about its training data."""
from .membership import MembershipResult, lira_offline_attack, loss_threshold_attack

__all__ = ["MembershipResult", "lira_offline_attack", "loss_threshold_attack"]
