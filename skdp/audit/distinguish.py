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
    """A lower bound on epsilon that holds with ``confidence``, from scores on D and on D'.

    Larger scores should indicate D'. Both directions of the inequality are
    tried (D' vs D and D vs D'), each threshold at level ``(1 - confidence) / (2 * tries)``.
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
