"""Privacy core: accounting, noise calibration, budget ledgers and what estimators report."""
from .accounting import ACCOUNTINGS, PrivacyAccountant, compute_epsilon
from .calibration import calibrate_noise_multiplier
from .composition import Spend, compose
from .ledger import BudgetLedger
from .public_steps import non_private_steps, register_public_step
from .report import privacy_spent, set_privacy_attributes
from .search import planned_spend, search_privacy_cost

__all__ = [
    "ACCOUNTINGS",
    "PrivacyAccountant",
    "compute_epsilon",
    "calibrate_noise_multiplier",
    "BudgetLedger",
    "Spend",
    "compose",
    "non_private_steps",
    "planned_spend",
    "privacy_spent",
    "register_public_step",
    "search_privacy_cost",
    "set_privacy_attributes",
]
