"""Which non-DP steps a certified composition may hold: a registry, never a default.

A Pipeline is differentially private only if every step that learns from the
private data does so through a mechanism. A ``StandardScaler`` stores the exact
mean of the data in ``mean_``, a ``OneHotEncoder()`` the categories it saw, a
``FunctionTransformer(sklearn.preprocessing.scale)`` standardises each lot by
its own statistics; all of them are released with the model. So a step counts
as safe only when it is known to be so:

- it spends privacy itself and reports it: an skdp DP estimator (its class
  declares it, :func:`declares_dp`), or any estimator that reports
  ``epsilon_`` and ``privacy_certified_`` after ``fit``
  (:func:`~skdp.privacy.set_privacy_attributes`: how a user's own DP
  estimator opts in); counted by :func:`~skdp.privacy.privacy_spent`. A
  parameter named ``epsilon`` proves nothing (``MLPClassifier``'s Adam
  epsilon, ``SGDClassifier``'s and ``SVR``'s loss epsilon): such a step that
  reports no spend after ``fit`` is a learning step like any other;
- it is a ``sklearn.frozen.FrozenEstimator`` (fitted elsewhere, on public data
  or charged where it was fitted), "passthrough", "drop" or None;
- its exact class is registered here with a check of its parameters that
  proves it row-wise and public: a constant ``SimpleImputer``,
  ``OneHotEncoder(categories=[...], handle_unknown="ignore")``, ``Normalizer``,
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
    "OneHotEncoder": "give categories=[[...], ...] from public knowledge and handle_unknown='ignore'",
    "OrdinalEncoder": ("give categories=[[...], ...] from public knowledge and "
                       "handle_unknown='use_encoded_value', unknown_value=-1"),
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


#: The class attribute by which an estimator class declares itself DP: its ``fit`` spends through a mechanism
#: and an accountant and reports the spend (``epsilon_``, ``delta_``, ``privacy_certified_``). Every skdp DP
#: estimator and DP meta-estimator (``TrainOnSynthetic``, ``PrivateSearchCV``) sets it in its class body.
DP_MARKER = "_spends_privacy"


def declares_dp(estimator):
    """Whether the class of ``estimator`` (an instance or a class) declares itself DP (:data:`DP_MARKER`)."""
    cls = estimator if isinstance(estimator, type) else type(estimator)
    return getattr(cls, DP_MARKER, False) is True


def _reports_spend(step):
    """Whether a fitted ``step`` reports its spend and certification (``set_privacy_attributes``)."""
    return hasattr(step, "epsilon_") and hasattr(step, "privacy_certified_")


def _fitted(step):
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(step)
    except (NotFittedError, TypeError):
        return False
    return True


def _dp_step(step):
    """Whether ``step`` spends privacy itself and reports it: declared DP by its class, or reporting after fit.

    A parameter named ``epsilon`` is not enough: scikit-learn's ``MLPClassifier`` (Adam's epsilon),
    ``SGDClassifier``, ``SVR`` and ``HuberRegressor`` (the loss's epsilon) learn without any noise.
    """
    return declares_dp(step) or _reports_spend(step)


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
    spends privacy itself (declared DP by its class, or reporting
    ``epsilon_`` and ``privacy_certified_`` after ``fit``; never because a
    parameter is named ``epsilon``), a ``FrozenEstimator``, "passthrough",
    "drop", None and the registered public steps
    (:func:`register_public_step`) are not listed; every other step is, a
    fitted DP step that reports no spend included.

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
    >>> non_private_steps(OneHotEncoder(categories=[["a", "b"]], handle_unknown="ignore"))
    []
    """
    if estimator is None or isinstance(estimator, str):  # "passthrough", "drop"
        return []
    if type(estimator).__name__ == "FrozenEstimator":
        return []
    path = prefix[:-2] if prefix else _name(estimator)
    kind = type(estimator).__name__
    if declares_dp(estimator) and not _reports_spend(estimator) and _fitted(estimator):
        return [(path, f"step {path!r} ({kind}) is fitted but reports no epsilon_ / privacy_certified_, so its "
                       "spend is not counted; use an skdp estimator that reports it (DPMomentumClassifier "
                       "rather than the bare DPNet)")]
    if _dp_step(estimator):
        return []
    children = _children(estimator)
    if children is not None:
        found = []
        for name, child in children:
            found += non_private_steps(child, f"{prefix}{name}__")
        return found
    check = _REGISTRY.get(type(estimator))
    reason = ("may learn from the data (it is not registered as row-wise and public)" if check is None
              else check(estimator))
    if check is None and hasattr(estimator, "get_params") and "epsilon" in estimator.get_params(deep=False):
        reason = ("has an epsilon parameter but is no DP estimator: it reports no epsilon_ / privacy_certified_ "
                  "after fit (an skdp DP estimator declares itself; a DP estimator of your own reports its spend "
                  "with skdp.privacy.set_privacy_attributes), and " + reason)
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

    # What an encoder does with a value outside its public categories must not depend on that value: raising
    # prints it ("Found unknown categories ['<private value>']"), a warning says that one exists; encoding it
    # as zeros (OneHotEncoder) or as unknown_value (OrdinalEncoder) is row-wise and silent.
    silent_unknown = {"OneHotEncoder": ("ignore", "infrequent_if_exist"), "OrdinalEncoder": ("use_encoded_value",)}

    def encoder(step):
        if isinstance(step.categories, str):
            return f"reads its categories from the data (categories={step.categories!r})"
        if getattr(step, "min_frequency", None) is not None or getattr(step, "max_categories", None) is not None:
            return "groups infrequent categories by their counts in the data (min_frequency / max_categories)"
        silent = silent_unknown[type(step).__name__]
        if step.handle_unknown not in silent:
            return (f"has handle_unknown={step.handle_unknown!r}: a private value outside the public categories "
                    f"would be printed in an error or reported by a warning; use handle_unknown={silent[0]!r}")
        if getattr(step, "drop", None) is not None:
            return "has drop set: sklearn then warns when a private value is outside the categories; use drop=None"
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
