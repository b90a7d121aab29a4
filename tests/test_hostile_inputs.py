"""Hostile but well-typed inputs: each test is named after the finding it pins down.

Every refusal must name the bad parameter and leave the caller's arrays as they were;
every accepted input must give finite outputs whose privacy claim holds.
"""
import math

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError

from skdp import BudgetLedger, DFSRelease, DPFisherClassifier, DPFisherSelector, TTestSelector
from skdp.attacks import MIFace
from skdp.audit import one_run_audit, one_run_epsilon_lower_bound
from skdp.mechanisms import analytic_gaussian_sigma, gaussian_dp_delta, gaussian_dp_mu, gumbel_top_k
from skdp.mechanisms.topk import top_k_epsilon, top_k_round_epsilon
from skdp.preprocessing import CenterNormalize, Downsample, Upsample
from skdp.utils.validation import encode_labels
from conftest import quiet




@pytest.fixture
def blobs():
    return make_blobs(40, 4, centers=2, random_state=0)


# -- 1. CenterNormalize on narrow dtypes -------------------------------------------------------------
def test_center_normalize_uint8_does_not_wrap_around():
    X = np.array([[200, 10, 128, 0]], np.uint8)
    before = X.copy()
    Z = CenterNormalize(center=[100] * 4).fit_transform(X)
    expected = np.array([100.0, -90.0, 28.0, -100.0])
    assert Z.dtype == np.float64
    np.testing.assert_allclose(Z[0], expected / np.linalg.norm(expected))
    assert np.array_equal(X, before)


def test_center_normalize_float16_norm_does_not_overflow():
    X = np.array([[300.0, 300.0, 300.0, 300.0], [60000.0, 0.0, 0.0, 0.0]], np.float16)
    Z = CenterNormalize().fit_transform(X)
    np.testing.assert_allclose(Z, [[0.5] * 4, [1.0, 0, 0, 0]])
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0)


def test_center_normalize_transform_before_fit_checks_center_length(blobs):
    X, _ = blobs
    with pytest.raises((ValueError, NotFittedError), match=r"center.*2.*4|4.*center.*2"):
        CenterNormalize(center=[1.0, 2.0]).transform(X)


@pytest.mark.parametrize("dtype", [np.uint8, np.float16])
def test_resamplers_accept_narrow_dtypes(dtype):
    X = np.full((1, 4, 4), 200, dtype)
    assert np.allclose(Downsample(2).fit_transform(X), 200.0)
    assert np.allclose(Upsample(2).fit_transform(X), 200.0)


# -- 2. finite but absurd bounds and labels ----------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: DPFisherClassifier(bounds=(-1e200, 1e200), classes=[0, 1]),
    lambda: DPFisherSelector(2, bounds=(-1e200, 1e200), classes=[0, 1]),
    lambda: DFSRelease(2, bounds=(-1e200, 1e200), classes=[0, 1]),
])
def test_absurd_bounds_are_refused_before_any_spend(blobs, make):
    X, y = blobs
    ledger = BudgetLedger()
    est = make().set_params(ledger=ledger)
    before = X.copy()
    with pytest.raises(ValueError, match=r"bounds.*1e\+200"):
        quiet(est.fit, X, y)
    assert ledger.total() == (0, 0)
    assert np.array_equal(X, before)


def test_absurd_data_range_with_bounds_none_is_refused(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match="bounds"):
        quiet(DPFisherClassifier(classes=[0, 1]).fit, X * 1e200, y)


def test_wide_but_sane_bounds_still_give_finite_outputs(blobs):
    X, y = blobs
    clf = quiet(DPFisherClassifier(bounds=(-1e40, 1e40), classes=[0, 1]).fit, X, y)
    assert np.all(np.isfinite(clf.predict_proba(X)))
    out = quiet(DFSRelease(2, bounds=(-1e40, 1e40), classes=[0, 1]).fit_transform, X, y)
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("bad", [[0.0, 1.0, np.nan], [0, 1, None]])
def test_nan_or_none_in_classes_is_refused(blobs, bad):
    X, y = blobs
    with pytest.raises(ValueError, match="classes.*(nan|None)"):
        encode_labels(bad, y.astype(float), "Test")
    with pytest.raises(ValueError, match="classes"):
        quiet(DPFisherClassifier(bounds=(-20, 20), classes=bad).fit, X, y.astype(float))


def test_ttest_with_mixed_label_types_says_so(blobs):
    X, _ = blobs
    y = np.array([0, "a"] * 20, dtype=object)
    with pytest.raises(ValueError, match="y mixes types"):
        quiet(TTestSelector(2).fit, X, y)
    with pytest.raises(ValueError, match="y mixes types"):
        quiet(DPFisherSelector(2, bounds=(-20, 20)).fit, X, y)


