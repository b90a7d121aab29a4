"""MI-Face: white-box and black-box inversion, stopping rules, pipelines, scoring."""
import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from skdp import DPMomentumClassifier, PrivacyLeakWarning
from skdp.attacks import InversionResult, MIFace, TorchUnavailableError, score_reconstructions
from skdp.preprocessing import CenterNormalize, Downsample
from skdp.superres import SRGANTransformer

SHAPE = (8, 8)


def prototype_data(n_per_class=30, n_classes=4, seed=0):
    """Classes are noisy copies of distinct 8x8 prototype images in [0, 1]."""
    rng = np.random.default_rng(seed)
    protos = rng.random((n_classes, 64)).round()
    y = np.repeat(np.arange(n_classes), n_per_class)
    X = np.clip(protos[y] + 0.2 * rng.standard_normal((len(y), 64)), 0, 1).astype(np.float32)
    return X, y, protos


def fitted_model(X, y, epsilon=math.inf):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        return make_pipeline(CenterNormalize(X.mean(0)),
                             DPMomentumClassifier(epsilon=epsilon, classes=np.unique(y), max_epochs=30, lr=1.0,
                                                  batch_size=len(y), normalize_rows="none",  # tuned without
                                                  random_state=0)).fit(X, y)


def nearest(reconstructions, protos):
    R = reconstructions - reconstructions.mean(1, keepdims=True)
    P = protos - protos.mean(1, keepdims=True)
    return np.argmax(R @ P.T, axis=1)


def test_white_box_recovers_the_class_prototypes():
    X, y, protos = prototype_data()
    model = fitted_model(X, y)
    result = MIFace(model, alpha=300, lambda_=10.0, process=lambda x: x.clamp(0, 1)).run(np.arange(4))
    assert isinstance(result, InversionResult) and result.reconstructions.shape == (4, 64)
    np.testing.assert_array_equal(nearest(result.reconstructions, protos), np.arange(4))
    assert np.all(result.confidences > 0.9)


def test_attack_fails_against_an_untrained_model():
    # Twin of the test above: with nothing learnt there is nothing to invert.
    X, y, protos = prototype_data()
    model = fitted_model(X, y)
    model[-1].net_.module_.linear.weight.data.zero_()
    result = MIFace(model, alpha=50, lambda_=10.0).run(np.arange(4))
    np.testing.assert_allclose(result.reconstructions, 0.0)


def test_black_box_gradient_matches_white_box():
    X, y, _ = prototype_data()
    model = fitted_model(X, y)
    attack = MIFace(model, fd_step=1e-3)
    cost_w, white = attack._cost_function()
    assert white
    bb = MIFace(model, mode="black_box", fd_step=1e-3)
    cost_b, white_b = bb._cost_function()
    assert not white_b
    x = torch.full((2, 64), 0.5)
    idx = torch.tensor([0, 3])
    g_w = attack._white_box_grad(cost_w, x, idx)
    g_b = bb._black_box_grad(np.random.default_rng(0))(cost_b, x, idx)
    cos = torch.nn.functional.cosine_similarity(g_w.double(), g_b.double(), dim=1)
    assert torch.all(cos > 0.99)


def test_black_box_with_random_directions_succeeds_on_an_sklearn_model():
    X, y, protos = prototype_data()
    model = LogisticRegression(max_iter=500).fit(X, y)
    with pytest.raises(TorchUnavailableError):
        MIFace(model, mode="white_box").run([0])
    result = MIFace(model, alpha=100, lambda_=1.0, n_directions=64, random_state=0,
                    process=lambda x: x.clamp(0, 1)).run(np.arange(4))  # auto: falls back to black-box
    np.testing.assert_array_equal(nearest(result.reconstructions, protos), np.arange(4))


def test_stopping_rules():
    X, y, _ = prototype_data()
    model = fitted_model(X, y)
    # gamma: the confidence is reached at once.
    quick = MIFace(model, alpha=1000, gamma=0.2, lambda_=10.0).run([1])
    assert quick.n_iter[0] <= 3 and quick.confidences[0] >= 0.2
    # beta: a step so small that nothing improves stops after beta + 1 iterations.
    stalled = MIFace(model, alpha=1000, beta=5, lambda_=1e-30).run([1])
    assert stalled.n_iter[0] == 6
    # alpha caps the rest.
    capped = MIFace(model, alpha=7, beta=100, gamma=1.0, lambda_=1e-3).run([1])
    assert capped.n_iter[0] == 7


