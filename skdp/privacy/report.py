"""The one meaning of ``epsilon_``, ``delta_`` and ``privacy_certified_``, for every estimator.

After ``fit`` every skdp estimator that touches private data reports

- ``epsilon_``, ``delta_``: what the fit spent (certified by a mechanism and
  an accountant), or the claim of a method that certifies nothing;
- ``privacy_certified_``: True only if (``epsilon_``, ``delta_``) is a
  proven guarantee of everything the estimator releases: a finite epsilon,
  fresh secret noise (not :func:`~skdp.utils.random.insecure_noise_seed`),
  a certified mechanism, and no privacy-relevant value (bounds, label set)
  read from the private data without paying for it.
- ``privacy_notes_``: why not, when it is False (empty when certified);
- ``privacy_cost_``: the same (epsilon, delta) as a
  :class:`~skdp.privacy.composition.Spend`, with its adjacency and, when the
  mechanism has one, its RDP curve: what compositions add up.
"""
import math
from typing import Iterable

from ..exceptions import warn_privacy
from ..utils import taps
from .composition import Spend, compose
from ..utils.steps import nested_estimators


def set_privacy_attributes(estimator, epsilon: float, delta: float, *, certified: bool | str = True,
                           read_from_data: Iterable[str] = (), cost=None, earlier_notes: Iterable[str] = ()):
    """Set ``epsilon_``, ``delta_``, ``privacy_certified_``, ``privacy_notes_`` and ``privacy_cost_``.

    The one place where an estimator's privacy report is decided, so that the
    four attributes mean the same for every skdp estimator (and for an
    estimator written outside skdp that calls it at the end of ``fit``).
    ``privacy_certified_`` is True only if nothing in ``privacy_notes_``
    voids the guarantee: the mechanism is certified, ``epsilon`` is finite,
    nothing privacy-relevant was read from the private data for free, and
    the noise was not seeded by :func:`~skdp.insecure_noise_seed` (read from
    the estimator's ``noise_seeded_``) nor removed by an audit tap
    (:mod:`skdp.utils.taps`, audits' noise-off twins). An infinite ``epsilon`` sets
    ``delta_`` to 0.

    Parameters
    ----------
    estimator : estimator
        The estimator being fitted.
    epsilon, delta : float
        What the fit spent (or claims, for an uncertified method).
    certified : bool or str, default=True
        Whether the mechanism itself is certified; a string is the reason it is not.
    read_from_data : iterable of str, default=()
        Privacy-relevant values that were read from the private data without
        paying for them (e.g. ``"bounds"``, ``"classes"``).
    cost : Spend or None, default=None
        The spend with its adjacency and RDP curve
        (:class:`~skdp.privacy.composition.Spend`); None: known only as
        ``(epsilon, delta)`` under add/remove adjacency.
    earlier_notes : iterable of str, default=()
        The ``privacy_notes_`` of the fits this one continues (a
        ``partial_fit`` or ``warm_start`` fit): kept, so that a model stays
        uncertified once a fit it continues was (an audit tap that removed
        the noise of its first lots, a label set read from the data).

    Returns
    -------
    estimator : estimator
        The same estimator, with the four attributes set.

    See Also
    --------
    privacy_spent : Reads them back, summed over a Pipeline.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from skdp.privacy import set_privacy_attributes
    >>> est = set_privacy_attributes(SimpleNamespace(), 1.0, 1e-5, read_from_data=["bounds"])
    >>> est.epsilon_, est.delta_, est.privacy_certified_
    (1.0, 1e-05, False)
    >>> est.privacy_notes_
    ('bounds read from the private data',)
    """
    epsilon = float(epsilon)
    notes = [f"{name} read from the private data" for name in read_from_data]
    if certified is not True:
        notes.append(certified if isinstance(certified, str) else "the method certifies nothing")
    if math.isinf(epsilon):
        notes.append("no noise (epsilon is infinite)")
    if getattr(estimator, "noise_seeded_", False):
        notes.append("noise seeded by insecure_noise_seed")
    if taps.noise_removed():
        notes.append("noise removed by an audit tap (not private)")
    notes += [note for note in earlier_notes if note not in notes]
    estimator.epsilon_ = epsilon
    estimator.delta_ = 0.0 if math.isinf(epsilon) else float(delta)
    estimator.privacy_certified_ = not notes
    estimator.privacy_notes_ = tuple(notes)
    if cost is None or (cost.epsilon, cost.delta) != (estimator.epsilon_, estimator.delta_):
        adjacency = "add/remove" if cost is None else cost.adjacency
        try:
            cost = Spend.approx(estimator.epsilon_, estimator.delta_, adjacency)
        except ValueError:  # an uncertified claim that is no (epsilon, delta) at all (NaN)
            cost = None
    estimator.privacy_cost_ = cost
    return estimator


