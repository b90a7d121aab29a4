"""One walk over composite estimators: Pipeline steps, FrozenEstimator, nested estimators."""
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline


def unwrap(step):
    """The estimator inside ``sklearn.frozen.FrozenEstimator`` wrappers (fitted, used as is)."""
    while type(step).__name__ == "FrozenEstimator" and hasattr(step, "estimator"):
        step = step.estimator
    return step


def pipeline_steps(estimator):
    """The steps of a Pipeline (or ``[estimator]``), unwrapped, without "passthrough"/None."""
    if isinstance(estimator, Pipeline):
        steps = [unwrap(s) for _, s in estimator.steps]
        return [s for s in steps if s not in (None, "passthrough")]
    return [unwrap(estimator)]


def nested_estimators(estimator):
    """``estimator`` and every estimator among its parameters, depth first (a tree walk).

    Covers Pipelines and meta-estimators (``TrainOnSynthetic(generator=...)``,
    searches), whatever their nesting. A ``FrozenEstimator`` is not entered: it is
    not refitted, so nothing inside it runs (or spends) when the composite is fitted.
    """
    if type(estimator).__name__ == "FrozenEstimator":
        return
    yield estimator
    if not isinstance(estimator, BaseEstimator):
        return
    for value in estimator.get_params(deep=False).values():
        if isinstance(value, BaseEstimator):
            yield from nested_estimators(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                inner = item[1] if isinstance(item, tuple) and len(item) == 2 else item
                if isinstance(inner, BaseEstimator):
                    yield from nested_estimators(inner)
