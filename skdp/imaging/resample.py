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
    """``resample`` on a float tensor ``(n, C, H, W)``; differentiable."""
    if method == "area":
        Rh = torch.as_tensor(_area_matrix(t.shape[2], size[0]), dtype=t.dtype, device=t.device)
        Rw = torch.as_tensor(_area_matrix(t.shape[3], size[1]), dtype=t.dtype, device=t.device)
        return torch.einsum("hH,ncHW,wW->nchw", Rh, t, Rw)
    # Antialiasing matters when shrinking (bicubic without it aliases); it is a no-op when enlarging.
    return F.interpolate(t, size=tuple(size), mode=method, align_corners=False,
                         antialias=size[0] < t.shape[2] or size[1] < t.shape[3])


def resample(images, size, method):
    """Resample ``(n, C, H, W)`` float images to ``size = (h, w)`` by ``"area"``, ``"bicubic"`` or ``"bilinear"``."""
    t = torch.as_tensor(np.ascontiguousarray(images), dtype=torch.float32)
    return resample_torch(t, size, method).numpy()
