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
import time
from typing import Iterable

from ..exceptions import warn_privacy
from ..utils import taps
from .composition import Spend, compose
from ..utils.steps import nested_estimators


#: The note of a fit that did not complete (a DP-SGD network interrupted after its charge); re-derived on every call.
INTERRUPTED = "the last fit did not complete (interrupted): its module is not certified"
_LAST_STAMP = [0]


def next_stamp():
    """A strictly increasing stamp of this process, close to the wall clock in ns (comparable across the processes
    of one machine): the order in which the steps of a composition released what they did."""
    _LAST_STAMP[0] = max(time.time_ns(), _LAST_STAMP[0] + 1)
    return _LAST_STAMP[0]


def begin_training(estimator, at=None):
    """Record, and return, that ``estimator``'s fresh training began ``at`` (a :func:`next_stamp`; None: now), before
    its report, which a cut fit never makes: a continuation after a cut keeps it, and the fit's own report takes it
    (``trained_since``)."""
    estimator._trained_since_ = next_stamp() if at is None else at
    return estimator._trained_since_


def privacy_notes(estimator, epsilon, *, certified=True, read_from_data=(), continued=False):
    """The notes a report of ``estimator`` would carry now (see :func:`set_privacy_attributes`, which writes them):
    what voids the guarantee under the current conditions (an audit tap, a seeded noise, ...), and on a
    continuation the notes of the fits it continues but an interruption's. A fit that may be cut writes them before
    it trains (``DPNet``: review_s37 k25), so that a cut fit's own conditions reach the fit that completes it."""
    notes = [f"{name} read from the private data" for name in read_from_data]
    if certified is not True:
        notes.append(certified if isinstance(certified, str) else "the method certifies nothing")
    if math.isinf(float(epsilon)):
        notes.append("no noise (epsilon is infinite)")
    if getattr(estimator, "noise_seeded_", False):
        notes.append("noise seeded by insecure_noise_seed")
    if taps.noise_removed():
        notes.append("noise removed by an audit tap (not private)")
    if continued:
        notes += [note for note in getattr(estimator, "privacy_notes_", ())
                  if note not in notes and not note.startswith(INTERRUPTED)]
    return notes


def set_privacy_attributes(estimator, epsilon: float, delta: float, *, certified: bool | str = True,
                           read_from_data: Iterable[str] = (), cost=None, continued: bool = False,
                           trained_since=None):
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
    continued : bool, default=False
        True when this fit continues the estimator's previous ones (a
        ``partial_fit`` or ``warm_start`` fit): their ``privacy_notes_`` are
        kept, so that a model stays uncertified once a fit it continues was
        (an audit tap that removed the noise of its first lots, a label set
        read from the data), except an interruption's, which the caller
        re-derives on every call; and the time its training began is kept
        (see :func:`privacy_spent`: a Pipeline step trained before an earlier
        step was fitted again is not certified). False: a fresh fit, whose
        report replaces the previous one.
    trained_since : int or None, default=None
        For a fresh fit, the stamp :func:`begin_training` returned when its
        training began (an earlier step refit during the fit is then seen by
        :func:`privacy_spent`); None: now. Ignored on a continuation.

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
    notes = privacy_notes(estimator, epsilon, certified=certified, read_from_data=read_from_data, continued=continued)
    stamp = next_stamp()
    estimator._released_at_ = stamp  # when this release was made (process-wide order; privacy_spent reads it)
    # A continuation of a report that does not say when its training began (a pickle from before the stamps) counts
    # as begun before everything (review_s37 k20); a fresh fit began when begin_training said (k26), else now.
    estimator._trained_since_ = (getattr(estimator, "_trained_since_", 0) if continued
                                 else stamp if trained_since is None else trained_since)
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

    A Pipeline's steps are also checked in order: a step whose training began
    (its fresh fit, or the first of the fits it continues) before an earlier
    step that spends privacy was fitted again was trained on a release that is
    no longer counted here (a warm Pipeline refit; a step refit by hand), so
    the result is uncertified, with a warning. The order comes from stamps
    that :func:`set_privacy_attributes` records, read from the clock: fits in
    processes whose clocks disagree may be misordered, and the stamps see fits,
    not data (a step fitted after an upstream refit on outputs computed before
    it is not caught).

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
    latest = None  # in a Pipeline: (the latest release of the steps before this one, that step's name)
    for name, step in _children(estimator) or ():
        s, c = _spent(step)
        since = min((t for _, t in _stamps(step) if t is not None), default=None)
        if latest is not None and since is not None and latest[0] > since:
            # This step was trained on what the earlier step released before it was fitted again (a warm Pipeline
            # refits it, charged, whether the continuation runs or is refused; a refit by hand): the release it
            # was trained on is no longer counted here (review_s37 k12, k15, k17).
            warn_privacy(f"The composition is NOT certified: step {latest[1]!r} was fitted again after step {name!r} "
                         f"was trained (or began the training it continued with warm_start or partial_fit) on its "
                         f"earlier output; that earlier release is not counted here (the ledger holds every charge). "
                         "Fit the Pipeline afresh (warm_start=False) to certify it.")
            c = False
        spends, certified = spends + s, certified and c
        if type(estimator).__name__ == "Pipeline":
            released = max((r for r, _ in _stamps(step) if r is not None), default=None)
            if released is not None and (latest is None or released > latest[0]):
                latest = (released, name)
    return spends, certified


def _stamps(step):
    """``[(released_at, trained_since)]`` of the steps under ``step`` that reported a spend (frozen ones: none)."""
    from .public_steps import _children

    if step is None or isinstance(step, str) or type(step).__name__ == "FrozenEstimator":
        return []
    children = _children(step)
    if children is None:
        found = (getattr(step, "_released_at_", None), getattr(step, "_trained_since_", None))
        return [found] if found != (None, None) else []
    return [stamp for _, child in children for stamp in _stamps(child)]


def dp_steps(estimator):
    """Every estimator in the tree of ``estimator`` that spends privacy (declared DP, or reporting its spend).

    Never by a parameter's name: ``MLPClassifier``'s or ``SGDClassifier``'s ``epsilon`` is no mechanism
    (:func:`~skdp.privacy.public_steps.declares_dp`).
    """
    from .public_steps import _dp_step

    return [e for e in nested_estimators(estimator) if _dp_step(e)]
