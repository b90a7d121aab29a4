"""SRGANTransformer: super-resolution as a scikit-learn transformer (Ledig et al. 2017; the thesis's variant)."""
import contextlib
import math
import numbers
import time
import warnings

import numpy as np
import torch
from sklearn.base import TransformerMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, Options, StrOptions
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from ..exceptions import PrivacyLeakWarning
from ..nn._estimator import DPSGDEstimator, fill_dp_docs
from ..imaging import as_images, normalize_image_shape, resample, restore_layout
from ..utils.validation import PRIVACY_CONSTRAINTS, Number, warn_if_delta_too_large
from .net import FrozenFeatures, SRGANNet
from .networks import SCALES, SRGAN

# Images pushed through the generator at once in ``transform``.
TRANSFORM_CHUNK = 64


@fill_dp_docs
class SRGANTransformer(TransformerMixin, DPSGDEstimator):
    """Super-resolve low-resolution images with an SRGAN trained on high-resolution ones.

    ``fit(X_high_res)`` makes the low-resolution inputs itself (``degradation``
    by ``scale``), pre-trains the generator on the content loss (SRResNet), then
    trains generator and discriminator adversarially.
    ``transform(X_low_res)`` returns the super-resolved images.

    **Privacy.** ``epsilon=None`` (default) declares the training images
    public: nothing is protected and nothing is accounted (``epsilon_`` is
    inf). With a number, both networks train by DP-SGD through skdp's engine
    (Poisson lots, per-example clipping, noise; group instead of batch
    normalisation) and the fit is (``epsilon``, ``delta``)-DP for one image
    added or removed. Inside a ``Pipeline`` fitted on private data, freeze a
    transformer fitted on public data so that it is not refitted::

        from sklearn.frozen import FrozenEstimator
        make_pipeline(FrozenEstimator(srgan), DPMomentumClassifier(...))

    **Sizes.** The low-resolution size is ``(H // scale, W // scale)``
    (``skdp.preprocessing.Downsample``). When ``H`` or ``W`` does not divide by
    ``scale`` (ORL's 112x92 at scale 8 gives 14x11 and a generator output of
    112x88), the generator's output is resized bicubically to ``(H, W)`` inside
    the network: training and ``transform`` see the same mapping.

    Parameters
    ----------
    scale : {2, 4, 8}, default=8
        Super-resolution factor of height and width (log2(scale) x2 stages).
    n_residual_blocks : int, default=5
        The thesis's 5 (Ledig et al. use 16).
    n_filters, discriminator_filters : int, default=64
        Generator channels and the discriminator's first width (then x2, x4, x8).
    norm : {"auto", "batch", "group", "none"}, default="auto"
        "auto": batch normalisation as in Ledig et al., group normalisation when
        ``epsilon`` is set (batch statistics have no per-example gradient).
    image_shape : (H, W) or (C, H, W) or None, default=None
        High-resolution image shape; needed for flat input ``(n, C*H*W)``.
    degradation : {"bicubic", "area"}, default="bicubic"
        How ``fit`` makes the low-resolution inputs; match the ``Downsample``
        that makes the data you will ``transform``.
    pretrain_epochs, gan_epochs : int, default=100, 50
        Epochs of content-only pre-training, then of adversarial training.
    batch_size : int, default=16
        Expected lot size (lots are Poisson samples).
    lr : float, default=1e-3
        Adam's learning rate for both networks while pre-training (Ledig et
        al.: 1e-4 over 10^6 steps; a higher rate suits a few thousand steps on CPU).
    gan_lr : float or None, default=None
        Learning rate of the adversarial phase; None is ``lr / 10`` (Ledig et
        al. also lower it tenfold).
    adversarial_weight : float, default=1e-3
        Weight of the non-saturating adversarial loss ``-log D(G(x))`` beside
        the content loss in the generator's loss (Ledig et al.: 1e-3); 0
        trains the adversarial phase on the content loss alone.
    feature_extractor : torch.nn.Module or None, default=None
        Content loss on its features instead of pixels (a perceptual loss, e.g.
        VGG layers loaded by the user). Kept frozen.
    epsilon : float or None, default=None
        None declares the training images public (nothing accounted,
        ``privacy_certified_=False``). A number: both networks train by DP-SGD
        and the fit spends at most (``epsilon``, ``delta``).
    {dp:delta}
    {dp:max_grad_norm}
    {dp:noise_multiplier}
    {dp:accounting}
    {dp:ledger}
    {dp:device}
    {dp:verbose}
    {dp:random_state}

    Attributes
    ----------
    generator_ : SRResNet
        The trained generator (evaluation mode).
    net_ : SRGANNet
        The fitted skorch net; ``net_.history`` holds the log.
    image_shape_, low_res_shape_ : tuple (C, H, W)
        Shape of one high-resolution training image and of one
        low-resolution input of ``transform``.
    {dp:attributes}
    images_per_second_ : float
        Training throughput (high-resolution images per second over all steps).
    n_features_in_ : int
        Features per high-resolution training row.

    See Also
    --------
    skdp.preprocessing.Upsample : Bicubic interpolation, the baseline to beat.
    skdp.preprocessing.Downsample : Makes the low-resolution data it restores.
    SRGAN : The generator and discriminator trained here.
    psnr : A quality measure of the super-resolved images.

    Examples
    --------
    Random images and tiny networks, for a quick run (``epsilon=None``: the
    images are declared public):

    >>> import numpy as np
    >>> from skdp.superres import SRGANTransformer
    >>> faces = np.random.default_rng(0).random((8, 16, 16)).astype("float32")
    >>> sr = SRGANTransformer(scale=4, n_residual_blocks=1, n_filters=4, discriminator_filters=4,
    ...                       pretrain_epochs=1, gan_epochs=1, batch_size=4, random_state=0).fit(faces)
    >>> sr.transform(faces[:, ::4, ::4]).shape
    (8, 16, 16)
    """

    _parameter_constraints = {
        **PRIVACY_CONSTRAINTS,
        "epsilon": [None, *PRIVACY_CONSTRAINTS["epsilon"]],
        "scale": [Options(numbers.Integral, set(SCALES))],
        "n_residual_blocks": [Interval(numbers.Integral, 0, None, closed="left")],
        "n_filters": [Interval(numbers.Integral, 2, None, closed="left")],
        "discriminator_filters": [Interval(numbers.Integral, 2, None, closed="left")],
        "norm": [StrOptions({"auto", "batch", "group", "none"})],
        "image_shape": [None, tuple, list],
        "degradation": [StrOptions({"bicubic", "area"})],
        "pretrain_epochs": [Interval(numbers.Integral, 0, None, closed="left")],
        "gan_epochs": [Interval(numbers.Integral, 0, None, closed="left")],
        "batch_size": [Number(numbers.Integral, 1, None, closed="left")],  # refuses True, as DPSGD_CONSTRAINTS
        "lr": [Interval(numbers.Real, 0, None, closed="neither")],
        "gan_lr": [None, Interval(numbers.Real, 0, None, closed="neither")],
        "adversarial_weight": [Interval(numbers.Real, 0, None, closed="left")],
        "feature_extractor": [None, torch.nn.Module],
        "max_grad_norm": [Interval(numbers.Real, 0, None, closed="neither")],
        "noise_multiplier": [None, Interval(numbers.Real, 0, None, closed="left")],
        "accounting": [StrOptions({"rdp", "prv"})],
        "ledger": [None, HasMethods(["spend"])],
        "device": [str, torch.device],
        "verbose": ["verbose"],
    }

    def __init__(self, scale=8, *, n_residual_blocks=5, n_filters=64, discriminator_filters=64, norm="auto",
                 image_shape=None, degradation="bicubic", pretrain_epochs=100, gan_epochs=50, batch_size=16,
                 lr=1e-3, gan_lr=None, adversarial_weight=1e-3, feature_extractor=None, epsilon=None, delta=1e-5,
                 max_grad_norm=1.0, noise_multiplier=None, accounting="rdp", ledger=None, device="cpu",
                 verbose=0, random_state=None):
        self._set_init_params(locals())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = True
        tags.non_deterministic = self.random_state is None or self._private
        return tags

    @property
    def _private(self):
        return self.epsilon is not None or self.noise_multiplier is not None

    # -- fit ---------------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Train on high-resolution images ``X`` (public unless ``epsilon`` is set).

        The low-resolution inputs are made from ``X`` by ``degradation``; the
        generator is pre-trained on the content loss for ``pretrain_epochs``,
        then trained against the discriminator for ``gan_epochs``. With
        ``epsilon`` set the whole fit spends at most (``epsilon``, ``delta``).

        Parameters
        ----------
        X : array-like of shape (n, C*H*W), (n, H, W) or (n, C, H, W)
            High-resolution images, at least 2; flat rows need ``image_shape``.
        y : None
            Ignored.

        Returns
        -------
        self : object
            Fitted transformer.
        """
        X = validate_data(self, X, dtype=np.float32, allow_nd=True, ensure_min_samples=2)
        shape = None if self.image_shape is None else normalize_image_shape(self.image_shape, "SRGANTransformer")
        hr, _ = as_images(X, shape, "SRGANTransformer")
        C, H, W = hr.shape[1:]
        h, w = H // self.scale, W // self.scale
        if h < 1 or w < 1:
            raise ValueError(
                f"SRGANTransformer: images of {H}x{W} are smaller than scale={self.scale}; fit takes the "
                "high-resolution images (in a Pipeline over low-resolution data, wrap a fitted "
                "transformer in sklearn.frozen.FrozenEstimator).")
        norm = self.norm if self.norm != "auto" else ("group" if self._private else "batch")
        if self._private and norm == "batch":
            raise ValueError("SRGANTransformer: norm='batch' mixes the examples of a lot and has no "
                             "per-example gradient; use norm='group' (or 'auto') with epsilon.")
        if self._private:
            warn_if_delta_too_large(self.delta, len(hr), "SRGANTransformer")
            # The privacy plan first, from public quantities: an unreachable epsilon is refused before the
            # images are resampled or a network built (74 s before; the net's own plan reuses the calibration).
            self._planned_privacy(len(hr))
        self.image_shape_, self.low_res_shape_ = (C, H, W), (C, h, w)
        lr_images = resample(hr, (h, w), self.degradation)
        output_size = None if (h * self.scale, w * self.scale) == (H, W) else (H, W)
        self.net_ = self._make_net(C, norm, output_size, len(hr))
        start = time.perf_counter()
        with self._public_data_context():
            self.net_.fit(lr_images, np.ascontiguousarray(hr))
        elapsed = time.perf_counter() - start
        self.generator_ = self.net_.module_.generator.eval()
        self._set_fit_results(self.net_, private=self._private,
                              certified=self._private or "training data declared public (epsilon=None)")
        seen = self.n_steps_ * self.net_.sample_rate_ * len(hr)
        self.images_per_second_ = seen / elapsed if elapsed > 0 else math.inf
        return self

    def _planned_privacy(self, n_samples):
        """(epsilon, delta) a fit on ``n_samples`` images will certify; (0, 0) for declared-public data."""
        return super()._planned_privacy(n_samples) if self._private else (0.0, 0.0)

    def _plan(self, n_samples):
        epsilon = math.inf if self.epsilon is None else self.epsilon
        return min(self.batch_size, n_samples), self.pretrain_epochs + self.gan_epochs, epsilon, 0.0

    def _public_data_context(self):
        if self._private:
            return contextlib.nullcontext()
        return _silence(PrivacyLeakWarning)

    def _make_net(self, channels, norm, output_size, n_samples):
        module_kwargs = dict(in_channels=channels, scale=self.scale, n_residual_blocks=self.n_residual_blocks,
                             n_filters=self.n_filters, discriminator_filters=self.discriminator_filters,
                             norm=norm, output_size=output_size)
        private = self._private
        # The class, not an instance: DPNet builds it without touching torch's global generator and
        # initialises it from the fit's own.
        public = dict(epsilon=math.inf, max_grad_norm=math.inf, noise_multiplier=0.0, ledger=None)
        return SRGANNet(
            SRGAN, **{f"module__{k}": v for k, v in module_kwargs.items()},
            pretrain_epochs=self.pretrain_epochs, adversarial_weight=self.adversarial_weight,
            gan_lr=self.lr / 10 if self.gan_lr is None else self.gan_lr,
            feature_extractor=(None if self.feature_extractor is None
                               else FrozenFeatures(self.feature_extractor, self.device)),
            batch_size=min(self.batch_size, n_samples),
            **self._dp_net_kwargs(max_epochs=self.pretrain_epochs + self.gan_epochs,
                                  **{**({"epsilon": math.inf} if self.epsilon is None else {}),
                                     **({} if private else public)}))

    # -- transform ---------------------------------------------------------------------------
    def transform(self, X):
        """Super-resolve low-resolution images ``X`` (shape ``low_res_shape_``, any skdp layout).

        Parameters
        ----------
        X : array-like of shape (n, c*h*w), (n, h, w) or (n, c, h, w)
            Low-resolution images of ``low_res_shape_``.

        Returns
        -------
        X_sr : ndarray of float32
            Images of ``image_shape_``, in the layout of ``X``.
        """
        check_is_fitted(self)
        X = self._validate_low_res(X)
        images, layout = as_images(X, self.low_res_shape_, "SRGANTransformer.transform")
        out = []
        with torch.no_grad():
            for i in range(0, len(images), TRANSFORM_CHUNK):
                chunk = torch.as_tensor(np.ascontiguousarray(images[i:i + TRANSFORM_CHUNK]), device=self.device)
                out.append(self.generator_(chunk).cpu().numpy())
        return restore_layout(np.concatenate(out), layout)

    def _validate_low_res(self, X):
        # Low-resolution input: n_features_in_ (of the high-resolution fit) does not apply.
        return check_array(X, dtype=np.float32, allow_nd=True, input_name="X")

    def torch_transform(self, x):
        """Super-resolve a tensor of low-resolution images (flat or ``(n, C, h, w)``); differentiable.

        Parameters
        ----------
        x : torch.Tensor of shape (n, c*h*w) or (n, c, h, w)
            Low-resolution images of ``low_res_shape_``.

        Returns
        -------
        x_sr : torch.Tensor
            Flat rows or ``(n, C, H, W)`` images of ``image_shape_``, as
            ``x`` was, on ``device``.
        """
        check_is_fitted(self)
        flat = x.dim() == 2
        images = x.reshape((-1,) + self.low_res_shape_) if flat else x
        out = self.generator_(images.to(self.device, torch.float32))
        return out.flatten(1) if flat else out

    def fit_transform(self, X, y=None):
        """Fit on high-resolution ``X`` and return the super-resolution of its own degraded copy.

        In a ``Pipeline`` over low-resolution data, freeze a fitted transformer
        (``sklearn.frozen.FrozenEstimator``) instead: its ``fit_transform`` is ``transform``.

        Parameters
        ----------
        X : array-like of shape (n, C*H*W), (n, H, W) or (n, C, H, W)
            High-resolution training images.
        y : None
            Ignored.

        Returns
        -------
        X_sr : ndarray of float32
            The super-resolution of ``X`` degraded by ``degradation``, in the
            layout of ``X``.
        """
        self.fit(X, y)
        images, layout = as_images(check_array(X, dtype=np.float32, allow_nd=True), self.image_shape_,
                                   "SRGANTransformer")
        low = resample(images, self.low_res_shape_[1:], self.degradation)
        return self.transform(restore_layout(low, layout))


@contextlib.contextmanager
def _silence(category):
    # Declared public data: DPNet's "no noise, not private" warning is the user's stated intent.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category)
        yield
