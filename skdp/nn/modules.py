"""Default networks. Inputs may be flat ``(n, features)`` or images ``(n, C, H, W)``."""
import math

import numpy as np
import torch

from torch import nn

from ..engine.layers import _ConvGeometry, register as _register_rule
from ..imaging.layout import row_image_shape
from .init import INITIALISERS, register_init

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}


class SoftmaxRegression(nn.Module):
    """The thesis's single-layer network: one linear layer to class logits.

    Softmax regression: ``logits = W x + b`` on the flattened input, trained
    with the cross-entropy loss. It is the ``module="linear"`` of
    :class:`DPMomentumClassifier` (and, with one output per target, the
    linear regression of :class:`DPMomentumRegressor`). Its one Linear layer
    is clipped exactly by the per-layer rule.

    Parameters
    ----------
    input_dim : int
        Features per example, after flattening.
    n_classes : int
        Number of outputs (classes).

    See Also
    --------
    MLP : Hidden layers between input and logits.
    SmallCNN : A convolutional network for images.
    module_spec : How an estimator's ``module`` name becomes this class and its arguments.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import SoftmaxRegression
    >>> SoftmaxRegression(input_dim=64, n_classes=10)(torch.zeros(5, 8, 8)).shape
    torch.Size([5, 10])
    """

    def __init__(self, input_dim, n_classes):
        super().__init__()
        self.linear = nn.Linear(input_dim, n_classes)

    @classmethod
    def from_prototypes(cls, prototypes, scale=10.0):
        """Start from one public prototype per class (row k for class k): logits ``scale * <prototype, x>``.

        With unit-norm prototypes and inputs this is the nearest-prototype rule;
        DP-SGD then fine-tunes it on the private data. The prototypes must be
        public (not computed from the private data without noise): they are
        released with the model.

        Parameters
        ----------
        prototypes : array-like of shape (n_classes, input_dim)
            One prototype per class.
        scale : float, default=10.0
            Multiplies the prototypes to give the initial weight (the bias is 0).

        Returns
        -------
        module : SoftmaxRegression
            The initialised network.
        """
        prototypes = torch.as_tensor(np.asarray(prototypes), dtype=torch.float32)
        module = cls(prototypes.shape[1], prototypes.shape[0])
        with torch.no_grad():
            module.linear.weight.copy_(scale * prototypes)
            module.linear.bias.zero_()
        return module

    def forward(self, X):
        """Compute the class logits of a lot.

        Parameters
        ----------
        X : torch.Tensor of shape (n, ...))
            The inputs; every dimension after the first is flattened.

        Returns
        -------
        logits : torch.Tensor of shape (n, n_classes)
            One unnormalised score per class (the softmax gives the probabilities).
        """
        return self.linear(X.flatten(1))


