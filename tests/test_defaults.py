"""The "auto" defaults: resolved from public quantities only, stored, and accounted as planned."""
import math
import pickle

import numpy as np
import pytest
from opacus.accountants import RDPAccountant
from sklearn.datasets import load_digits

from skdp import DPMomentumClassifier, DPMomentumRegressor
from skdp.nn import _defaults
from skdp.preprocessing import ScatteringTransform
from skdp.privacy.accounting import RDP_ORDERS, PrivacyAccountant


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:600] / 8 - 1, y[:600]


def test_auto_schedule_is_stored_and_the_parameters_stay_auto(digits):
    X, y = digits
    clf = DPMomentumClassifier(epsilon=1.0, classes=range(10), random_state=0).fit(X, y)
    assert (clf.lr, clf.max_epochs, clf.batch_size) == ("auto", "auto", "auto")
    assert clf.batch_size_ == 150 and clf.max_epochs_ == 75 and clf.n_steps_ == 300
    # lr = 7 (1 - m) B / (sigma C sqrt(T p)), p = 64 * 10 + 10 weights of the linear model
    expected = 7 * 0.1 * 150 / (clf.noise_multiplier_ * 1.0 * math.sqrt(300 * 650))
    assert clf.lr_ == pytest.approx(expected) and clf.net_.lr == clf.lr_
    given = DPMomentumClassifier(lr=0.2, max_epochs=3, batch_size=50, classes=range(10)).fit(X, y)
    assert (given.lr_, given.max_epochs_, given.batch_size_) == (0.2, 3, 50)


def test_auto_schedule_reads_no_private_value(digits):
    # Same public shape (n, d, classes), different private values: the same schedule and noise.
    X, y = digits
    rng = np.random.default_rng(0)
    other_X, other_y = rng.uniform(-1, 1, X.shape), rng.permutation(y)
    a = DPMomentumClassifier(epsilon=1.0, classes=range(10), max_epochs=2).fit(X, y)
    b = DPMomentumClassifier(epsilon=1.0, classes=range(10), max_epochs=2).fit(other_X, other_y)
    for name in ("lr_", "batch_size_", "max_epochs_", "noise_multiplier_", "sample_rate_", "epsilon_"):
        assert getattr(a, name) == getattr(b, name), name


def test_planned_spend_of_the_auto_schedule_is_what_the_fit_spends(digits):
    X, y = digits
    clf = DPMomentumClassifier(epsilon=0.7, classes=range(10), max_epochs=3)
    planned, delta = clf._planned_privacy(len(X))
    clf.fit(X, y)
    assert planned == pytest.approx(clf.epsilon_) and delta == clf.delta_


def test_auto_module_reads_the_declared_image_shape_only():
    # "auto" is the CNN for declared images of >= 16 x 16 pixels, else the linear model; it reads parameters
    # only (the privacy plan, whose lot the CNN caps at 500, is fixed before any row is read).
    assert _defaults.auto_module(None) == "linear" and _defaults.auto_module((8, 8)) == "linear"
    assert _defaults.auto_module((16, 16)) == "cnn" and _defaults.auto_module((3, 32, 32)) == "cnn"
    assert _defaults.auto_module((28, 8)) == "linear"
    assert _defaults.auto_batch_size(8000, "cnn") == 500 and _defaults.auto_batch_size(8000) == 2000
    assert _defaults.auto_batch_size(1000, "cnn") == 250  # n / 4 below the cap
    assert _defaults.auto_augment("cnn", (28, 28)) == 4 and _defaults.auto_augment("cnn", (8, 8)) is None
    assert _defaults.auto_augment("linear", (28, 28)) is None and _defaults.auto_augment("cnn", None) is None
    assert _defaults.auto_augment("cnn", (28, 28), clipping="ghost") is None  # copies need the vmap path
    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (2400, 256)), rng.integers(0, 3, 2400)
    common = dict(epsilon=2.0, classes=range(3), max_epochs=1, random_state=0)
    small = dict(augment=None, module__channels=(4,))  # the CNN's path, fast (augmentation: below)
    image = DPMomentumClassifier(image_shape=(16, 16), **common, **small)
    planned, _ = image._planned_privacy(len(X))
    image.fit(X, y)
    assert image.module == "auto" and image.module_ == "cnn" and image.batch_size_ == 500
    assert type(image.net_.module_).__name__ != "SoftmaxRegression"
    assert planned == pytest.approx(image.epsilon_)  # the plan before the data is the fit's
    augmented = DPMomentumClassifier(image_shape=(16, 16), module__channels=(4,), **common).fit(X[:40], y[:40])
    assert augmented.augment == "auto" and augmented.augment_ == 4  # shifted copies: free in privacy
    table = DPMomentumClassifier(**common).fit(X, y)  # 256 columns, no image_shape: a table
    assert table.module_ == "linear" and table.batch_size_ == 600 and table.augment_ is None
    cube = DPMomentumClassifier(**common).fit(X.reshape(-1, 16, 16), y)  # not declared: the plan is the table's
    assert cube.module_ == "linear"
    explicit = DPMomentumClassifier(module="cnn", image_shape=(16, 16), **common)
    assert explicit._schedule(len(X))[0] == 500
    # With the noise fixed the spend depends on the lot: the plan must use the capped one (review_s35 t1).
    fixed = DPMomentumClassifier(image_shape=(16, 16), noise_multiplier=1.5, classes=range(3), max_epochs=1, **small)
    planned, _ = fixed._planned_privacy(2100)
    fixed.fit(X[:2100], y[:2100])
    assert fixed.batch_size_ == 500 and planned == pytest.approx(fixed.epsilon_, rel=1e-12)
    assert planned != pytest.approx(DPMomentumClassifier(noise_multiplier=1.5, classes=range(3), max_epochs=1,
                                                          batch_size=525)._planned_privacy(2100)[0])


