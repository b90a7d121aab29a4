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

from ..utils import taps


def _zcdp_epsilon(rho, delta):
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def top_k_epsilon(eps0, k, delta):
    """(epsilon, delta) of k peeling rounds of eps0 each."""
    rho = k * (eps0 / math.sqrt(8.0)) ** 2 if eps0 < 1e150 else math.inf  # no overflow warning
    return min(k * eps0, _zcdp_epsilon(rho, delta))


def top_k_round_epsilon(epsilon, delta, k):
    """Compute the largest per-round eps0 whose k-fold composition is (epsilon, delta)-DP.

    k peeling exponential mechanisms of ``eps0`` each are ``k * eps0``-DP
    and ``k * eps0**2 / 8``-zCDP; the per-round budget returned is the larger
    of ``epsilon / k`` and the zCDP root, so either composition certifies the
    total. It is what :func:`gumbel_top_k` takes as ``eps0``.

    The zCDP branch has a closed form: with L = ln(1/delta) and s = sqrt(rho),
    rho + 2 sqrt(rho L) = epsilon is s^2 + 2 s sqrt(L) - epsilon = 0, so
    s = epsilon / (sqrt(L) + sqrt(L + epsilon)) (the root written without
    cancellation) and eps0 = sqrt(8 rho / k). It stays finite and exact for
    every epsilon in (0, inf) and delta down to the smallest float.

    Parameters
    ----------
    epsilon : float
        Total budget of the k selections, ``> 0``; ``inf`` gives ``inf``.
    delta : float
        Total delta of the zCDP conversion, in (0, 1).
    k : int
        Number of items selected (rounds), ``>= 1``.

    Returns
    -------
    eps0 : float
        Budget of each round.

    See Also
    --------
    gumbel_top_k : The selection that spends ``eps0`` per round.

    Examples
    --------
    >>> from skdp.mechanisms import top_k_round_epsilon
    >>> round(top_k_round_epsilon(epsilon=1.0, delta=1e-5, k=10), 4)
    0.1291
    >>> round(top_k_round_epsilon(epsilon=1.0, delta=1e-5, k=1), 4)
    1.0
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
    """Choose the indices of k scores by one-shot Gumbel top-k, in selection order.

    Gumbel noise of scale ``2 * sensitivity / eps0`` is added to every score
    once and the k largest are kept: the same distribution as k rounds of the
    exponential mechanism with ``eps0`` each, peeling off the winner every
    round (Durfee & Rogers 2019). The release is (epsilon, delta)-DP for the
    (epsilon, delta) that :func:`top_k_round_epsilon` was given. Only the
    indices may be released, not the noisy scores. ``eps0 = inf`` (or zero
    sensitivity) returns the exact top k (no privacy).

    Parameters
    ----------
    scores : array-like of shape (n_items,)
        The quality score of each item, computed from the private data.
    k : int
        Number of items to select.
    eps0 : float
        Budget of each round, e.g. from :func:`top_k_round_epsilon`.
    sensitivity : float
        Largest change of any one score when one record is added or removed.
    rng : numpy.random.Generator
        Source of the noise. For a private release it must be fresh and
        secret (skdp's estimators pass ``skdp.utils.random.mechanism_rng()``);
        a seeded generator makes the selection reproducible and not private.

    Returns
    -------
    indices : ndarray of shape (k,)
        Indices into ``scores``, the first selected first.

    See Also
    --------
    top_k_round_epsilon : The per-round budget for a total (epsilon, delta).
    skdp.feature_selection.DPFisherSelector : Selects features with this mechanism.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.mechanisms import gumbel_top_k, top_k_round_epsilon
    >>> scores = np.array([0.1, 5.0, 0.3, 4.0])
    >>> gumbel_top_k(scores, k=2, eps0=np.inf, sensitivity=1.0, rng=None)
    array([1, 3])
    >>> eps0 = top_k_round_epsilon(epsilon=1.0, delta=1e-5, k=2)
    >>> gumbel_top_k(scores, k=2, eps0=eps0, sensitivity=0.01, rng=np.random.default_rng()).shape
    (2,)
    """
    scores = np.asarray(scores, dtype=float)
    if math.isinf(eps0) or sensitivity == 0:
        noisy = scores
    else:
        scores = taps.release("exponential", scores, sensitivity, "linf")  # each score moves <= sensitivity
        noisy = scores + rng.gumbel(scale=2.0 * sensitivity / eps0, size=scores.shape) * taps.noise_factor()
    return np.argsort(-noisy, kind="stable")[:k]
