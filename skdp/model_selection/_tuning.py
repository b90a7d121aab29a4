"""Random-stopping hyperparameter tuning with Renyi DP (Papernot & Steinke, ICLR 2022): the math.

Pure functions, no estimators: the number of trials ``K``, the RDP of the
tuned algorithm and the conversion to (epsilon, delta). ``PrivateSearchCV``
(:mod:`skdp.model_selection._private_search`) is built on them, and a test
pins them to a value computed by hand.

The algorithm ``A`` runs a randomized algorithm ``Q`` (one trial: pick a
candidate, train with DP, score with DP) ``K`` times on the same data, ``K``
drawn from a public distribution and kept secret, and outputs only the best
``(output, score)`` of the ``K`` runs.

**Theorem 2 (truncated negative binomial).** Let ``Q`` be
``(lambda, eps(lambda))``-RDP and ``(lambda_hat, eps(lambda_hat))``-RDP with
``lambda > 1``, ``lambda_hat >= 1``. Let ``eta > -1``, ``0 < gamma < 1`` and
``K ~ D_{eta,gamma}``,
``P[K = k] = (1 - gamma)^k / (gamma^-eta - 1) * prod_{l=0}^{k-1} (l + eta) / (l + 1)``
for ``k >= 1`` (``eta = 0``: the logarithmic distribution,
``P[K = k] = (1 - gamma)^k / (k log(1/gamma))``). Then ``A`` is
``(lambda, eps')``-RDP with::

    eps' = eps(lambda) + (1 + eta) (1 - 1/lambda_hat) eps(lambda_hat)
           + (1 + eta) log(1/gamma) / lambda_hat + log(E[K]) / (lambda - 1),

    E[K] = eta (1 - gamma) / (gamma (1 - gamma^eta))     (eta != 0)
         = (1/gamma - 1) / log(1/gamma)                 (eta = 0).

``lambda_hat`` is free: we take the minimum over ``lambda_hat`` in
``{1} + orders`` (at ``lambda_hat = 1`` the second term vanishes; ``Q``'s
KL divergence is finite for the Gaussian mechanisms used here).

**Theorem 6 (Poisson).** If ``K ~ Poisson(mu)`` (``K = 0`` outputs nothing)
and ``Q`` is ``(lambda, eps(lambda))``-RDP and ``(eps_hat, delta_hat)``-DP with
``e^eps_hat <= 1 + 1/(lambda - 1)``, then ``A`` is ``(lambda, eps')``-RDP with::

    eps' = eps(lambda) + mu * delta_hat + log(mu) / (lambda - 1).

``delta_hat`` is read off ``Q``'s RDP curve at
``eps_hat = log(1 + 1/(lambda - 1))`` by the inverse of the conversion below.

**RDP -> (epsilon, delta)** is Opacus's ``get_privacy_spent`` (Balle et al.
2020, as ``skdp.privacy.accounting`` uses)::

    epsilon = min_lambda  eps'(lambda) + log((lambda - 1)/lambda) - (log(delta) + log(lambda)) / (lambda - 1).
"""
import math

import numpy as np
from scipy.optimize import brentq

from ..privacy.composition import _no_nan, rdp_to_delta, rdp_to_epsilon  # noqa: F401 (their home)

DISTRIBUTIONS = ("truncated_negative_binomial", "poisson")


def tnb_expected_trials(eta, gamma):
    """``E[K]`` of the truncated negative binomial ``D_{eta,gamma}`` (Papernot & Steinke, Section 2)."""
    if eta == 0:
        return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
    return eta * (1.0 - gamma) / (gamma * (1.0 - gamma ** eta))


def tnb_gamma_for_mean(eta, mean):
    """The ``gamma`` in (0, 1) whose ``D_{eta,gamma}`` has ``E[K] = mean`` (``E[K]`` falls as gamma grows).

    ``mean`` must exceed 1: ``K >= 1`` always, and ``E[K] -> 1`` only as ``gamma -> 1``.
    """
    if not mean > 1:
        raise ValueError(f"n_trials_mean must be > 1 for the truncated negative binomial, got {mean!r}.")
    return brentq(lambda g: tnb_expected_trials(eta, g) - mean, 1e-15, 1 - 1e-12, xtol=1e-15, rtol=1e-12)


def sample_tnb(eta, gamma, rng):
    """One draw of ``K ~ D_{eta,gamma}`` by inverting its CDF with the pmf recursion.

    ``P[K=1] = (1-gamma) eta / (gamma^-eta - 1)`` (``(1-gamma)/log(1/gamma)`` at
    ``eta = 0``) and ``P[K=k+1] / P[K=k] = (1-gamma) (k + eta) / (k + 1)``.
    ``rng`` must be mechanism randomness: ``K`` is part of what the theorem keeps secret.
    """
    u = rng.random()
    p = (1 - gamma) / math.log(1 / gamma) if eta == 0 else (1 - gamma) * eta / (gamma ** -eta - 1)
    k, cdf = 1, p
    while cdf < u and p > 1e-300:  # p underflows only where the remaining mass is below float precision
        p *= (1 - gamma) * (k + eta) / (k + 1)
        k += 1
        cdf += p
    return k


