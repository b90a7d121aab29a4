"""Privacy core: accounting, noise calibration and budget ledgers."""
from .accounting import ACCOUNTINGS, PrivacyAccountant, compute_epsilon
from .calibration import calibrate_noise_multiplier
from .ledger import BudgetLedger
from .search import search_privacy_cost

__all__ = [
    "ACCOUNTINGS",
    "PrivacyAccountant",
    "compute_epsilon",
    "calibrate_noise_multiplier",
    "BudgetLedger",
    "search_privacy_cost",
]
