"""Tabular preprocessing that pays for what it learns: DP clipping ranges and DP medians.

Both steps learn per-column quantiles with the one quantile mechanism of
:mod:`skdp.mechanisms.quantiles` (a Gaussian noisy histogram on a public grid), spend
their own stated (epsilon, delta), charge a ledger before they read the data, and
report it through :func:`~skdp.privacy.set_privacy_attributes`, so that
``privacy_spent(pipeline)`` counts them and a Pipeline or ColumnTransformer holding
them stays certified end to end.
"""
import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .exceptions import warn_privacy
from .mechanisms.quantiles import dp_quantiles, histogram_edges
from .privacy.ledger import charge
from .privacy.report import set_privacy_attributes
from .utils.bounds import bounds_by_name
from .utils.random import mechanism_rng
from .utils.validation import PRIVACY_CONSTRAINTS, set_init_params, warn_if_delta_too_large

__all__ = ["DPQuantileScaler", "DPMedianImputer"]


class _DPQuantileStep(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Shared fit of the quantile steps: validate -> public grid -> charge -> one noisy histogram -> quantiles."""

    _spends_privacy = True  # declared DP: fit spends through a mechanism and reports it (public_steps.declares_dp)
    _parameter_constraints = {
        "epsilon": PRIVACY_CONSTRAINTS["epsilon"],
        "delta": PRIVACY_CONSTRAINTS["delta"],
        "domain": [tuple, list, dict],
        "grid": [StrOptions({"log", "linear"})],
        "n_bins": [Interval(numbers.Integral, 1, None, closed="left")],
        "ledger": [None, HasMethods(["spend"])],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    def _domain(self, n_features):
        """Per-column ``(low, high)`` arrays from ``domain``: a pair (of scalars or arrays) or a dict by column."""
        owner = type(self).__name__
        domain = self.domain
        if isinstance(domain, dict):  # by column name: the one home of ranges by name
            domain = bounds_by_name(domain, getattr(self, "feature_names_in_", None), owner, param="domain")
        try:
            low, high = domain
            low = np.broadcast_to(np.asarray(low, dtype=float), (n_features,)).copy()
            high = np.broadcast_to(np.asarray(high, dtype=float), (n_features,)).copy()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{owner}: domain must be a pair (low, high) of scalars or of arrays of length "
                             f"n_features={n_features}, or a dict by column name; got {self.domain!r}.") from exc
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
            raise ValueError(f"{owner}: domain must be finite with low < high for every column; got "
                             f"{self.domain!r}. It is public: a range known before seeing the data.")
        return low, high

    def _fit_quantiles(self, X, quantiles):
        """Validate, charge, release; returns the (len(quantiles), d) quantiles. Sets the privacy attributes."""
        owner = type(self).__name__
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite="allow-nan")
        low, high = self._domain(X.shape[1])
        self.domain_ = (low, high)
        edges = [histogram_edges(lo, hi, self.grid, self.n_bins) for lo, hi in zip(low, high)]
        private = not math.isinf(self.epsilon)
        if private:
            warn_if_delta_too_large(self.delta, X.shape[0], owner)
        else:
            warn_privacy(f"{owner}(epsilon=inf) reads the quantiles without noise: NOT private.")
        charge(self.ledger, self.epsilon, self.delta if private else 0.0, owner)  # before the data are read
        values = dp_quantiles(X, quantiles, edges, self.epsilon, self.delta, mechanism_rng(self))
        set_privacy_attributes(self, self.epsilon, self.delta)
        return values


class DPQuantileScaler(_DPQuantileStep):
    """Clip each column to a private estimate of its quantile range and scale it to ``feature_range``.

    A ``MinMaxScaler`` whose range is paid for: ``fit`` releases each column's
    ``quantiles`` with (``epsilon``, ``delta``)-DP and ``transform`` clips to
    them and scales linearly to ``feature_range``. The output range is then a
    public constant, so a later estimator's ``bounds=feature_range`` reads
    nothing from the data, and ``privacy_spent(pipeline)`` adds this step's
    spend to the estimator's: the whole pipeline is certified end to end.

    The mechanism (:mod:`skdp.mechanisms.quantiles`): each column's values,
    clipped to its public ``domain`` (a value outside lands in the end bin),
    are counted in the bins of a public grid over that domain; all columns'
    counts are released together by one Gaussian mechanism of L2 sensitivity
    ``sqrt(n_features)`` (a record adds 1 to one bin per column), which splits
    the budget evenly over the columns (each column's histogram is
    ``mu / sqrt(n_features)``-GDP of the total ``mu``). The quantiles are read
    from the bins that stand out of the noise, interpolated inside a bin.
    With a small budget per column the range found is the bulk of the column
    (bins of fewer than about ``2 sigma`` records at its edges are dropped), so
    some records are clipped. NaN counts in no bin and stays NaN.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget of the ranges of all columns together; ``inf``: exact
        quantiles of the grid without noise (warns; not certified).
    delta : float, default=1e-5
        Delta of the Gaussian release.
    quantiles : (float, float), default=(0.01, 0.99)
        Levels of the lower and upper clipping points, ``0 <= lo < hi <= 1``.
    domain : (low, high), pair of arrays, or dict, default=(-1e6, 1e6)
        Public range of every column (a pair of scalars), of each column (a pair
        of arrays), or by column name (``{"age": (0, 120), ...}``, for a
        DataFrame). Known before the data are seen; it can be wide: the "log"
        grid resolves 12 decades below its largest magnitude. Values outside
        are clipped to it.
    grid : {"log", "linear"}, default="log"
        Public bins of the histogram: geometric in magnitude on both sides of 0
        (values of unknown scale) or of equal width (a narrow known domain).
    n_bins : int, default=24
        Bins per sign ("log": 12 decades, 2 bins per decade for 24) or in all ("linear").
    feature_range : (float, float), default=(-1.0, 1.0)
        The public output range; pass it as ``bounds`` to the next estimator.
    ledger : BudgetLedger or None, default=None
        Charged (epsilon, delta) before the data are read.

    Attributes
    ----------
    bounds_ : (ndarray, ndarray)
        The private clipping range of each column (lower, upper), released with DP.
    domain_ : (ndarray, ndarray)
        The public domain of each column.
    scale_, min_ : ndarray of shape (n_features,)
        ``transform(X) = clip(X, *bounds_) * scale_ + min_``.
    epsilon_, delta_ : float
        What the fit spent.
    privacy_certified_ : bool
        Whether (``epsilon_``, ``delta_``) is a proven guarantee (finite epsilon, fresh noise).
    privacy_notes_ : tuple of str
        Why not, when it is not.
    noise_seeded_ : bool
        Whether the noise was seeded by ``insecure_noise_seed``.
    n_features_in_ : int
        Number of columns.
    feature_names_in_ : ndarray of str
        Column names, when fitted on a DataFrame with string column names.

    See Also
    --------
    DPMedianImputer : Fills missing values with DP medians of the same mechanism.
    skdp.mechanisms.dp_quantiles : The quantile mechanism.
    sklearn.preprocessing.MinMaxScaler : The non-private scaler (it learns the range without noise).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from skdp import DPFisherClassifier
    >>> from skdp.preprocessing import DPQuantileScaler
    >>> from skdp.privacy import privacy_spent
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 2000)
    >>> X = np.c_[rng.normal(1000 + 500 * y, 200), rng.normal(0.1 - 0.05 * y, 0.02)]  # unknown scales
    >>> pipe = make_pipeline(DPQuantileScaler(epsilon=0.5, domain=(-1e6, 1e6)),
    ...                      DPFisherClassifier(epsilon=0.5, bounds=(-1, 1), classes=[0, 1]))
    >>> pipe = pipe.fit(X, y)
    >>> privacy_spent(pipe)
    (1.0, 2e-05, True)
    >>> bool(pipe.score(X, y) > 0.85)
    True
    """

    _parameter_constraints = {
        **_DPQuantileStep._parameter_constraints,
        "quantiles": [tuple, list],
        "feature_range": [tuple, list],
    }

    def __init__(self, *, epsilon=1.0, delta=1e-5, quantiles=(0.01, 0.99), domain=(-1e6, 1e6), grid="log",
                 n_bins=24, feature_range=(-1.0, 1.0), ledger=None):
        set_init_params(self, locals())

    def _levels(self):
        try:
            lo, hi = (float(q) for q in self.quantiles)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"quantiles must be a pair (lo, hi) of levels, got {self.quantiles!r}.") from exc
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError(f"quantiles must satisfy 0 <= lo < hi <= 1, got {self.quantiles!r}.")
        try:
            out_lo, out_hi = (float(v) for v in self.feature_range)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"feature_range must be a pair (min, max), got {self.feature_range!r}.") from exc
        if not (math.isfinite(out_lo) and math.isfinite(out_hi) and out_lo < out_hi):
            raise ValueError(f"feature_range must be finite with min < max, got {self.feature_range!r}.")
        return (lo, hi), (out_lo, out_hi)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Release each column's clipping range with DP; spends (``epsilon``, ``delta``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Private numeric columns; NaN allowed (counted nowhere).
        y : None
            Ignored.

        Returns
        -------
        self : object
            Fitted scaler.
        """
        (q_lo, q_hi), (out_lo, out_hi) = self._levels()  # every parameter checked before the charge
        lower, upper = self._fit_quantiles(X, (q_lo, q_hi))
        self.bounds_ = (lower, upper)
        width = upper - lower
        # A column whose range collapsed to a point maps to the middle of feature_range.
        self.scale_ = np.where(width > 0, (out_hi - out_lo) / np.where(width > 0, width, 1.0), 0.0)
        self.min_ = np.where(width > 0, out_lo - lower * self.scale_, (out_lo + out_hi) / 2)
        return self

    def transform(self, X):
        """Clip to ``bounds_`` and scale to ``feature_range`` (row-wise; NaN stays NaN).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Numeric columns as in ``fit``; not modified.

        Returns
        -------
        X_scaled : ndarray of shape (n_samples, n_features)
            Values in ``feature_range`` (or NaN).
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite="allow-nan", reset=False)
        out_lo, out_hi = (float(v) for v in self.feature_range)
        return np.clip(np.clip(X, *self.bounds_) * self.scale_ + self.min_, out_lo, out_hi)

    def inverse_transform(self, X):
        """Map scaled values back to the columns' units (clipped values stay at the clipping points).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Values in ``feature_range``.

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features)
            Values in ``bounds_``.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite="allow-nan", reset=False)
        safe = np.where(self.scale_ > 0, self.scale_, 1.0)
        return np.where(self.scale_ > 0, (X - self.min_) / safe, self.bounds_[0])


