"""SRGANTransformer: shapes, learning, the GAN phase, privacy, pipelines, bad input."""
import math
import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.utils._param_validation import InvalidParameterError

from skdp import BudgetLedger, DPMomentumClassifier, PrivacyLeakWarning
from skdp.preprocessing import CenterNormalize, Downsample
from skdp.superres import SRGANTransformer, SRResNet, psnr, ssim
from skdp.superres.net import SRGANNet
from skdp.superres.networks import SRGAN

TINY = dict(n_filters=8, discriminator_filters=4, n_residual_blocks=1, batch_size=8, random_state=0)


def smooth_images(n, shape=(16, 16), seed=0):
    """Low-frequency images in [0, 1]: what super-resolution can learn from few examples."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]] / max(shape)
    out = np.empty((n,) + shape, np.float32)
    for i in range(n):
        a, b, c, d = rng.uniform(1, 4, 4)
        out[i] = 0.5 + 0.25 * np.sin(a * xx * 3 + c) * np.cos(b * yy * 3 + d)
    return out


@pytest.mark.parametrize("scale, size", [(2, (16, 16)), (4, (16, 12)), (8, (24, 20)), (8, (112, 92))])
def test_generator_output_size_including_sizes_that_do_not_divide(scale, size):
    H, W = size
    h, w = H // scale, W // scale
    output_size = None if (h * scale, w * scale) == size else size
    g = SRResNet(1, scale, 1, 4, "batch", output_size).eval()
    assert g(torch.zeros(2, 1, h, w)).shape == (2, 1, H, W)


def test_architecture_follows_the_thesis():
    g = SRResNet(3, 8, 5, 16)
    assert len(g.blocks) == 5
    assert g.head[0].kernel_size == (9, 9) and g.tail.kernel_size == (9, 9)
    shuffles = [m for m in g.upsample if isinstance(m, torch.nn.PixelShuffle)]
    assert len(shuffles) == 3  # 8 = 2 x 2 x 2
    d = SRGAN(norm="batch").discriminator
    convs = [m for m in d.features if isinstance(m, torch.nn.Conv2d)]
    assert [c.stride[0] for c in convs] == [1, 2, 1, 2, 1, 2, 1, 2]
    assert convs[-1].out_channels == 8 * convs[0].out_channels


@pytest.mark.slow  # training quality, no privacy property: 10 s
def test_training_learns_super_resolution():
    X = smooth_images(24)
    untrained = SRGANTransformer(scale=2, pretrain_epochs=0, gan_epochs=0, **TINY).fit(X)
    trained = SRGANTransformer(scale=2, pretrain_epochs=40, gan_epochs=2, **TINY).fit(X)
    test = smooth_images(8, seed=1)
    low = Downsample(2, method="bicubic").fit_transform(test)
    assert psnr(test, trained.transform(low)) > psnr(test, untrained.transform(low)) + 10
    assert ssim(test, trained.transform(low)) > 0.8
    assert trained.images_per_second_ > 0 and trained.epsilon_ == math.inf and trained.delta_ == 0


def test_gan_phase_trains_the_discriminator_and_logs():
    X = smooth_images(16)
    sr = SRGANTransformer(scale=2, pretrain_epochs=1, gan_epochs=2, **TINY).fit(X)
    # The discriminator's loss is computed on private images without noise: shown to the curator with
    # verbose=1, never kept in the history (only released quantities are).
    assert set(sr.net_.history[-1]) <= {"epoch", "dur", "epsilon", "batches"}
    before = SRGANTransformer(scale=2, pretrain_epochs=1, gan_epochs=0, **TINY).fit(X)
    w0 = before.net_.module_.discriminator.classifier[-1].weight
    w1 = sr.net_.module_.discriminator.classifier[-1].weight
    assert not torch.allclose(w0, w1)  # only the GAN phase moves the discriminator
    assert sr.net_.optimizer_.param_groups[0]["lr"] == pytest.approx(1e-4)  # Ledig: a lower rate for the GAN
    assert before.net_.optimizer_.param_groups[0]["lr"] == pytest.approx(1e-3)


def test_same_seed_same_model_and_pickle():
    X = smooth_images(12)
    a = SRGANTransformer(scale=2, pretrain_epochs=2, gan_epochs=1, **TINY).fit(X)
    b = SRGANTransformer(scale=2, pretrain_epochs=2, gan_epochs=1, **TINY).fit(X)
    low = X[:, ::2, ::2]
    np.testing.assert_allclose(a.transform(low), b.transform(low))
    c = pickle.loads(pickle.dumps(a))
    np.testing.assert_allclose(c.transform(low), a.transform(low))
    assert clone(a).get_params()["scale"] == 2


def test_layouts_and_colour():
    rng = np.random.default_rng(0)
    X = rng.random((6, 3, 8, 8)).astype(np.float32)
    sr = SRGANTransformer(scale=2, pretrain_epochs=1, gan_epochs=1, **TINY).fit(X)
    assert sr.low_res_shape_ == (3, 4, 4)
    assert sr.transform(X[:, :, ::2, ::2]).shape == (6, 3, 8, 8)
    flat = SRGANTransformer(scale=2, image_shape=(3, 8, 8), pretrain_epochs=1, gan_epochs=0, **TINY)
    flat.fit(X.reshape(6, -1))
    assert flat.transform(X[:, :, ::2, ::2].reshape(6, -1)).shape == (6, 3 * 64)
    assert sr.fit_transform(X).shape == X.shape


# -- privacy ------------------------------------------------------------------------------
def test_private_fit_is_accounted_and_uses_group_norm():
    X = smooth_images(40)
    ledger = BudgetLedger(epsilon=3.0, delta=1e-3)
    sr = SRGANTransformer(scale=2, pretrain_epochs=1, gan_epochs=1, epsilon=2.0, delta=1e-3, ledger=ledger,
                          **TINY).fit(X)
    assert 1.9 < sr.epsilon_ <= 2.0 and sr.delta_ == 1e-3
    assert ledger.total()[0] == pytest.approx(sr.epsilon_, rel=1e-6)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in sr.generator_.modules())
    with pytest.raises(ValueError, match="norm='batch'"):
        SRGANTransformer(scale=2, norm="batch", epsilon=1.0, **TINY).fit(X)


def _noise_only_gradient_std(pretrain):
    """Std of the generator's gradient when clipping leaves (almost) no signal: it is the noise."""
    X = smooth_images(16)
    low = Downsample(2, method="bicubic").fit_transform(X)[:, None]
    net = SRGANNet(SRGAN(1, 2, 1, 8, 4, "group"), pretrain_epochs=10 if pretrain else 0,
                   noise_multiplier=2.0, max_grad_norm=1e-9, batch_size=8, max_epochs=1, random_state=0,
                   lr=1e-3, train_split=None)
    net.initialize()
    net.history.new_epoch()
    net.history.new_batch()
    net.sample_rate_, net.noise_multiplier_ = 0.5, 2.0
    net._lot_rng = np.random.default_rng()  # what fit_loop sets up: the fit's mechanism randomness
    net.initialize_engines(2.0, 8.0)
    grads = {}
    orig_step = net.optimizer_.step

    def record():
        for p in net.module_.generator.parameters():
            if p.grad is not None:
                grads[p] = p.grad.clone()
        orig_step()
    net.optimizer_.step = record
    net.train_step((low[:8], X[:8, None]))
    return torch.cat([g.flatten() for g in grads.values()]).std().item()