def test_auto_lr_follows_the_noise_and_the_model_size():
    base = _defaults.auto_lr(256, 300, 4.0, 1000, 0.9, 1.0)
    assert _defaults.auto_lr(256, 300, 8.0, 1000, 0.9, 1.0) == pytest.approx(base / 2)  # twice the noise
    assert _defaults.auto_lr(256, 300, 4.0, 4000, 0.9, 1.0) == pytest.approx(base / 2)  # 4x the parameters
    assert _defaults.auto_lr(256, 300, 4.0, 1000, 0.9, 2.0) == pytest.approx(base / 2)  # twice the clip
    assert _defaults.auto_lr(10 ** 6, 1, 1.0, 1, 0.0, 1.0) == _defaults.LR_MAX
    assert _defaults.auto_lr(256, 300, 0.0, 1000, 0.9, 1.0) > 0  # no noise: sigma taken as 1
    assert _defaults.auto_batch_size(1) == 1 and _defaults.auto_max_epochs(1000, 250) == 75


def test_regressor_auto_defaults_learn_a_linear_target():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (2000, 3))
    y = X @ [0.5, -0.3, 0.2]
    reg = DPMomentumRegressor(epsilon=2.0, random_state=0).fit(X, y)
    assert reg.score(X, y) > 0.5 and reg.lr_ > 0 and reg.batch_size_ == 500


# -- the RDP accountant's cache gives Opacus's numbers -------------------------------------------
@pytest.mark.parametrize("history", [[(1.5, 0.04, 2250)], [(28.7, 0.5, 200)],
                                     [(1.1, 0.01, 100), (2.0, 0.2, 30), (1.1, 0.01, 50)]])
def test_cached_rdp_matches_opacus(history):
    acc = PrivacyAccountant("rdp")
    reference = RDPAccountant()
    for sigma, q, n in history:
        acc.step(sigma, q, n)
        reference.history.append((sigma, q, n))
    assert acc.get_epsilon(1e-5) == pytest.approx(reference.get_epsilon(1e-5, alphas=RDP_ORDERS), rel=1e-12)


# -- ScatteringTransform: fixed, row-wise, learns nothing from pixels ----------------------------
def test_scattering_shape_and_rowwise():
    rng = np.random.default_rng(0)
    X = rng.random((6, 28 * 28)).astype(np.float32)
    st = ScatteringTransform().fit(X)
    F = st.transform(X)
    assert F.shape == (6, 81 * 7 * 7) and st.output_shape_ == (81, 7, 7) and st.n_channels_ == 81
    np.testing.assert_allclose(st.transform(X[2:3]), F[2:3], rtol=1e-5, atol=1e-6)  # no row sees another
    other = ScatteringTransform().fit(rng.random((3, 28 * 28)))  # fit learns only the shape
    np.testing.assert_array_equal(other.transform(X), F)
    groups = F.reshape(6, 27, -1)  # each row, each channel group: zero mean, unit variance (up to eps)
    np.testing.assert_allclose(groups.mean(-1), 0, atol=1e-4)
    assert np.all(groups.std(-1) <= 1 + 1e-3) and np.all(groups.std(-1) > 0)
    restored = pickle.loads(pickle.dumps(st))
    np.testing.assert_allclose(restored.transform(X), F, rtol=1e-6)


