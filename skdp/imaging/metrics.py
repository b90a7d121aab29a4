"""Image quality: PSNR and SSIM (Wang et al. 2004: 11x11 Gaussian window, sigma 1.5, K1=0.01, K2=0.03)."""
import numpy as np
import torch
import torch.nn.functional as F

from .layout import as_images, normalize_image_shape


def psnr(reference, image, data_range=1.0, image_shape=None):
    """Compute the peak signal-to-noise ratio, in decibels, averaged over images.

    For each image, ``10 log10(data_range**2 / MSE)`` with MSE the mean
    squared difference from its reference over all channels and pixels
    (floored at 1e-12, so identical images give 120 dB rather than ``inf``);
    the result is the mean over images. Higher is closer.

    Parameters
    ----------
    reference : array-like of shape (n, C*H*W), (n, H, W) or (n, C, H, W)
        The true images.
    image : array-like of the same shape as ``reference``
        The images to compare with them (e.g. reconstructions).
    data_range : float, default=1.0
        The range of pixel values (1 for images in [0, 1], 255 for uint8).
    image_shape : tuple (H, W) or (C, H, W) or None, default=None
        Needed for flat rows.

    Returns
    -------
    psnr : float
        The mean PSNR in dB.

    See Also
    --------
    ssim : Structural similarity, which follows perceived quality more closely.
    skdp.attacks.score_reconstructions : PSNR and SSIM of model-inversion reconstructions.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.superres import psnr
    >>> reference = np.random.default_rng(0).random((2, 16, 16))
    >>> round(psnr(reference, reference + 0.1), 6)
    20.0
    """
    shape = None if image_shape is None else normalize_image_shape(image_shape, "psnr")
    ref, _ = as_images(reference, shape, "psnr", "reference")
    img, _ = as_images(image, shape, "psnr", "image")
    mse = ((ref.astype(np.float64) - img) ** 2).reshape(len(ref), -1).mean(1)
    return float(np.mean(10 * np.log10(data_range ** 2 / np.maximum(mse, 1e-12))))


def _gaussian_window(size=11, sigma=1.5):
    x = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-x ** 2 / (2 * sigma ** 2))
    g = g / g.sum()
    return (g[:, None] * g[None, :])[None, None]


def ssim_per_image(reference, image, data_range=1.0):
    """Compute the SSIM of each image of two ``(n, C, H, W)`` tensors, averaged over channels and pixels.

    The structural similarity of Wang et al. (2004): local means, variances
    and covariance under an 11x11 Gaussian window (sigma 1.5), with
    ``C1 = (0.01 data_range)**2`` and ``C2 = (0.03 data_range)**2``, computed
    over the valid positions of the window. Images smaller than 11 pixels
    use a uniform window as large as the image. Differentiable.

    Parameters
    ----------
    reference : torch.Tensor of shape (n, C, H, W)
        The true images, float (float64 for the metric as reported).
    image : torch.Tensor of shape (n, C, H, W)
        The images to compare with them, of the same dtype.
    data_range : float, default=1.0
        The range of pixel values.

    Returns
    -------
    ssim : torch.Tensor of shape (n,)
        The SSIM of each image, 1 for identical images.

    See Also
    --------
    ssim : The mean over images, for numpy arrays in any skdp layout.

    Examples
    --------
    >>> import numpy as np
    >>> import torch
    >>> from skdp.imaging import ssim_per_image
    >>> reference = torch.from_numpy(np.random.default_rng(0).random((2, 1, 16, 16)))
    >>> ssim_per_image(reference, reference)
    tensor([1., 1.], dtype=torch.float64)
    """
    C1, C2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    n, c = reference.shape[:2]
    win = _gaussian_window().to(reference).repeat(c, 1, 1, 1)
    size = min(11, reference.shape[2], reference.shape[3])
    if size < 11:  # tiny images: a uniform window over what there is
        win = torch.full((c, 1, size, size), 1.0 / size ** 2, dtype=reference.dtype)

    def blur(t):
        return F.conv2d(t, win, groups=c)

    mu_x, mu_y = blur(reference), blur(image)
    sxx = blur(reference * reference) - mu_x ** 2
    syy = blur(image * image) - mu_y ** 2
    sxy = blur(reference * image) - mu_x * mu_y
    s = ((2 * mu_x * mu_y + C1) * (2 * sxy + C2)) / ((mu_x ** 2 + mu_y ** 2 + C1) * (sxx + syy + C2))
    return s.reshape(n, -1).mean(1)


def ssim(reference, image, data_range=1.0, image_shape=None):
    """Compute the mean structural similarity (SSIM) of images, in any skdp image layout.

    The SSIM of Wang et al. (2004), computed by :func:`ssim_per_image` in
    float64 and averaged over images. It compares local means, contrasts and
    correlations rather than single pixels; 1 means identical images.

    Parameters
    ----------
    reference : array-like of shape (n, C*H*W), (n, H, W) or (n, C, H, W)
        The true images.
    image : array-like of the same shape as ``reference``
        The images to compare with them.
    data_range : float, default=1.0
        The range of pixel values (1 for images in [0, 1], 255 for uint8).
    image_shape : tuple (H, W) or (C, H, W) or None, default=None
        Needed for flat rows.

    Returns
    -------
    ssim : float
        The mean SSIM, at most 1.

    See Also
    --------
    psnr : Peak signal-to-noise ratio, a pixel-wise measure.
    skdp.imaging.ssim_per_image : The SSIM of each image, on tensors.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.superres import ssim
    >>> reference = np.random.default_rng(0).random((2, 16, 16))
    >>> ssim(reference, reference)
    1.0
    >>> ssim(reference, np.zeros_like(reference)) < 0.1
    True
    """
    shape = None if image_shape is None else normalize_image_shape(image_shape, "ssim")
    ref, _ = as_images(reference, shape, "ssim", "reference")
    img, _ = as_images(image, shape, "ssim", "image")
    if ref.shape != img.shape:
        raise ValueError(f"ssim: reference images {ref.shape[1:]} and images {img.shape[1:]} differ in shape.")
    t = torch.as_tensor
    return float(ssim_per_image(t(ref, dtype=torch.float64), t(img, dtype=torch.float64), data_range).mean())
