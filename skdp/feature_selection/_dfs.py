"""DPFisherSelector: DFS feature selection by class-mean gaps (Shen et al. 2021, Algorithm 1, steps 1-3)."""
import math

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import HasMethods, StrOptions

from ..exceptions import warn_privacy
from ..mechanisms import gumbel_top_k, top_k_round_epsilon
from ..privacy.ledger import charge
from ..utils.bounds import apply_bounds, resolve_bounds
from ..privacy.report import set_privacy_attributes
from ..utils import taps
from ..utils.random import mechanism_rng
from ..utils.validation import PRIVACY_CONSTRAINTS, encode_labels, set_init_params, warn_if_delta_too_large
from ._base import TopKSelectorMixin
from ._scores import mean_gap

# Share of epsilon spent on the noisy class counts that set the score's sensitivity.
COUNT_SHARE = 0.1


class DPFisherSelector(TopKSelectorMixin, BaseEstimator):
    """Keep the features whose class means are furthest apart, privately.

    The score of feature j is ``D_j = max_{q,c} |mean_qj - mean_cj|`` (DFS,
    Algorithm 1). Two methods:

    ``"private"`` (certified, the default)
        Features are clipped to the public ``bounds`` of width ``w``. Class
        counts are released with Laplace noise (``0.1 * epsilon``); their
        smallest value is a floor ``N0``, and each class mean is computed as
        ``sum / max(n_c, N0)`` on data centred in the box, so that adding or
        removing one record moves any ``D_j`` by at most ``max(w) / N0`` whatever
        the true counts (a class smaller than ``N0`` is shrunk to the centre).
        The top ``m`` features are chosen by one-shot Gumbel top-m, i.e. m
        peeling exponential mechanisms, with the rest of the budget
        (``0.9 * epsilon``, ``delta``, bounded-range zCDP composition). The whole fit is (epsilon, delta)-DP under add/remove-one
        adjacency of (x, y) records. Only the chosen set and its order are
        released (``support_``, ``ranking_``); no score is, so ``scores_`` is
        NaN.
    ``"paper"`` (not certified)
        Algorithm 1 as written: the exact top ``m`` gaps of the raw data, no
        noise, no bounds. Fitting warns with ``PrivacyLeakWarning``;
        ``privacy_certified_`` is False and ``epsilon_`` only repeats the claim.

    Parameters
    ----------
    n_features_to_select : int, default=10
        Number ``m`` of features to keep, >= 1 and at most the number of
        features. It must be public; keeping every feature chooses nothing
        and spends nothing.
    epsilon : float, default=1.0
        Privacy budget of the fit, > 0: ``0.1 * epsilon`` for the class
        counts, ``0.9 * epsilon`` for the m selections. ``inf`` selects the
        exact top m (not private; warns).
    delta : float, default=1e-5
        Delta of the selection's zCDP-to-(epsilon, delta) conversion, in
        (0, 1); keep it well below 1 / n_samples.
    bounds : None, (lower, upper) or dict, default=None
        Public feature range, scalars or per-feature arrays, or a dict
        ``{column: (lower, upper)}`` for a DataFrame (every column needs one;
        a ``DPFisherClassifier`` after it can take the same dict: it reads the
        kept columns' entries by name). It sets the sensitivity ``max(w) / N0``. None reads it from the data (warns,
        voids the certificate; stored in ``bounds_``, never in ``bounds``).
    clip : bool, default=True
        Clip X to ``bounds``; with False, data outside the bounds is an error.
    method : {"private", "paper"}, default="private"
        ``"private"``: the certified selection above. ``"paper"``: the
        paper's exact ranking, not private.
    classes : array-like or None, default=None
        Public label set; None reads it from ``y`` (warns; the label set is
        then a release the certificate does not cover).
    ledger : BudgetLedger or None, default=None
        Charged before any noise is drawn ("paper" charges its claim).
    random_state : int, Generator or None, default=None
        Accepted for scikit-learn compatibility; the noise is always fresh OS
        entropy (see :func:`skdp.insecure_noise_seed` for experiments).

    Attributes
    ----------
    support_ : ndarray of bool of shape (n_features,)
        Mask of the kept features.
    ranking_ : ndarray of int of shape (n_features,)
        1 for the first feature chosen, ..., m; m + 1 for the others.
    scores_ : ndarray of float of shape (n_features,)
        The released scores: "paper", the exact gaps ``D_j`` (not private).
        "private": NaN, since the mechanism releases the chosen set and its
        order only (``ranking_``), never a gap; a released value must be a DP
        output, and ranks are not scores. NaN also when every feature is kept
        (nothing is computed or spent).
    classes_ : ndarray of shape (n_classes,)
        The label set used (``classes``, or read from ``y``).
    bounds_ : tuple of ndarray
        The per-feature ``(lower, upper)`` used.
    class_counts_ : ndarray of shape (n_classes,) or None
        Noisy class counts ("private"; exact ones when ``epsilon`` is
        inf); None for "paper" or when every feature is kept.
    sensitivity_ : float
        Bound ``max(w) / N0`` on the change of any ``D_j`` by one record
        ("private"); NaN for "paper".
    epsilon_ : float
        Epsilon spent ("private") or claimed ("paper").
    delta_ : float
        Delta spent ("private") or claimed ("paper").
    privacy_certified_ : bool
        Whether (``epsilon_``, ``delta_``) is a proven guarantee of the
        selection: "private" with finite epsilon, public ``bounds`` and
        ``classes``, and fresh noise.
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
    DFSRelease : This selection, then a noisy release of the kept features.
    TTestSelector : The paper's non-private t-test baseline.
    skdp.discriminant.DPFisherClassifier : A private classifier for the kept features.
    skdp.mechanisms.gumbel_top_k : The private top-m selection used here.

    Examples
    --------
    Five informative features of 50; the selection is noisy, so only its
    size and its certified cost are fixed:

    >>> import numpy as np
    >>> from skdp.feature_selection import DPFisherSelector
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 2000)
    >>> X = rng.normal(size=(2000, 50)); X[:, :5] += y[:, None]
    >>> sel = DPFisherSelector(5, epsilon=3, bounds=(-4, 5), classes=[0, 1]).fit(X, y)
    >>> sel.transform(X).shape, sel.epsilon_, sel.privacy_certified_
    ((2000, 5), 3.0, True)
    """

    _spends_privacy = True  # declared DP: fit spends through a mechanism and reports it (public_steps.declares_dp)
    _parameter_constraints = {
        **TopKSelectorMixin._selector_constraints,
        **PRIVACY_CONSTRAINTS,
        "bounds": [None, tuple, list, dict],
        "clip": ["boolean"],
        "method": [StrOptions({"private", "paper"})],
        "classes": [None, "array-like"],
        "ledger": [None, HasMethods(["spend"])],
    }

    def __init__(self, n_features_to_select=10, *, epsilon=1.0, delta=1e-5, bounds=None, clip=True,
                 method="private", classes=None, ledger=None, random_state=None):
        set_init_params(self, locals())

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Choose the features from private ``(X, y)``; spends (``epsilon``, ``delta``) for "private".

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
        X, y = self._validate_Xy(X, y)
        self.classes_, codes = encode_labels(self.classes, y, type(self).__name__)
        k, m = len(self.classes_), self.n_features_to_select
        if m == X.shape[1]:
            self._fit_all(X)  # keeping every feature reveals nothing and costs nothing
        elif self.method == "paper":
            self._fit_paper(X, codes, k, m)
        else:
            self._fit_private(X, codes, k, m, mechanism_rng(self))
        self.noise_seeded_ = getattr(self, "noise_seeded_", False)
        certified = (self.method == "private" or m == X.shape[1]
                     or "the paper's Algorithm 1 ranks the raw data at no privacy cost")
        read = ([] if self.bounds is not None else ["bounds"]) + ([] if self.classes is not None else ["classes"])
        set_privacy_attributes(self, self.epsilon_, self.delta_, certified=certified, read_from_data=read)
        return self

    def _fit_all(self, X):
        private = not math.isinf(self.epsilon) and self.method == "private"
        self.bounds_ = resolve_bounds(self.bounds, X, type(self).__name__, warn=private,
                                     feature_names=getattr(self, "feature_names_in_", None))
        apply_bounds(X, *self.bounds_, self.clip, type(self).__name__)
        self._set_support(np.arange(X.shape[1]))
        self.scores_ = np.full(X.shape[1], np.nan)  # nothing is scored
        self.class_counts_, self.sensitivity_ = None, 0.0
        self.epsilon_, self.delta_ = 0.0, 0.0
        self.privacy_certified_ = True

    def _fit_paper(self, X, codes, k, m):
        warn_privacy("DPFisherSelector(method='paper') ranks features on the raw private data at no privacy "
            "cost, as the paper's Algorithm 1 does; its privacy claim is NOT certified.")
        self.bounds_ = resolve_bounds(self.bounds, X, type(self).__name__, warn=False,
                                     feature_names=getattr(self, "feature_names_in_", None))
        X = apply_bounds(X, *self.bounds_, self.clip, type(self).__name__)
        charge(self.ledger, self.epsilon, self.delta, type(self).__name__ + " (paper, not certified)")
        self.scores_ = mean_gap(X, codes, k)
        self._set_support(np.argsort(-self.scores_, kind="stable")[:m])
        self.class_counts_ = None
        self.sensitivity_ = math.nan
        self.epsilon_, self.delta_ = float(self.epsilon), float(self.delta)
        self.privacy_certified_ = False

    def _fit_private(self, X, codes, k, m, rng):
        owner = type(self).__name__
        warn_if_delta_too_large(self.delta, X.shape[0], owner)
        self.bounds_ = resolve_bounds(self.bounds, X, owner, warn=not math.isinf(self.epsilon),
                                     feature_names=getattr(self, "feature_names_in_", None))
        lower, upper = self.bounds_
        X = apply_bounds(X, lower, upper, self.clip, owner)
        width = float(np.max(upper - lower))
        Z = X - (lower + upper) / 2  # centred, so an empty or shrunk class mean sits at the centre
        counts = np.bincount(codes, minlength=k).astype(float)
        if math.isinf(self.epsilon):
            charge(self.ledger, math.inf, 0.0, owner)
            warn_privacy("DPFisherSelector(epsilon=inf) selects without noise: NOT private.")
            self.class_counts_, self.sensitivity_ = counts, 0.0
            chosen = gumbel_top_k(mean_gap(Z, codes, k), m, math.inf, 0.0, rng)
            self.epsilon_, self.delta_ = math.inf, 0.0
        else:
            charge(self.ledger, self.epsilon, self.delta, owner)
            eps_count, eps_select = COUNT_SHARE * self.epsilon, (1 - COUNT_SHARE) * self.epsilon
            counts = taps.release("laplace:class_counts", counts, 1.0, "l1")  # one record: one count, by 1
            self.class_counts_ = counts + rng.laplace(scale=taps.noise_factor() / eps_count, size=k)
            # Class means divide by max(n_c, floor): one record then moves any mean by at most
            # width / floor, whatever the true counts. The floor is post-processing of the noisy counts.
            floor = max(1.0, float(self.class_counts_.min()))
            self.sensitivity_ = width / floor
            eps0 = top_k_round_epsilon(eps_select, self.delta, m)
            chosen = gumbel_top_k(mean_gap(Z, codes, k, floor=floor), m, eps0, self.sensitivity_, rng)
            self.epsilon_, self.delta_ = float(self.epsilon), float(self.delta)
        self._set_support(chosen)
        self.scores_ = np.full(X.shape[1], np.nan)  # released: the set and its order (ranking_), no score
        self.privacy_certified_ = not math.isinf(self.epsilon)
