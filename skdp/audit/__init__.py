"""Checking privacy claims empirically: lower bounds on epsilon from attacks."""
from .distinguish import epsilon_lower_bound
from .fdp import one_run_gaussian_lower_bound
from .one_run import (AuditResult, log_likelihood_score, logit_score, mislabelled_canaries, one_run_audit,
                      one_run_epsilon_lower_bound, one_run_p_value)

__all__ = [
    "AuditResult",
    "epsilon_lower_bound",
    "log_likelihood_score",
    "logit_score",
    "mislabelled_canaries",
    "one_run_audit",
    "one_run_epsilon_lower_bound",
    "one_run_gaussian_lower_bound",
    "one_run_p_value",
]
