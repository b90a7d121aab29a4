"""The Gaussian mechanism, calibrated exactly (Balle & Wang 2018; Dong, Roth & Su 2019).

A Gaussian mechanism with L2 sensitivity ``Delta`` and noise std ``sigma`` is
``mu``-Gaussian-DP with ``mu = Delta / sigma``. Its exact (epsilon, delta)
curve is ``delta(eps) = Phi(-eps/mu + mu/2) - exp(eps) * Phi(-eps/mu - mu/2)``,
valid for every epsilon (unlike the classical ``sqrt(2 ln(1.25/delta))/eps``
bound, proven only for epsilon < 1). Composing Gaussian mechanisms adds their
``mu**2``, so several noisy statistics share one budget without loss.
"""
import math

from scipy.optimize import brentq
from scipy.special import log_ndtr


def gaussian_dp_delta(mu, epsilon):
    """The smallest delta for which a mu-GDP mechanism is (epsilon, delta)-DP."""
    if mu <= 0:
        return 0.0
    if math.isinf(epsilon):
        return 0.0
    a = log_ndtr(-epsilon / mu + mu / 2)
    b = epsilon + log_ndtr(-epsilon / mu - mu / 2)
    return max(0.0, math.exp(a) - math.exp(b))  # computed in logs to stay finite for large epsilon


def gaussian_dp_mu(epsilon, delta):
    """The largest mu such that a mu-GDP mechanism is (epsilon, delta)-DP."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got epsilon={epsilon}, delta={delta}.")
    if math.isinf(epsilon):
        return math.inf
    hi = 1.0
    while gaussian_dp_delta(hi, epsilon) < delta:
        hi *= 2.0
    return brentq(lambda mu: gaussian_dp_delta(mu, epsilon) - delta, 1e-12, hi, xtol=1e-12, rtol=1e-12)


def analytic_gaussian_sigma(epsilon, delta, sensitivity):
    """Noise std of the analytic Gaussian mechanism: the smallest sigma that is (epsilon, delta)-DP."""
    if sensitivity < 0:
        raise ValueError(f"sensitivity must be >= 0, got {sensitivity}.")
    if math.isinf(epsilon) or sensitivity == 0:
        return 0.0
    # brentq stops within tolerance on either side; nudge up so the certified delta is never exceeded.
    return sensitivity / gaussian_dp_mu(epsilon, delta) * (1 + 1e-9)