def test_scattering_images_and_errors():
    rng = np.random.default_rng(0)
    imgs = rng.random((2, 16, 12)).astype(np.float32)
    st = ScatteringTransform(J=2, L=4, n_groups=1).fit(imgs)
    assert st.transform(imgs).shape == (2, (1 + 8 + 16) * 4 * 3)
    with pytest.raises(ValueError, match="image_shape"):
        ScatteringTransform().fit(rng.random((2, 30)))
    with pytest.raises(ValueError, match="n_groups=5"):
        ScatteringTransform(n_groups=5).fit(rng.random((2, 28 * 28)))
    with pytest.raises(ValueError, match="J=3"):
        ScatteringTransform(J=3).fit(rng.random((2, 4, 4)))
    raw = ScatteringTransform(normalize="none").fit_transform(rng.random((2, 28 * 28)))
    assert raw.shape == (2, 3969) and np.isfinite(raw).all()


def test_scattering_auto_scales_and_groups_read_the_image_shape_only():
    rng = np.random.default_rng(0)
    small = ScatteringTransform(image_shape=(8, 8)).fit(rng.random((2, 64)))
    assert (small.J_, small.n_channels_, small.n_groups_, small.output_shape_) == (1, 9, 9, (9, 4, 4))
    assert small.J == "auto" and small.n_groups == "auto"  # the parameters stay as given
    X = rng.random((3, 64))
    F = small.transform(X)
    np.testing.assert_allclose(F.reshape(3, 9, 16).mean(-1), 0, atol=1e-4)  # one channel a group
    outlier = np.vstack([X, 1e4 * np.ones((1, 64)), rng.normal(0, 1e3, (5, 64))])
    np.testing.assert_allclose(small.transform(outlier)[:3], F, rtol=1e-5, atol=1e-6)  # no row sees another
    np.testing.assert_allclose(small.transform(X[1:2]), F[1:2], rtol=1e-5, atol=1e-6)
    large = ScatteringTransform().fit(rng.random((1, 28 * 28)))
    assert (large.J_, large.n_groups_) == (2, 27)  # Tramer & Boneh's setting
    colour = ScatteringTransform(image_shape=(3, 16, 16)).fit(rng.random((1, 3 * 256)))
    assert (colour.J_, colour.n_groups_) == (2, 81)
    odd = ScatteringTransform(J=2, L=3).fit(rng.random((1, 16, 16)))  # 1 + 6 + 9 = 16 channels: 3 does not divide
    assert odd.n_groups_ == 16
    with pytest.raises(ValueError, match=r'n_groups=4 does not divide the 9 .*\(e.g. 9\) or n_groups="auto"'):
        ScatteringTransform(n_groups=4, image_shape=(8, 8)).fit(rng.random((1, 64)))


def test_scattering_keeps_its_fitted_operator_and_checks_the_row_width():
    # review_s37 k08: set_params(L=3) without a refit: the cached operator gave the old features, a pickled copy
    # (operator rebuilt from self.L) crashed. k09: torch_transform merged rows of another width into images.
    import torch

    rng = np.random.default_rng(0)
    X = rng.random((3, 64))
    st = ScatteringTransform(image_shape=(8, 8)).fit(X)
    F = st.transform(X)
    st.set_params(L=3)
    np.testing.assert_array_equal(st.transform(X), F)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(st)).transform(X), F)
    assert st.L_ == 8
    with pytest.raises(ValueError, match=r"rows of shape \(4, 32\)"):
        st.torch_transform(torch.zeros((2, 4, 32)))
    for rows in ((2, 1, 8, 8), (2, 8, 8), (2, 64)):
        assert st.torch_transform(torch.zeros(rows)).shape == (2, 144)


def test_scattering_then_classifier_in_a_pipeline(digits):
    from sklearn.pipeline import make_pipeline

    X, y = digits
    pipe = make_pipeline(ScatteringTransform(J=1, L=4, n_groups=5),
                         DPMomentumClassifier(epsilon=5.0, classes=range(10), max_epochs=20))
    pipe.fit(X, y)
    assert pipe.score(X, y) > 0.5 and pipe[-1].epsilon_ <= 5.0


def test_rms_rows_make_the_fit_independent_of_the_feature_scale(digits, seeded_noise):
    X, y = digits
    with seeded_noise():
        a = DPMomentumClassifier(epsilon=1.0, classes=range(10), max_epochs=3, random_state=0).fit(X, y)
    with seeded_noise():
        b = DPMomentumClassifier(epsilon=1.0, classes=range(10), max_epochs=3, random_state=0).fit(100 * X, y)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(100 * X), rtol=1e-4, atol=1e-6)
    assert a.lr_ == b.lr_
    zero = np.zeros((1, X.shape[1]))
    assert np.isfinite(a.predict_proba(zero)).all()
    raw = DPMomentumClassifier(normalize_rows="none", classes=range(10), max_epochs=1).fit(X, y)
    assert type(raw.net_.module_).__name__ == "SoftmaxRegression"
    assert type(a.net_.module_).__name__ == "RowRMSNormalized"
