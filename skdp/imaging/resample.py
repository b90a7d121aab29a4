"""Image resampling in one home: exact area (box) filter and antialiased bicubic/bilinear, numpy and torch.

``Downsample``/``Upsample`` (``skdp.preprocessing``), ``SRGANTransformer`` (its low-resolution inputs) and
white-box attacks (``torch_transform``) all resample through these two functions.
"""
import numpy as np
import torch
import torch.nn.functional as F


def _area_matrix(n_in, n_out):
    """(n_out, n_in) weights: output pixel i averages input [i * r, (i + 1) * r), r = n_in / n_out,
    with fractional pixels at the edges weighted by their overlap (exact box filter)."""
    r = n_in / n_out
    edges = np.arange(n_out + 1) * r
    lo, hi = edges[:-1, None], edges[1:, None]
    left = np.arange(n_in)[None, :]
    overlap = np.clip(np.minimum(hi, left + 1) - np.maximum(lo, left), 0, None)
    return overlap / r


def resample_torch(t, size, method):
    """Resample a float tensor of images ``(n, C, H, W)`` to ``size``; differentiable.

    The torch form of :func:`resample`, for white-box attacks and networks
    that need gradients through the resampling. ``"area"`` is the exact box
    filter: each output pixel averages its footprint of ``H / h`` by
    ``W / w`` input pixels, fractional pixels at the edges weighted by their
    overlap. ``"bicubic"`` and ``"bilinear"`` are antialiased when shrinking.

    Parameters
    ----------
    t : torch.Tensor of shape (n, C, H, W)
        Float images, on any device.
    size : tuple (h, w)
        The output size.
    method : {"area", "bicubic", "bilinear"}
        The filter.

    Returns
    -------
    resampled : torch.Tensor of shape (n, C, h, w)
        Of the dtype and on the device of ``t``.

    See Also
    --------
    resample : The same on numpy arrays.
    skdp.preprocessing.Downsample : The transformer built on it.

    Examples
    --------
    >>> import torch
    >>> from skdp.imaging import resample_torch
    >>> resample_torch(torch.arange(16.0).reshape(1, 1, 4, 4), (2, 2), "area")
    tensor([[[[ 2.5000,  4.5000],
              [10.5000, 12.5000]]]])
    """
    if method == "area":
        Rh = torch.as_tensor(_area_matrix(t.shape[2], size[0]), dtype=t.dtype, device=t.device)
        Rw = torch.as_tensor(_area_matrix(t.shape[3], size[1]), dtype=t.dtype, device=t.device)
        return torch.einsum("hH,ncHW,wW->nchw", Rh, t, Rw)
    # Antialiasing matters when shrinking (bicubic without it aliases); it is a no-op when enlarging.
    return F.interpolate(t, size=tuple(size), mode=method, align_corners=False,
                         antialias=size[0] < t.shape[2] or size[1] < t.shape[3])


def resample(images, size, method):
    """Resample ``(n, C, H, W)`` float images to ``size = (h, w)`` by ``"area"``, ``"bicubic"`` or ``"bilinear"``.

    Computed by :func:`resample_torch` in float32 on the CPU. Sizes that do
    not divide are not cropped: with ``"area"`` every output pixel averages
    its exact fractional footprint.

    Parameters
    ----------
    images : array-like of shape (n, C, H, W)
        The images.
    size : tuple (h, w)
        The output size.
    method : {"area", "bicubic", "bilinear"}
        The filter.

    Returns
    -------
    resampled : ndarray of shape (n, C, h, w), float32
        The resampled images.

    See Also
    --------
    resample_torch : The same on tensors, differentiable.
    skdp.preprocessing.Downsample : The transformer built on it.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.imaging import resample
    >>> resample(np.ones((2, 1, 112, 92)), (14, 11), "area").shape
    (2, 1, 14, 11)
    """
    t = torch.as_tensor(np.ascontiguousarray(images), dtype=torch.float32)
    return resample_torch(t, size, method).numpy()
