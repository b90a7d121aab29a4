"""Super-resolution: SRGAN as a transformer, its networks, and image-quality metrics."""
from ..imaging.metrics import psnr, ssim
from .networks import SRGAN, Discriminator, SRResNet
from .srgan import SRGANTransformer

__all__ = ["SRGANTransformer", "SRGAN", "SRResNet", "Discriminator", "psnr", "ssim"]
