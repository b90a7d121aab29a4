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
    "one sample": ({}, X[:1], Y[:1], "sample|one class|at least 2"),
    "single class": ({}, X, np.zeros(40), "one class|at least 2"),
    "strings": ({}, np.array([["a", "b", "c", "d"]] * 40, dtype=object), Y, "could not convert|numeric"),
    "y length": ({}, X, Y[:-1], "inconsistent numbers of samples"),
    "epsilon 0": ({"epsilon": 0}, X, Y, "epsilon"),
    "epsilon < 0": ({"epsilon": -1}, X, Y, "epsilon"),
    "delta 0": ({"delta": 0}, X, Y, "delta"),
    "delta 1": ({"delta": 1.0}, X, Y, "delta"),
    "epsilon True": ({"epsilon": True}, X, Y, "epsilon.*True"),
    "labels above int64": ({}, X, np.array([2 ** 64 + int(v) for v in Y], dtype=object), "int64"),
    "whole labels 1e20": ({}, X, np.where(Y == 0, 1e20, 2e20), "int64"),
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


# -- labels: private values never printed, any collection of public classes -------------------------
PRIVATE_LABEL = 987654321
LABEL_LEAKS = {
    "single class": ({}, np.full(40, PRIVATE_LABEL), "one class"),
    "label outside classes": ({"classes": [0, 1]}, np.where(Y == 0, 0, PRIVATE_LABEL), "not in classes"),
}


@pytest.mark.parametrize("case", LABEL_LEAKS)
@pytest.mark.parametrize("name", ESTIMATORS)
def test_label_errors_give_counts_never_private_label_values(name, case):
    params, y_bad, match = LABEL_LEAKS[case]
    if params and name in NO_PRIVACY_PARAMS:
        pytest.skip(f"{name} takes no classes")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        with pytest.raises(ValueError, match=match) as error:
            ESTIMATORS[name][0](**params).fit(X, y_bad)
    assert str(PRIVATE_LABEL) not in str(error.value)


