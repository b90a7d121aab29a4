"""Attacker's read of module="auto" (/work/review_s35 of session 35): each finding's test, written first."""
import warnings

import numpy as np
import pytest
import torch

from skdp import BudgetLedger, DPMomentumClassifier

FAST = dict(classes=range(3), epsilon=1.0, max_epochs=1)


@pytest.mark.parametrize("rows, image_shape", [((28, 28, 1), (28, 28)),  # channels-last rows
                                                ((28, 28), (16, 16))])  # rows of another size
def test_a03_an_image_shape_unlike_the_rows_is_refused_before_the_charge(rows, image_shape):
    # The CNN was built from image_shape, the ledger charged, and the first lot crashed inside torch:
    # budget spent, nothing released (and the error named neither image_shape nor the fix).
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (60, *rows)).astype(np.float32), rng.integers(0, 3, 60)
    ledger = BudgetLedger(epsilon=10.0, delta=1e-3)
    clf = DPMomentumClassifier(image_shape=image_shape, ledger=ledger, **FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="image_shape"):
            clf.fit(X, y)
    assert ledger.entries == []


@pytest.mark.parametrize("flat", [True, False])
def test_a01_a_channels_first_image_shape_fits_the_cnn(flat):
    # auto_module takes (C, H, W); module_spec refused it with a false "too small" message.
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (60, 3, 16, 16)).astype(np.float32), rng.integers(0, 3, 60)
    X = X.reshape(60, -1) if flat else X
    clf = DPMomentumClassifier(image_shape=(3, 16, 16), **FAST).fit(X, y)
    assert clf.module_ == "cnn" and clf.predict(X).shape == (60,)
    first = next(m for m in clf.net_.module_.modules() if isinstance(m, torch.nn.Conv2d))
    assert first.in_channels == 3


class _RaisesOnLargeValues(torch.nn.Module):
    """Fine on the stand-in lot (standard normal), fails on the real rows (all 10): after the charge."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        if float(x.abs().max()) > 8:
            raise RuntimeError("no")
        return self.linear(x)


def test_a06_a_fresh_fit_that_fails_after_the_charge_keeps_no_certificate():
    # A refit failing after the charge kept the previous fit's epsilon_/privacy_certified_ next to the new,
    # untrained network: privacy_spent reported a fit that was not the model's.
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 4)).astype(np.float32), rng.integers(0, 3, 60)
    clf = DPMomentumClassifier(module=_RaisesOnLargeValues, **FAST).fit(X, y)
    assert clf.privacy_certified_
    with pytest.raises(RuntimeError, match="no"):
        clf.fit(np.full_like(X, 10.0), y)
    assert not hasattr(clf, "epsilon_") and not hasattr(clf, "net_") and not hasattr(clf, "privacy_certified_")
