"""TTestSelector: the paper's "t-testing" baseline. NOT private."""
import math

from sklearn.base import BaseEstimator, _fit_context

from ..exceptions import warn_privacy
from ..privacy.report import set_privacy_attributes
from ..utils.validation import check_label_types, encode_labels
from ._base import TopKSelectorMixin
from ._scores import max_pairwise_t

import numpy as np


class TTestSelector(TopKSelectorMixin, BaseEstimator):
    """Keep the features with the largest two-sample t-statistic. NOT private.

    The baseline of the DFS paper (Fan & Fan's FAIR ranking): for k classes a
    feature scores the largest Welch ``|t|`` over class pairs,
    ``|t| = |mean_q - mean_c| / sqrt(s_q^2 / n_q + s_c^2 / n_c)``, and the
    ``n_features_to_select`` highest scores are kept. The ranking reads the
    private data directly, with no noise and no bound on any record's
    influence, so fitting warns with ``PrivacyLeakWarning``,
    ``privacy_certified_`` is False and ``epsilon_`` is inf. Use it as a
    reference for what the private selectors give up.

    Parameters
    ----------
    n_features_to_select : int, default=10
        Number of features to keep, >= 1 and at most the number of features.

    Attributes
    ----------
    scores_ : ndarray of shape (n_features,)
        Max pairwise Welch ``|t|`` per feature (exact: a release of the data).
    support_ : ndarray of bool of shape (n_features,)
        Mask of the kept features.
    ranking_ : ndarray of int of shape (n_features,)
        1 for the highest score, ..., ``n_features_to_select``; one more for the others.
    classes_ : ndarray of shape (n_classes,)
        Labels seen in ``y``.
    epsilon_ : float
        Always inf: the selection is not private.
    delta_ : float
        Always 0.
    privacy_certified_ : bool
        Always False.
    privacy_notes_ : tuple of str
        Why: a non-private baseline, no noise.
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of shape (``n_features_in_``,)
        Names of the features seen during ``fit``, when ``X`` has string
        column names.

    See Also
    --------
    DPFisherSelector : The private selector it is the baseline of.
    DFSRelease : Private selection, then a noisy release of the kept features.

    Examples
    --------
    >>> import numpy as np, warnings
    >>> from skdp.feature_selection import TTestSelector
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 500); X = rng.normal(size=(500, 20)); X[:, 3] += 2 * y
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     TTestSelector(1).fit(X, y).get_support(indices=True)
    array([3])
    """

    _parameter_constraints = {**TopKSelectorMixin._selector_constraints}

    def __init__(self, n_features_to_select=10):
        self.n_features_to_select = n_features_to_select

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Rank the features of ``(X, y)`` by their largest pairwise Welch t-statistic (not private).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training features.
        y : array-like of shape (n_samples,)
            Labels; the class set is read from them.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        X, y = self._validate_Xy(X, y)
        warn_privacy("TTestSelector is a non-private baseline: its selection reveals the data.")
        check_label_types(y, type(self).__name__)
        self.classes_, codes = encode_labels(None, y, type(self).__name__)  # the label set read from y (warns)
        self.scores_ = max_pairwise_t(X, codes, len(self.classes_))
        self._set_support(np.argsort(-self.scores_, kind="stable")[: self.n_features_to_select])
        set_privacy_attributes(self, math.inf, 0.0, certified="a non-private baseline")
        return self