def test_noise_per_release_matches_the_accounted_mechanism():
    # One release per lot while pre-training: std sigma C / B; two in the GAN phase: sigma sqrt(2) C / B
    # each, which composes to exactly the accounted multiplier sigma.
    assert _noise_only_gradient_std(pretrain=True) == pytest.approx(2.0 * 1e-9 / 8, rel=0.1)
    assert _noise_only_gradient_std(pretrain=False) == pytest.approx(2.0 * math.sqrt(2) * 1e-9 / 8, rel=0.1)


def test_without_noise_the_fit_is_not_private_and_says_so():
    X = smooth_images(16)
    with pytest.warns(PrivacyLeakWarning, match="NOT"):
        sr = SRGANTransformer(scale=2, pretrain_epochs=1, gan_epochs=0, noise_multiplier=0.0, **TINY).fit(X)
    assert sr.epsilon_ == math.inf


# -- pipelines -----------------------------------------------------------------------------
def frozen_sr_pipeline():
    """A public SR fit, its weights, private low-resolution data and a pipeline that freezes the SR."""
    X = smooth_images(40)
    y = np.arange(40) % 2
    sr = SRGANTransformer(scale=2, pretrain_epochs=1, gan_epochs=0, **TINY).fit(X[:10])
    weights = [p.detach().clone() for p in sr.generator_.parameters()]
    low = Downsample(2).fit_transform(X).reshape(40, -1)
    pipe = make_pipeline(FrozenEstimator(sr), CenterNormalize(),
                         DPMomentumClassifier(epsilon=5.0, classes=[0, 1], max_epochs=2, random_state=0))
    return sr, weights, low, y, pipe


