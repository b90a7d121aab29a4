"""DPMomentumRegressor: scikit-learn's checks, learning, privacy twin, partial_fit accounting."""
import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from skdp import BudgetLedger, DPMomentumRegressor
from test_classifier import EXPECTED_FAILED_CHECKS as CLASSIFIER_EXPECTED

EXPECTED_FAILED_CHECKS = {name: reason for name, reason in CLASSIFIER_EXPECTED.items()
                          if "sample_weight" in name and "classifiers" not in name}


@parametrize_with_checks([DPMomentumRegressor(max_epochs=5, random_state=0)],
                         expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS)
def test_sklearn_compatible(estimator, check, seeded_noise):
    with seeded_noise():
        check(estimator)


def linear_task(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 5))
    return X, X @ np.array([0.5, -0.4, 0.3, 0.0, 0.2]) + 0.05 * rng.normal(size=n)


@pytest.mark.parametrize("loss", ["squared_error", "huber"])
def test_learns_a_linear_target_privately(loss):
    X, y = linear_task()
    # Fresh noise: the median of three fits (the auto learning rate was chosen on classification data;
    # one Huber fit in ten lands near 0.7 on this task).
    regs = [DPMomentumRegressor(loss=loss, epsilon=1.0).fit(X, y) for _ in range(3)]
    assert np.median([r.score(X, y) for r in regs]) > 0.8
    assert all(r.epsilon_ <= 1.0 and r.privacy_certified_ for r in regs)


def test_noise_costs_accuracy():
    # Twin of the test above: at epsilon = 0.01 the fit is much worse.
    X, y = linear_task()
    assert np.median([DPMomentumRegressor(epsilon=0.01).fit(X, y).score(X, y) for _ in range(3)]) < 0.5


def test_multi_output_and_partial_fit_charges_every_call():
    X, y = linear_task(500)
    Y = np.c_[y, -y]
    reg = DPMomentumRegressor(max_epochs=2).fit(X, Y)
    assert reg.predict(X).shape == (500, 2) and reg.n_outputs_ == 2
    ledger = BudgetLedger(epsilon=10)
    reg = DPMomentumRegressor(ledger=ledger, warm_start=True, max_epochs=2)
    reg.fit(X, y)
    first = reg.epsilon_
    reg.fit(X, y)  # continues the same network: the accountant composes both fits
    assert reg.epsilon_ > first and len(ledger.entries) == 2
    assert ledger.total()[0] >= reg.epsilon_ - 1e-9


def test_sample_weight_is_refused_with_the_reason():
    X, y = linear_task(100)
    with pytest.raises(ValueError, match="sample_weight.*clipping"):
        DPMomentumRegressor().fit(X, y, sample_weight=np.ones(100))