class MLP(nn.Module):
    """Fully connected network with ``hidden_sizes`` hidden layers.

    ``Linear -> activation`` per hidden layer, then a Linear layer to the
    logits, on the flattened input. No BatchNorm and no dropout: BatchNorm
    mixes the examples of a lot, which per-example clipping cannot bound.
    Every layer is a Linear, clipped exactly by the per-layer rule. It is the
    ``module="mlp"`` of the DP-SGD estimators.

    Parameters
    ----------
    input_dim : int
        Features per example, after flattening.
    n_classes : int
        Number of outputs (classes).
    hidden_sizes : tuple of int, default=(256,)
        Width of each hidden layer, in order.
    activation : {"tanh", "relu", "elu"}, default="tanh"
        Activation after each hidden layer. Bounded activations such as tanh
        tend to do better than ReLU under DP-SGD (Papernot et al. 2021,
        "Tempered sigmoid activations").

    See Also
    --------
    SoftmaxRegression : No hidden layer.
    SmallCNN : A convolutional network for images.
    module_spec : How an estimator's ``module`` name becomes this class and its arguments.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import MLP
    >>> model = MLP(input_dim=20, n_classes=3, hidden_sizes=(32, 16))
    >>> model(torch.zeros(4, 20)).shape
    torch.Size([4, 3])
    """

    def __init__(self, input_dim, n_classes, hidden_sizes=(256,), activation="tanh"):
        super().__init__()
        if any(int(h) < 1 for h in hidden_sizes):
            raise ValueError(f"MLP: hidden_sizes={tuple(hidden_sizes)!r} has a layer of no units (its output "
                             "would not depend on the input); give every hidden layer at least one unit.")
        layers, width = [], input_dim
        for h in hidden_sizes:
            layers += [nn.Linear(width, h), ACTIVATIONS[activation]()]
            width = h
        layers.append(nn.Linear(width, n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, X):
        """Compute the class logits of a lot.

        Parameters
        ----------
        X : torch.Tensor of shape (n, ...))
            The inputs; every dimension after the first is flattened.

        Returns
        -------
        logits : torch.Tensor of shape (n, n_classes)
            One unnormalised score per class (the softmax gives the probabilities).
        """
        return self.net(X.flatten(1))


class SmallCNN(nn.Module):
    """Two conv-activation-pool blocks and a linear head (no BatchNorm: it mixes examples).

    Each block is a 3x3 convolution (padding 1), the activation and a 2x2
    average pooling, so each halves the height and width; the head is a
    Linear layer on the flattened last feature map. Without BatchNorm every
    example's output depends on that example alone, as per-example clipping
    requires; convolutions and the head are clipped exactly by the per-layer
    rules. It was the ``module="cnn"`` of the DP-SGD estimators before
    :class:`GroupNormCNN`; pass the class as ``module=SmallCNN`` for it.

    Parameters
    ----------
    n_classes : int
        Number of outputs (classes).
    image_shape : tuple of int (H, W)
        Image size; each side must be at least ``2 ** len(channels)``.
    in_channels : int, default=1
        Channels of the input images.
    channels : tuple of int, default=(16, 32)
        Output channels of each block (one block per entry).
    activation : {"tanh", "relu", "elu"}, default="tanh"
        Activation after each convolution.

    See Also
    --------
    SoftmaxRegression : One linear layer.
    MLP : A fully connected network.
    module_spec : How an estimator's ``module`` name becomes this class and its arguments.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import SmallCNN
    >>> model = SmallCNN(n_classes=10, image_shape=(8, 8))
    >>> model(torch.zeros(4, 1, 8, 8)).shape, model(torch.zeros(4, 64)).shape
    (torch.Size([4, 10]), torch.Size([4, 10]))
    """

    def __init__(self, n_classes, image_shape, in_channels=1, channels=(16, 32), activation="tanh"):
        super().__init__()
        self._build(n_classes, image_shape, in_channels, channels, lambda c, out_c: [
            nn.Conv2d(c, out_c, 3, padding=1), ACTIVATIONS[activation](), nn.AvgPool2d(2)])

    def _build(self, n_classes, image_shape, in_channels, channels, block):
        """Set ``features`` (one ``block(c_in, c_out)`` per entry of ``channels``, each halving H and W) and ``head``."""
        self.image_shape = tuple(image_shape)
        self.in_channels = in_channels
        layers, c = [], in_channels
        h, w = self.image_shape
        for out_c in channels:
            layers += block(c, out_c)
            c, h, w = out_c, h // 2, w // 2
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c * h * w, n_classes)

    def forward(self, X):
        """Compute the class logits of a lot.

        Parameters
        ----------
        X : torch.Tensor of shape (n, in_channels, H, W) or (n, in_channels * H * W))
            Images, or flat rows reshaped to ``(in_channels, H, W)``.

        Returns
        -------
        logits : torch.Tensor of shape (n, n_classes)
            One unnormalised score per class (the softmax gives the probabilities).
        """
        if X.dim() == 2:
            X = X.view(X.shape[0], self.in_channels, *self.image_shape)
        return self.head(self.features(X).flatten(1))


