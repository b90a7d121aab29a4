"""Per-layer rules for per-example gradient norms and clipped gradient sums.

A rule sees one layer's input activations ``a`` and the gradient of the summed
per-example losses with respect to the layer's output ``g`` (both with the
batch first). It returns the per-example squared gradient norm of the layer's
trainable parameters and a function that, given per-example clipping factors,
returns the clipped sum of their gradients. Nothing of size (batch x
parameters) is built unless that is the cheaper way (mixed ghost clipping).

Register a rule for a new layer type with ``@register(LayerType, params=(...))``:
``params`` names the layer's own parameters the rule accounts for. The hooks
refuse a layer carrying any other trainable parameter (``lin.gain =
nn.Parameter(...)``), whose gradient the rule would leave out of the norm.

Rules are dtype-generic: the hooks call them on float64 copies of ``a`` and
``g`` when a float32 norm overflows (one record of 1e20 squares to 1e40).
"""
import torch
import torch.nn.functional as F
from torch import nn

LAYER_RULES = {}
#: Per layer type, the names of the direct parameters its rule accounts for.
RULE_PARAMS = {}


def register(*layer_types, params=("weight", "bias")):
    def deco(fn):
        for t in layer_types:
            LAYER_RULES[t] = fn
            RULE_PARAMS[t] = tuple(params)
        return fn
    return deco


def uncovered_params(module):
    """Names of ``module``'s trainable direct parameters that its rule does not account for."""
    covered = RULE_PARAMS.get(type(module), ())
    return [name for name, p in module.named_parameters(recurse=False) if p.requires_grad and name not in covered]


def rule_for(module):
    """The rule for ``module``'s type, or None when the layer is not supported."""
    rule = LAYER_RULES.get(type(module))
    if rule is conv2d_rule and (isinstance(module.padding, str) or module.padding_mode != "zeros"):
        return None
    return rule


def _trainable(param):
    return param is not None and param.requires_grad


def _ghost_is_cheaper(T, d, p):
    # Ghost norm costs ~T^2 (d + p) per example, the per-example gradient ~T d p.
    return T * T * (d + p) < T * d * p


@register(nn.Linear)
def linear_rule(module, a, g):
    B, d, p = a.shape[0], a.shape[-1], g.shape[-1]
    use_w, use_b = _trainable(module.weight), _trainable(module.bias)
    norm_sq = a.new_zeros(B)
    if a.dim() == 2:
        g_sq = g.pow(2).sum(1)
        if use_w:
            norm_sq += a.pow(2).sum(1) * g_sq  # ||a g^T||_F = ||a|| ||g|| for one token
        if use_b:
            norm_sq += g_sq
        a2, g2 = a, g
    else:
        a3, g3 = a.reshape(B, -1, d), g.reshape(B, -1, p)
        if use_w:
            if _ghost_is_cheaper(a3.shape[1], d, p):
                norm_sq += (torch.bmm(a3, a3.transpose(1, 2)) * torch.bmm(g3, g3.transpose(1, 2))).sum((1, 2))
            else:
                norm_sq += torch.einsum("btp,btd->bpd", g3, a3).pow(2).sum((1, 2))
        if use_b:
            norm_sq += g3.sum(1).pow(2).sum(1)
        a2, g2 = a3, g3

    def clipped(scale):
        gs = g2 * scale.view(-1, *([1] * (g2.dim() - 1)))
        out = []
        if use_w:
            out.append((module.weight, gs.reshape(-1, p).t() @ a2.reshape(-1, d)))
        if use_b:
            out.append((module.bias, gs.reshape(-1, p).sum(0)))
        return out

    return norm_sq, clipped


# Above this many elements the unfolded input (B x D x T) costs more than a grouped convolution.
UNFOLD_LIMIT = 2 ** 20


