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
    """Re-initialise every layer of ``module`` with a registered initialiser."""
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
