"""SRGAN's generator (SRResNet) and discriminator (Ledig et al. 2017), for grey or colour images.

The thesis's variant: ``n_residual_blocks=5`` (Ledig uses 16) and scale 8
(three x2 sub-pixel stages). ``norm="group"`` replaces batch normalisation,
which mixes the examples of a lot and so has no per-example gradient: it is
what DP-SGD training uses.
"""
import math

import torch.nn.functional as F
from torch import nn

SCALES = (2, 4, 8)


def _norm(kind, channels):
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(32, channels // 2) or 1, channels)
    return nn.Identity()


class ResidualBlock(nn.Module):
    """conv3-norm-PReLU-conv3-norm plus the identity."""

    def __init__(self, channels, norm="batch"):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1), _norm(norm, channels), nn.PReLU(channels),
            nn.Conv2d(channels, channels, 3, padding=1), _norm(norm, channels))

    def forward(self, x):
        return x + self.body(x)


class SRResNet(nn.Module):
    """Generator: 9x9 conv + PReLU, residual blocks, 3x3 conv + norm with the long skip,
    log2(scale) sub-pixel x2 stages (conv to 4x channels, PixelShuffle, PReLU), 9x9 output conv.

    ``output_size``: when the high-resolution size is not ``scale`` times the
    input's (92 px is not 8 x 11), the ``scale``-times output is resized to it
    bicubically, inside the network, so that training and ``transform`` agree.
    """

    def __init__(self, in_channels=1, scale=8, n_residual_blocks=5, n_filters=64, norm="batch",
                 output_size=None):
        super().__init__()
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {scale!r}.")
        self.output_size = None if output_size is None else tuple(output_size)
        f = n_filters
        self.head = nn.Sequential(nn.Conv2d(in_channels, f, 9, padding=4), nn.PReLU(f))
        self.blocks = nn.Sequential(*[ResidualBlock(f, norm) for _ in range(n_residual_blocks)])
        self.trunk_out = nn.Sequential(nn.Conv2d(f, f, 3, padding=1), _norm(norm, f))
        up = []
        for _ in range(int(math.log2(scale))):
            up += [nn.Conv2d(f, 4 * f, 3, padding=1), nn.PixelShuffle(2), nn.PReLU(f)]
        self.upsample = nn.Sequential(*up)
        self.tail = nn.Conv2d(f, in_channels, 9, padding=4)

    def forward(self, x):
        h = self.head(x)
        out = self.tail(self.upsample(h + self.trunk_out(self.blocks(h))))
        if self.output_size is not None and out.shape[-2:] != self.output_size:
            out = F.interpolate(out, size=self.output_size, mode="bicubic", align_corners=False)
        return out


class Discriminator(nn.Module):
    """Ledig's discriminator: conv3 + LeakyReLU, then 7 conv-norm-LeakyReLU blocks with
    (width, stride) = (f, 2), (2f, 1), (2f, 2), (4f, 1), (4f, 2), (8f, 1), (8f, 2), then
    Dense(1024) - LeakyReLU - Dense(1). Returns logits.

    Global average pooling precedes the dense layers so that any image size works
    (Ledig's dense layer sits on the 6x6 maps of 96x96 crops).
    """

    def __init__(self, in_channels=1, n_filters=64, norm="batch"):
        super().__init__()
        f = n_filters
        layers = [nn.Conv2d(in_channels, f, 3, padding=1), nn.LeakyReLU(0.2)]
        width = f
        for out, stride in ((f, 2), (2 * f, 1), (2 * f, 2), (4 * f, 1), (4 * f, 2), (8 * f, 1), (8 * f, 2)):
            layers += [nn.Conv2d(width, out, 3, stride=stride, padding=1), _norm(norm, out), nn.LeakyReLU(0.2)]
            width = out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(width, 1024), nn.LeakyReLU(0.2), nn.Linear(1024, 1))

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3))).squeeze(1)


class SRGAN(nn.Module):
    """The pair trained together; ``forward`` is the generator's."""

    def __init__(self, in_channels=1, scale=8, n_residual_blocks=5, n_filters=64, discriminator_filters=64,
                 norm="batch", output_size=None):
        super().__init__()
        self.generator = SRResNet(in_channels, scale, n_residual_blocks, n_filters, norm, output_size)
        self.discriminator = Discriminator(in_channels, discriminator_filters, norm)

    def forward(self, x):
        return self.generator(x)
