"""Noise-conditional score networks s(x, y, sigma) for PGE.

Inputs: x flat ``(n, d)`` (images are reshaped inside), y one-hot ``(n, k)``
(k may be 0 for an unconditional model), sigma ``(n,)``. The output is a score
``(n, d)`` divided by sigma, the scale the true score of ``p * N(0, sigma^2)``
has. ``residual=True`` is the "residual enhancement" of the PGE supplement
(its Table 2 ablates it): skip connections around every hidden block and a
linear skip from the input to the output.
"""
import torch
from torch import nn

from ..nn.init import register_init


class ScoreMLP(nn.Module):
    """Fully connected score network for tabular data (and small images)."""

    def __init__(self, n_features, n_classes=0, hidden_size=256, n_blocks=2, residual=True):
        super().__init__()
        self.residual = residual
        self.inp = nn.Linear(n_features + n_classes + 1, hidden_size)
        self.blocks = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(n_blocks))
        self.out = nn.Linear(hidden_size, n_features)
        self.skip = nn.Linear(n_features, n_features) if residual else None
        self.act = nn.SiLU()

    def forward(self, x, y, sigma):
        h = self.act(self.inp(torch.cat([x, y, sigma.log()[:, None]], dim=1)))
        for block in self.blocks:
            h = h + self.act(block(h)) if self.residual else self.act(block(h))
        out = self.out(h)
        if self.skip is not None:
            out = out + self.skip(x)
        return out / sigma[:, None]


class ScoreCNN(nn.Module):
    """Small convolutional score network for images (no pooling, no normalisation across examples)."""

    def __init__(self, image_shape, in_channels=1, n_classes=0, channels=32, n_blocks=2, residual=True):
        super().__init__()
        self.image_shape, self.in_channels, self.residual = tuple(image_shape), in_channels, residual
        self.inp = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.cond = nn.Linear(n_classes + 1, channels)  # label and noise level as a channel bias
        self.blocks = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1) for _ in range(n_blocks))
        self.out = nn.Conv2d(channels, in_channels, 3, padding=1)
        self.act = nn.SiLU()

    def forward(self, x, y, sigma):
        img = x.view(x.shape[0], self.in_channels, *self.image_shape)
        cond = self.cond(torch.cat([y, sigma.log()[:, None]], dim=1))[:, :, None, None]
        h = self.act(self.inp(img) + cond)
        for block in self.blocks:
            h = h + self.act(block(h)) if self.residual else self.act(block(h))
        out = self.out(h)
        if self.residual:
            out = out - img  # the score of a wide Gaussian around 0, refined by the network
        return out.flatten(1) / sigma[:, None]


class GaussianScore(nn.Module):
    """The score of a class-conditional diagonal Gaussian, smoothed at level sigma.

    ``s(x | y, sigma) = -(x - mu_y) / (var_y + sigma^2)``: 2 k d parameters, so
    DP-SGD's noise, whose norm grows with the square root of the parameter
    count, stays small where a neural score network drowns in it.


    Its Jacobian is diagonal, ``d s_j / d x_j = -1 / a_j`` with ``a_j = var_j +
    sigma^2``, and coordinate j's score depends on coordinate j's parameters
    only, so the score-matching loss separates by coordinate. ``forward(...,
    terms=True)`` returns the score, that exact divergence and ``a``, which
    :class:`~skdp.generative.net.PGENet` uses instead of projections (see
    its ``per_example_loss``).
    """

    # Its output does not scale like 1/sigma: unweighted levels give comparable gradient norms.
    sigma_weight_power = 0
    # forward(..., terms=True) gives the exact, per-coordinate divergence and scale a = var + sigma^2.
    separable = True

    def __init__(self, n_features, n_classes=0):
        super().__init__()
        rows = max(n_classes, 1)
        self.mean = nn.Parameter(torch.zeros(rows, n_features))
        self.log_var = nn.Parameter(torch.zeros(rows, n_features))

    def forward(self, x, y, sigma, terms=False):
        if y.shape[1] == 0:
            y = torch.ones(x.shape[0], 1, device=x.device)
        mean, var = y @ self.mean, y @ self.log_var.exp()
        scale = var + sigma[:, None] ** 2
        score = -(x - mean) / scale
        return (score, -1 / scale, scale) if terms else score


@register_init(GaussianScore)
def _init_gaussian(module, generator):
    # A standard normal per class: deterministic, so nothing to draw.
    nn.init.zeros_(module.mean)
    nn.init.zeros_(module.log_var)