def privacy_spent(estimator) -> tuple[float, float, bool]:
    """``(epsilon, delta, certified)`` of a fitted estimator or composition, under one adjacency.

    Composes the spends of the steps that spend privacy, in Pipelines,
    ``ColumnTransformer`` and ``FeatureUnion`` to any depth (FrozenEstimator
    steps were fitted elsewhere and are counted where they were fitted: not
    here): the tighter of basic composition (epsilons and deltas add, delta
    capped at 1) and RDP composition at the same delta
    (:func:`~skdp.privacy.composition.compose`). Every spend is stated under
    one adjacency: add/remove, or replace-one as soon as one step is
    replace-one (``DFSRelease``), its add/remove spends converted (group
    privacy of two; a Gaussian mechanism's doubled sensitivity). A fitted
    ``GridSearchCV`` counts every fit it made (:func:`search_privacy_cost`).

    The result is certified only if every step that spent is certified
    (``privacy_certified_``) **and no other step learnt from the private
    data**: a step without ``epsilon_`` is allowed only when it is known to be
    row-wise and public (a constant ``SimpleImputer``,
    ``OneHotEncoder(categories=[...], handle_unknown="ignore")``, ``RowFunctionTransformer``; see
    :func:`~skdp.privacy.public_steps.register_public_step`). Any other step
    (``StandardScaler``, ``OneHotEncoder()``, a ``FunctionTransformer``, the
    choice of a ``GridSearchCV``) makes the result uncertified and warns with
    ``PrivacyLeakWarning``, naming the step and its fix.

    Parameters
    ----------
    estimator : fitted estimator or composition
        The fitted model to report on.

    Returns
    -------
    epsilon : float
        Total epsilon of the fitted steps.
    delta : float
        Total delta, at most 1.
    certified : bool
        Whether every step that spent certifies its (``epsilon_``,
        ``delta_``) and no step learnt from the data without DP.

    Warns
    -----
    PrivacyLeakWarning
        When a step learnt from the private data without DP.

    See Also
    --------
    set_privacy_attributes : Sets the attributes summed here.
    planned_spend : The same total, before fitting, from the parameters.
    BudgetLedger : Caps what fits on the same data spend together.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.impute import SimpleImputer
    >>> from skdp import DPFisherClassifier
    >>> from skdp.privacy import privacy_spent
    >>> pipe = make_pipeline(SimpleImputer(strategy="constant", fill_value=0.5),
    ...                      DPFisherClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1]))
    >>> eps, delta, certified = privacy_spent(pipe.fit([[0.1], [0.9], [0.2], [0.8]], [0, 1, 0, 1]))
    >>> eps, certified
    (1.0, True)
    """
    from .public_steps import non_private_steps

    if type(estimator).__name__ == "FrozenEstimator":
        return 0.0, 0.0, True
    leaks = non_private_steps(estimator)
    if leaks:
        warn_privacy("The composition is NOT certified: " + "; ".join(message for _, message in leaks) + ".")
    spends, certified = _spent(estimator)
    eps, delta, _ = compose(spends)
    return eps, min(delta, 1.0), certified and not leaks


def _cost_of(estimator):
    """The fitted estimator's :class:`Spend` (its ``privacy_cost_``, else its (epsilon_, delta_), add/remove)."""
    cost = getattr(estimator, "privacy_cost_", None)
    if isinstance(cost, Spend):
        return cost
    try:
        return Spend.approx(estimator.epsilon_, estimator.delta_)
    except (TypeError, ValueError):  # not a number: counts as no guarantee at all
        return Spend(math.inf, 0.0)


def _spent(estimator):
    """``(spends, certified)`` of the steps of a composition that spend privacy."""
    from .public_steps import _children, _dp_step, is_fitted_search

    if estimator is None or isinstance(estimator, str) or type(estimator).__name__ == "FrozenEstimator":
        return [], True  # a frozen step was fitted (and spent) elsewhere; the composition only applies it
    if hasattr(estimator, "epsilon_"):
        return [_cost_of(estimator)], getattr(estimator, "privacy_certified_", False)
    if _dp_step(estimator) and _children(estimator) is None:
        # An unfitted DP step (never fitted, or dropped by a refused refit) has spent nothing that describes a
        # model: reporting (0, 0, certified) for it would certify a composition that does not exist (review_s36 j03).
        from sklearn.exceptions import NotFittedError

        raise NotFittedError(f"privacy_spent reports fitted models: {type(estimator).__name__} is not fitted (never "
                             "fitted, or its last fit was refused); fit it (or the composition) first.")
    if is_fitted_search(estimator):
        from .search import search_costs

        return search_costs(estimator), False
    spends, certified = [], True
    upstream = None  # in a Pipeline: the first earlier step that spent
    for name, step in _children(estimator) or ():
        s, c = _spent(step)
        if upstream is not None and _continued(step):
            # The continued network was trained on what the upstream step released at each earlier fit (a warm
            # Pipeline refits it every time); only its last release is counted here (review_s37 k12).
            warn_privacy(f"The composition is NOT certified: step {name!r} was fitted again and continued (warm_start "
                         f"or partial_fit) after step {upstream!r}, which spends privacy; its network was trained on "
                         f"{upstream!r}'s earlier releases too, which are not counted here (the ledger holds every "
                         "charge). Fit the Pipeline afresh (warm_start=False) to certify it.")
            c = False
        spends, certified = spends + s, certified and c
        if s and upstream is None and type(estimator).__name__ == "Pipeline":
            upstream = name
    return spends, certified


def _continued(step):
    """Whether ``step`` holds a DP-SGD network fitted again as a continuation (``partial_fit`` or a warm fit,
    carried out or refused: a warm Pipeline refits the steps before it either way)."""
    return any(getattr(e, "_continued_", False) for e in nested_estimators(step))


def dp_steps(estimator):
    """Every estimator in the tree of ``estimator`` that spends privacy (declared DP, or reporting its spend).

    Never by a parameter's name: ``MLPClassifier``'s or ``SGDClassifier``'s ``epsilon`` is no mechanism
    (:func:`~skdp.privacy.public_steps.declares_dp`).
    """
    from .public_steps import _dp_step

    return [e for e in nested_estimators(estimator) if _dp_step(e)]
