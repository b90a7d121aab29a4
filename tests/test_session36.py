"""Fixes of 2026-11-26 (session 36), each with the test that failed before it."""
import warnings

import numpy as np
import pytest

from skdp import DPMomentumClassifier, DPMomentumRegressor


@pytest.fixture
def images():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (120, 16, 16)).astype(np.float32)
    return X, (X.mean((1, 2)) > 0.5).astype(int)


@pytest.mark.parametrize("image_shape", [None, (16, 16)])
def test_partial_fit_continues_on_image_rows(images, image_shape):
    # review_s35 d06: partial_fit after a fit on (n, H, W) rows refused its own training rows (sklearn's
    # n_features check compared X.shape[1] = H with n_features_in_ = H * W pixels).
    X, y = images
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1),
                                   image_shape=image_shape, random_state=0).fit(X, y)
        steps = clf.n_steps_
        clf.partial_fit(X, y)
    assert clf.n_steps_ > steps and clf.privacy_certified_ and clf.n_features_in_ == 256
    # rows of another shape are still refused by name, before any charge
    spent = clf.epsilon_
    with pytest.raises(ValueError, match=r"rows of shape \(16, 15\)"):
        clf.partial_fit(X[:, :, :15], y)
    assert clf.epsilon_ == spent


def test_partial_fit_on_tables_keeps_sklearns_wording():
    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (80, 4)).astype(np.float32), np.arange(80) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(-1, 1)).fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features, but DPMomentumClassifier is expecting 4 features"):
        clf.partial_fit(X[:, :3], y)


def test_regressor_auto_augment_takes_no_copies(images):
    # review_s35 c06: augment="auto" was chosen on classification (mnist-dev); a shift is not label-preserving
    # for a position-like regression target, and no regression development data chose copies: none.
    X, _ = images
    y = X.mean((1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, bounds=(0, 1), image_shape=(16, 16),
                                  random_state=0).fit(X.reshape(len(X), -1), y)
    assert reg.module_ == "cnn" and reg.augment_ is None
    # asked for, the copies are still there
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, bounds=(0, 1), image_shape=(16, 16), augment=2,
                                  random_state=0).fit(X.reshape(len(X), -1), y)
    assert reg.augment_ == 2
