"""DFSRelease: Algorithm 1 in full, selection then a noisy release of the kept features."""
import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..exceptions import warn_privacy
from ..mechanisms import analytic_gaussian_sigma
from ..privacy.composition import Spend
from ..privacy.ledger import charge
from ..utils.bounds import apply_bounds, bounds_by_name, resolve_bounds
from ..privacy.report import set_privacy_attributes
from ..utils import taps
from ..utils.random import mechanism_rng
from ..utils.validation import PRIVACY_CONSTRAINTS, set_init_params
from ._dfs import DPFisherSelector


class DFSRelease(TransformerMixin, BaseEstimator):
    """DFS (Shen et al. 2021, Algorithm 1): select m features, release them with Gaussian noise.

    Scikit-learn semantics, as in ``TargetEncoder``: ``fit_transform(X, y)``
    returns the *release* of the private training rows (kept features plus
    noise), which is what a ``Pipeline`` passes to the next step when it fits;
    ``transform(X)`` on new data only selects (and clips) the features,
    because prediction-time data is not being published. ``fit(X, y)`` alone
    only selects and spends only the selection budget.

    ``"private"`` (certified)
        One adjacency for everything: **replace-one record** (a release of the
        rows cannot hide whether a row is there; ``n`` is public). Selection by
        ``DPFisherSelector``, certified for add/remove at ``selection_share *
        epsilon / 2`` and ``delta / 2 / (1 + e^eps_s)``, which by group privacy
        is (``selection_share * epsilon``, ``delta / 2``) for replace-one.
        Release: rows clipped to the public bounds (and, if given, centred and
        clipped to L2 norm ``clip_norm``), plus N(0, sigma^2) with sigma from the
        analytic Gaussian mechanism for the rest of the budget and sensitivity
        ``min(||w_S||_2, 2 * clip_norm)`` (replace-one of a row; each row's
        noise is independent, so one record touches one row). Total:
        (epsilon, delta)-DP for the features under replace-one. **Labels are not protected**: the
        next step receives ``y`` as it is, so treat labels as public or use an
        estimator that protects them (``DPFisherClassifier``). Fitting warns.
    ``"paper"`` (not certified)
        Algorithm 1 as written: exact ranking, ``N_max`` = largest L1 norm of a
        kept row, noise N(0, 2 N_max ln(1/delta) / epsilon) read as a variance.
        Warns with ``PrivacyLeakWarning``; ``privacy_certified_`` is False.

    Parameters
    ----------
    n_features_to_select : int, default=10
        Number ``m`` of features to keep and release, >= 1 and at most the
        number of features (public). Keeping every feature skips the
        selection.
    epsilon : float, default=1.0
        Total budget of selection and release, > 0, under replace-one
        adjacency: ``selection_share * epsilon`` for the selection (spent by
        ``fit``), the rest for the release (spent by ``fit_transform``).
        ``inf`` releases the rows without noise (not private; warns).
    delta : float, default=1e-5
        Total delta, in (0, 1): half for the selection, half for the release.
        Keep it well below 1 / n_samples.
    bounds : None, (lower, upper) or dict, default=None
        Public feature range, scalars or per-feature arrays, or a dict
        ``{column name: (lower, upper)}`` for a DataFrame ``X`` (names ``X``
        does not have are ignored); it sets the sensitivity of both steps.
        None reads it from the data (warns, voids the certificate).
    clip : bool, default=True
        Clip X to ``bounds`` for the selection; with False, data outside the
        bounds is an error. The release always clips the kept features.
    clip_norm : float or None, default=None
        L2 norm bound of a centred kept row ("private"); the release's
        sensitivity is then ``min(||w_S||_2, 2 * clip_norm)``. None clips to
        the box only.
    method : {"private", "paper"}, default="private"
        ``"private"``: the certified release above. ``"paper"``: Algorithm 1
        as written, not private.
    selection_share : float in (0, 1), default=0.5
        Share of epsilon spent on selection ("private"). When
        ``n_features_to_select`` equals the number of features nothing is
        chosen, and the whole budget goes to the release.
    classes : array-like or None, default=None
        Public label set, for the selection; None reads it from ``y`` (warns).
    ledger : BudgetLedger or None, default=None
        Charged for the selection in ``fit`` and for the release in ``fit_transform``.
    random_state : int, Generator or None, default=None
        Accepted for scikit-learn compatibility; the noise is always fresh OS
        entropy (see :func:`skdp.insecure_noise_seed` for experiments).

    Attributes
    ----------
    selector_ : DPFisherSelector
        The fitted selection (at its add/remove share of the budget).
    classes_ : ndarray of shape (n_classes,)
        The label set used.
    noise_std_ : float
        Standard deviation of the release noise (NaN until ``fit_transform``).
    sensitivity_ : float
        L2 sensitivity of one released row ("private"); NaN for "paper" and
        until ``fit_transform``.
    epsilon_ : float
        Epsilon spent so far, under replace-one: the selection after ``fit``,
        selection plus release after ``fit_transform``. Claimed, not
        certified, for "paper".
    delta_ : float
        Delta spent so far, likewise.
    privacy_certified_ : bool
        Whether (``epsilon_``, ``delta_``) is a proven guarantee for the
        released features ("private", finite epsilon, public ``bounds`` and
        ``classes``, fresh noise). The labels are never covered.
    privacy_notes_ : tuple of str
        Why it is not certified, when it is not.
    noise_seeded_ : bool
        True if the noise was seeded by :func:`skdp.insecure_noise_seed`.
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of the features seen during ``fit``, when ``X`` has string
        column names.

    See Also
    --------
    DPFisherSelector : The selection step alone, add/remove adjacency.
    TTestSelector : The paper's non-private baseline selection.
    skdp.discriminant.DPFisherClassifier : Protects the labels too, without releasing rows.

    Examples
    --------
    The release is noisy, so only its shape and certified cost are fixed:

    >>> import numpy as np, warnings
    >>> from skdp.exceptions import PrivacyLeakWarning
    >>> from skdp.feature_selection import DFSRelease
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 500); X = rng.normal(size=(500, 20)); X[:, :4] += y[:, None]
    >>> dfs = DFSRelease(4, epsilon=6.0, bounds=(-4, 5), clip_norm=2.0, classes=[0, 1])
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", PrivacyLeakWarning)  # the labels are not protected
    ...     released = dfs.fit_transform(X, y)
    >>> released.shape, dfs.epsilon_, dfs.privacy_certified_
    ((500, 4), 6.0, True)
    >>> dfs.transform(X[:3]).shape  # new data: selected and clipped, no noise
    (3, 4)
    """

    _spends_privacy = True  # declared DP: fit spends through a mechanism and reports it (public_steps.declares_dp)
    _parameter_constraints = {
        **PRIVACY_CONSTRAINTS,
        "n_features_to_select": [Interval(numbers.Integral, 1, None, closed="left")],
        "bounds": [None, tuple, list, dict],
        "clip": ["boolean"],
        "clip_norm": [None, Interval(numbers.Real, 0, None, closed="neither")],
        "method": [StrOptions({"private", "paper"})],
        "selection_share": [Interval(numbers.Real, 0, 1, closed="neither")],
        "classes": [None, "array-like"],
        "ledger": [None, HasMethods(["spend"])],
    }

    def __init__(self, n_features_to_select=10, *, epsilon=1.0, delta=1e-5, bounds=None, clip=True,
                 clip_norm=None, method="private", selection_share=0.5, classes=None, ledger=None,
                 random_state=None):
        set_init_params(self, locals())

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Select the features (spends the selection budget only).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Private training features.
        y : array-like of shape (n_samples,)
            Private labels, in ``classes`` when it is given.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._fit(X, y)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y, **fit_params):
        """Select, then return the noisy release of the training rows (spends all of epsilon).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Private training features.
        y : array-like of shape (n_samples,)
            Private labels, in ``classes`` when it is given; they are not
            protected by the release.
        **fit_params : dict
            Ignored; accepted for scikit-learn compatibility.

        Returns
        -------
        X_release : ndarray of shape (n_samples, n_features_to_select)
            The kept features of ``X``, clipped and noised: the (``epsilon``,
            ``delta``)-DP release ("private").
        """
        X = self._fit(X, y)
        kept = self._select(X)
        if self.method == "paper":
            n_max = float(np.abs(kept).sum(axis=1).max())
            variance = 2 * n_max * math.log(1 / self.delta) / self.epsilon
            self.noise_std_, self.sensitivity_ = math.sqrt(variance), math.nan
        else:
            warn_privacy("DFSRelease protects the released features; the labels y reach the next step "
                "unprotected. Treat them as public or use DPFisherClassifier.")
            kept = self._centre_and_clip_rows(kept)
            lower, upper = (b[self.selector_.support_] for b in self.selector_.bounds_)
            self.sensitivity_ = float(np.linalg.norm(upper - lower))
            if self.clip_norm is not None:
                self.sensitivity_ = min(self.sensitivity_, 2.0 * self.clip_norm)
            if self._selects_all:
                eps_release, delta_release = self.epsilon, self.delta
            else:
                eps_release, delta_release = (1 - self.selection_share) * self.epsilon, self.delta / 2
            charge(self.ledger, eps_release, 0.0 if math.isinf(eps_release) else delta_release,
                   type(self).__name__ + " release", cost=Spend.approx(
                       eps_release, 0.0 if math.isinf(eps_release) else delta_release, "replace-one"))
            self.noise_std_ = analytic_gaussian_sigma(eps_release, delta_release, self.sensitivity_)
            self.epsilon_, self.delta_ = float(self.epsilon), float(self.delta)
            if math.isinf(self.epsilon):
                self.delta_ = 0.0
        if self.method != "paper":  # replace-one: one row moves by at most sensitivity_ (L2)
            kept = taps.release("gaussian:rows", kept, self.sensitivity_, "l2", adjacency="replace-one")
        noise = mechanism_rng(self).normal(scale=self.noise_std_, size=kept.shape) * taps.noise_factor()
        self.noise_seeded_ = self.noise_seeded_ or self.selector_.noise_seeded_
        self._set_privacy()
        return kept + noise

    def transform(self, X):
        """Select (and clip) the kept features of new data; adds no noise.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            New data (not being published, e.g. at prediction time).

        Returns
        -------
        X_kept : ndarray of shape (n_samples, n_features_to_select)
            The kept features of ``X``, clipped to the bounds ("private").
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self._select(X)

    def get_feature_names_out(self, input_features=None):
        """Get the names of the kept features.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Input feature names; None uses ``feature_names_in_`` if ``X``
            had them, else ``x0``, ``x1``, ...

        Returns
        -------
        feature_names_out : ndarray of str
            Names of the kept features, in input order.
        """
        check_is_fitted(self)
        if input_features is None:  # the selector saw an array: the column names are ours
            input_features = getattr(self, "feature_names_in_", None)
        return self.selector_.get_feature_names_out(input_features)

    # -- internals ---------------------------------------------------------------------------
    def _fit(self, X, y):
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        if self.delta / 2 == 0:  # selection and release each need a positive share of delta
            raise ValueError(f"delta={self.delta!r} is too small to split between the selection and the "
                             "release (half of it rounds to 0); use delta >= 1e-300.")
        self._selects_all = self.n_features_to_select == X.shape[1]
        share = 1.0 if self.method == "paper" else self.selection_share
        # One adjacency for the whole release: replace one record (a release of rows can not hide a row's
        # presence). The selector is certified for add/remove; a replacement is a removal then an
        # addition, so by group privacy (eps, d) add/remove is (2 eps, (1 + e^eps) d) replace-one. It
        # therefore runs at half its share of epsilon and a delta scaled down to match.
        eps_sel = share * self.epsilon / 2 if self.method == "private" else share * self.epsilon
        delta_sel = (self.delta / 2 / (1 + math.exp(min(eps_sel, 700.0))) if self.method == "private"
                     else self.delta / 2)
        bounds = self.bounds
        if isinstance(bounds, dict):  # by column name: the selector below sees an array, so resolve the names here
            bounds = bounds_by_name(bounds, getattr(self, "feature_names_in_", None), type(self).__name__)
        resolve_bounds(bounds, X, type(self).__name__, warn=False)  # refuse absurd bounds before charging
        if not self._selects_all:  # the selection's replace-one cost, charged before it runs
            cost = (share * self.epsilon, 0.0 if math.isinf(self.epsilon) else self.delta / 2)
            label = " selection" + (" (paper, not certified)" if self.method == "paper" else " (replace-one)")
            charge(self.ledger, *cost, type(self).__name__ + label, cost=Spend.approx(*cost, "replace-one"))
        self.selector_ = DPFisherSelector(
            self.n_features_to_select, epsilon=eps_sel, delta=delta_sel,
            bounds=bounds, clip=self.clip, method=self.method, classes=self.classes,
            ledger=None, random_state=self.random_state,
        ).fit(X, y)
        self.noise_seeded_ = self.selector_.noise_seeded_
        self.classes_ = self.selector_.classes_
        self.noise_std_, self.sensitivity_ = math.nan, math.nan
        if self.method == "paper" or self._selects_all:
            self.epsilon_, self.delta_ = self.selector_.epsilon_, self.selector_.delta_
        else:  # the selector's add/remove guarantee, stated for replace-one (group privacy of 2)
            e_s, d_s = self.selector_.epsilon_, self.selector_.delta_
            self.epsilon_ = 2 * e_s
            self.delta_ = 0.0 if math.isinf(e_s) else (1 + math.exp(min(e_s, 700.0))) * d_s
        self._set_privacy()
        return X

    def _set_privacy(self):
        # The selector's notes (bounds or labels read from the data, the paper's method) carry over.
        notes = self.selector_.privacy_notes_
        certified = True if not notes or self.method == "private" else "; ".join(notes)
        read = ([] if self.bounds is not None else ["bounds"]) + ([] if self.classes is not None else ["classes"])
        set_privacy_attributes(self, self.epsilon_, self.delta_, certified=certified, read_from_data=read,
                               cost=Spend.approx(self.epsilon_, self.delta_, "replace-one"))

    def _planned_costs(self, n_samples=None):
        """The fit's :class:`~skdp.privacy.composition.Spend`: ``(epsilon, delta)`` under replace-one adjacency."""
        eps = float(self.epsilon)
        return [Spend.approx(eps, 0.0 if math.isinf(eps) else float(self.delta), "replace-one")]

    def _select(self, X):
        if self.method == "private":
            X = apply_bounds(X, *self.selector_.bounds_, True, type(self).__name__)
        return X[:, self.selector_.support_]

    def _centre_and_clip_rows(self, kept):
        if self.clip_norm is None:
            return kept
        lower, upper = (b[self.selector_.support_] for b in self.selector_.bounds_)
        centre = (lower + upper) / 2
        offset = kept - centre
        norms = np.linalg.norm(offset, axis=1, keepdims=True)
        return centre + offset * np.minimum(1.0, self.clip_norm / np.maximum(norms, 1e-300))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.non_deterministic = False
        return tags
