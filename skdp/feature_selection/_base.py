"""Shared parts of skdp's feature selectors."""
import numbers

import numpy as np
from sklearn.feature_selection import SelectorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data


class TopKSelectorMixin(SelectorMixin):
    """A selector that keeps ``n_features_to_select`` features found in ``fit``."""

    _selector_constraints = {
        "n_features_to_select": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def _validate_Xy(self, X, y):
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        if self.n_features_to_select > X.shape[1]:
            raise ValueError(
                f"n_features_to_select={self.n_features_to_select} is larger than the number of "
                f"features ({X.shape[1]})."
            )
        return X, y

    def _set_support(self, chosen):
        """``chosen``: feature indices in the order they were selected."""
        self.support_ = np.zeros(self.n_features_in_, dtype=bool)
        self.support_[chosen] = True
        self.ranking_ = np.full(self.n_features_in_, len(chosen) + 1)
        self.ranking_[chosen] = np.arange(1, len(chosen) + 1)

    def _get_support_mask(self):
        check_is_fitted(self)
        return self.support_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags
