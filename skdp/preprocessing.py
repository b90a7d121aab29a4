"""Image resampling transformers: make low-resolution data inside a ``Pipeline``.

Sizes that do not divide by the factor are not cropped: the output is
``floor(H / factor) x floor(W / factor)`` and every output pixel covers the
matching fraction of the input (92 px / 8 -> 11 px of 8.36 input px each).
"""
import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .imaging.layout import as_images, normalize_image_shape, restore_layout
from .imaging.resample import resample, resample_torch

__all__ = ["Downsample", "Upsample", "CenterNormalize", "ScatteringTransform", "RowFunctionTransformer",
           "DPQuantileScaler", "DPMedianImputer"]


class _Resampler(TransformerMixin, BaseEstimator):
    _parameter_constraints = {
        "factor": [Interval(numbers.Integral, 1, None, closed="left")],
        "image_shape": [None, tuple, list],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the input's image shape (nothing is learnt from the pixels).

        Parameters
        ----------
        X : array-like of shape (n, C*H*W), (n, H, W) or (n, C, H, W)
            Any numeric dtype (computed in float32); flat rows need ``image_shape``.
        y : None
            Ignored.

        Returns
        -------
        self : object
            Fitted transformer.
        """
        X = validate_data(self, X, dtype=np.float32, allow_nd=True)
        shape = None if self.image_shape is None else normalize_image_shape(self.image_shape, type(self).__name__)
        self.image_shape_ = as_images(X, shape, type(self).__name__)[0].shape[1:]
        self.output_shape_ = (self.image_shape_[0],) + self._output_size(self.image_shape_[1:])
        return self

    def transform(self, X):
        """Resample ``X`` to ``output_shape_``, in the layout it came in.

        Parameters
        ----------
        X : array-like, the layout and image shape seen in ``fit``
            Any numeric dtype; it is converted to float32 (``uint8`` pixels
            are not wrapped, ``float16`` is widened).

        Returns
        -------
        X_resampled : ndarray of float32
            The images of shape ``output_shape_``, flat, ``(n, H, W)`` or
            ``(n, C, H, W)`` as ``X`` was.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float32, allow_nd=True, reset=False)
        images, layout = as_images(X, self.image_shape_, type(self).__name__)
        return restore_layout(resample(images, self.output_shape_[1:], self.method), layout)

    def torch_transform(self, x):
        """Resample a tensor of flat rows or ``(n, C, H, W)`` images; differentiable.

        Parameters
        ----------
        x : torch.Tensor of shape (n, C*H*W) or (n, C, H, W)
            Float images of ``image_shape_``, on any device.

        Returns
        -------
        x_resampled : torch.Tensor
            Flat rows or ``(n, C, H, W)`` images of ``output_shape_``, as ``x`` was.
        """
        check_is_fitted(self)
        flat = x.dim() == 2
        images = x.reshape((-1,) + tuple(self.image_shape_)) if flat else x
        out = resample_torch(images, self.output_shape_[1:], self.method)
        return out.flatten(1) if flat else out


class Downsample(_Resampler):
    """Shrink images by an integer ``factor`` (``(H, W) -> (H // factor, W // factor)``).

    A fixed map of each image: ``fit`` learns only the image shape, so the
    transformer costs no privacy wherever it sits in a ``Pipeline``. With
    ``factor=8`` it makes 112x92 faces 14x11. ``torch_transform`` is the same
    map on tensors, differentiable, for white-box attacks through a ``Pipeline``.

    Parameters
    ----------
    factor : int, default=8
        Shrink factor of both height and width (sizes that do not divide are
        not cropped; see the module docstring).
    method : {"area", "bicubic", "bilinear"}, default="area"
        "area" averages each output pixel's exact footprint (what a camera of
        lower resolution records); "bicubic" is antialiased bicubic (the
        degradation Ledig et al. train SRGAN on).
    image_shape : (H, W) or (C, H, W) or None, default=None
        Needed for flat input ``(n, C*H*W)``.

    Attributes
    ----------
    image_shape_, output_shape_ : tuple (C, H, W)
        Shape of one input image and of one output image.
    n_features_in_ : int
        Features per input row (``C*H*W`` for flat input).

    See Also
    --------
    Upsample : Enlarges images, the bicubic baseline of super-resolution.
    skdp.superres.SRGANTransformer : Learnt upsampling of downsampled faces.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.preprocessing import Downsample
    >>> faces = np.random.default_rng(0).random((2, 112, 92))
    >>> Downsample(8).fit_transform(faces).shape
    (2, 14, 11)
    """

    _parameter_constraints = {**_Resampler._parameter_constraints,
                              "method": [StrOptions({"area", "bicubic", "bilinear"})]}

    def __init__(self, factor=8, *, method="area", image_shape=None):
        self.factor = factor
        self.method = method
        self.image_shape = image_shape

    def _output_size(self, size):
        h, w = size[0] // self.factor, size[1] // self.factor
        if h == 0 or w == 0:
            raise ValueError(f"Downsample: images of {size[0]}x{size[1]} are smaller than factor={self.factor}.")
        return h, w


class Upsample(_Resampler):
    """Enlarge images by ``factor``, or to ``output_size``: the bicubic baseline of super-resolution.

    A fixed map of each image: ``fit`` learns only the image shape, so it
    costs no privacy. Interpolation adds no detail: it is the baseline that a
    learnt super-resolution (``SRGANTransformer``) must beat in PSNR and SSIM.

    Parameters
    ----------
    factor : int, default=8
        Enlargement factor of both height and width.
    method : {"bicubic", "bilinear", "area"}, default="bicubic"
        "area" is nearest-neighbour replication here.
    output_size : (H, W), (C, H, W) or None, default=None
        Exact output size (e.g. back to 112x92 from 14x11); overrides ``factor``.
        Resampling keeps the channels: a ``C`` other than the input's is refused.
    image_shape : (H, W) or (C, H, W) or None, default=None
        Needed for flat input ``(n, C*H*W)``.

    Attributes
    ----------
    image_shape_, output_shape_ : tuple (C, H, W)
        Shape of one input image and of one output image.
    n_features_in_ : int
        Features per input row.

    See Also
    --------
    Downsample : Shrinks images; ``Upsample(output_size=...)`` undoes its size.
    skdp.superres.SRGANTransformer : Learnt super-resolution.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.preprocessing import Upsample
    >>> Upsample(output_size=(112, 92)).fit_transform(np.zeros((3, 14, 11))).shape
    (3, 112, 92)
    """

    _parameter_constraints = {**_Resampler._parameter_constraints,
                              "method": [StrOptions({"area", "bicubic", "bilinear"})],
                              "output_size": [None, tuple, list]}

    def __init__(self, factor=8, *, method="bicubic", output_size=None, image_shape=None):
        self.factor = factor
        self.method = method
        self.output_size = output_size
        self.image_shape = image_shape

    def _output_size(self, size):
        if self.output_size is not None:
            channels, *hw = normalize_image_shape(self.output_size, "Upsample", "output_size")
            if len(self.output_size) == 3 and channels != self.image_shape_[0]:
                raise ValueError(
                    f"Upsample: output_size={tuple(self.output_size)} asks for {channels} channel(s), but the "
                    f"images have {self.image_shape_[0]}; resampling changes only height and width. Pass "
                    f"output_size=({hw[0]}, {hw[1]}).")
            return tuple(hw)
        return size[0] * self.factor, size[1] * self.factor


class CenterNormalize(TransformerMixin, BaseEstimator):
    """Subtract a public ``center`` (e.g. the mean of public images) and scale each row to unit L2 norm.

    Row-wise and fitted on nothing private: it costs no privacy budget. It is
    what makes a linear DP model on images work: DP-SGD clips each example's
    gradient, whose norm grows with the norm of the input.

    The arithmetic and the output are float64 whatever the input dtype: a
    ``uint8`` pixel minus a centre of 100 would wrap around in ``uint8``, and
    the squared norm of ``float16`` rows overflows above about 256 per pixel.

    Parameters
    ----------
    center : array-like of shape (n_features,) or None, default=None
        Public centre subtracted from every row (e.g. the mean of public
        images). None: no centring (rows are only normalised).

    Attributes
    ----------
    n_features_in_ : int
        Set by ``fit``; ``transform`` also works unfitted (nothing is learnt).

    See Also
    --------
    skdp.DPMomentumClassifier : Its gradients are clipped, which unit-norm rows suit.
    ScatteringTransform : Another fixed feature map that costs no privacy.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.preprocessing import CenterNormalize
    >>> CenterNormalize(center=[1.0, 1.0]).fit_transform(np.array([[4.0, 5.0]]))
    array([[0.6, 0.8]])
    """

    _parameter_constraints = {"center": [None, "array-like"]}

    def __init__(self, center=None):
        self.center = center

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Check ``X`` and ``center`` against each other; nothing is learnt from the data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows of the length of ``center``; only the shape is read.
        y : None
            Ignored.

        Returns
        -------
        self : object
            Fitted transformer.
        """
        X = validate_data(self, X, dtype=np.float64)
        self._center(X.shape[1])
        return self

    def transform(self, X):
        """Centre each row on ``center`` and scale it to unit L2 norm.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Any numeric dtype; it is not modified.

        Returns
        -------
        ndarray of float64, shape (n_samples, n_features)
            Rows of norm 1 (an all-zero centred row stays zero).
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)  # a float64 copy for narrow dtypes
        center = self._center(X.shape[1])
        Z = X if center is None else X - center
        # ||z|| = s * ||z / s|| with s = max|z|: no overflow of the squares even near float64's max.
        scale = np.max(np.abs(Z), axis=1, keepdims=True)
        safe = np.where(scale > 0, scale, 1.0)
        norms = scale * np.linalg.norm(Z / safe, axis=1, keepdims=True)
        return Z / np.maximum(norms, 1e-12)

    def _center(self, n_features):
        """``center`` as float64 of length ``n_features`` (None stays None), or a clear error."""
        if self.center is None:
            return None
        center = np.asarray(self.center, dtype=np.float64).ravel()
        if center.shape[0] != n_features:
            raise ValueError(
                f"CenterNormalize: center has {center.shape[0]} values but X has {n_features} features; "
                f"pass a center of length {n_features}.")
        if not np.all(np.isfinite(center)):
            raise ValueError("CenterNormalize: center must be finite (it holds NaN or inf).")
        return center

    def torch_transform(self, x):
        """Centre and normalise a tensor of rows; differentiable.

        Parameters
        ----------
        x : torch.Tensor of shape (n_samples, n_features)
            Float rows, on any device.

        Returns
        -------
        z : torch.Tensor of shape (n_samples, n_features)
            Rows of norm 1, of the dtype and on the device of ``x``.
        """
        z = x if self.center is None else x - torch.as_tensor(np.ravel(self.center), dtype=x.dtype, device=x.device)
        return z / z.norm(dim=1, keepdim=True).clamp_min(1e-12)
class RowFunctionTransformer(FunctionTransformer):
    """A ``FunctionTransformer`` that applies ``func`` to each row alone: row-wise by construction.

    scikit-learn's ``FunctionTransformer`` hands ``func`` the whole array, so
    ``func`` may use the other rows (``sklearn.preprocessing.scale``
    standardises each call's columns by their own mean): before a DP estimator
    that is a release of the private data without noise, and a Pipeline holding
    one is not certified. This transformer calls ``func`` on one row at a time
    (``X[i:i + 1]``) and stacks the results, so whatever ``func`` does, a row's
    output depends on that row and the public parameters alone: it costs no
    privacy and a certified Pipeline may hold it. Slower than the vectorised
    call (one Python call per row); use it for cheap maps.

    ``func`` must keep no state: a callable that learns as it goes (a
    streaming standardiser's running mean) would carry earlier rows into later
    ones and be released with the model. ``func`` and ``kw_args`` are
    fingerprinted by value (cloudpickle: attributes, closures and containers)
    before and after each call of ``transform``, and a change is refused with
    ``ValueError``. The limit: state kept outside them (a module's global, a
    file, a database) is not seen; such a function is not row-wise and must
    not be used here.

    Parameters
    ----------
    func : callable or None, default=None
        Applied to each row, as a 2-D array (or DataFrame) of one row; it must
        return one row. None: the identity.
    inverse_func : callable or None, default=None
        Applied to each row by ``inverse_transform``.
    validate : bool, default=False
        Check ``X`` (numeric, 2-D) before ``func``, as ``FunctionTransformer`` does.
    accept_sparse : bool, default=False
        Let ``validate`` accept sparse input.
    check_inverse : bool, default=True
        Check in ``fit`` that ``inverse_func`` undoes ``func`` on a few rows.
    feature_names_out : callable, "one-to-one" or None, default=None
        As for ``FunctionTransformer``.
    kw_args : dict or None, default=None
        Keyword arguments of ``func``.
    inv_kw_args : dict or None, default=None
        Keyword arguments of ``inverse_func``.

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen in ``fit`` (only the shape is read).
    feature_names_in_ : ndarray of str
        Names of the features seen in ``fit``, when ``X`` has string column names.

    See Also
    --------
    sklearn.preprocessing.FunctionTransformer : The vectorised transformer it restricts.
    skdp.privacy.non_private_steps : Which steps keep a Pipeline from being certified.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.preprocessing import scale
    >>> from skdp.preprocessing import RowFunctionTransformer
    >>> X = np.array([[1.0, 3.0], [5.0, 7.0]])
    >>> RowFunctionTransformer(np.log1p).fit_transform(X).round(3)
    array([[0.693, 1.386],
           [1.792, 2.079]])
    >>> RowFunctionTransformer(scale).fit_transform(X)  # each row alone: scale() sees one row
    array([[0., 0.],
           [0., 0.]])
    """

    def _transform(self, X, func=None, kw_args=None):
        if func is None:
            return X
        before = _fingerprint(func, kw_args)
        n = X.shape[0]
        rows = [func(X.iloc[i:i + 1] if hasattr(X, "iloc") else X[i:i + 1], **(kw_args or {})) for i in range(n)]
        if n == 0:
            rows = func(X, **(kw_args or {}))
        for name, value, was in (("func", func, before[0]), ("kw_args", kw_args, before[1])):
            if _fingerprint(value)[0] != was:
                raise ValueError(
                    f"RowFunctionTransformer: {name} changed while transforming the rows ({type(value).__name__} "
                    "keeps state: a running mean, a cache, a list it appends to): each row's output would depend "
                    "on the rows before it, and the state would be released with the model. Use a function "
                    "without state (public constants only), or a DP step for statistics of the data.")
        if n == 0:
            return rows
        if hasattr(rows[0], "iloc"):
            import pandas as pd

            return pd.concat(rows)
        if hasattr(rows[0], "tocsr"):
            import scipy.sparse as sp

            return sp.vstack(rows).tocsr()
        return np.concatenate([np.asarray(r).reshape(1, -1) if np.ndim(r) < 2 else np.asarray(r) for r in rows])


def _fingerprint(*values):
    """A digest of each of ``values``, deep (by value: closures, attributes and containers included)."""
    import hashlib

    try:
        import cloudpickle  # a dependency of joblib >= 1.5; vendored by older versions
    except ImportError:  # pragma: no cover
        from joblib.externals import cloudpickle

    digests = []
    for value in values:
        try:
            digests.append(hashlib.sha256(cloudpickle.dumps(value)).hexdigest())
        except Exception as exc:  # noqa: BLE001 (anything pickling raises)
            raise TypeError(f"RowFunctionTransformer cannot check that {type(value).__name__} keeps no state: it "
                            f"cannot be pickled ({exc}). Use a picklable function.") from exc
    return digests


from .imaging.scattering import ScatteringTransform  # noqa: E402,F401  (re-exported: the transformers' home)
from ._tabular_preprocessing import DPMedianImputer, DPQuantileScaler  # noqa: E402,F401  (tabular steps that spend)


def _register_public_steps():
    # Row-wise by construction and fitted on nothing private: a certified Pipeline may hold them
    # (skdp.privacy.public_steps; exact classes only).
    from .privacy.public_steps import register_public_step

    for cls in (Downsample, Upsample, CenterNormalize, ScatteringTransform, RowFunctionTransformer):
        register_public_step(cls)


_register_public_steps()
