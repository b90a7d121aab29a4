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


def _zcdp_epsilon(rho, delta):
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def top_k_epsilon(eps0, k, delta):
    """(epsilon, delta) of k peeling rounds of eps0 each."""
    rho = k * (eps0 / math.sqrt(8.0)) ** 2 if eps0 < 1e150 else math.inf  # no overflow warning
    return min(k * eps0, _zcdp_epsilon(rho, delta))


def top_k_round_epsilon(epsilon, delta, k):
    """The largest per-round eps0 whose k-fold composition is (epsilon, delta)-DP.

    The zCDP branch has a closed form: with L = ln(1/delta) and s = sqrt(rho),
    rho + 2 sqrt(rho L) = epsilon is s^2 + 2 s sqrt(L) - epsilon = 0, so
    s = epsilon / (sqrt(L) + sqrt(L + epsilon)) (the root written without
    cancellation) and eps0 = sqrt(8 rho / k). It stays finite and exact for
    every epsilon in (0, inf) and delta down to the smallest float.
    """
    if math.isinf(epsilon):
        return math.inf
    if not (epsilon > 0 and 0 < delta < 1 and k >= 1):
        raise ValueError(f"need epsilon > 0, 0 < delta < 1 and k >= 1; got epsilon={epsilon!r}, "
                         f"delta={delta!r}, k={k!r}.")
    pure = epsilon / k
    log_inv_delta = -math.log(delta)
    s = epsilon / (math.sqrt(log_inv_delta) + math.sqrt(log_inv_delta + epsilon))
    zcdp = math.sqrt(8.0 / k) * s
    # Stay on the certified side of both roots (rounding of the products above).
    return max(pure, zcdp) * (1 - 1e-9)


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
