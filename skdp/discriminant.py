"""DPFisherClassifier: Fisher's discriminant with diagonal covariance from noisy sufficient statistics."""
import math
import numbers

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .exceptions import warn_privacy
from .mechanisms import gaussian_dp_mu
from .privacy.composition import Spend
from .privacy.ledger import charge
from .utils.bounds import apply_bounds, resolve_bounds
from .privacy.report import set_privacy_attributes
from .utils import taps
from .utils.random import mechanism_rng
from .utils.validation import PRIVACY_CONSTRAINTS, encode_labels, set_init_params, warn_if_delta_too_large

__all__ = ["DPFisherClassifier"]

# How the Gaussian-DP budget mu**2 is split between counts, sums and sums of squares.
MU2_SHARES = {"counts": 0.1, "sums": 0.6, "squares": 0.3}


class DPFisherClassifier(ClassifierMixin, BaseEstimator):
    """Fisher's linear discriminant (pooled diagonal covariance), trained privately.

    The model needs only class counts, per-class sums and per-class sums of
    squares. After clipping X to the public ``bounds`` and centring it on the
    box, one record moves the counts by 1, the sums by at most ``||w/2||_2`` and
    the (offset) sums of squares by at most ``||w^2/8||_2`` (``w`` the box
    widths). Each is released by a Gaussian mechanism; together they are
    ``mu``-Gaussian-DP with ``mu`` set from (epsilon, delta) exactly, so the fit
    is (epsilon, delta)-DP under add/remove of one (x, y) record, labels
    included. Everything after the release is post-processing. This is the
    certified counterpart of "a Fisher classifier on noisy records": the noise
    on a mean is about n times smaller than on a released record.

    The Gaussian-DP budget ``mu^2`` is split 10% / 60% / 30% between counts,
    sums and sums of squares, so each statistic gets noise of standard
    deviation ``sensitivity / (mu * sqrt(share))``. Prediction is the
    Gaussian rule with a shared diagonal covariance, linear in x:
    ``argmax_c x . (m_c / v) - (m_c . (m_c / v)) / 2 + log(prior_c)``.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget of the fit, > 0. ``inf`` fits the exact (non-private)
        diagonal Fisher rule and warns.
    delta : float, default=1e-5
        Delta of the guarantee, in (0, 1); with ``epsilon`` it sets ``mu``
        exactly. Keep it well below 1 / n_samples.
    bounds : None, (lower, upper) or dict, default=None
        Public feature range (scalars or per-feature arrays), or a dict
        ``{column: (lower, upper)}`` for a DataFrame (every column needs one;
        other names are ignored, so the dict given to a ``DPFisherSelector``
        before it serves the columns it keeps: use
        ``pipeline.set_output(transform="pandas")`` so the names reach this
        step). The box widths set the sensitivities. None reads it from the
        data (warns, unless epsilon is inf, and voids the certificate);
        stored in ``bounds_``.
    clip : bool, default=True
        Clip X to ``bounds``; with False, data outside is an error.
    classes : array-like or None, default=None
        Public label set; None reads it from ``y`` (warns; the label set is
        then a release the certificate does not cover).
    priors : None, "uniform" or array-like of shape (n_classes,), default=None
        Class priors. None estimates them from the noisy counts. Fisher's rule
        itself has none ("uniform"), which is the right choice when training
        on noisy records and predicting clean ones: the noise inflates the
        variances, and with them the weight of the prior term.
    var_smoothing : float, default=1e-2
        Share of the largest variance added to every variance (as in
        ``GaussianNB``); keeps noisy tiny variances from dominating.
    ledger : BudgetLedger or None, default=None
        Charged with (``epsilon``, ``delta``) before any noise is drawn; a
        spend past its caps raises ``BudgetExceededError`` and fits nothing.
    random_state : int, Generator or None, default=None
        Accepted for scikit-learn compatibility; the noise is always fresh OS
        entropy (see :func:`skdp.insecure_noise_seed` for experiments).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The label set used (``classes``, or read from ``y``).
    class_count_ : ndarray of shape (n_classes,)
        Noisy class counts (may be fractional or negative).
    class_prior_ : ndarray of shape (n_classes,)
        Class priors used by the rule.
    means_ : ndarray of shape (n_classes, n_features)
        Class means from the noisy sums, clipped to the bounds.
    var_ : ndarray of shape (n_features,)
        Pooled within-class variances (smoothed).
    bounds_ : tuple of ndarray
        The per-feature ``(lower, upper)`` used.
    noise_std_ : dict
        Noise standard deviation of each released statistic
        (``"counts"``, ``"sums"``, ``"squares"``).
    epsilon_ : float
        Epsilon spent by the fit.
    delta_ : float
        Delta spent by the fit (0 when ``epsilon`` is inf).
    privacy_certified_ : bool
        Whether (``epsilon_``, ``delta_``) is a proven guarantee of the
        fitted model: finite epsilon, public ``bounds`` and ``classes``,
        fresh noise.
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
    skdp.feature_selection.DPFisherSelector : Private selection of the features it separates best.
    skdp.feature_selection.DFSRelease : Noisy features for a classifier, labels unprotected.
    sklearn.naive_bayes.GaussianNB : The non-private model with per-class variances.

    Examples
    --------
    The noise is fresh on every fit, so only shapes and the certified cost
    are fixed:

    >>> from sklearn.datasets import load_digits
    >>> from skdp import DPFisherClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = DPFisherClassifier(epsilon=3.0, bounds=(0, 16), classes=range(10)).fit(X, y)
    >>> clf.means_.shape, clf.predict_proba(X[:2]).shape
    ((10, 64), (2, 10))
    >>> clf.epsilon_, clf.delta_, clf.privacy_certified_
    (3.0, 1e-05, True)
    """

    _spends_privacy = True  # declared DP: fit spends through a mechanism and reports it (public_steps.declares_dp)
    _parameter_constraints = {
        **PRIVACY_CONSTRAINTS,
        "bounds": [None, tuple, list, dict],
        "clip": ["boolean"],
        "classes": [None, "array-like"],
        "priors": [None, StrOptions({"uniform"}), "array-like"],
        "var_smoothing": [Interval(numbers.Real, 0, None, closed="left")],
        "ledger": [None, HasMethods(["spend"])],
    }

    def __init__(self, *, epsilon=1.0, delta=1e-5, bounds=None, clip=True, classes=None,
                 priors=None, var_smoothing=1e-2, ledger=None, random_state=None):
        set_init_params(self, locals())

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Release noisy statistics of private ``(X, y)`` and build the rule; spends (epsilon, delta).

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
        owner = type(self).__name__
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        self.classes_, codes = encode_labels(self.classes, y, owner)
        private = not math.isinf(self.epsilon)
        if private:
            warn_if_delta_too_large(self.delta, X.shape[0], owner)
        else:
            warn_privacy(f"{owner}(epsilon=inf) fits without noise: NOT private.")
        self.bounds_ = resolve_bounds(self.bounds, X, owner, warn=private,
                                     feature_names=getattr(self, "feature_names_in_", None))
        lower, upper = self.bounds_
        centre, half = (lower + upper) / 2, (upper - lower) / 2
        Z = apply_bounds(X, lower, upper, self.clip, owner) - centre  # in [-half, half]
        offset = half ** 2 / 2  # centres z**2 in [-offset, offset]: halves its sensitivity

        k = len(self.classes_)
        counts = np.bincount(codes, minlength=k).astype(float)
        sums, squares = np.zeros((k, X.shape[1])), np.zeros((k, X.shape[1]))
        np.add.at(sums, codes, Z)
        np.add.at(squares, codes, Z ** 2 - offset)

        sensitivities = {"counts": 1.0, "sums": float(np.linalg.norm(half)),
                         "squares": float(np.linalg.norm(offset))}
        mu = gaussian_dp_mu(self.epsilon, self.delta) if private else math.inf
        cost = self._cost(mu) if private else Spend(math.inf, 0.0)
        charge(self.ledger, self.epsilon, self.delta if private else 0.0, owner, cost=cost)
        self.noise_std_ = {name: sensitivities[name] / (mu * math.sqrt(share))
                           for name, share in MU2_SHARES.items()}
        rng = mechanism_rng(self)  # fresh and secret: never from random_state
        noisy = {}
        for name, value in (("counts", counts), ("sums", sums), ("squares", squares)):
            value = taps.release(f"gaussian:{name}", value, sensitivities[name], "l2")
            noisy[name] = value + rng.normal(scale=self.noise_std_[name] * taps.noise_factor(), size=value.shape)
        counts, sums, squares = noisy["counts"], noisy["sums"], noisy["squares"]

        # Post-processing of the released statistics.
        self.class_count_ = counts
        n_c = np.maximum(counts, 1.0)
        mean_z = np.clip(sums / n_c[:, None], -half, half)
        self.means_ = mean_z + centre
        within = (squares + n_c[:, None] * offset) - n_c[:, None] * mean_z ** 2
        var = np.clip(within.sum(axis=0) / max(n_c.sum() - k, 1.0), 0.0, np.maximum(half ** 2, 0))
        scale = var.max() if var.max() > 0 else 1.0
        self.var_ = var + self.var_smoothing * scale + np.finfo(float).tiny
        self.class_prior_ = self._resolve_priors(n_c / n_c.sum())
        read = ([] if self.bounds is not None else ["bounds"]) + ([] if self.classes is not None else ["classes"])
        set_privacy_attributes(self, self.epsilon, self.delta, read_from_data=read, cost=cost)
        return self

    def _cost(self, mu):
        """The release as one mu-GDP Gaussian mechanism (the three statistics share mu**2 by MU2_SHARES).

        Replace-one: a record moved within its class changes no count and moves its class's sum and
        squares by up to twice their add/remove sensitivity (mu**2 -> 4 (0.6 + 0.3) mu**2); moved to
        another class it changes two counts, two sums and two squares by one record each
        (mu**2 -> 2 mu**2). The larger: ``2 sqrt(0.9) mu``.
        """
        mu_r = 2 * math.sqrt(MU2_SHARES["sums"] + MU2_SHARES["squares"]) * mu
        return Spend.gaussian(mu, self.delta, epsilon=self.epsilon, replace_one_mu=max(mu_r, math.sqrt(2) * mu))

    def _planned_costs(self, n_samples=None):
        """The fit's :class:`~skdp.privacy.composition.Spend`, from ``epsilon`` and ``delta`` alone."""
        if math.isinf(self.epsilon):
            return [Spend(math.inf, 0.0)]
        return [self._cost(gaussian_dp_mu(self.epsilon, self.delta))]

    def _resolve_priors(self, estimated):
        k = len(self.classes_)
        if self.priors is None:
            return estimated
        if isinstance(self.priors, str):
            return np.full(k, 1.0 / k)
        priors = np.asarray(self.priors, dtype=float)
        if priors.shape != (k,) or np.any(priors <= 0) or not np.isclose(priors.sum(), 1.0):
            raise ValueError(f"priors must be {k} positive numbers summing to 1, got {self.priors!r}.")
        return priors

    def _joint_log_likelihood(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        # Shared diagonal covariance: the quadratic term in x cancels, so the rule is linear.
        weights = self.means_ / self.var_
        return X @ weights.T - 0.5 * np.sum(self.means_ * weights, axis=1) + np.log(self.class_prior_)

    def decision_function(self, X):
        """Log-posterior scores of the fitted rule (post-processing of the release).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples to score.

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Unnormalised log-posterior of each class; for two classes, that
            of ``classes_[1]`` minus that of ``classes_[0]``.
        """
        jll = self._joint_log_likelihood(X)
        return jll[:, 1] - jll[:, 0] if len(self.classes_) == 2 else jll

    def predict_log_proba(self, X):
        """Log-probability of each class (post-processing of the release).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples to score.

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
            Log of the posterior probability of each class in ``classes_``.
        """
        jll = self._joint_log_likelihood(X)
        return jll - logsumexp(jll, axis=1, keepdims=True)

    def predict_proba(self, X):
        """Probability of each class (post-processing of the release).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples to score.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Posterior probability of each class in ``classes_``.
        """
        return np.exp(self.predict_log_proba(X))

    def predict(self, X):
        """Predict the most probable class (post-processing of the release).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples to classify.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Predicted labels, from ``classes_``.
        """
        jll = self._joint_log_likelihood(X)
        return self.classes_[np.argmax(jll, axis=1)]
