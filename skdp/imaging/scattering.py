"""Wavelet scattering features: data-independent image features for DP learning.

Tramer & Boneh (ICLR 2021, "Differentially private learning needs better
features (or much more data)") show that a linear model on ScatterNet
features beats end-to-end CNNs under DP on MNIST, Fashion-MNIST and
CIFAR-10: the features are fixed (Morlet wavelets, nothing learnt), so all of
the privacy budget goes to a small model that converges in few steps.

The transform is kymatio's (Andreux et al., JMLR 2020), the reference
implementation that paper used. We depend on it rather than keep our own:
it is small, pure Python on torch, and its filters are the ones the published
numbers were measured with. Its top-level ``kymatio.torch`` import fails on
current scipy (``scipy.special.sph_harm`` was removed, for its 3-D
transform), so the 2-D frontend is imported from its own module, which does
not touch that code; ``tests/test_scattering.py`` pins that this works.

Defaults (``J="auto"``, ``n_groups="auto"``), chosen on development data
(``benchmarks/dev_recipe.py --group scattering``, ``benchmarks/results/dev_recipe.md``) with the linear
``DPMomentumClassifier`` behind the transform: ``J=2`` for images of at least 16 x 16 (Tramer & Boneh's
setting; on 28 x 28 mnist-dev J=2 beat J=1) and ``J=1`` below (on 8 x 8 digits-dev J=2 leaves 2 x 2
positions and lost to J=1); groups of three channels for J >= 2 (Tramer & Boneh: 81 channels in 27
groups) and one channel a group for J = 1 (on digits-dev one group of all 9 channels lost clearly to 3 or 9).

Normalisation: the coefficients' scales differ by orders of magnitude
between orders and scales, and a DP-SGD model trains badly on them raw.
Tramer & Boneh either spend budget on DP per-channel means and variances or
put a GroupNorm (per example) in the model. We do the second, as a
transformer: each row is standardised over groups of its own channels, with
no learnt or data-derived statistic, so the transform is a fixed function
of each row and costs no privacy.
"""
import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .layout import as_images, normalize_image_shape


def _scattering_class():
    try:
        from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "ScatteringTransform needs kymatio: pip install 'skdp[images]' (or pip install kymatio)."
        ) from exc
    return ScatteringTorch2D


#: The smallest image side for which J="auto" takes two scales (else one).
AUTO_J2_MIN_SIDE = 16


def auto_scales(height, width):
    """The scales of ``J="auto"``: 2 for images of at least 16 x 16, else 1 (a fixed rule of the shape)."""
    return 2 if min(height, width) >= AUTO_J2_MIN_SIDE else 1


def auto_groups(channels, J):
    """The channel groups of ``n_groups="auto"``: groups of three channels for ``J >= 2`` where three
    divide ``channels`` (Tramer & Boneh's 27 of 81), else one channel a group."""
    return channels // 3 if J >= 2 and channels % 3 == 0 else channels


