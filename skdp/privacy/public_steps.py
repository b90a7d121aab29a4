"""Which non-DP steps a certified composition may hold: a registry, never a default.

A Pipeline is differentially private only if every step that learns from the
private data does so through a mechanism. A ``StandardScaler`` stores the exact
mean of the data in ``mean_``, a ``OneHotEncoder()`` the categories it saw, a
``FunctionTransformer(sklearn.preprocessing.scale)`` standardises each lot by
its own statistics; all of them are released with the model. So a step counts
as safe only when it is known to be so:

- it spends privacy itself (an ``epsilon`` parameter; its own ``epsilon_`` and
  ``privacy_certified_`` report it): counted by :func:`~skdp.privacy.privacy_spent`;
- it is a ``sklearn.frozen.FrozenEstimator`` (fitted elsewhere, on public data
  or charged where it was fitted), "passthrough", "drop" or None;
- its exact class is registered here with a check of its parameters that
  proves it row-wise and public: a constant ``SimpleImputer``,
  ``OneHotEncoder(categories=[...])``, ``Normalizer``,
  :class:`skdp.preprocessing.RowFunctionTransformer`, skdp's image
  transformers... (:func:`register_public_step` adds a class of your own).

Everything else, a subclass of a registered class included (it may override
what made the parent safe), is a learning step: it makes the composition
uncertified, and :func:`non_private_steps` says which step and how to fix it.
Pipelines, ``ColumnTransformer`` and ``FeatureUnion`` are walked step by step;
a fitted scikit-learn search (``GridSearchCV``) chooses on unnoised scores of
the private data, which no accountant covers.

The checks read parameters only, never data, so they hold for an unfitted
template, every candidate of a search, and a fitted model alike.
"""
from sklearn.base import BaseEstimator

#: exact class -> check(step) returning None (public and row-wise) or why not.
_REGISTRY = {}

#: How to fix a learning step, by class name (a hint only: the registry decides what is allowed).
_FIXES = {
    "StandardScaler": "scale by public bounds (the DP estimators' bounds=) or use a DP scaler",
    "MinMaxScaler": "scale by public bounds (the DP estimators' bounds=) or use a DP scaler",
    "MaxAbsScaler": "scale by public bounds (the DP estimators' bounds=) or use a DP scaler",
    "RobustScaler": "scale by public bounds (the DP estimators' bounds=) or use a DP scaler",
    "QuantileTransformer": "use public quantiles or a DP scaler",
    "OneHotEncoder": "give categories=[[...], ...] from public knowledge",
    "OrdinalEncoder": "give categories=[[...], ...] from public knowledge",
    "SimpleImputer": "use strategy='constant' (a public fill value)",
    "FunctionTransformer": ("use skdp.preprocessing.RowFunctionTransformer(func), which applies func to each row "
                            "alone (a FunctionTransformer may learn or mix rows, e.g. sklearn.preprocessing.scale)"),
    "GridSearchCV": "use skdp.PrivateSearchCV, whose choice is private too",
    "RandomizedSearchCV": "use skdp.PrivateSearchCV, whose choice is private too",
}
_DEFAULT_FIX = ("fit it on public data and wrap it in sklearn.frozen.FrozenEstimator, give it public values, "
                "or use a DP step")


def register_public_step(step_class, check=None):
    """Declare a transformer class row-wise and public, so that certified compositions may hold it.

    Only the exact class is registered (a subclass may override what made it
    safe and must be registered itself). ``check(step)`` reads the step's
    parameters and returns None when this instance learns nothing from the
    data and transforms each row alone, or a string saying why not (then the
    step makes the composition uncertified, with that reason).

    Parameters
    ----------
    step_class : type
        The transformer class.
    check : callable or None, default=None
        ``check(step) -> None or str``; None: every instance is public.

    Returns
    -------
    step_class : type
        The same class (usable as a decorator).

    See Also
    --------
    non_private_steps : The steps of a composition that learn without DP.

    Examples
    --------
    >>> from sklearn.base import BaseEstimator, TransformerMixin
    >>> from skdp.privacy import register_public_step, non_private_steps
    >>> class Clip(TransformerMixin, BaseEstimator):
    ...     def fit(self, X, y=None):
    ...         return self
    ...     def transform(self, X):
    ...         return X.clip(0, 1)
    >>> non_private_steps(Clip())[0][0]
    'clip'
    >>> _ = register_public_step(Clip)
    >>> non_private_steps(Clip())
    []
    """
    _REGISTRY[step_class] = check if check is not None else (lambda step: None)
    return step_class


def _name(step):
    return type(step).__name__.lower()


def _dp_step(step):
    """Whether ``step`` spends privacy itself (and so reports its own certification)."""
    return isinstance(step, BaseEstimator) and "epsilon" in step.get_params(deep=False)


