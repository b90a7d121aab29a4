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
    """SRGAN's generator (SRResNet): residual blocks, then sub-pixel upsampling by ``scale``.

    9x9 conv + PReLU, residual blocks (conv3-norm-PReLU-conv3-norm plus the
    identity), 3x3 conv + norm with the long skip, log2(scale) sub-pixel x2
    stages (conv to 4x channels, PixelShuffle, PReLU), 9x9 output conv.

    ``output_size``: when the high-resolution size is not ``scale`` times the
    input's (92 px is not 8 x 11), the ``scale``-times output is resized to it
    bicubically, inside the network, so that training and ``transform`` agree.

    Parameters
    ----------
    in_channels : int, default=1
        Image channels (1 grey, 3 colour), of input and output.
    scale : {2, 4, 8}, default=8
        Upsampling factor.
    n_residual_blocks : int, default=5
        Residual blocks (the thesis's 5; Ledig et al. use 16).
    n_filters : int, default=64
        Channels of the trunk.
    norm : {"batch", "group", "none"}, default="batch"
        Normalisation in the blocks; "group" for DP-SGD, whose per-example
        gradients batch normalisation does not have.
    output_size : tuple (H, W) or None, default=None
        Exact output size; None keeps ``scale`` times the input size.

    See Also
    --------
    SRGAN : This generator with its discriminator.
    SRGANTransformer : Trains it as a scikit-learn transformer.

    Examples
    --------
    >>> import torch
    >>> from skdp.superres import SRResNet
    >>> net = SRResNet(scale=4, n_residual_blocks=1, n_filters=8, output_size=(30, 30))
    >>> net(torch.zeros(2, 1, 7, 7)).shape
    torch.Size([2, 1, 30, 30])
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
        """Super-resolve a batch of images.

        Parameters
        ----------
        x : torch.Tensor of shape (n, in_channels, h, w)
            Low-resolution images.

        Returns
        -------
        out : torch.Tensor of shape (n, in_channels, scale * h, scale * w)
            The super-resolved images (of ``output_size`` if given).
        """
        h = self.head(x)
        out = self.tail(self.upsample(h + self.trunk_out(self.blocks(h))))
        if self.output_size is not None and out.shape[-2:] != self.output_size:
            out = F.interpolate(out, size=self.output_size, mode="bicubic", align_corners=False)
        return out


class Discriminator(nn.Module):
    """SRGAN's discriminator (Ledig et al. 2017): one logit per image, "real" high.

    Conv3 + LeakyReLU, then 7 conv-norm-LeakyReLU blocks with
    (width, stride) = (f, 2), (2f, 1), (2f, 2), (4f, 1), (4f, 2), (8f, 1), (8f, 2), then
    Dense(1024) - LeakyReLU - Dense(1). Returns logits.

    Global average pooling precedes the dense layers so that any image size works
    (Ledig's dense layer sits on the 6x6 maps of 96x96 crops).

    Parameters
    ----------
    in_channels : int, default=1
        Image channels.
    n_filters : int, default=64
        Width f of the first block; the widths grow to 8f.
    norm : {"batch", "group", "none"}, default="batch"
        Normalisation in the blocks; "group" for DP-SGD.

    See Also
    --------
    SRResNet : The generator it is trained against.
    SRGAN : The pair.

    Examples
    --------
    >>> import torch
    >>> from skdp.superres import Discriminator
    >>> Discriminator(n_filters=4)(torch.zeros(3, 1, 16, 16)).shape
    torch.Size([3])
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
        """Score a batch of images.

        Parameters
        ----------
        x : torch.Tensor of shape (n, in_channels, H, W)
            Images of any size.

        Returns
        -------
        logits : torch.Tensor of shape (n,)
            Logit of "real high-resolution image" per image.
        """
        return self.classifier(self.features(x).mean((2, 3))).squeeze(1)


class SRGAN(nn.Module):
    """SRGAN: the generator and the discriminator, trained together; ``forward`` is the generator's.

    One module holds both networks so that skdp's DP-SGD engine clips and
    noises each one's per-example gradients within one net
    (``SRGANTransformer``). The constructor arguments are those of
    :class:`SRResNet` and :class:`Discriminator`.

    Parameters
    ----------
    in_channels : int, default=1
        Image channels.
    scale : {2, 4, 8}, default=8
        Upsampling factor of the generator.
    n_residual_blocks : int, default=5
        Residual blocks of the generator.
    n_filters : int, default=64
        Channels of the generator's trunk.
    discriminator_filters : int, default=64
        Width of the discriminator's first block.
    norm : {"batch", "group", "none"}, default="batch"
        Normalisation of both networks; "group" for DP-SGD.
    output_size : tuple (H, W) or None, default=None
        Exact output size of the generator.

    Attributes
    ----------
    generator : SRResNet
        The generator.
    discriminator : Discriminator
        The discriminator.

    See Also
    --------
    SRGANTransformer : Trains it as a scikit-learn transformer.
    SRResNet : The generator alone.

    Examples
    --------
    >>> import torch
    >>> from skdp.superres import SRGAN
    >>> gan = SRGAN(scale=2, n_residual_blocks=1, n_filters=4, discriminator_filters=4)
    >>> sr = gan(torch.zeros(2, 1, 8, 8))
    >>> sr.shape, gan.discriminator(sr).shape
    (torch.Size([2, 1, 16, 16]), torch.Size([2]))
    """

    def __init__(self, in_channels=1, scale=8, n_residual_blocks=5, n_filters=64, discriminator_filters=64,
                 norm="batch", output_size=None):
        super().__init__()
        self.generator = SRResNet(in_channels, scale, n_residual_blocks, n_filters, norm, output_size)
        self.discriminator = Discriminator(in_channels, discriminator_filters, norm)

    def forward(self, x):
        """Super-resolve a batch of images with the generator.

        Parameters
        ----------
        x : torch.Tensor of shape (n, in_channels, h, w)
            Low-resolution images.

        Returns
        -------
        out : torch.Tensor of shape (n, in_channels, scale * h, scale * w)
            The super-resolved images (of ``output_size`` if given).
        """
        return self.generator(x)