# -- 3. huge epsilon, tiny delta --------------------------------------------------------------------
def test_huge_epsilon_selects_the_exact_top_k(blobs):
    X, y = blobs
    sel = DPFisherSelector(2, epsilon=1e300, bounds=(-20, 20), classes=[0, 1]).fit(X, y)
    exact = quiet(DPFisherSelector(2, epsilon=math.inf, bounds=(-20, 20), classes=[0, 1]).fit, X, y)
    assert np.array_equal(sel.support_, exact.support_)
    out = quiet(DFSRelease(2, epsilon=1e300, bounds=(-20, 20), classes=[0, 1]).fit_transform, X, y)
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("epsilon", [1e-300, 1e-3, 1.0, 30.0, 1e8, 1e300])
@pytest.mark.parametrize("delta", [5e-324, 1e-12, 0.1])
def test_top_k_round_epsilon_is_finite_and_certified(epsilon, delta):
    eps0 = top_k_round_epsilon(epsilon, delta, 5)
    assert 0 < eps0 < math.inf
    assert top_k_epsilon(eps0, 5, delta) <= epsilon


def test_gumbel_top_k_is_safe_at_extreme_scales():
    rng = np.random.default_rng(0)
    scores = np.array([3.0, 1.0, 2.0, 0.0])
    assert gumbel_top_k(scores, 2, 1e300, 1e-300, rng).tolist() == [0, 2]
    picks = [tuple(gumbel_top_k(scores, 1, 1e-300, 1e10, rng)) for _ in range(200)]
    assert len(set(picks)) == 4  # noise dominates: every feature is chosen sometimes


def test_tiny_delta_is_computed_safely(blobs):
    X, y = blobs
    mu = gaussian_dp_mu(1.0, 5e-324)
    assert 0 < mu < math.inf and gaussian_dp_delta(mu, 1.0) <= 5e-324 * (1 + 1e-6)
    sel = DPFisherSelector(2, delta=5e-324, bounds=(-20, 20), classes=[0, 1]).fit(X, y)
    assert sel.support_.sum() == 2
    # DFSRelease splits delta in two: half of the smallest float is 0, so it refuses, naming delta.
    ledger = BudgetLedger(adjacency="replace-one")  # DFSRelease is replace-one
    with pytest.raises(ValueError, match="delta=5e-324"):
        quiet(DFSRelease(2, delta=5e-324, bounds=(-20, 20), classes=[0, 1], ledger=ledger).fit_transform, X, y)
    assert ledger.total() == (0, 0)
    out = quiet(DFSRelease(2, delta=1e-300, bounds=(-20, 20), classes=[0, 1], ledger=ledger).fit_transform, X, y)
    assert np.all(np.isfinite(out)) and ledger.total()[1] <= 1e-300


def test_huge_epsilon_gaussian_calibration_is_finite():
    assert 0 < analytic_gaussian_sigma(1e300, 1e-5, 1.0) < 1e-100


# -- 5. one-run audit arguments ---------------------------------------------------------------------
def _audit_args():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), np.repeat([0, 1], 20)
    Xc, yc = rng.normal(size=(10, 3)), rng.integers(0, 2, 10)
    est = DPFisherClassifier(epsilon=1.0, bounds=(-4, 4), classes=[0, 1])
    return est, X, y, Xc, yc


@pytest.mark.parametrize("confidence", [0, 1, 1.5, -0.1, math.nan])
def test_one_run_audit_refuses_confidence_outside_0_1(confidence):
    with pytest.raises(ValueError, match="confidence"):
        quiet(one_run_audit, *_audit_args(), confidence=confidence)
    with pytest.raises(ValueError, match="confidence"):
        one_run_epsilon_lower_bound(100, 10, 10, 1e-5, confidence)


@pytest.mark.parametrize("n_guesses", [0, 11, -2, 2.5])
def test_one_run_audit_refuses_guesses_outside_1_to_n_canaries(n_guesses):
    with pytest.raises(ValueError, match="n_guesses"):
        quiet(one_run_audit, *_audit_args(), n_guesses=n_guesses)


def test_one_run_audit_refuses_no_canaries():
    est, X, y, Xc, yc = _audit_args()
    with pytest.raises(ValueError, match="canar"):
        quiet(one_run_audit, est, X, y, Xc[:0], yc[:0])


def test_one_run_audit_refuses_mismatched_canaries():
    est, X, y, Xc, yc = _audit_args()
    with pytest.raises(ValueError, match="y_canary"):
        quiet(one_run_audit, est, X, y, Xc, yc[:5])


# -- 6. MI-Face finite-difference parameters --------------------------------------------------------
@pytest.mark.parametrize("kwargs,name", [
    (dict(fd_step=0), "fd_step"), (dict(fd_step=-1e-3), "fd_step"), (dict(fd_step=math.nan), "fd_step"),
    (dict(n_directions=0), "n_directions"), (dict(n_directions=2.5), "n_directions"),
])
def test_miface_refuses_degenerate_finite_differences(kwargs, name):
    with pytest.raises(ValueError, match=name):
        MIFace(object(), mode="black_box", **kwargs)