class WSConv2d(nn.Conv2d):
    """A 2-D convolution with weight standardisation: each filter is centred and scaled to variance 1.

    ``y = conv2d(x, w_hat) + b`` with ``w_hat_o = (w_o - mean(w_o)) / sqrt(var(w_o) + eps)`` per
    output channel o (mean and biased variance over its ``in_channels * kh * kw`` entries; Qiao et
    al. 2019). With GroupNorm after it, this is the normalisation of De et al. 2022's DP-SGD
    networks: it does not mix the examples of a lot, unlike BatchNorm. Its per-example clipping
    rule (registered for the hooks) is the convolution's per-example weight gradient through the
    standardisation's Jacobian: ``dL/dw_o = (G_o - mean(G_o) - w_hat_o * mean(G_o * w_hat_o)) /
    sqrt(var(w_o) + eps)`` with ``G_o`` the gradient with respect to ``w_hat_o``.

    Parameters
    ----------
    *args : tuple
        The arguments of ``torch.nn.Conv2d`` (``in_channels``, ``out_channels``, ``kernel_size``, ...).
    eps : float, default=1e-5
        Added to each filter's variance.
    **kwargs : dict
        The keyword arguments of ``torch.nn.Conv2d``.

    See Also
    --------
    GroupNormCNN : The network built of these.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import WSConv2d
    >>> conv = WSConv2d(1, 4, 3, padding=1)
    >>> w = conv.standardized_weight()
    >>> conv(torch.zeros(2, 1, 8, 8)).shape, bool(w.flatten(1).mean(1).abs().max() < 1e-5)
    (torch.Size([2, 4, 8, 8]), True)
    """

    def __init__(self, *args, eps=1e-5, **kwargs):
        super().__init__(*args, **kwargs)
        self.eps = eps

    def _scale(self):
        """``(w_hat, s)``: the standardised weight and each filter's ``sqrt(var + eps)``, shape (O, 1, 1, 1)."""
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        s = (w.var(dim=(1, 2, 3), unbiased=False, keepdim=True) + self.eps).sqrt()
        return (w - mean) / s, s

    def standardized_weight(self):
        """Return the weight the convolution applies: each filter centred, divided by ``sqrt(var + eps)``.

        Returns
        -------
        weight : torch.Tensor of shape (out_channels, in_channels / groups, kh, kw)
            The standardised filters.
        """
        return self._scale()[0]

    def forward(self, x):
        """Convolve ``x`` with the standardised filters.

        Parameters
        ----------
        x : torch.Tensor of shape (n, in_channels, H, W)
            The input maps.

        Returns
        -------
        y : torch.Tensor of shape (n, out_channels, H', W')
            The output maps.
        """
        return self._conv_forward(x, self.standardized_weight(), self.bias)


register_init(WSConv2d)(INITIALISERS[nn.Conv2d])  # a convolution's initialisation, from the fit's generator


@_register_rule(WSConv2d)
def _ws_conv_rule(module, a, g):
    # Per-example gradients with respect to w_hat (the convolution's), then through the standardisation:
    # per filter, dL/dw = (G - mean(G) - w_hat mean(G w_hat)) / s, linear in G, so the clipped sum is the
    # same map of the clipped sum of the G's.
    B, O = a.shape[0], module.out_channels
    use_w, use_b = module.weight.requires_grad, module.bias is not None and module.bias.requires_grad
    geo = _ConvGeometry(module, a)
    with torch.no_grad():
        w_hat, s = module._scale()
    w_hat, s = w_hat.reshape(O, -1).to(a.dtype), s.reshape(O, 1).to(a.dtype)

    def through(G):  # G: (..., O, D) gradients w.r.t. w_hat -> w.r.t. w
        return (G - G.mean(-1, keepdim=True) - w_hat * (G * w_hat).mean(-1, keepdim=True)) / s

    norm_sq = a.new_zeros(B)
    per_example = None
    if use_w:
        per_example = through(geo.per_example_weight(module, g).reshape(B, O, -1))
        norm_sq += per_example.pow(2).sum((1, 2))
    g_bias = g.reshape(B, O, -1).sum(2) if use_b else None
    if use_b:
        norm_sq += g_bias.pow(2).sum(1)

    def clipped(scale):
        out = []
        if use_w:
            out.append((module.weight, torch.einsum("b,bod->od", scale, per_example).reshape(module.weight.shape)))
        if use_b:
            out.append((module.bias, scale @ g_bias))
        return out

    return norm_sq, clipped


