"""Images in one home: layouts (flat, (n, H, W), (n, C, H, W)), resampling, quality metrics."""
from .layout import as_images, normalize_image_shape, restore_layout
from .metrics import psnr, ssim, ssim_per_image
from .resample import resample, resample_torch

__all__ = ["as_images", "normalize_image_shape", "restore_layout", "psnr", "ssim", "ssim_per_image",
           "resample", "resample_torch"]
