"""The privacy cost of a hyperparameter search, by composition."""
import math

from sklearn.base import clone


def _spend_of(estimator):
    """(epsilon, delta) an unfitted estimator or Pipeline is set to spend: the sum over its steps."""
    steps = [s for _, s in getattr(estimator, "steps", [])] or [estimator]
    eps = delta = 0.0
    for step in steps:
        params = step.get_params(deep=False) if hasattr(step, "get_params") else {}
        if "epsilon" in params:
            eps += params["epsilon"]
            delta += 0.0 if math.isinf(params["epsilon"]) else params.get("delta", 0.0)
    return eps, delta


def search_privacy_cost(search):
    """Total (epsilon, delta) of a fitted ``GridSearchCV`` / ``RandomizedSearchCV`` by basic composition.

    Every candidate is fitted ``n_splits_`` times, and the best is refitted on
    all the data: a record may be in all of those fits, so their epsilons and
    deltas add up. (With a K-fold partition each record sits out one fold, so
    this is conservative by one fit per candidate.) Not covered, and not
    small: choosing the best candidate from validation scores computed on
    private data without noise is itself a release of that data. Run searches
    on public or separate data when the choice must be private.
    """
    if not hasattr(search, "cv_results_"):
        raise ValueError("search_privacy_cost needs a fitted search (no cv_results_).")
    eps = delta = 0.0
    for params in search.cv_results_["params"]:
        e, d = _spend_of(clone(search.estimator).set_params(**params))
        eps += search.n_splits_ * e
        delta += search.n_splits_ * d
    if getattr(search, "refit", False):
        e, d = _spend_of(clone(search.estimator).set_params(**search.best_params_))
        eps, delta = eps + e, delta + d
    return eps, min(delta, 1.0)
