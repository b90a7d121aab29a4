"""Default networks. Inputs may be flat ``(n, features)`` or images ``(n, C, H, W)``."""
import math

import numpy as np
import torch

from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}


class SoftmaxRegression(nn.Module):
    """The thesis's single-layer network: one linear layer to class logits."""

    def __init__(self, input_dim, n_classes):
        super().__init__()
        self.linear = nn.Linear(input_dim, n_classes)

    @classmethod
    def from_prototypes(cls, prototypes, scale=10.0):
        """Start from one public prototype per class (row k for class k): logits ``scale * <prototype, x>``.

        With unit-norm prototypes and inputs this is the nearest-prototype rule;
        DP-SGD then fine-tunes it on the private data.
        """
        prototypes = torch.as_tensor(np.asarray(prototypes), dtype=torch.float32)
        module = cls(prototypes.shape[1], prototypes.shape[0])
        with torch.no_grad():
            module.linear.weight.copy_(scale * prototypes)
            module.linear.bias.zero_()
        return module

    def forward(self, X):
        return self.linear(X.flatten(1))


class MLP(nn.Module):
    """Fully connected network with ``hidden_sizes`` hidden layers."""

    def __init__(self, input_dim, n_classes, hidden_sizes=(256,), activation="tanh"):
        super().__init__()
        layers, width = [], input_dim
        for h in hidden_sizes:
            layers += [nn.Linear(width, h), ACTIVATIONS[activation]()]
            width = h
        layers.append(nn.Linear(width, n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, X):
        return self.net(X.flatten(1))


class SmallCNN(nn.Module):
    """Two conv-activation-pool blocks and a linear head (no BatchNorm: it mixes examples)."""

    def __init__(self, n_classes, image_shape, in_channels=1, channels=(16, 32), activation="tanh"):
        super().__init__()
        self.image_shape = tuple(image_shape)
        self.in_channels = in_channels
        layers, c = [], in_channels
        h, w = self.image_shape
        for out_c in channels:
            layers += [nn.Conv2d(c, out_c, 3, padding=1), ACTIVATIONS[activation](), nn.AvgPool2d(2)]
            c, h, w = out_c, h // 2, w // 2
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c * h * w, n_classes)

    def forward(self, X):
        if X.dim() == 2:
            X = X.view(X.shape[0], self.in_channels, *self.image_shape)
        return self.head(self.features(X).flatten(1))


class RowRMSNormalized(nn.Module):
    """``module`` applied to each input row rescaled to root-mean-square 1: ``x * sqrt(d) / ||x||``.

    A fixed map of each example on its own (no parameters, no statistics
    across examples), so it costs no privacy and is differentiable (white-box
    attacks go through it). It makes a DP-SGD model insensitive to how the
    features were scaled: the logits move by about ``lr * C * ||x||`` per
    clipped step, so without it the best learning rate depends on the data's
    norm, which the "auto" rule must not read. A zero row stays zero.
    """

    def __init__(self, module, **kwargs):
        super().__init__()
        self.inner = module(**kwargs) if isinstance(module, type) else module

    def forward(self, X):
        flat = X.flatten(1)
        scale = math.sqrt(flat.shape[1]) / flat.norm(dim=1).clamp_min(1e-12)
        return self.inner(X * scale.view((-1,) + (1,) * (X.dim() - 1)))


MODULES = {"linear": SoftmaxRegression, "mlp": MLP, "cnn": SmallCNN}


def module_spec(module, *, input_shape, n_classes, image_shape=None, **kwargs):
    """``(module, kwargs)`` for DPNet: a module name is resolved to its class and the
    data-dependent constructor arguments (input size, classes, image shape) are filled in.
    An instance is returned as it is."""
    if isinstance(module, nn.Module):
        return module, {}
    cls = MODULES[module] if isinstance(module, str) else module
    if cls is SmallCNN:
        if len(input_shape) == 3:  # (C, H, W) given
            kwargs.setdefault("in_channels", input_shape[0])
            image_shape = image_shape or input_shape[1:]
        if image_shape is None:
            side = int(math.isqrt(int(input_shape[0])))
            if side * side != input_shape[0]:
                raise ValueError("module='cnn' needs image_shape=(H, W) for non-square flat input.")
            image_shape = (side, side)
        elif len(input_shape) == 1 and int(np.prod(image_shape)) * kwargs.get("in_channels", 1) != input_shape[0]:
            raise ValueError(f"image_shape={tuple(image_shape)} does not match {input_shape[0]} features.")
        # Each block halves H and W: the smallest side must survive every pooling.
        n_pools = len(kwargs.get("channels", (16, 32)))
        if min(image_shape) < 2 ** n_pools:
            raise ValueError(
                f"image_shape={tuple(image_shape)} is too small for module='cnn': its {n_pools} pooling "
                f"blocks need images of at least {2 ** n_pools}x{2 ** n_pools}. Use module='linear' or "
                "'mlp', or fewer blocks (module__channels=(16,)).")
        return cls, {"n_classes": n_classes, "image_shape": tuple(image_shape), **kwargs}
    if cls in (SoftmaxRegression, MLP):
        return cls, {"input_dim": int(np.prod(input_shape)), "n_classes": n_classes, **kwargs}
    return cls, kwargs
