"""Epsilon lower bounds from a distinguishing test between two neighbouring datasets.

Run a mechanism many times on D and on a neighbour D' and record a scalar
score each time. For any threshold t, (epsilon, delta)-DP forces
``P[s' > t] <= exp(epsilon) P[s > t] + delta`` (and symmetrically). With
Clopper-Pearson bounds on both rates, ``log((TPR_low - delta) / FPR_high)`` is
a lower bound on epsilon at the chosen confidence; the best threshold over
a fixed grid is reported (a Bonferroni correction covers the grid).
"""
import numpy as np
from scipy.stats import beta


def _rate_bounds(k, n, alpha):
    low = beta.ppf(alpha, k, n - k + 1) if k > 0 else 0.0
    high = beta.ppf(1 - alpha, k + 1, n - k) if k < n else 1.0
    return low, high


def epsilon_lower_bound(scores_d, scores_d_prime, delta, confidence=0.95, n_thresholds=40):
    """Compute a lower bound on epsilon that holds with ``confidence``, from scores on D and on D'.

    Larger scores should indicate D'. For each threshold ``t`` of a grid of
    ``n_thresholds`` quantiles of the pooled scores, (epsilon, delta)-DP
    forces ``P[s' > t] <= exp(epsilon) P[s > t] + delta``; with
    Clopper-Pearson bounds on both rates, ``log((TPR_low - delta) / FPR_high)``
    is a lower bound on epsilon. Both directions of the inequality are tried
    (D' vs D and D vs D'), and each rate is bounded at level
    ``(1 - confidence) / (4 * n_thresholds)`` (Bonferroni over the grid), so
    the best bound over the grid still holds with ``confidence``.

    Parameters
    ----------
    scores_d : array-like of shape (n_runs_d,)
        One scalar score per run of the mechanism on D.
    scores_d_prime : array-like of shape (n_runs_d_prime,)
        One scalar score per run on the neighbour D'.
    delta : float
        The delta of the claim being audited.
    confidence : float, default=0.95
        Confidence of the bound, in (0, 1).
    n_thresholds : int, default=40
        Thresholds tried, quantiles 0.02 to 0.98 of the pooled scores; more
        thresholds find a better one but pay a larger Bonferroni correction.

    Returns
    -------
    epsilon : float
        The lower bound on epsilon (0.0 if no threshold refutes anything).

    See Also
    --------
    one_run_audit : A lower bound from a single training run.
    skdp.mechanisms.gaussian_dp_delta : The exact privacy profile of a Gaussian mechanism to compare with.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.audit import epsilon_lower_bound
    >>> rng = np.random.default_rng(0)
    >>> s_d, s_d_prime = rng.normal(0, 1, 2000), rng.normal(3, 1, 2000)
    >>> bound = epsilon_lower_bound(s_d, s_d_prime, delta=1e-5)
    >>> 1.0 < bound < 10.0
    True
    """
    s0, s1 = np.asarray(scores_d, dtype=float), np.asarray(scores_d_prime, dtype=float)
    pooled = np.concatenate([s0, s1])
    thresholds = np.unique(np.quantile(pooled, np.linspace(0.02, 0.98, n_thresholds)))
    alpha = (1 - confidence) / (4 * len(thresholds))  # two rates x two directions per threshold
    best = 0.0
    for t in thresholds:
        for a, b in (((s1 > t), (s0 > t)), ((s0 <= t), (s1 <= t))):
            k_in, k_out = int(a.sum()), int(b.sum())
            tpr_low, _ = _rate_bounds(k_in, len(a), alpha)
            _, fpr_high = _rate_bounds(k_out, len(b), alpha)
            if tpr_low - delta > 0:
                best = max(best, float(np.log((tpr_low - delta) / max(fpr_high, 1e-300))))
    return best
