"""Image quality: PSNR and SSIM (Wang et al. 2004: 11x11 Gaussian window, sigma 1.5, K1=0.01, K2=0.03)."""
import numpy as np
import torch
import torch.nn.functional as F

from .layout import as_images, normalize_image_shape


def psnr(reference, image, data_range=1.0, image_shape=None):
    """Mean over images of ``10 log10(data_range^2 / MSE)``."""
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
    """Per-image SSIM of two ``(n, C, H, W)`` tensors (float64), averaged over channels and pixels."""
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
    """Mean structural similarity of images (numpy, any skdp image layout)."""
    shape = None if image_shape is None else normalize_image_shape(image_shape, "ssim")
    ref, _ = as_images(reference, shape, "ssim", "reference")
    img, _ = as_images(image, shape, "ssim", "image")
    if ref.shape != img.shape:
        raise ValueError(f"ssim: reference images {ref.shape[1:]} and images {img.shape[1:]} differ in shape.")
    t = torch.as_tensor
    return float(ssim_per_image(t(ref, dtype=torch.float64), t(img, dtype=torch.float64), data_range).mean())
