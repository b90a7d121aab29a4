"""The privacy cost of a hyperparameter search, by composition."""
import math

import numbers

from sklearn.base import clone

from .composition import Spend, compose
from .report import dp_steps


def planned_spend(estimator, n_samples: int | None = None) -> tuple[float, float]:
    """Compute the ``(epsilon, delta)`` that fitting ``estimator`` on ``n_samples`` records will spend.

    The estimator is unfitted and may be nested to any depth: every
    estimator in the tree that has an ``epsilon`` parameter is counted (a
    Pipeline's steps, ``TrainOnSynthetic``'s generator, ...), and their
    spends compose (:func:`~skdp.privacy.composition.compose`: the tighter of
    basic and RDP composition, under one adjacency: replace-one as soon as a
    step is replace-one, ``DFSRelease``). An estimator that plans its fit from
    public quantities (``_planned_privacy(n_samples)``, the DP-SGD
    estimators) reports exactly what its accountant will certify; that needs
    ``n_samples`` when ``noise_multiplier`` is set. Otherwise the ``epsilon``
    parameter is used: every skdp fit spends at most that. An ``epsilon`` of
    None (declared public) counts as nothing, and an infinite one counts with
    delta 0. Nothing is fitted and no data is read.

    Parameters
    ----------
    estimator : estimator
        The unfitted estimator or Pipeline whose fit is planned.
    n_samples : int or None, default=None
        Number of training records (public). Needed by a DP-SGD estimator
        that fixes ``noise_multiplier``: its epsilon depends on the sample
        rate ``batch_size / n_samples``.

    Returns
    -------
    epsilon : float
        Total epsilon the fit will spend.
    delta : float
        Total delta the fit will spend.

    Raises
    ------
    ValueError
        If a step fixes ``noise_multiplier`` and ``n_samples`` is None.

    See Also
    --------
    search_privacy_cost : The same count over every fit of a search.
    privacy_spent : What a fitted estimator reports it spent.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from skdp import DFSRelease, DPFisherClassifier
    >>> from skdp.privacy import planned_spend
    >>> pipe = make_pipeline(DFSRelease(4, epsilon=2.0, delta=1e-6),
    ...                      DPFisherClassifier(epsilon=1.0, delta=1e-6))
    >>> eps, delta = planned_spend(pipe)  # DFSRelease is replace-one: the classifier is converted
    >>> round(eps, 3), delta
    (4.004, 2e-06)
    """
    eps, delta, _ = compose(planned_costs(estimator, n_samples))
    return eps, delta


def planned_costs(estimator, n_samples=None):
    """The :class:`~skdp.privacy.composition.Spend` of every DP step of ``estimator``, planned from its parameters.

    A step's own ``_planned_costs(n_samples)`` when it has one (the DP-SGD
    estimators' RDP curves, ``DPFisherClassifier``'s Gaussian mechanism,
    ``DFSRelease``'s replace-one adjacency), else its ``epsilon``/``delta``
    parameters under add/remove adjacency.
    """
    costs = []
    for step in dp_steps(estimator):
        params = step.get_params(deep=False)
        if params.get("noise_multiplier") is not None and n_samples is None:
            raise ValueError(
                f"{type(step).__name__} has noise_multiplier={params['noise_multiplier']!r}: its spend "
                "depends on the number of training records; pass n_samples=len(X).")
        plan = getattr(step, "_planned_costs", None)
        if params.get("epsilon") is None:  # declared public (SRGANTransformer without epsilon)
            continue
        if plan is not None:
            costs.extend(plan(n_samples))
            continue
        e = float(params["epsilon"])
        costs.append(Spend.approx(e, 0.0 if math.isinf(e) else float(params.get("delta", 0.0))))
    return costs


def _fold_train_sizes(n_samples, n_splits):
    # K-fold train sizes are n - ceil(n/k) or n - floor(n/k); stratified splits can move a few
    # records between folds, so a small window around them is checked and the largest spend kept.
    lo, hi = n_samples - math.ceil(n_samples / n_splits), n_samples - n_samples // n_splits
    return range(max(2, lo - n_splits), min(n_samples, hi + n_splits) + 1)