def random_stopping_rdp(orders, rdp, distribution, *, eta=0.0, gamma=None, mu=None):
    """RDP curve (at ``orders``) of the best of ``K`` runs of a mechanism whose RDP at ``orders`` is ``rdp``.

    Random-stopping tuning (Papernot & Steinke, ICLR 2022) runs a base
    mechanism ``Q`` ``K`` times, ``K`` drawn from a public law and kept
    secret, and releases only the best run. For the truncated negative
    binomial ``D_{eta,gamma}`` (Theorem 2)::

        eps'(lambda) = eps(lambda) + min_lambda_hat [(1 + eta) (1 - 1/lambda_hat) eps(lambda_hat)
                       + (1 + eta) log(1/gamma) / lambda_hat] + log(E[K]) / (lambda - 1),

    the minimum over ``lambda_hat`` in ``{1} + orders``. For ``K ~
    Poisson(mu)`` (Theorem 6)::

        eps'(lambda) = eps(lambda) + mu * delta_hat(lambda) + log(mu) / (lambda - 1),

    with ``delta_hat`` read off ``Q``'s own curve at ``eps_hat = log(lambda
    / (lambda - 1))``. The bound holds only if ``K`` stays secret and each
    run's randomness is fresh. NaN in ``rdp`` is read as no bound (inf).

    Parameters
    ----------
    orders : array-like of float
        RDP orders ``lambda > 1``.
    rdp : array-like of float
        The base mechanism's RDP at ``orders``.
    distribution : {"truncated_negative_binomial", "poisson"}
        Law of ``K``: Theorem 2 or Theorem 6 of Papernot & Steinke (module docstring).
    eta : float, default=0.0
        Shape of the truncated negative binomial, > -1 (0: the logarithmic law).
    gamma : float or None, default=None
        Parameter of the truncated negative binomial, in (0, 1); required for
        it (``E[K]`` falls as ``gamma`` grows).
    mu : float or None, default=None
        Mean of the Poisson law, > 0; required for it.

    Returns
    -------
    rdp : ndarray
        ``eps'(lambda)`` at each order.

    Raises
    ------
    ValueError
        If ``distribution`` is not one of the two laws.

    See Also
    --------
    random_stopping_epsilon : The same bound converted to (epsilon, delta).
    PrivateSearchCV : The search built on it.

    Examples
    --------
    The Gaussian mechanism of sensitivity 1 and noise 4 has RDP ``lambda / 32``:

    >>> import numpy as np
    >>> from skdp.model_selection import random_stopping_rdp
    >>> orders = np.arange(2, 129, dtype=float)
    >>> tuned = random_stopping_rdp(orders, orders / 32, "truncated_negative_binomial", gamma=0.05)
    >>> tuned.shape, bool((tuned > orders / 32).all())
    ((127,), True)
    """
    orders, rdp = np.asarray(orders, dtype=float), _no_nan(rdp)
    if distribution == "truncated_negative_binomial":
        # min over lambda_hat of (1+eta)(1 - 1/lambda_hat) eps(lambda_hat) + (1+eta) log(1/gamma) / lambda_hat,
        # lambda_hat = 1 included (there the first term is 0).
        hat = (1 + eta) * ((1 - 1 / orders) * rdp + math.log(1 / gamma) / orders)
        best_hat = min(float(np.min(hat)), (1 + eta) * math.log(1 / gamma))
        return rdp + best_hat + math.log(tnb_expected_trials(eta, gamma)) / (orders - 1)
    if distribution == "poisson":
        # delta_hat at eps_hat = log(1 + 1/(lambda-1)) = log(lambda/(lambda-1)), from Q's own RDP curve.
        delta_hat = np.array([rdp_to_delta(orders, rdp, math.log(lam / (lam - 1))) for lam in orders])
        return rdp + mu * delta_hat + math.log(mu) / (orders - 1)
    raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}.")


def random_stopping_epsilon(orders, rdp, delta, distribution, **law):
    """``(epsilon, order)`` of the tuned algorithm at ``delta``: Theorem 2 or 6, then Opacus's conversion.

    Applies :func:`random_stopping_rdp`, then converts the tuned RDP curve
    to (epsilon, ``delta``)-DP as Opacus's ``get_privacy_spent`` does (Balle
    et al. 2020)::

        epsilon = min_lambda eps'(lambda) + log((lambda - 1)/lambda) - (log(delta) + log(lambda)) / (lambda - 1).

    The epsilon covers the whole tuned algorithm, selection included, under
    the adjacency of the base mechanism's RDP; it is never below 0.

    Parameters
    ----------
    orders : array-like of float
        RDP orders ``lambda > 1``.
    rdp : array-like of float
        The base mechanism's RDP at ``orders``.
    delta : float
        Failure probability of the guarantee, in (0, 1).
    distribution : {"truncated_negative_binomial", "poisson"}
        Law of the number of runs ``K``.
    **law : dict
        Parameters of that law, passed to :func:`random_stopping_rdp`:
        ``eta`` and ``gamma``, or ``mu``.

    Returns
    -------
    epsilon : float
        Epsilon of the tuned algorithm at ``delta``.
    order : float
        The RDP order at which the conversion is tightest.

    See Also
    --------
    random_stopping_rdp : The tuned RDP curve itself.
    PrivateSearchCV : Calibrates its trials' noise with this bound.

    Examples
    --------
    The Gaussian mechanism of sensitivity 1 and noise 4 (RDP ``lambda / 32``)
    is (1.01, 1e-5)-DP once; the best of ``K`` runs, ``K`` logarithmic with
    ``gamma = 0.05`` (``E[K]`` about 6.3), is (1.70, 1e-5)-DP:

    >>> import numpy as np
    >>> from skdp.model_selection import random_stopping_epsilon
    >>> orders = np.arange(2, 129, dtype=float)
    >>> eps, order = random_stopping_epsilon(orders, orders / 32, 1e-5, "truncated_negative_binomial",
    ...                                      eta=0.0, gamma=0.05)
    >>> round(eps, 2), order
    (1.7, 19.0)
    """
    return rdp_to_epsilon(orders, random_stopping_rdp(orders, rdp, distribution, **law), delta)