class DPMedianImputer(_DPQuantileStep):
    """Fill missing values with each column's DP median: an imputer that pays for what it learns.

    ``SimpleImputer(strategy="median")`` releases the exact median of the
    private data in every filled cell (and a Pipeline holding it is not
    certified). This imputer releases each column's median with (``epsilon``,
    ``delta``)-DP by the quantile mechanism of :class:`DPQuantileScaler`
    (one Gaussian noisy histogram of all columns on a public grid over their
    public ``domain``; NaN counted nowhere) and fills NaN with it. A constant
    fill known in advance, ``SimpleImputer(strategy="constant")``, costs
    nothing and is the choice when a good public value exists.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget of the medians of all columns together; ``inf``: no noise (warns; not certified).
    delta : float, default=1e-5
        Delta of the Gaussian release.
    domain : (low, high), pair of arrays, or dict, default=(-1e6, 1e6)
        Public range of every column, of each column, or by column name (see
        :class:`DPQuantileScaler`); values outside are clipped to it.
    grid : {"log", "linear"}, default="log"
        Public bins: geometric in magnitude or of equal width.
    n_bins : int, default=24
        Bins per sign ("log") or in all ("linear").
    ledger : BudgetLedger or None, default=None
        Charged (epsilon, delta) before the data are read.

    Attributes
    ----------
    statistics_ : ndarray of shape (n_features,)
        The DP median of each column, the fill value.
    domain_ : (ndarray, ndarray)
        The public domain of each column.
    epsilon_, delta_ : float
        What the fit spent.
    privacy_certified_ : bool
        Whether (``epsilon_``, ``delta_``) is a proven guarantee.
    privacy_notes_ : tuple of str
        Why not, when it is not.
    noise_seeded_ : bool
        Whether the noise was seeded by ``insecure_noise_seed``.
    n_features_in_ : int
        Number of columns.
    feature_names_in_ : ndarray of str
        Column names, when fitted on a DataFrame with string column names.

    See Also
    --------
    DPQuantileScaler : Clipping ranges from the same mechanism.
    sklearn.impute.SimpleImputer : ``strategy="constant"`` is free (row-wise); the others learn without DP.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.preprocessing import DPMedianImputer
    >>> X = np.random.default_rng(0).normal(40, 5, (3000, 1))
    >>> X[::10] = np.nan
    >>> imp = DPMedianImputer(epsilon=1.0, domain=(0, 1000)).fit(X)
    >>> bool(30 < imp.statistics_[0] < 50), bool(np.isnan(imp.transform(X)).any())
    (True, False)
    """

    def __init__(self, *, epsilon=1.0, delta=1e-5, domain=(-1e6, 1e6), grid="log", n_bins=24, ledger=None):
        set_init_params(self, locals())

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Release each column's median with DP; spends (``epsilon``, ``delta``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Private numeric columns with NaN for missing values.
        y : None
            Ignored.

        Returns
        -------
        self : object
            Fitted imputer.
        """
        self.statistics_ = self._fit_quantiles(X, (0.5,))[0]
        return self

    def transform(self, X):
        """Replace NaN by ``statistics_`` (row-wise).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Numeric columns as in ``fit``; not modified.

        Returns
        -------
        X_filled : ndarray of shape (n_samples, n_features)
            ``X`` with every NaN replaced by its column's DP median.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite="allow-nan", reset=False, copy=True)
        rows, cols = np.nonzero(np.isnan(X))
        X[rows, cols] = self.statistics_[cols]
        return X
