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
    feature scores the largest Welch |t| over class pairs. The ranking reads
    the private data directly, so fitting warns with ``PrivacyLeakWarning``.

    Parameters
    ----------
    n_features_to_select : int, default=10

    Attributes
    ----------
    scores_ : ndarray of shape (n_features_in_,)
        Max pairwise |t| per feature.
    support_, ranking_, classes_, n_features_in_

    Examples
    --------
    >>> import numpy as np, warnings
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
        X, y = self._validate_Xy(X, y)
        warn_privacy("TTestSelector is a non-private baseline: its selection reveals the data.")
        check_label_types(y, type(self).__name__)
        self.classes_, codes = encode_labels(np.unique(y), y, type(self).__name__)
        self.scores_ = max_pairwise_t(X, codes, len(self.classes_))
        self._set_support(np.argsort(-self.scores_, kind="stable")[: self.n_features_to_select])
        set_privacy_attributes(self, math.inf, 0.0, certified="a non-private baseline")
        return self