def _per_example_conv_weight(module, a, g):
    """Per-example weight gradients ``(B, O, C/G * kh * kw)``.

    Small inputs: unfold and contract. Large maps (a 9x9 kernel on a 112x88 image unfolds to
    B x 2592 x 9856): one convolution-weight gradient with the batch folded into the groups.
    """
    B, O, G = a.shape[0], module.out_channels, module.groups
    D = module.weight[0].numel()
    T = g.shape[2] * g.shape[3]
    if B * D * T <= UNFOLD_LIMIT:
        cols = F.unfold(a, module.kernel_size, dilation=module.dilation, padding=module.padding,
                        stride=module.stride).reshape(B, G, D, T)
        return torch.einsum("bgot,bgdt->bgod", g.reshape(B, G, O // G, T), cols).reshape(B, O, D)
    w = torch.nn.grad.conv2d_weight(a.reshape(1, -1, *a.shape[2:]), (B * O,) + tuple(module.weight.shape[1:]),
                                    g.reshape(1, -1, *g.shape[2:]), module.stride, module.padding,
                                    module.dilation, B * G)
    return w.reshape(B, O, D)


@register(nn.Conv2d)
def conv2d_rule(module, a, g):
    B, G = a.shape[0], module.groups
    use_w, use_b = _trainable(module.weight), _trainable(module.bias)
    O = g.shape[1]
    g_flat = g.reshape(B, O, -1)                      # (B, O, T)
    norm_sq = a.new_zeros(B)
    per_example = None
    if use_w:
        T = g_flat.shape[-1]
        D, P = module.weight[0].numel(), O // G
        if _ghost_is_cheaper(T, D, P):
            cols = F.unfold(a, module.kernel_size, dilation=module.dilation,
                            padding=module.padding, stride=module.stride).reshape(B, G, D, T)
            gg = g_flat.reshape(B, G, P, T)
            aa = torch.einsum("bgdt,bgds->bgts", cols, cols)
            gg2 = torch.einsum("bgot,bgos->bgts", gg, gg)
            norm_sq += (aa * gg2).sum((1, 2, 3))
        else:
            per_example = _per_example_conv_weight(module, a, g).reshape(B, G, P, D)
            norm_sq += per_example.pow(2).sum((1, 2, 3))
    if use_b:
        g_bias = g_flat.sum(2)
        norm_sq += g_bias.pow(2).sum(1)

    def clipped(scale):
        out = []
        if use_w:
            if per_example is not None:
                w = torch.einsum("b,bgod->god", scale, per_example).reshape(module.weight.shape)
            else:
                w = torch.nn.grad.conv2d_weight(a, module.weight.shape, g * scale.view(-1, 1, 1, 1),
                                                module.stride, module.padding, module.dilation, G)
            out.append((module.weight, w))
        if use_b:
            out.append((module.bias, scale @ g_bias))
        return out

    return norm_sq, clipped


@register(nn.PReLU, params=("weight",))
def prelu_rule(module, a, g):
    B = a.shape[0]
    contrib = g * a.clamp(max=0)
    if module.weight.numel() == 1:
        per_example = contrib.reshape(B, 1, -1).sum(2)
    else:  # one slope per channel (dim 1)
        per_example = contrib.reshape(B, a.shape[1], -1).sum(2)
    norm_sq = per_example.pow(2).sum(1) if _trainable(module.weight) else a.new_zeros(B)

    def clipped(scale):
        if not _trainable(module.weight):
            return []
        return [(module.weight, (scale @ per_example).reshape(module.weight.shape))]

    return norm_sq, clipped


@register(nn.GroupNorm)
def group_norm_rule(module, a, g):
    # The affine weight scales the normalised input: its per-example gradient is sum(g * a_hat).
    B, C = a.shape[0], a.shape[1]
    a_hat = F.group_norm(a, module.num_groups, None, None, module.eps)
    per_example = []
    if module.affine and _trainable(module.weight):
        per_example.append((module.weight, (g * a_hat).reshape(B, C, -1).sum(2)))
    if module.affine and _trainable(module.bias):
        per_example.append((module.bias, g.reshape(B, C, -1).sum(2)))
    norm_sq = sum((pe.pow(2).sum(1) for _, pe in per_example), a.new_zeros(B))

    def clipped(scale):
        return [(p, scale @ pe) for p, pe in per_example]

    return norm_sq, clipped
