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
    """Compute the smallest delta for which a mu-GDP mechanism is (epsilon, delta)-DP.

    This is the exact privacy profile of the Gaussian mechanism (Dong, Roth &
    Su 2019, Corollary 2.13),
    ``delta(epsilon) = Phi(-epsilon/mu + mu/2) - exp(epsilon) Phi(-epsilon/mu - mu/2)``,
    valid for every epsilon >= 0. It is computed in logarithms, so it stays
    finite for large epsilon.

    Parameters
    ----------
    mu : float
        The Gaussian-DP parameter, ``sensitivity / sigma`` for one Gaussian
        mechanism, ``sqrt(sum of mu_i**2)`` for several composed; ``mu <= 0``
        (no sensitivity) gives delta 0.
    epsilon : float
        The epsilon at which delta is wanted, ``>= 0``; ``inf`` gives 0.

    Returns
    -------
    delta : float
        The delta, in [0, 1].

    See Also
    --------
    gaussian_dp_mu : The inverse: the largest mu for a given (epsilon, delta).
    analytic_gaussian_sigma : The noise std for a given (epsilon, delta).

    Examples
    --------
    >>> from skdp.mechanisms import gaussian_dp_delta
    >>> round(gaussian_dp_delta(1.0, epsilon=1.0), 4)
    0.1269
    """
    if mu <= 0:
        return 0.0
    if math.isinf(epsilon):
        return 0.0
    a = log_ndtr(-epsilon / mu + mu / 2)
    b = epsilon + log_ndtr(-epsilon / mu - mu / 2)
    return max(0.0, math.exp(a) - math.exp(b))  # computed in logs to stay finite for large epsilon


def gaussian_dp_mu(epsilon, delta):
    """Compute the largest mu such that a mu-GDP mechanism is (epsilon, delta)-DP.

    Inverts :func:`gaussian_dp_delta` in mu by bisection (the profile is
    increasing in mu). Composed Gaussian mechanisms add their ``mu**2``, so
    ``mu`` is the budget that several noisy statistics of one release share
    without the loss of composing (epsilon, delta) pairs.

    Parameters
    ----------
    epsilon : float
        Target epsilon, ``> 0``; ``inf`` gives ``inf``.
    delta : float
        Target delta, in (0, 1).

    Returns
    -------
    mu : float
        The largest mu of an (epsilon, delta)-DP mechanism.

    See Also
    --------
    gaussian_dp_delta : The privacy profile this function inverts.
    analytic_gaussian_sigma : ``sensitivity / mu``, the calibrated noise std.

    Examples
    --------
    >>> from skdp.mechanisms import gaussian_dp_mu
    >>> round(gaussian_dp_mu(epsilon=1.0, delta=1e-5), 4)
    0.2681
    """
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got epsilon={epsilon}, delta={delta}.")
    if math.isinf(epsilon):
        return math.inf
    hi = 1.0
    while gaussian_dp_delta(hi, epsilon) < delta:
        hi *= 2.0
    return brentq(lambda mu: gaussian_dp_delta(mu, epsilon) - delta, 1e-12, hi, xtol=1e-12, rtol=1e-12)


def gaussian_dp_epsilon(mu, delta):
    """Compute the smallest epsilon at which a mu-GDP mechanism is (epsilon, ``delta``)-DP.

    Inverts :func:`gaussian_dp_delta` in epsilon by bisection (the profile
    decreases in epsilon).

    Parameters
    ----------
    mu : float
        The Gaussian-DP parameter, >= 0 (``inf``: no noise).
    delta : float
        Target delta, in (0, 1).

    Returns
    -------
    epsilon : float
        0 for ``mu = 0``, ``inf`` for ``mu = inf``.

    See Also
    --------
    gaussian_dp_mu : The largest mu for a given (epsilon, delta).

    Examples
    --------
    >>> from skdp.mechanisms import gaussian_dp_epsilon, gaussian_dp_mu
    >>> round(gaussian_dp_epsilon(gaussian_dp_mu(1.0, 1e-5), 1e-5), 6)
    1.0
    """
    if not 0 < delta < 1:
        raise ValueError(f"need 0 < delta < 1, got delta={delta}.")
    if mu <= 0 or gaussian_dp_delta(mu, 0.0) <= delta:
        return 0.0
    if math.isinf(mu):
        return math.inf
    hi = 1.0
    while gaussian_dp_delta(mu, hi) > delta:
        hi *= 2.0
    return brentq(lambda eps: gaussian_dp_delta(mu, eps) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12)


def analytic_gaussian_sigma(epsilon, delta, sensitivity):
    """Compute the noise std of the analytic Gaussian mechanism: the smallest (epsilon, delta)-DP sigma.

    Adding ``N(0, sigma**2)`` noise to each coordinate of a statistic of L2
    sensitivity ``sensitivity`` is (epsilon, delta)-DP exactly when
    ``sensitivity / sigma <= gaussian_dp_mu(epsilon, delta)`` (Balle & Wang
    2018). Unlike the classical ``sqrt(2 ln(1.25/delta)) * sensitivity / epsilon``,
    this holds for every epsilon and gives less noise. The result is rounded
    up by a relative 1e-9 so that the certified delta is never exceeded.

    Parameters
    ----------
    epsilon : float
        Privacy budget of the release, ``> 0``; ``inf`` gives sigma 0 (no
        privacy).
    delta : float
        Allowed failure probability, in (0, 1).
    sensitivity : float
        L2 sensitivity of the statistic under the adjacency being protected,
        ``>= 0``; 0 gives sigma 0.

    Returns
    -------
    sigma : float
        The standard deviation of the Gaussian noise to add.

    See Also
    --------
    gaussian_dp_mu : The Gaussian-DP parameter that sigma is calibrated to.
    gaussian_dp_delta : The delta a given sigma achieves at other epsilons.

    Examples
    --------
    >>> from skdp.mechanisms import analytic_gaussian_sigma
    >>> round(analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0), 3)
    3.731
    """
    if sensitivity < 0:
        raise ValueError(f"sensitivity must be >= 0, got {sensitivity}.")
    if math.isinf(epsilon) or sensitivity == 0:
        return 0.0
    # brentq stops within tolerance on either side; nudge up so the certified delta is never exceeded.
    return sensitivity / gaussian_dp_mu(epsilon, delta) * (1 + 1e-9)
