"""Fixes of 2026-11-26 (session 37), each with the test that failed before it."""
import warnings

import numpy as np
import pytest

from skdp import BudgetLedger, DPMomentumClassifier, DPMomentumRegressor


def _fitted(estimator_class, **params):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (80, 4)).astype(np.float32)
    y = np.arange(80) % 2 if estimator_class is DPMomentumClassifier else X[:, 0]
    extra = {"classes": [0, 1]} if estimator_class is DPMomentumClassifier else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = estimator_class(epsilon=1.0, max_epochs=1, bounds=(-1, 1), random_state=0, **extra, **params).fit(X, y)
    return est, X, y


@pytest.mark.parametrize("estimator_class, how", [(DPMomentumClassifier, "partial_fit"),
                                                   (DPMomentumClassifier, "warm fit"),
                                                   (DPMomentumRegressor, "warm fit")])  # the regressor has no partial_fit
@pytest.mark.parametrize("change", ["ledger", "epsilon", "delta", "max_grad_norm", "noise_multiplier"])
def test_a_continuation_refuses_privacy_parameters_changed_since_the_fit(estimator_class, how, change):
    # review_s36 n1: set_params(ledger=L2) after a fit, then a continuation: it charged L1 (the ledger the network
    # was built with) and L2 stayed empty, so the ledger the user now keeps never saw the spend. epsilon, delta,
    # the clipping bound and the noise multiplier were silently ignored the same way. Refused by name before
    # any charge.
    first = BudgetLedger(epsilon=100.0, delta=1e-2)
    est, X, y = _fitted(estimator_class, ledger=first, warm_start=how == "warm fit")
    second = BudgetLedger(epsilon=100.0, delta=1e-2)
    new = {"ledger": second, "epsilon": 2.0, "delta": 1e-6, "max_grad_norm": 0.5, "noise_multiplier": 2.0}[change]
    est.set_params(**{change: new})
    spent, steps, entries = est.epsilon_, est.n_steps_, len(first.entries)
    with pytest.raises(ValueError, match=rf"{change}.*changed since the fit"):
        est.partial_fit(X, y) if how == "partial_fit" else est.fit(X, y)
    assert (est.epsilon_, est.n_steps_, len(first.entries), len(second.entries)) == (spent, steps, entries, 0)
    assert est.get_params()[change] is new  # the parameter stays as the user set it


def test_a_continuation_with_the_same_privacy_parameters_still_runs():
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    est, X, y = _fitted(DPMomentumClassifier, ledger=ledger)
    est.set_params(ledger=ledger, epsilon=1.0, verbose=0)  # the same values: nothing changed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.partial_fit(X, y)
    assert len(ledger.entries) == 2 and est.privacy_certified_