@pytest.mark.parametrize("name", sorted(set(ESTIMATORS) - NO_PRIVACY_PARAMS))
def test_classes_may_be_a_set_and_are_sorted(name):
    est = ESTIMATORS[name][0](classes={1, 0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        est.fit(X, Y)
    np.testing.assert_array_equal(est.classes_, [0, 1])


@pytest.mark.parametrize("classes, match", [({0, "a"}, "classes mixes types"), ("ab", "classes"),
                                            ((c for c in (0, 1)), "classes")])
def test_classes_that_are_no_label_set_are_refused_by_name(classes, match):
    with pytest.raises((ValueError, TypeError), match=match):
        DPFisherClassifier(bounds=(-20, 20), classes=classes).fit(X, Y)


# -- the other odd calls of issue 24: each refused with an error that names the problem ------------
def _dpnet(**params):
    import torch
    from skdp.nn import DPNet
    return DPNet(torch.nn.Linear, module__in_features=4, module__out_features=2, epsilon=1.0, delta=1e-3, lr=0.5,
                 batch_size=8, max_epochs=1, verbose=0, **params).fit(X.astype(np.float32), Y.astype(np.int64))


def _upsample(output_size):
    from skdp.preprocessing import Upsample
    return Upsample(output_size=output_size).fit(np.zeros((2, 16, 16)))


def _dp_sgd(name, **params):
    from skdp import DPMomentumRegressor, PGEGenerator, SRGANTransformer
    makers = {"DPMomentumClassifier": lambda: DPMomentumClassifier(max_epochs=1, classes=[0, 1], **params),
              "DPMomentumRegressor": lambda: DPMomentumRegressor(max_epochs=1, **params),
              "PGEGenerator": lambda: PGEGenerator(max_epochs=1, hidden_size=8, n_levels=2, **params),
              "SRGANTransformer": lambda: SRGANTransformer(scale=2, n_filters=4, discriminator_filters=4,
                                                           n_residual_blocks=1, pretrain_epochs=1, gan_epochs=0,
                                                           image_shape=(2, 2), **{"epsilon": 1.0, **params})}
    return makers[name]().fit(X.astype(np.float32), Y)


ODD_CALLS = {
    "Upsample output_size (3, 8, 8) on 1 channel": (lambda: _upsample((3, 8, 8)), "output_size.*3 channel.*1"),
    "Upsample output_size (5, 32, 32) on 1 channel": (lambda: _upsample((5, 32, 32)), "output_size.*5 channel.*1"),
    **{f"DPNet max_grad_norm={v!r}": (lambda v=v: _dpnet(max_grad_norm=v), "max_grad_norm")
       for v in (np.inf, np.nan, 0.0, -1.0, True)},
    "DPNet callbacks__x": (lambda: _dpnet(callbacks__x=1), "callback 'x' which does not exist"),
    **{f"{name} set_params({key}=1)": (
        lambda n=name, k=key: _dp_sgd(n, **{k: 1}), "callback 'x' which does not exist")
       for name in ("DPMomentumClassifier", "DPMomentumRegressor") for key in ("callbacks__x", "callbacks__x__y")},
    **{f"{name} {param}=True": (lambda n=name, p=param: _dp_sgd(n, **{p: True}), f"'{param}'.*True")
       for name in ("DPMomentumClassifier", "DPMomentumRegressor", "PGEGenerator", "SRGANTransformer")
       for param in ("epsilon", "batch_size")},
    # The audits' delta is a probability below 1: NaN or 2 gave a bound of 0.0 (hiding a leak), -1 gave 12.3.
    **{f"one_run_audit delta={d!r}": (lambda d=d: _audit(delta=d), r"delta must be .*\[0, 1\)")
       for d in (np.nan, 2.0, -1.0, 1.0, True)},
    **{f"one_run_epsilon_lower_bound delta={d!r}": (lambda d=d: _audit_bound(d), r"delta must be .*\[0, 1\)")
       for d in (np.nan, 2.0, -1.0, 1.0, "1e-5")},
}


def _audit(**params):
    from skdp.audit import one_run_audit
    clf = DPFisherClassifier(epsilon=1.0, bounds=(-20, 20), classes=[0, 1])
    return one_run_audit(clf, X, Y, X[:10], Y[:10], random_state=0, **params)


def _audit_bound(delta):
    from skdp.audit import one_run_epsilon_lower_bound
    return one_run_epsilon_lower_bound(1000, 100, 100, delta)


@pytest.mark.parametrize("case", ODD_CALLS)
def test_odd_calls_are_refused_by_name(case):
    call, match = ODD_CALLS[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        with pytest.raises((ValueError, TypeError), match=match):
            call()


def test_set_params_on_an_existing_callback_still_works():
    clf = DPMomentumClassifier(max_epochs=1, classes=[0, 1]).set_params(callbacks__print_log__floatfmt=".2f")
    assert clf.fit(X, Y).net_.callbacks_[-1][1].floatfmt == ".2f"


def test_dpnet_keeps_the_non_private_identity_of_public_pretraining():
    # max_grad_norm=inf with noise_multiplier=0: no clipping, no noise, epsilon inf (skdp's public pretraining).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        assert _dpnet(max_grad_norm=np.inf, noise_multiplier=0.0).epsilon_spent() == np.inf


def test_unreachable_epsilon_is_decided_before_any_search(monkeypatch):
    # calibrate_noise_multiplier(1e-9, 1e-5, 0.5, 10000) searched for 87 s before refusing: the least epsilon
    # reachable is bounded up front, without one accountant call, and named in the error.
    from skdp.privacy import calibration
    from skdp.privacy.accounting import compute_epsilon
    calls = []
    monkeypatch.setattr(calibration, "compute_epsilon", lambda *a: calls.append(a))
    with pytest.raises(ValueError, match=r"least epsilon reachable .* is 0\.003"):
        calibration.calibrate_noise_multiplier(1e-9, 1e-5, 0.5, 10000)
    assert calls == []
    monkeypatch.undo()
    # The bound is the accountant's epsilon at the largest sigma searched (to float rounding), and a target just
    # above it is still reached by the search.
    least = calibration._least_rdp_epsilon(calibration.SIGMA_TOP, 0.01, 1000, 1e-5)
    assert least == pytest.approx(compute_epsilon(calibration.SIGMA_TOP, 0.01, 1000, 1e-5), rel=1e-9)
    target = least * 1.01
    sigma = calibration.calibrate_noise_multiplier(target, 1e-5, 0.01, 1000, rel_tol=0.05)
    assert compute_epsilon(sigma, 0.01, 1000, 1e-5) <= target
    with pytest.raises(ValueError, match="least epsilon reachable"):
        calibration.calibrate_noise_multiplier(least * 0.99, 1e-5, 0.01, 1000)


@pytest.mark.parametrize("name", ["DPMomentumClassifier", "DPMomentumRegressor", "SRGANTransformer"])
def test_unreachable_epsilon_is_refused_before_anything_is_built(name, monkeypatch):
    # SRGANTransformer(epsilon=1e-12) resampled the images and built its networks, then searched for 82 s.
    from skdp.nn._momentum import _DPMomentum
    from skdp.superres import srgan

    def built(*args, **kwargs):
        raise AssertionError("built before the privacy plan")
    monkeypatch.setattr(_DPMomentum, "_make_net", built)
    monkeypatch.setattr(srgan.SRGANTransformer, "_make_net", built)
    monkeypatch.setattr(srgan, "resample", built)
    with pytest.raises(ValueError, match="Cannot reach epsilon.*least epsilon reachable"):
        _dp_sgd(name, epsilon=1e-12, lr=0.1)