class GroupNormCNN(nn.Module):
    """Weight-standardised convolutions with GroupNorm (De et al. 2022's normalisation for DP-SGD).

    Each block is a 3x3 :class:`WSConv2d` (padding 1), a GroupNorm, the
    activation and a 2x2 average pooling (which halves the height and width);
    the head is a Linear layer on the flattened last map. Neither
    normalisation mixes the examples of a lot: weight standardisation acts on
    the filters, GroupNorm on the channels of one example; both are clipped
    exactly by the per-layer rules. It is the ``module="cnn"`` of the DP-SGD
    estimators.

    Parameters
    ----------
    n_classes : int
        Number of outputs (classes).
    image_shape : tuple of int (H, W)
        Image size; each side must be at least ``2 ** len(channels)``.
    in_channels : int, default=1
        Channels of the input images.
    channels : tuple of int, default=(16, 32)
        Output channels of each block (one block per entry).
    groups : int, default=8
        GroupNorm groups per block (at most the block's channels, and a divisor of them).
    activation : {"tanh", "relu", "elu"}, default="tanh"
        Activation after each normalisation.

    See Also
    --------
    SmallCNN : The same blocks without weight standardisation and GroupNorm.
    WSConv2d : Its convolution.
    module_spec : How an estimator's ``module`` name becomes this class and its arguments.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import GroupNormCNN
    >>> model = GroupNormCNN(n_classes=10, image_shape=(8, 8))
    >>> model(torch.zeros(4, 1, 8, 8)).shape, model(torch.zeros(4, 64)).shape
    (torch.Size([4, 10]), torch.Size([4, 10]))
    """

    def __init__(self, n_classes, image_shape, in_channels=1, channels=(16, 32), groups=8, activation="tanh"):
        nn.Module.__init__(self)
        self._build(n_classes, image_shape, in_channels, channels, lambda c, out_c: [
            WSConv2d(c, out_c, 3, padding=1), nn.GroupNorm(math.gcd(int(groups), out_c), out_c),
            ACTIVATIONS[activation](), nn.AvgPool2d(2)])

    _build = SmallCNN._build
    forward = SmallCNN.forward


class RowRMSNormalized(nn.Module):
    """``module`` applied to each input row rescaled to root-mean-square 1: ``x * sqrt(d) / ||x||``.

    A fixed map of each example on its own (no parameters, no statistics
    across examples), so it costs no privacy and is differentiable (white-box
    attacks go through it). It makes a DP-SGD model insensitive to how the
    features were scaled: the logits move by about ``lr * C * ||x||`` per
    clipped step, so without it the best learning rate depends on the data's
    norm, which the "auto" rule must not read. A zero row stays zero, and
    is differentiated as a row already of RMS 1 (scale 1): the output has
    no derivative there (it depends on the direction only), and the clamped
    norm would give a gradient of ``sqrt(d) * 1e12`` times the inner one,
    which sent MI-Face's first step from the all-zero start to ~1e10.
    """

    def __init__(self, module, **kwargs):
        super().__init__()
        self.inner = module(**kwargs) if isinstance(module, type) else module

    def forward(self, X):
        flat = X.flatten(1)
        norm = flat.norm(dim=1)
        # scale = sqrt(d) / ||x||; for x = 0 any scale gives the same output 0, and 1 gives the input
        # gradient of the unscaled inner module (d(x * s)/dx = s I there, since x = 0).
        scale = torch.where(norm > 0, math.sqrt(flat.shape[1]) / norm.clamp_min(1e-12), 1.0)
        return self.inner(X * scale.view((-1,) + (1,) * (X.dim() - 1)).to(X.dtype))


class BoxScaled(nn.Module):
    """``module`` applied to each input row clipped to public bounds and mapped to [-1, 1].

    ``z = 2 (clip(x, lower, upper) - lower) / (upper - lower) - 1`` per
    feature (a feature with ``upper == lower`` maps to 0). ``lower`` and
    ``upper`` are public (given before the data are seen), so this is a fixed
    map of each example on its own: it costs no privacy, it is part of the
    released model (buffers, not parameters: nothing is trained), and the
    same map is applied in prediction. It is differentiable inside the box.

    Parameters
    ----------
    inner : torch.nn.Module class or instance
        The network that receives the scaled rows (named ``inner``, not
        ``module``, so that it can wrap a ``RowRMSNormalized(module=...)``).
    lower, upper : array-like of shape (n_features,)
        Public bounds of the flattened row.
    **kwargs : dict
        Constructor arguments of ``inner`` when it is a class.
    """

    def __init__(self, inner, lower, upper, **kwargs):
        super().__init__()
        self.inner = inner(**kwargs) if isinstance(inner, type) else inner
        lower = torch.as_tensor(np.asarray(lower, dtype=np.float32))
        width = torch.as_tensor(np.asarray(upper, dtype=np.float32)) - lower
        self.register_buffer("lower", lower)
        self.register_buffer("width", width)

    def forward(self, X):
        flat = X.flatten(1).to(self.lower.dtype)
        upper = self.lower + self.width
        inside = torch.minimum(torch.maximum(flat, self.lower), upper)
        # 2 (x - lower) / w - 1 maps [lower, upper] onto [-1, 1]; a zero width gives 0 (the box's centre).
        z = torch.where(self.width > 0, 2 * (inside - self.lower) / self.width.clamp_min(1e-30) - 1, 0.0)
        return self.inner(z.view(X.shape))


