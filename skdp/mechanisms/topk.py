"""Private top-k selection by the exponential mechanism.

Adding Gumbel noise of scale ``2 * sensitivity / eps0`` to every score once
and keeping the k largest is the same distribution as k rounds of peeling
exponential mechanisms with ``eps0`` each (Durfee & Rogers, NeurIPS 2019).
Each round is ``eps0``-DP and, as a bounded-range mechanism, ``eps0**2 / 8``-zCDP
(Cesar & Rogers, 2021); the k rounds compose to the better of ``k * eps0`` and
the zCDP conversion ``rho + 2 sqrt(rho ln(1/delta))`` with ``rho = k eps0**2 / 8``.
"""
import math

import numpy as np
from scipy.optimize import brentq


def _zcdp_epsilon(rho, delta):
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def top_k_epsilon(eps0, k, delta):
    """(epsilon, delta) of k peeling rounds of eps0 each."""
    return min(k * eps0, _zcdp_epsilon(k * eps0 ** 2 / 8.0, delta))


def top_k_round_epsilon(epsilon, delta, k):
    """The largest per-round eps0 whose k-fold composition is (epsilon, delta)-DP."""
    if math.isinf(epsilon):
        return math.inf
    pure = epsilon / k
    hi = math.sqrt(8.0 * epsilon / k) + epsilon  # rho alone already exceeds epsilon beyond this
    zcdp = brentq(lambda e0: _zcdp_epsilon(k * e0 ** 2 / 8.0, delta) - epsilon, 0.0, hi, xtol=1e-14)
    zcdp *= 1 - 1e-9  # stay on the certified side of the root
    return max(pure, zcdp)


def gumbel_top_k(scores, k, eps0, sensitivity, rng):
    """Indices of k scores chosen by one-shot Gumbel top-k, in selection order.

    ``eps0 = inf`` (or zero sensitivity) returns the exact top k.
    """
    scores = np.asarray(scores, dtype=float)
    if math.isinf(eps0) or sensitivity == 0:
        noisy = scores
    else:
        noisy = scores + rng.gumbel(scale=2.0 * sensitivity / eps0, size=scores.shape)
    return np.argsort(-noisy, kind="stable")[:k]
