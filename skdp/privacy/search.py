"""The privacy cost of a hyperparameter search, by composition."""
import math

from sklearn.base import clone

from .report import dp_steps


def planned_spend(estimator, n_samples: int | None = None) -> tuple[float, float]:
    """``(epsilon, delta)`` that fitting ``estimator`` (unfitted; any nesting) on ``n_samples`` records spends.

    Every estimator in the tree that has an ``epsilon`` parameter is counted
    (a Pipeline's steps, ``TrainOnSynthetic``'s generator, ...). An estimator
    that plans its fit from public quantities (``_planned_privacy(n_samples)``,
    the DP-SGD estimators) reports exactly what its accountant will certify;
    that needs ``n_samples`` when ``noise_multiplier`` is set. Otherwise the
    ``epsilon`` parameter is used: every skdp fit spends at most that.
    """
    eps = delta = 0.0
    for step in dp_steps(estimator):
        plan = getattr(step, "_planned_privacy", None)
        params = step.get_params(deep=False)
        if plan is not None and (n_samples is not None or params.get("noise_multiplier") is not None):
            if n_samples is None:
                raise ValueError(
                    f"{type(step).__name__} has noise_multiplier={params['noise_multiplier']!r}: its spend "
                    "depends on the number of training records; pass n_samples=len(X).")
            e, d = plan(n_samples)
        elif params.get("epsilon") is None:  # declared public (SRGANTransformer without epsilon)
            e, d = 0.0, 0.0
        else:
            e = float(params["epsilon"])
            d = 0.0 if math.isinf(e) else float(params.get("delta", 0.0))
        eps, delta = eps + e, delta + d
    return eps, delta


def _fold_train_sizes(n_samples, n_splits):
    # K-fold train sizes are n - ceil(n/k) or n - floor(n/k); stratified splits can move a few
    # records between folds, so a small window around them is checked and the largest spend kept.
    lo, hi = n_samples - math.ceil(n_samples / n_splits), n_samples - n_samples // n_splits
    return range(max(2, lo - n_splits), min(n_samples, hi + n_splits) + 1)


def search_privacy_cost(search, n_samples: int | None = None) -> tuple[float, float]:
    """Total (epsilon, delta) of a fitted ``GridSearchCV`` / ``RandomizedSearchCV`` by basic composition.

    Every candidate is fitted ``n_splits_`` times, and the best is refitted on
    all the data: a record may be in all of those fits, so their epsilons and
    deltas add up. Each fit counts what it certifies: its ``epsilon`` when the
    noise is calibrated to it, or the accountant's epsilon for a fixed
    ``noise_multiplier`` (which needs ``n_samples``, the number of records the
    search was fitted on). Estimators nested anywhere in the candidate (Pipeline
    steps, ``TrainOnSynthetic``'s generator) are counted.

    Not covered, and not small: choosing the best candidate from validation
    scores computed on private data without noise is itself a release of that
    data. Use ``BudgetLedger`` to cap a search, and run searches on public or
    separate data when the choice must be private.

    Parameters
    ----------
    search : fitted GridSearchCV or RandomizedSearchCV
    n_samples : int or None, default=None
        Records the search was fitted on; needed when a candidate fixes ``noise_multiplier``.

    Returns
    -------
    epsilon, delta : float
    """
    if not hasattr(search, "cv_results_"):
        raise ValueError("search_privacy_cost needs a fitted search (no cv_results_).")
    eps = delta = 0.0
    sizes = None if n_samples is None else _fold_train_sizes(int(n_samples), search.n_splits_)
    for params in search.cv_results_["params"]:
        candidate = clone(search.estimator).set_params(**params)
        if sizes is None:
            e, d = planned_spend(candidate)
        else:
            e, d = max((planned_spend(candidate, n) for n in sizes), key=lambda ed: ed[0])
        eps += search.n_splits_ * e
        delta += search.n_splits_ * d
    if getattr(search, "refit", False):
        e, d = planned_spend(clone(search.estimator).set_params(**search.best_params_), n_samples)
        eps, delta = eps + e, delta + d
    return eps, min(delta, 1.0)