@pytest.mark.slow  # an attack (not a privacy guard): 20 s of SR training and inversion
def test_through_a_frozen_super_resolution_step():
    X, y, protos = prototype_data(n_per_class=10)
    sr = SRGANTransformer(scale=2, n_filters=4, discriminator_filters=4, n_residual_blocks=1, pretrain_epochs=3,
                          gan_epochs=0, batch_size=8, image_shape=SHAPE, random_state=0).fit(X)
    low = Downsample(2, image_shape=SHAPE).fit_transform(X)
    clf = fitted_model(sr.transform(low), y)
    pipe = make_pipeline(FrozenEstimator(sr), *[s for _, s in clf.steps])
    start_conf = pipe.predict_proba(np.zeros((1, 16)))[0, 2]
    result = MIFace(pipe, alpha=100, lambda_=10.0).run([2])
    assert result.reconstructions.shape == (1, 16)  # the low-resolution input is what is optimised
    assert result.confidences[0] > start_conf + 0.2
    np.testing.assert_allclose(pipe.predict_proba(result.reconstructions)[0, 2], result.confidences[0], rtol=1e-4)


def test_score_reconstructions():
    X, y, protos = prototype_data()
    evaluator = LogisticRegression(max_iter=500).fit(X, y)
    means = np.stack([X[y == k].mean(0) for k in range(4)])
    perfect = InversionResult(np.arange(4), means, np.ones(4), np.zeros(4), np.ones(4, int))
    score = score_reconstructions(perfect, X, y, evaluator=evaluator, image_shape=SHAPE)
    assert score["attack_accuracy"] == 1.0 and score["ssim"] == pytest.approx(1.0)
    shuffled = InversionResult(np.arange(4), means[[1, 2, 3, 0]], np.ones(4), np.zeros(4), np.ones(4, int))
    bad = score_reconstructions(shuffled, X, y, evaluator=evaluator, image_shape=SHAPE)
    assert bad["attack_accuracy"] == 0.0 and bad["ssim"] < 0.5
    with pytest.raises(ValueError, match="to_reference"):
        score_reconstructions(perfect, X[:, :10], y, evaluator=evaluator, image_shape=SHAPE)


@pytest.mark.parametrize("kwargs, match", [({"alpha": 0}, "alpha"), ({"gamma": 0}, "gamma"),
                                           ({"lambda_": -1}, "lambda_"), ({"mode": "grey"}, "mode")])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MIFace(None, **kwargs)


def test_unknown_target_and_unfitted_model():
    X, y, _ = prototype_data()
    with pytest.raises(ValueError, match="not classes"):
        MIFace(fitted_model(X, y)).run([7])
    with pytest.raises(ValueError, match="fitted"):
        MIFace(LogisticRegression()).run([0])


def _default_classifier(X, y, **kwargs):
    """A default DPMomentumClassifier (normalize_rows="rms"), trained without noise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        return DPMomentumClassifier(epsilon=math.inf, classes=np.unique(y), max_epochs=30, lr=1.0,
                                    batch_size=len(y), random_state=0, **kwargs).fit(X, y)


def test_white_box_attack_on_the_default_classifier_rescaling_rows():
    # The default model rescales each row to RMS 1, so its output at the all-zero start does not depend
    # on the direction taken: the clamped norm used to give a gradient of ~1e12 there and one step sent the
    # reconstruction to ~1e10, where the gradient (~1/||x||) froze it.
    X, y, protos = prototype_data()
    results = {rows: MIFace(_default_classifier(X, y, normalize_rows=rows), alpha=300, lambda_=10.0).run(np.arange(4))
               for rows in ("rms", "none")}
    rms, none = results["rms"], results["none"]
    assert np.all(np.isfinite(rms.reconstructions))
    np.testing.assert_array_equal(nearest(rms.reconstructions, protos), np.arange(4))
    assert np.all(rms.confidences > 0.9)
    # The same order of size as the attack on the model that does not rescale its rows.
    size = np.abs(rms.reconstructions).max(1) / np.abs(none.reconstructions).max(1)
    assert np.all((size > 0.1) & (size < 10)), size


def test_miface_names_n_features_that_do_not_fit_the_model():
    X, y, _ = prototype_data()
    model = _default_classifier(X, y)
    for mode in ("white_box", "black_box"):
        with pytest.raises(ValueError, match="n_features=7.*64"):
            MIFace(model, n_features=7, mode=mode).run([0])
    with pytest.raises(ValueError, match="n_features"):
        MIFace(model, n_features=0)
