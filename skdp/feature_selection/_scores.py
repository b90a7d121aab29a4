"""Feature scores for class separation: the DFS class-mean gap and the pairwise t-statistic."""
import numpy as np


def class_means(X, codes, n_classes, floor=1.0):
    """(n_classes, n_features) means ``sum / max(count, floor)``; an empty class sits at 0."""
    counts = np.bincount(codes, minlength=n_classes).astype(float)
    sums = np.zeros((n_classes, X.shape[1]))
    np.add.at(sums, codes, X)
    return sums / np.maximum(counts, floor)[:, None], counts


def mean_gap(X, codes, n_classes, floor=1.0):
    """Algorithm 1, steps 1-2: D_j = max over class pairs of |mean_q,j - mean_c,j|."""
    means, _ = class_means(X, codes, n_classes, floor)
    return means.max(axis=0) - means.min(axis=0)


def max_pairwise_t(X, codes, n_classes):
    """Largest |Welch t| over class pairs, per feature (zero-variance pairs score 0 unless means differ)."""
    means, counts = class_means(X, codes, n_classes)
    sq = np.zeros_like(means)
    np.add.at(sq, codes, X ** 2)
    var = np.zeros_like(means)
    present = counts > 1
    var[present] = (sq[present] - counts[present, None] * means[present] ** 2) / (counts[present, None] - 1)
    se2 = np.where(counts[:, None] > 0, np.maximum(var, 0) / np.maximum(counts, 1)[:, None], np.inf)
    best = np.zeros(X.shape[1])
    for q in range(n_classes):
        for c in range(q + 1, n_classes):
            gap = np.abs(means[q] - means[c])
            se = np.sqrt(se2[q] + se2[c])
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(se > 0, gap / se, np.where(gap > 0, np.inf, 0.0))
            best = np.maximum(best, np.nan_to_num(t, posinf=np.finfo(float).max))
    return best
