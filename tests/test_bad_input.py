"""One matrix: every public estimator against the common bad inputs.

Each must refuse with an error that names the problem, train nothing, and
leave the caller's arrays as they were.
"""
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from skdp import (DFSRelease, DPFisherClassifier, DPFisherSelector, DPMomentumClassifier,
                  PrivacyLeakWarning, TTestSelector)

ESTIMATORS = {
    "DPMomentumClassifier": (lambda **kw: DPMomentumClassifier(max_epochs=1, **kw), "net_"),
    "DPFisherSelector": (lambda **kw: DPFisherSelector(2, bounds=(-20, 20), **kw), "support_"),
    "DFSRelease": (lambda **kw: DFSRelease(2, bounds=(-20, 20), **kw), "selector_"),
    "DPFisherClassifier": (lambda **kw: DPFisherClassifier(bounds=(-20, 20), **kw), "means_"),
    "TTestSelector": (lambda **kw: TTestSelector(2, **kw), "scores_"),
}
X, Y = make_blobs(n_samples=40, n_features=4, centers=2, random_state=0)
MASK = np.arange(X.size).reshape(X.shape) == 5
CASES = {
    "nan": ({}, np.where(MASK, np.nan, X), Y, "NaN"),
    "inf": ({}, np.where(MASK, np.inf, X), Y, "infinity"),
    "1d": ({}, X[:, 0], Y, "2D array"),
    "3d": ({}, X.reshape(40, 2, 2), Y, "dim|2D|image_shape|channels"),
    "empty": ({}, X[:0], Y[:0], "0 sample"),
    "one sample": ({}, X[:1], Y[:1], "sample|one class|2 labels"),
    "single class": ({}, X, np.zeros(40), "one class|2 labels"),
    "strings": ({}, np.array([["a", "b", "c", "d"]] * 40, dtype=object), Y, "could not convert|numeric"),
    "y length": ({}, X, Y[:-1], "inconsistent numbers of samples"),
    "epsilon 0": ({"epsilon": 0}, X, Y, "epsilon"),
    "epsilon < 0": ({"epsilon": -1}, X, Y, "epsilon"),
    "delta 0": ({"delta": 0}, X, Y, "delta"),
    "delta 1": ({"delta": 1.0}, X, Y, "delta"),
}
NO_PRIVACY_PARAMS = {"TTestSelector"}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ESTIMATORS)
def test_bad_input_is_refused_clearly_and_arrays_are_untouched(name, case):
    params, X_bad, y_bad, match = CASES[case]
    if params and name in NO_PRIVACY_PARAMS:
        pytest.skip(f"{name} is a non-private baseline without {list(params)}")
    if case == "3d" and name == "DPMomentumClassifier":
        pytest.skip("DPMomentumClassifier takes (n, H, W) images: 3-D input is valid there")
    make, fitted_attr = ESTIMATORS[name]
    X_before, y_before = X_bad.copy(), y_bad.copy()
    est = make(**params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        with pytest.raises((ValueError, TypeError), match=match):
            est.fit(X_bad, y_bad)
    assert not hasattr(est, fitted_attr)
    np.testing.assert_array_equal(X_bad, X_before)
    np.testing.assert_array_equal(y_bad, y_before)
