"""skdp: differentially private estimators for scikit-learn, with torch models behind skorch."""
from .nn import DPMomentumClassifier, DPMomentumRegressor
from .discriminant import DPFisherClassifier
from .feature_selection import DFSRelease, DPFisherSelector, TTestSelector
from .generative import PGEGenerator, TrainOnSynthetic
from .superres import SRGANTransformer
from .model_selection import PrivateSearchCV
from .exceptions import BudgetExceededError, LedgerDetachedError, LedgerUnavailableError, PrivacyLeakWarning
from .privacy import (BudgetLedger, PrivacyAccountant, calibrate_noise_multiplier, compute_epsilon,
                      privacy_spent, search_privacy_cost)
from .utils.random import insecure_noise_seed

__version__ = "0.1.0"

__all__ = [
    "DPMomentumClassifier",
    "DPMomentumRegressor",
    "DPFisherClassifier",
    "DPFisherSelector",
    "DFSRelease",
    "TTestSelector",
    "PGEGenerator",
    "TrainOnSynthetic",
    "SRGANTransformer",
    "PrivateSearchCV",
    "BudgetExceededError",
    "LedgerDetachedError",
    "LedgerUnavailableError",
    "PrivacyLeakWarning",
    "BudgetLedger",
    "PrivacyAccountant",
    "calibrate_noise_multiplier",
    "compute_epsilon",
    "search_privacy_cost",
    "privacy_spent",
    "insecure_noise_seed",
]
