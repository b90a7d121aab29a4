"""Backward-compatible home of ``DPMomentumClassifier``; the estimators live in ``skdp.nn._momentum``."""
from .nn._momentum import DPMomentumClassifier, DPMomentumRegressor

__all__ = ["DPMomentumClassifier", "DPMomentumRegressor"]