def test_frozen_in_a_pipeline_is_not_refitted():
    sr, weights, low, y, pipe = frozen_sr_pipeline()
    pipe.fit(low, y)
    assert pipe.predict(low).shape == (40,)
    assert all(torch.equal(a, b) for a, b in zip(weights, sr.generator_.parameters()))
    assert pipe.steps[0][1].estimator is sr


def test_unfrozen_on_low_resolution_data_points_to_frozen_estimator():
    low = np.zeros((10, 3, 2))
    with pytest.raises(ValueError, match="FrozenEstimator"):
        SRGANTransformer(scale=8, **TINY).fit(low)


# -- bad input -----------------------------------------------------------------------------
def test_bad_input():
    X = smooth_images(8)
    with pytest.raises(InvalidParameterError, match="scale"):
        SRGANTransformer(scale=3).fit(X)
    with pytest.raises(NotFittedError):
        SRGANTransformer().transform(X[:, ::8, ::8])
    bad = X.copy()
    bad[0, 0, 0] = np.nan
    before = bad.copy()
    with pytest.raises(ValueError, match="NaN"):
        SRGANTransformer(scale=2, **TINY).fit(bad)
    np.testing.assert_array_equal(bad, before)
    with pytest.raises(ValueError, match="image_shape"):
        SRGANTransformer(scale=2, image_shape=(5, 5), **TINY).fit(X.reshape(8, -1))
    sr = SRGANTransformer(scale=2, pretrain_epochs=1, gan_epochs=0, **TINY).fit(X)
    with pytest.raises(ValueError, match="image_shape"):
        sr.transform(X[:, ::4, ::4])  # 4x4 given, 8x8 expected
    with pytest.raises(ValueError, match="NaN"):
        sr.transform(np.full((1, 8, 8), np.nan))
    with pytest.raises(ValueError, match="10 features per row"):
        sr.transform(X[:, ::2, ::2].reshape(8, -1)[:, :10])


@pytest.mark.slow  # perceptual loss plumbing: 9 s
def test_perceptual_loss_uses_the_given_feature_extractor_and_keeps_it_frozen():
    X = smooth_images(12)
    features = torch.nn.Conv2d(1, 3, 3, padding=1)
    before = features.weight.detach().clone()
    sr = SRGANTransformer(scale=2, pretrain_epochs=2, gan_epochs=1, feature_extractor=features, **TINY).fit(X)
    assert torch.equal(sr.net_.feature_extractor.module.weight, before)
    assert features.weight.requires_grad  # the parameter itself is not modified
    low, hr = torch.tensor(X[:4, None, ::2, ::2].copy()), torch.tensor(X[:4, None])
    out = sr.generator_(low)
    expected = (features(out) - features(hr)).pow(2).flatten(1).mean(1)
    torch.testing.assert_close(sr.net_.content_loss(out, hr), expected)
    assert not torch.allclose(sr.net_.content_loss(out, hr), (out - hr).pow(2).flatten(1).mean(1))


def test_grid_search_over_epsilon_keeps_the_frozen_generator():
    from sklearn.model_selection import GridSearchCV
    sr, weights, low, y, pipe = frozen_sr_pipeline()
    search = GridSearchCV(pipe, {"dpmomentumclassifier__epsilon": [1.0, 4.0]}, cv=2).fit(low, y)
    assert search.best_estimator_[-1].epsilon_ <= search.best_params_["dpmomentumclassifier__epsilon"]
    assert search.best_estimator_[0].estimator is sr  # cloning a frozen step keeps the fitted one
    assert all(torch.equal(a, b) for a, b in zip(weights, sr.generator_.parameters()))
