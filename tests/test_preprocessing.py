"""Downsample / Upsample / CenterNormalize: exact resampling, layouts, torch paths, errors."""
import numpy as np
import pytest
import torch
from sklearn.pipeline import make_pipeline

from skdp.imaging.resample import _area_matrix
from skdp.preprocessing import CenterNormalize, Downsample, Upsample


def test_area_downsample_of_blocks_is_exact():
    rng = np.random.default_rng(0)
    blocks = rng.random((2, 3, 4))
    images = np.kron(blocks, np.ones((1, 8, 8)))  # 24 x 32, constant on 8x8 blocks
    np.testing.assert_allclose(Downsample(8).fit_transform(images), blocks, rtol=1e-5)


def test_area_weights_conserve_mass_when_size_does_not_divide():
    # 92 / 8 = 11.5: every input pixel must be counted exactly once in total.
    W = _area_matrix(92, 11)
    np.testing.assert_allclose(W.sum(1), 1.0)
    np.testing.assert_allclose(W.sum(0) * 92 / 11, 1.0)
    image = np.random.default_rng(1).random((1, 112, 92))
    out = Downsample(8).fit_transform(image)
    assert out.shape == (1, 14, 11)
    np.testing.assert_allclose(out.mean(), image.mean(), rtol=1e-5)


@pytest.mark.parametrize("method", ["area", "bicubic", "bilinear"])
def test_layouts_round_trip(method):
    rng = np.random.default_rng(2)
    grey = rng.random((3, 16, 12)).astype(np.float32)
    flat = grey.reshape(3, -1)
    nchw = grey[:, None]
    a = Downsample(4, method=method).fit_transform(grey)
    b = Downsample(4, method=method, image_shape=(16, 12)).fit_transform(flat)
    c = Downsample(4, method=method).fit_transform(nchw)
    assert a.shape == (3, 4, 3) and b.shape == (3, 12) and c.shape == (3, 1, 4, 3)
    np.testing.assert_allclose(a.reshape(3, -1), b)
    np.testing.assert_allclose(a, c[:, 0])
    assert Upsample(output_size=(16, 12), method=method).fit_transform(a).shape == (3, 16, 12)


def test_torch_transform_matches_and_is_differentiable():
    X = np.random.default_rng(3).random((2, 4 * 6)).astype(np.float32)
    down = Downsample(2, image_shape=(4, 6)).fit(X)
    t = torch.tensor(X, requires_grad=True)
    out = down.torch_transform(t)
    np.testing.assert_allclose(out.detach().numpy(), down.transform(X), rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), 0.25, rtol=1e-6)  # each pixel feeds one 2x2 mean


def test_center_normalize():
    X = np.array([[3.0, 5.0], [1.0, 1.0 + 1e-9]])
    Z = CenterNormalize(center=[0.0, 1.0]).fit_transform(X)
    np.testing.assert_allclose(Z[0], [0.6, 0.8])
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0)
    t = CenterNormalize(center=[0.0, 1.0]).fit(X).torch_transform(torch.tensor(X))
    np.testing.assert_allclose(t.numpy(), Z)
    with pytest.raises(ValueError, match="center has 3 values"):
        CenterNormalize(center=[0, 0, 0]).fit(X)


@pytest.mark.parametrize("make, X, match", [
    (lambda: Downsample(8), np.zeros((2, 4, 4)), "smaller than factor"),
    (lambda: Downsample(2), np.zeros((2, 16)), "needs image_shape"),
    (lambda: Downsample(2, image_shape=(3, 3)), np.zeros((2, 16)), "image_shape"),
    (lambda: Downsample(0), np.zeros((2, 4, 4)), "factor"),
    (lambda: Downsample(2, method="lanczos"), np.zeros((2, 4, 4)), "method"),
    (lambda: Downsample(2), np.full((2, 4, 4), np.nan), "NaN"),
])
def test_bad_input(make, X, match):
    before = X.copy()
    with pytest.raises(ValueError, match=match):
        make().fit(X)
    np.testing.assert_array_equal(X, before)


def test_transform_checks_the_fitted_size():
    down = Downsample(2).fit(np.zeros((1, 8, 8)))
    with pytest.raises(ValueError, match="image_shape"):
        down.transform(np.zeros((1, 8, 6)))


def test_in_a_pipeline():
    X = np.random.default_rng(4).random((5, 8 * 8))
    pipe = make_pipeline(Downsample(2, image_shape=(8, 8)), Upsample(2, image_shape=(4, 4)))
    assert pipe.fit_transform(X).shape == (5, 64)
