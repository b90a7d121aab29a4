"""Hostile and odd inputs to the DP-SGD estimators (issue 18): refuse early, name the value, never spend
budget on a fit that can not run."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs

from skdp import BudgetLedger, DPMomentumClassifier, PGEGenerator, PrivacyLeakWarning

X, Y = make_blobs(n_samples=40, n_features=4, centers=2, random_state=0)
X = X / 10


pytestmark = pytest.mark.usefixtures("no_privacy_warnings")


CANNOT_RUN = {
    "lr 1e300": (lambda L: DPMomentumClassifier(max_epochs=1, classes=[0, 1], ledger=L, lr=1e300), "lr"),
    "device meta": (lambda L: DPMomentumClassifier(max_epochs=1, classes=[0, 1], ledger=L, device="meta"),
                    "device"),
    "device bogus": (lambda L: DPMomentumClassifier(max_epochs=1, classes=[0, 1], ledger=L, device="bogus"),
                     "device"),
    "max_grad_norm 1e300": (lambda L: DPMomentumClassifier(max_epochs=1, classes=[0, 1], ledger=L,
                                                           max_grad_norm=1e300), "max_grad_norm"),
    "cnn on 2x2 images": (lambda L: DPMomentumClassifier(module="cnn", image_shape=(2, 2), classes=[0, 1],
                                                         ledger=L), "image_shape"),
    "pge device bogus": (lambda L: PGEGenerator(module="gaussian", bounds=(-5, 5), classes=[0, 1], ledger=L,
                                                device="bogus"), "device"),
    "pge lr 1e300": (lambda L: PGEGenerator(module="gaussian", bounds=(-5, 5), classes=[0, 1], ledger=L,
                                            lr=1e300), "lr"),
}


@pytest.mark.parametrize("case", CANNOT_RUN)
def test_a_fit_that_cannot_run_is_refused_before_any_spend(case):
    make, name = CANNOT_RUN[case]
    ledger = BudgetLedger(epsilon=10)
    with pytest.raises(ValueError, match=name):
        make(ledger).fit(X, Y)
    assert ledger.total() == (0.0, 0.0)


def test_documented_prefix_can_be_set():
    clf = DPMomentumClassifier(max_epochs=1, classes=[0, 1]).set_params(iterator_valid__batch_size=512)
    assert clf.fit(X, Y).net_.iterator_valid__batch_size == 512


def test_predicting_images_of_another_shape_names_both_shapes():
    images = np.random.default_rng(0).random((40, 8, 8))
    clf = DPMomentumClassifier(max_epochs=1, classes=[0, 1]).fit(images, Y)
    assert clf.n_features_in_ == 64 and clf.input_shape_ == (8, 8)
    with pytest.raises(ValueError, match=r"\(16, 16\).*\(8, 8\)"):
        clf.predict(np.zeros((2, 16, 16)))
    assert clf.predict(images).shape == (40,)


def test_misspelt_parameter_fails_in_clone_too():
    clf = DPMomentumClassifier(max_epochs=1, classes=[0, 1], module_hidden_sizes=(8,))
    with pytest.raises(TypeError, match="module_hidden_sizes"):
        clone(clf).fit(X, Y)


@pytest.mark.parametrize("n", [True, 0, -1, 2.5, "3"])
def test_pge_sample_refuses_what_is_not_a_count(n):
    gen = PGEGenerator(module="gaussian", max_epochs=1, bounds=(-5, 5), classes=[0, 1]).fit(X, Y)
    with pytest.raises(ValueError, match="n_samples"):
        gen.sample(n)


def test_unsupported_module_is_refused_before_any_spend():
    from torch import nn
    ledger = BudgetLedger(epsilon=10)
    clf = DPMomentumClassifier(nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 2)), classes=[0, 1], ledger=ledger)
    with pytest.raises(TypeError, match="BatchNorm1d"):
        clf.fit(X, Y)
    assert ledger.total() == (0.0, 0.0)


def test_frozen_eval_batchnorm_stays_in_eval_mode_and_trains():
    from torch import nn
    bn = nn.BatchNorm1d(4).eval().requires_grad_(False)
    clf = DPMomentumClassifier(nn.Sequential(bn, nn.Linear(4, 2)), classes=[0, 1], max_epochs=2).fit(X, Y)
    assert np.isfinite(clf.epsilon_) and not clf.net_.module_[0].training


def test_ledger_entries_name_the_estimator():
    ledger = BudgetLedger(epsilon=10)
    DPMomentumClassifier(max_epochs=1, classes=[0, 1], ledger=ledger).fit(X, Y)
    assert ledger.entries[0][2].startswith("DPMomentumClassifier:")


def test_privacy_warning_points_at_the_callers_line():
    with pytest.warns(PrivacyLeakWarning) as record:
        DPMomentumClassifier(max_epochs=1, epsilon=float("inf"), classes=[0, 1]).fit(X, Y)
    assert any(w.filename == __file__ for w in record)


def test_progress_goes_to_the_skdp_logger_when_one_is_configured(caplog, capsys):
    import logging
    with caplog.at_level(logging.INFO, logger="skdp"):
        DPMomentumClassifier(max_epochs=1, classes=[0, 1], verbose=1).fit(X, Y)
    assert "epsilon" in caplog.text and "epsilon" not in capsys.readouterr().out


def test_pge_sample_returns_a_dataframe_with_the_fitted_columns():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    gen = PGEGenerator(module="gaussian", max_epochs=1, bounds=(-5, 5), classes=[0, 1]).fit(frame, Y)
    Xs, ys = gen.sample(10, random_state=0)
    assert list(Xs.columns) == ["a", "b", "c", "d"] and len(ys) == 10


def test_dfs_release_keeps_real_column_names_with_pandas_output():
    pd = pytest.importorskip("pandas")
    from skdp import DFSRelease
    frame = pd.DataFrame(X * 10, columns=["alpha", "beta", "gamma", "delta"])
    rel = DFSRelease(2, bounds=(-20, 20), classes=[0, 1]).set_output(transform="pandas")
    out = rel.fit_transform(frame, Y)
    assert isinstance(out, pd.DataFrame) and set(out.columns) <= {"alpha", "beta", "gamma", "delta"}
    assert list(rel.transform(frame).columns) == list(out.columns)


@pytest.mark.parametrize("make", [lambda: DPMomentumClassifier(max_epochs=1, classes=[0, 1], batch_size=20),
                                  lambda: DPMomentumClassifier("mlp", max_epochs=1, classes=[0, 1], batch_size=20)])
def test_property_extreme_records_keep_every_dp_sgd_release_finite(make):
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st
    from skdp import DPMomentumRegressor

    @settings(max_examples=3, deadline=None)
    @given(st.lists(st.floats(-3e38, 3e38, allow_nan=False, allow_infinity=False), min_size=4, max_size=4),
           st.integers(0, 39))
    def check(record, where):
        Xh = X.copy()
        Xh[where] = record  # one record with extreme finite values
        clf = make().fit(Xh, Y)
        assert all(np.isfinite(p.detach().numpy()).all() for p in clf.net_.module_.parameters())
        assert np.isfinite(clf.predict_proba(Xh)).all()
        reg = DPMomentumRegressor(max_epochs=1, batch_size=20).fit(Xh, Y.astype(float))
        assert all(np.isfinite(p.detach().numpy()).all() for p in reg.net_.module_.parameters())
        # The regressor does not rescale rows (its target depends on their scale): its float32 prediction
        # for the extreme row itself is w . x with |x| up to 3e38 and may overflow for a weight above ~1.1,
        # which fresh noise sometimes gives. Every other row's prediction must stay finite.
        others = np.arange(len(Xh)) != where
        assert np.isfinite(reg.predict(Xh[others])).all()
    check()