MODULES = {"linear": SoftmaxRegression, "mlp": MLP, "cnn": GroupNormCNN}
#: The image networks: built from an image shape (given, or read from square flat rows).
IMAGE_MODULES = (GroupNormCNN, SmallCNN)


def module_spec(module, *, input_shape, n_classes, image_shape=None, **kwargs):
    """Resolve an estimator's ``module`` to the ``(module, kwargs)`` that ``DPNet`` builds.

    A name ("linear", "mlp", "cnn") is resolved to its class in ``MODULES``,
    and the constructor arguments that depend on the data's shape (input
    size, number of classes, image shape and channels) are filled in from
    public quantities: the shape of a row and the number of outputs. A class
    gets the same for the built-in ones and ``kwargs`` only otherwise; an
    instance is returned as it is, with no arguments.

    Parameters
    ----------
    module : str, torch.nn.Module class or instance
        A key of ``MODULES``, a module class or a module instance.
    input_shape : tuple of int
        Shape of one row: ``(n_features,)``, ``(H, W)`` or ``(C, H, W)``.
    n_classes : int
        Number of outputs.
    image_shape : tuple of int (H, W) or (C, H, W), or None, default=None
        Image size of flat rows for the image networks; None: from ``input_shape``,
        or a square image when the rows are flat (the rule:
        :func:`skdp.imaging.layout.row_image_shape`).
    **kwargs : dict
        Further constructor arguments (an estimator's ``module__*``), kept.

    Returns
    -------
    module : torch.nn.Module class or instance
        The class to build, or the instance given.
    kwargs : dict
        Its constructor arguments (empty for an instance).

    Raises
    ------
    ValueError
        For an image network, when the image shape cannot be found or does not
        fit the rows, or is too small for its pooling blocks.

    See Also
    --------
    SoftmaxRegression : The module "linear".
    MLP : The module "mlp".
    GroupNormCNN : The module "cnn".

    Examples
    --------
    >>> from skdp.nn import module_spec
    >>> cls, kwargs = module_spec("cnn", input_shape=(64,), n_classes=10)
    >>> cls.__name__, kwargs
    ('GroupNormCNN', {'n_classes': 10, 'image_shape': (8, 8)})
    >>> module_spec("mlp", input_shape=(8, 8), n_classes=3, hidden_sizes=(32,))[1]
    {'input_dim': 64, 'n_classes': 3, 'hidden_sizes': (32,)}
    """
    if isinstance(module, nn.Module):
        return module, {}
    cls = MODULES[module] if isinstance(module, str) else module
    if cls in IMAGE_MODULES:
        for key in ("in_channels", "channels"):  # module__in_channels=None, module__channels=None: not given
            if key in kwargs and kwargs[key] is None:
                kwargs.pop(key)
        given = None if image_shape is None else tuple(image_shape)  # quoted as given in the errors
        channels, *image_shape = row_image_shape(input_shape, given, kwargs.get("in_channels"))
        if len(input_shape) == 3 or (given is not None and len(given) == 3):
            kwargs.setdefault("in_channels", channels)
        # Each block halves H and W: the smallest side must survive every pooling.
        n_pools = len(kwargs.get("channels", (16, 32)))
        if min(image_shape) < 2 ** n_pools:
            raise ValueError(
                f"image_shape={given or tuple(image_shape)} is too small for module='cnn': its {n_pools} pooling "
                f"blocks need images of at least {2 ** n_pools}x{2 ** n_pools}. Use module='linear' or "
                "'mlp', or fewer blocks (module__channels=(16,)).")
        return cls, {"n_classes": n_classes, "image_shape": tuple(image_shape), **kwargs}
    if cls in (SoftmaxRegression, MLP):
        return cls, {"input_dim": int(np.prod(input_shape)), "n_classes": n_classes, **kwargs}
    return cls, kwargs
