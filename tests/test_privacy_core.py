import math
import pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from sklearn.base import clone

from skdp import BudgetExceededError, BudgetLedger, PrivacyAccountant, calibrate_noise_multiplier, compute_epsilon


def test_rdp_reference_value():
    # Public reference: noise 1.5, sample rate 0.04, 2,250 steps, delta 1e-5.
    assert compute_epsilon(1.5, 0.04, 2250, 1e-5, "rdp") == pytest.approx(7.3291, abs=1e-4)


def test_prv_reference_value():
    assert compute_epsilon(1.5, 0.04, 2250, 1e-5, "prv") == pytest.approx(6.7774, rel=1e-2)


def test_accountant_composes_steps_and_reports_inf_without_noise():
    acc = PrivacyAccountant()
    assert acc.get_epsilon(1e-5) == 0.0
    acc.step(1.0, 0.1, 10)
    e10 = acc.get_epsilon(1e-5)
    acc.step(1.0, 0.1, 10)
    assert acc.n_steps == 20 and acc.get_epsilon(1e-5) > e10
    assert acc.get_epsilon(1e-5) == pytest.approx(compute_epsilon(1.0, 0.1, 20, 1e-5))
    acc.step(0.0, 0.1, 1)
    assert math.isinf(acc.get_epsilon(1e-5))


@pytest.mark.parametrize("accounting", ["rdp", "prv"])
@pytest.mark.parametrize("epsilon,sample_rate,steps", [(0.5, 0.01, 1000), (1.0, 0.1, 200), (8.0, 0.25, 40)])
def test_calibration_never_overshoots_and_is_tight(accounting, epsilon, sample_rate, steps):
    sigma = calibrate_noise_multiplier(epsilon, 1e-5, sample_rate, steps, accounting)
    assert compute_epsilon(sigma, sample_rate, steps, 1e-5, accounting) <= epsilon
    # Tight: 1% less noise would overshoot, so no budget is wasted.
    assert compute_epsilon(sigma * 0.99, sample_rate, steps, 1e-5, accounting) > epsilon


def test_calibration_inf_means_no_noise():
    assert calibrate_noise_multiplier(math.inf, 1e-5, 0.1, 10) == 0.0


def test_ledger_spends_and_refuses_overdraft():
    ledger = BudgetLedger(epsilon=2.0, delta=1e-5, composition="basic")  # an RDP ledger: tests/test_composition.py
    ledger.spend(1.5, 5e-6, "a")
    assert ledger.remaining() == pytest.approx((0.5, 5e-6))
    with pytest.raises(BudgetExceededError, match="exceeded"):
        ledger.spend(0.6, 0.0)
    assert len(ledger.entries) == 1  # the refused spend is not recorded
    ledger.spend(0.5, 5e-6)
    assert ledger.total() == pytest.approx((2.0, 1e-5))


def test_ledger_survives_clone_and_deepcopy():
    from skdp import DPMomentumClassifier
    ledger = BudgetLedger()
    clf = DPMomentumClassifier(ledger=ledger)
    assert clone(clf).ledger is ledger


def _spend_in_other_process(path):
    BudgetLedger(path=path).spend(0.25, 1e-7, "worker")


def test_sqlite_ledger_is_shared_across_processes(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    ledger = BudgetLedger(epsilon=10, path=path)
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(_spend_in_other_process, [path] * 4))
    assert ledger.total()[0] == pytest.approx(1.0)
    restored = pickle.loads(pickle.dumps(ledger))
    assert len(restored.entries) == 4


def test_ledger_rejects_bad_totals():
    with pytest.raises(ValueError, match="epsilon"):
        BudgetLedger(epsilon=0)
    with pytest.raises(ValueError, match="delta"):
        BudgetLedger(delta=2)




@pytest.mark.parametrize("sigma,q,steps,delta", [(0.8, 0.01, 1000, 1e-5), (1.5, 0.04, 2250, 1e-5),
                                                 (3.0, 0.2, 100, 1e-6), (1.2, 0.1, 500, 1e-3)])
def test_rdp_agrees_with_dp_accounting(sigma, q, steps, delta):
    dpa = pytest.importorskip("dp_accounting")
    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
    assert compute_epsilon(sigma, q, steps, delta) == pytest.approx(acc.get_epsilon(delta), rel=1e-2)


@pytest.mark.parametrize("sigma,q,steps,delta", [(0.8, 0.01, 1000, 1e-5), (1.5, 0.04, 2250, 1e-5),
                                                 (3.0, 0.2, 100, 1e-6), (1.2, 0.1, 500, 1e-3)])
def test_prv_agrees_with_dp_accounting_pld(sigma, q, steps, delta):
    # A second, independent numerical accountant (privacy loss distributions) within 1%.
    dpa = pytest.importorskip("dp_accounting")
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
    assert compute_epsilon(sigma, q, steps, delta, "prv") == pytest.approx(acc.get_epsilon(delta), rel=1e-2)


def test_rng_does_not_touch_global_generators():
    import torch
    from skdp.utils.random import make_rng
    np_state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    make_rng(None).random(5)
    make_rng(3).random(5)
    assert (np.random.get_state()[1] == np_state).all()
    assert torch.equal(torch.get_rng_state(), torch_state)
    with pytest.raises(ValueError, match="random_state"):
        make_rng("seed")
