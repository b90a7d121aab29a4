"""Parameter initialisation from an explicit ``torch.Generator``.

torch's layers initialise themselves from the global generator; skdp
re-initialises them from the fit's own generator so that ``random_state``
controls the whole fit and the global generator is never touched.
"""
import math
import warnings

import torch
from torch import nn

INITIALISERS = {}


def register_init(*layer_types):
    """Register an initialiser ``fn(module, generator)`` for ``layer_types``.

    :func:`init_parameters` calls it, in place and under ``torch.no_grad()``,
    for every submodule of exactly one of these types, so that the fit's
    ``random_state`` also controls layers torch does not know how to
    initialise from a generator. It must draw every random number from
    ``generator`` (never from torch's global generator). A type registered
    again replaces the earlier initialiser.

    Parameters
    ----------
    *layer_types : type
        The ``torch.nn.Module`` classes the initialiser is for (exact types).

    Returns
    -------
    decorator : callable
        Registers the function it decorates and returns it unchanged.

    See Also
    --------
    init_parameters : Initialise a module with the registered initialisers.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from skdp.nn import init_parameters, register_init
    >>> class Gain(nn.Module):
    ...     def __init__(self, d):
    ...         super().__init__()
    ...         self.weight = nn.Parameter(torch.empty(d))
    >>> @register_init(Gain)
    ... def _init_gain(module, generator):
    ...     nn.init.ones_(module.weight)
    >>> init_parameters(Gain(3), torch.Generator()).weight.tolist()
    [1.0, 1.0, 1.0]
    """
    def deco(fn):
        for t in layer_types:
            INITIALISERS[t] = fn
        return fn
    return deco


@register_init(nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d)
def _init_affine(module, generator):
    # The same distribution as torch's default reset_parameters, drawn from `generator`.
    nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=generator)
    if module.bias is not None:
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(module.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(module.bias, -bound, bound, generator=generator)


@register_init(nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)
def _init_norm(module, generator):
    if getattr(module, "weight", None) is not None:
        nn.init.ones_(module.weight)
    if getattr(module, "bias", None) is not None:
        nn.init.zeros_(module.bias)


@register_init(nn.PReLU)
def _init_prelu(module, generator):
    nn.init.constant_(module.weight, 0.25)


@register_init(nn.Embedding)
def _init_embedding(module, generator):
    nn.init.normal_(module.weight, generator=generator)


@torch.no_grad()
def init_parameters(module, generator):
    """Re-initialise every layer of ``module`` with a registered initialiser.

    torch's layers initialise themselves from torch's global generator; this
    draws the same distributions (Linear and convolutions: torch's default
    Kaiming-uniform) from ``generator`` instead, so that an estimator's
    ``random_state`` controls the initialisation and the global generator is
    left alone. The initialisation is not a mechanism: it is independent of
    the data, and seeding it costs no privacy. Layers with parameters and no
    registered initialiser keep torch's initialisation, with a warning.

    Parameters
    ----------
    module : torch.nn.Module
        The network, re-initialised in place.
    generator : torch.Generator
        Source of the random initial values, on the module's device.

    Returns
    -------
    module : torch.nn.Module
        The same module.

    Warns
    -----
    RuntimeWarning
        When a layer with parameters has no registered initialiser.

    See Also
    --------
    register_init : Register an initialiser for another layer type.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from skdp.nn import init_parameters
    >>> a = init_parameters(nn.Linear(3, 2), torch.Generator().manual_seed(0))
    >>> b = init_parameters(nn.Linear(3, 2), torch.Generator().manual_seed(0))
    >>> torch.equal(a.weight, b.weight)
    True
    """
    unknown = set()
    for sub in module.modules():
        init = INITIALISERS.get(type(sub))
        if init is not None:
            init(sub, generator)
        elif any(True for _ in sub.parameters(recurse=False)):
            unknown.add(type(sub).__name__)
    if unknown:
        warnings.warn(
            f"Layers {sorted(unknown)} have no registered initialiser; they keep torch's default "
            "initialisation, which random_state does not control "
            "(register one with skdp.nn.init.register_init).",
            RuntimeWarning,
        )
    return module