def search_privacy_cost(search, n_samples: int | None = None) -> tuple[float, float]:
    """Total (epsilon, delta) of a fitted ``GridSearchCV`` / ``RandomizedSearchCV``, composed.

    Every candidate is fitted ``n_splits_`` times, and the best is refitted on
    all the data: a record may be in all of those fits, so their spends
    compose: the tighter of basic composition (epsilons and deltas add) and
    RDP composition at the same delta, under one adjacency
    (:func:`~skdp.privacy.composition.compose`; the fits are fixed by the
    grid before any runs). Each fit counts what it certifies: its ``epsilon`` when the
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
        The fitted search; its ``cv_results_["params"]``, ``n_splits_``,
        ``refit`` and ``best_params_`` are read, never the data.
    n_samples : int or None, default=None
        Records the search was fitted on; needed when a candidate fixes
        ``noise_multiplier`` (each fold's training size is then bounded from
        it and the largest spend kept).

    Returns
    -------
    epsilon : float
        Total epsilon of every fit of the search, refit included.
    delta : float
        Total delta, at most 1.

    Raises
    ------
    ValueError
        If ``search`` is not fitted.

    See Also
    --------
    planned_spend : The spend of one fit, summed here over the fits.
    BudgetLedger : Caps the search while it runs, fit by fit.
    skdp.model_selection.PrivateSearchCV : A search whose choice is private too.

    Examples
    --------
    Two candidates, two folds and a refit: five fits at epsilon 1 each, composed by RDP (basic: 5).

    >>> import numpy as np
    >>> from sklearn.model_selection import GridSearchCV
    >>> from skdp import DPFisherClassifier
    >>> from skdp.privacy import search_privacy_cost
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.random((40, 3)), rng.integers(0, 2, 40)
    >>> clf = DPFisherClassifier(epsilon=1.0, delta=1e-6, bounds=(0, 1), classes=[0, 1])
    >>> search = GridSearchCV(clf, {"var_smoothing": [1e-2, 1e-1]}, cv=2).fit(X, y)
    >>> eps, delta = search_privacy_cost(search)
    >>> round(eps, 3), round(delta, 12)
    (2.396, 5e-06)
    """
    eps, delta, _ = compose(search_costs(search, n_samples))
    return eps, min(delta, 1.0)


def _kfold_sizes(search, n_samples):
    """The training sizes a search's ``cv`` gives on ``n_samples`` records, when they are K-fold's; else None."""
    from sklearn.model_selection import KFold, StratifiedKFold

    cv = search.cv  # (GroupKFold's sizes follow the groups, not n / k: not K-fold's here)
    if cv is None or (isinstance(cv, numbers.Integral) and not isinstance(cv, bool)) or type(cv) in (
            KFold, StratifiedKFold):
        return _fold_train_sizes(int(n_samples), search.n_splits_)
    return None


def search_costs(search, n_samples=None):
    """The :class:`~skdp.privacy.composition.Spend` of every fit of a fitted search (refit included).

    A fit's RDP curve depends on its training size, which is known (up to
    stratification) for K-fold splits only: with any other ``cv`` each fit
    counts the epsilon it is calibrated to, valid at any size, and a fixed
    ``noise_multiplier`` (whose epsilon depends on the size) is refused.
    """
    if not hasattr(search, "cv_results_"):
        raise ValueError("search_privacy_cost needs a fitted search (no cv_results_).")
    costs = []
    sizes = None if n_samples is None else _kfold_sizes(search, n_samples)
    if n_samples is not None and sizes is None:
        if any("noise_multiplier" in s.get_params(deep=False) and s.get_params(deep=False)["noise_multiplier"]
               is not None for p in search.cv_results_["params"]
               for s in dp_steps(clone(search.estimator).set_params(**p))):
            raise ValueError(f"cv={search.cv!r} does not give K-fold training sizes, and a candidate fixes "
                             "noise_multiplier, whose epsilon depends on them: use cv=K (KFold) or read the "
                             "fits' spends from a BudgetLedger passed to the estimator.")
    for params in search.cv_results_["params"]:
        candidate = clone(search.estimator).set_params(**params)
        if sizes is None:
            fit = planned_costs(candidate)
        else:  # every fold size that stratification allows: each spend's envelope over them
            fit = [Spend.envelope(c) for c in zip(*(planned_costs(candidate, n) for n in sizes))]
        costs.extend(fit * search.n_splits_)
    if getattr(search, "refit", False):
        costs.extend(planned_costs(clone(search.estimator).set_params(**search.best_params_), n_samples))
    return costs