def _children(step):
    """``[(name, child)]`` of a composite step, or None for a leaf."""
    kind = type(step).__name__
    if kind == "Pipeline":
        return list(step.steps)
    if kind == "ColumnTransformer":
        fitted = getattr(step, "transformers_", None)
        # A fitted ColumnTransformer holds a FunctionTransformer where "passthrough" was given: keep the word.
        passthrough = {name for name, t, _ in step.transformers if isinstance(t, str) and t == "passthrough"}
        if isinstance(step.remainder, str) and step.remainder == "passthrough":
            passthrough.add("remainder")
        items = [(name, "passthrough" if name in passthrough else t)
                 for name, t, _ in (fitted if fitted is not None else step.transformers)]
        if fitted is None and step.remainder not in ("drop", "passthrough"):
            items.append(("remainder", step.remainder))
        return items
    if kind == "FeatureUnion":
        return list(step.transformer_list)
    return None


def non_private_steps(estimator, prefix=""):
    """The steps of ``estimator`` that learn from the data without a DP mechanism, with why and the fix.

    Walks Pipelines, ``ColumnTransformer`` and ``FeatureUnion``. A step that
    spends privacy itself (an ``epsilon`` parameter), a ``FrozenEstimator``,
    "passthrough", "drop", None and the registered public steps
    (:func:`register_public_step`) are not listed; every other step is.

    Parameters
    ----------
    estimator : estimator
        A single estimator or a composition, fitted or not.
    prefix : str, default=""
        Prepended to the step names (``pre__scaler``).

    Returns
    -------
    steps : list of (str, str)
        ``(path, message)`` per learning step: the step's path in the
        composition (``get_params`` style) and what it learns and how to fix it.

    See Also
    --------
    register_public_step : Allow a row-wise, public transformer class.
    privacy_spent : Uncertifies (and warns about) compositions that hold such steps.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import OneHotEncoder, StandardScaler
    >>> from skdp import DPFisherClassifier
    >>> from skdp.privacy import non_private_steps
    >>> pipe = make_pipeline(StandardScaler(), DPFisherClassifier(bounds=(0, 1), classes=[0, 1]))
    >>> [path for path, _ in non_private_steps(pipe)]
    ['standardscaler']
    >>> non_private_steps(OneHotEncoder(categories=[["a", "b"]]))
    []
    """
    if estimator is None or isinstance(estimator, str):  # "passthrough", "drop"
        return []
    if type(estimator).__name__ == "FrozenEstimator" or _dp_step(estimator):
        return []
    children = _children(estimator)
    if children is not None:
        found = []
        for name, child in children:
            found += non_private_steps(child, f"{prefix}{name}__")
        return found
    path = prefix[:-2] if prefix else _name(estimator)
    kind = type(estimator).__name__
    check = _REGISTRY.get(type(estimator))
    reason = ("may learn from the data (it is not registered as row-wise and public)" if check is None
              else check(estimator))
    if reason is None:
        return []
    fix = _FIXES.get(kind, _DEFAULT_FIX)
    return [(path, f"step {path!r} ({kind}) {reason}: what it learns from the private data is released "
                   f"without noise; {fix}")]


# -- the registry: scikit-learn's row-wise, public transformers (exact classes, parameters checked) --------
def _register_sklearn():
    from sklearn import impute, preprocessing

    def imputer(step):
        if step.strategy != "constant":
            return f"imputes with strategy={step.strategy!r}, a statistic of the private data"
        if step.add_indicator:
            return "has add_indicator=True, which learns which columns had missing values"
        return None

    def encoder(step):
        if isinstance(step.categories, str):
            return f"reads its categories from the data (categories={step.categories!r})"
        if getattr(step, "min_frequency", None) is not None or getattr(step, "max_categories", None) is not None:
            return "groups infrequent categories by their counts in the data (min_frequency / max_categories)"
        return None

    def indicator(step):
        return None if step.features == "all" else "learns which columns had missing values (features='missing-only')"

    register_public_step(impute.SimpleImputer, imputer)
    register_public_step(impute.MissingIndicator, indicator)
    register_public_step(preprocessing.OneHotEncoder, encoder)
    register_public_step(preprocessing.OrdinalEncoder, encoder)
    register_public_step(preprocessing.Normalizer)       # each row to unit norm: stateless
    register_public_step(preprocessing.Binarizer)        # a public threshold: stateless
    register_public_step(preprocessing.PolynomialFeatures)  # products of a row's own features; fit reads the width


_register_sklearn()


def is_fitted_search(estimator):
    """Whether ``estimator`` is a fitted scikit-learn search (``cv_results_``) that spends no privacy itself."""
    return hasattr(estimator, "cv_results_") and not _dp_step(estimator)


__all__ = ["register_public_step", "non_private_steps"]