class ScatteringTransform(TransformerMixin, BaseEstimator):
    """2-D wavelet scattering transform (ScatterNet features), normalised per example.

    A fixed, data-independent feature map: ``fit`` learns only the image
    shape, so putting it before a DP estimator in a ``Pipeline`` costs no
    privacy. With ``J=2`` and ``L=8`` a 28x28 image gives 81 channels of
    7x7 (3,969 features), the features of Tramer & Boneh (2021); an 8x8
    image takes ``J=1``: 9 channels of 4x4 (144 features).

    Parameters
    ----------
    J : int or "auto", default="auto"
        Number of scales: the output is subsampled by ``2**J``. "auto": 2
        for images of at least 16 x 16, else 1 (chosen on development data,
        see the module's docstring). Read from the image shape only.
    L : int, default=8
        Number of wavelet orientations.
    normalize : {"group", "none"}, default="group"
        "group": each row is standardised (zero mean, unit variance) within
        each of ``n_groups`` groups of its channels, as a GroupNorm without
        learnt parameters; nothing is computed across rows. "none": raw
        coefficients.
    n_groups : int or "auto", default="auto"
        Channel groups of ``normalize="group"`` (must divide the number of
        channels, ``C * n_channels_``: 81 for ``J=2, L=8`` on grey images).
        "auto": groups of three channels for ``J >= 2`` (27 for ``J=2,
        L=8``, Tramer & Boneh's) and one channel a group for ``J=1``; one
        channel a group also where three do not divide the count.
    image_shape : tuple (H, W) or None, default=None
        Shape of flat input rows; None takes square images.
    batch_size : int, default=512
        Images transformed at once (memory only; the output does not depend on it).
    device : str, default="cpu"
        Where the transform runs.

    Attributes
    ----------
    image_shape_ : tuple (C, H, W)
        Shape of one input image.
    J_ : int
        The number of scales used (``J``, or the "auto" rule's choice).
    L_ : int
        The number of orientations used (``L`` at fit).
    n_groups_ : int
        The channel groups used by ``normalize="group"`` (``n_groups``, or
        the "auto" rule's choice).
    n_channels_ : int
        Scattering channels per input channel, ``1 + J*L + L**2 * J*(J-1)/2``.
    output_shape_ : tuple
        Shape of one output row before flattening, ``(C * n_channels_, H // 2**J, W // 2**J)``.
    n_features_in_ : int
        Features (pixels) per input row.

    See Also
    --------
    skdp.DPMomentumClassifier : A linear model on these features is the paper's recipe.
    CenterNormalize : Another fixed per-row map that costs no privacy.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.preprocessing import ScatteringTransform
    >>> X = np.random.default_rng(0).random((4, 28 * 28))
    >>> ScatteringTransform().fit_transform(X).shape
    (4, 3969)
    """

    _parameter_constraints = {
        "J": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "L": [Interval(numbers.Integral, 1, None, closed="left")],
        "normalize": [StrOptions({"group", "none"})],
        "n_groups": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "image_shape": [None, tuple, list],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "device": [str, torch.device],
    }

    def __init__(self, J="auto", L=8, *, normalize="group", n_groups="auto", image_shape=None, batch_size=512,
                 device="cpu"):
        self.J = J
        self.L = L
        self.normalize = normalize
        self.n_groups = n_groups
        self.image_shape = image_shape
        self.batch_size = batch_size
        self.device = device

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        tags.input_tags.two_d_array = True
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the image shape (nothing is learnt from the pixels).

        Parameters
        ----------
        X : array-like of shape (n, H*W), (n, H, W) or (n, C, H, W)
            Images; flat rows need ``image_shape`` unless square.
        y : None
            Ignored.

        Returns
        -------
        self : object
            Fitted transformer.
        """
        X = validate_data(self, X, dtype=np.float32, allow_nd=True)
        shape = None if self.image_shape is None else normalize_image_shape(self.image_shape, type(self).__name__)
        if shape is None and X.ndim == 2:  # flat rows: square grey images
            side = int(np.sqrt(X.shape[1]))
            if side * side != X.shape[1]:
                raise ValueError(f"ScatteringTransform: flat rows of {X.shape[1]} features are not square "
                                 "images; pass image_shape=(H, W).")
            shape = (1, side, side)
        self.image_shape_ = as_images(X, shape, type(self).__name__)[0].shape[1:]
        C, H, W = self.image_shape_
        J, L = auto_scales(H, W) if self.J == "auto" else self.J, self.L
        if min(H, W) < 2 ** J:
            raise ValueError(f"J={J} needs images of at least {2 ** J}x{2 ** J}; "
                             f"got {H}x{W}. Use a smaller J.")
        self.J_, self.L_ = J, L  # what transform uses, whatever set_params changes later (review_s37 k08)
        self.n_channels_ = 1 + J * L + L * L * J * (J - 1) // 2
        channels = C * self.n_channels_
        self.n_groups_ = auto_groups(channels, J) if self.n_groups == "auto" else self.n_groups
        if self.normalize == "group" and channels % self.n_groups_:
            raise ValueError(f"n_groups={self.n_groups} does not divide the {channels} scattering "
                             f"channels of J={J}, L={L}; pick a divisor (e.g. {auto_groups(channels, J)}) "
                             'or n_groups="auto".')
        self.output_shape_ = (channels, H // 2 ** J, W // 2 ** J)
        self._scattering = None
        return self

    def _operator(self):
        if getattr(self, "_scattering", None) is None:
            self._scattering = _scattering_class()(J=self.J_, shape=tuple(self.image_shape_[1:]), L=self.L_)
            self._scattering.to(self.device)
        return self._scattering

    def torch_transform(self, x):
        """Transform a float tensor of images ``(n, C, H, W)`` or flat rows; differentiable.

        Parameters
        ----------
        x : torch.Tensor of shape (n, C*H*W) or (n, C, H, W) (or (n, H, W) for grey images)
            Float32 images of ``image_shape_``, on ``device``; rows of another
            shape raise ``ValueError``.

        Returns
        -------
        features : torch.Tensor of shape (n, ``prod(output_shape_)``)
            The (normalised) scattering coefficients, one flat row per image.
        """
        check_is_fitted(self)
        shape = tuple(self.image_shape_)
        accepted = (shape, (int(np.prod(shape)),)) + ((shape[1:],) if shape[0] == 1 else ())
        if tuple(x.shape[1:]) not in accepted:  # never merge rows into images (review_s37 k09)
            raise ValueError(f"ScatteringTransform: rows of shape {tuple(x.shape[1:])}, but the fitted images are "
                             f"{shape} (or flat rows of {int(np.prod(shape))}).")
        images = x.reshape((-1,) + shape)
        out = self._operator()(images).reshape(len(images), *self.output_shape_)
        if self.normalize == "group":
            # GroupNorm without affine parameters: statistics of each row's own channel groups.
            out = torch.nn.functional.group_norm(out, self.n_groups_, eps=1e-5)
        return out.flatten(1)

    def transform(self, X):
        """Scattering features of ``X``, one flat row per image.

        Parameters
        ----------
        X : array-like, the layout and image shape seen in ``fit``
            The images; any numeric dtype (computed in float32).

        Returns
        -------
        features : ndarray of shape (n_samples, ``prod(output_shape_)``), float32
            The (normalised) scattering coefficients, one flat row per image.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float32, allow_nd=True, reset=False)
        images = torch.from_numpy(np.ascontiguousarray(as_images(X, self.image_shape_, type(self).__name__)[0]))
        out = []
        with torch.no_grad():
            for start in range(0, len(images), self.batch_size):
                batch = images[start:start + self.batch_size].to(self.device)
                out.append(self.torch_transform(batch).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, int(np.prod(self.output_shape_))), np.float32)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_scattering"] = None  # rebuilt on demand: the filters are a fixed function of (J, L, shape)
        return state
