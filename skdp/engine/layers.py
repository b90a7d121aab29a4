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

A layer called several times in one forward (the cell of an RNN, once per time
step) is exact when its per-example gradient is the sum over calls of the same
bilinear form: for Linear, ``sum_t g_t a_t^T`` is the gradient of one call on the
calls stacked along a token axis. ``register(..., stack=fn)`` declares how to
stack the calls' ``(a, g)`` into one; a layer without ``stack`` called twice is
refused by the hooks (``clipping="auto"`` then takes the vmap path).

Lookup (``lookup``) goes through ``RULE_PROVIDERS`` in order: skdp's own rules
by exact type, then Opacus's registered grad samplers (per-example gradients
of one layer, when Opacus is installed). Each provider returns a ``Rule`` or
None; the vmap path takes what none of them covers.
"""
import contextlib
from dataclasses import dataclass
import math
import threading
import torch
import torch.nn.functional as F
from torch import nn

from ..exceptions import UnsupportedModelError

LAYER_RULES = {}
#: Per layer type, the names of the direct parameters its rule accounts for.
RULE_PARAMS = {}
#: Per layer type, ``stack(module, calls) -> (a, g)`` merging several calls of one forward into one.
CALL_STACKERS = {}
#: Per layer type, ``accepts(module) -> str or None``: why this instance is not covered by its rule.
RULE_LIMITS = {}


@dataclass(frozen=True)
class Rule:
    """What the hooks apply to one layer: the rule, the parameters it covers, how to stack calls.

    ``path`` names where the rule comes from ("rule": skdp's own, "opacus": an Opacus grad sampler).
    """
    fn: object
    params: tuple
    stack: object = None
    path: str = "rule"


def register(*layer_types, params=("weight", "bias"), stack=None, limits=None):
    """Register a per-layer clipping rule ``fn(module, a, g) -> (norm_sq, clipped)`` for ``layer_types``.

    The ``"ghost"`` (and ``"auto"``) clipping computes per-example gradient
    norms layer by layer from each hooked layer's input ``a`` and the gradient
    ``g`` of the summed per-example losses with respect to its output, both
    with the examples along dim 0. A rule returns ``norm_sq``, of shape
    ``(B,)``: example b's squared gradient norm over the layer's ``params``,
    and ``clipped(scale)``: given the per-example factors ``scale`` of shape
    ``(B,)``, the list ``[(param, sum_b scale_b * grad_b(param)), ...]``.
    Rules must be exact: a norm that under-counts an example's gradient
    under-clips it, and the noise no longer covers the sensitivity. The hooks
    check the rule's unclipped sums against autograd on the first lot.
    Lookup is by exact type (a subclass needs its own registration), and a
    rule registered again replaces the earlier one.

    Parameters
    ----------
    *layer_types : type
        The ``torch.nn.Module`` classes the rule is for (exact types).
    params : tuple of str, default=("weight", "bias")
        The layer's direct parameters the rule accounts for. A layer carrying
        any other trainable parameter is refused by the hooks (its gradient
        would be left out of the norm).
    stack : callable or None, default=None
        ``stack(module, calls) -> (a, g)`` merges the ``[(a, g), ...]`` of
        several calls of the layer in one forward into one ``(a, g)`` (exact
        only when the per-example gradient is additive over calls in the
        rule's own form, as ``sum_t g_t a_t^T`` for Linear). None: a layer
        called twice in one forward is refused by the hooks.
    limits : callable or None, default=None
        ``limits(module) -> str or None``: why this instance is outside the
        rule (an Embedding's ``max_norm``, ...), or None. An instance outside
        it takes the vmap path.

    Returns
    -------
    decorator : callable
        Registers the rule it decorates and returns it unchanged.

    See Also
    --------
    DPSGDEngine : The engine that applies the rules.
    make_clipper : The clipping methods; ``"vmap"`` needs no rule.
    check_module : Which layers of a module a rule covers.

    Examples
    --------
    A per-feature gain ``y = x * w``: example b's gradient of ``w`` is the sum
    over its tokens of ``g * a``.

    >>> import torch
    >>> from torch import nn
    >>> from skdp.engine import check_module, register
    >>> class Gain(nn.Module):
    ...     def __init__(self, d):
    ...         super().__init__()
    ...         self.weight = nn.Parameter(torch.ones(d))
    ...     def forward(self, x):
    ...         return x * self.weight
    >>> model = nn.Sequential(nn.Linear(4, 3), Gain(3))
    >>> check_module(model).paths()
    {'0': 'rule', '1': 'vmap'}
    >>> @register(Gain, params=("weight",))
    ... def gain_rule(module, a, g):
    ...     per_example = (g * a).reshape(a.shape[0], -1, a.shape[-1]).sum(1)
    ...     return per_example.pow(2).sum(1), lambda scale: [(module.weight, scale @ per_example)]
    >>> check_module(model).paths()
    {'0': 'rule', '1': 'rule'}
    """
    def deco(fn):
        for t in layer_types:
            LAYER_RULES[t] = fn
            RULE_PARAMS[t] = tuple(params)
            if stack is not None:
                CALL_STACKERS[t] = stack
            if limits is not None:
                RULE_LIMITS[t] = limits
        return fn
    return deco


def _own_rule(module):
    fn = LAYER_RULES.get(type(module))
    if fn is None:
        return None
    limit = RULE_LIMITS.get(type(module))
    if limit is not None and limit(module):
        return None
    return Rule(fn, RULE_PARAMS[type(module)], CALL_STACKERS.get(type(module)), "rule")


def _opacus_samplers():
    try:
        from opacus.grad_sample import GradSampleModule
    except Exception:  # noqa: BLE001 - Opacus is optional; any import failure means "not available"
        return {}
    return GradSampleModule.GRAD_SAMPLERS


def _opacus_rule(module):
    sampler = _opacus_samplers().get(type(module))
    if sampler is None:
        return None

    def rule(module, a, g):
        # Opacus's grad samplers return per-example gradients {param: (B, *param.shape)} of one call.
        # They see only the layer's first positional input: a sampler that needs more (EmbeddingBag's
        # offsets) fails here, before anything is released, and "auto" takes the exact vmap path.
        try:
            samples = sampler(module, [a], g)
        except Exception as exc:  # noqa: BLE001 - any failure of a third-party sampler means "not covered"
            raise UnsupportedModelError(
                f"Opacus's grad sampler for {type(module).__name__} failed on this layer's input "
                f"({type(exc).__name__}: {exc}); use clipping='vmap' (or 'auto', which falls back to it).") from exc
        grads = [(p, gs) for p, gs in samples.items() if p.requires_grad]
        B = g.shape[0]
        norm_sq = sum((gs.reshape(B, -1).pow(2).sum(1) for _, gs in grads), g.new_zeros(B))

        def clipped(scale):
            return [(p, torch.tensordot(scale.to(gs.dtype), gs, dims=1)) for p, gs in grads]

        return norm_sq, clipped

    # An Opacus sampler covers the layer's own parameters; the hooks' probe checks its sums on the first lot.
    return Rule(rule, tuple(n for n, _ in module.named_parameters(recurse=False)), None, "opacus")


#: Tried in order; the first that returns a Rule wins.
RULE_PROVIDERS = [_own_rule, _opacus_rule]


def lookup(module):
    """The ``Rule`` covering ``module``, or None (the vmap path)."""
    for provider in RULE_PROVIDERS:
        rule = provider(module)
        if rule is not None:
            return rule
    return None


def uncovered_params(module, rule=None):
    """Names of ``module``'s trainable direct parameters that its rule does not account for."""
    rule = lookup(module) if rule is None else rule
    covered = rule.params if rule is not None else ()
    return [name for name, p in module.named_parameters(recurse=False) if p.requires_grad and name not in covered]


def _trainable(param):
    return param is not None and param.requires_grad


#: Largest per-example weight gradient (B x p x d elements, 64 MB in float32) a rule keeps between
#: the norm and the clipped sum instead of recomputing it.
_KEEP_PER_EXAMPLE = 1 << 24


#: The ghost norm's cost per multiply-add against the per-example gradient's: its Gram matrices are float64 (see
#: _CANCELLATION). On the layer grid of benchmarks/results/dpsgd_layer_rules.md (batch 64), 2 picks the faster way
#: in 66 of 80 cells and 4 in 70, against 58 for 1 (the float32 Grams' factor); on whole DP steps at batch 256,
#: where a large instantiated gradient is memory-bound, 2 was best (an LSTM 1.76x its plain step against 2.43x at
#: 4; a TransformerEncoder 1.67x against 1.75x).
GHOST_COST = 2


def _ghost_is_cheaper(T, d, p):
    # Ghost norm costs ~T^2 (d + p) per example (in float64), the per-example gradient ~T d p.
    return GHOST_COST * T * T * (d + p) < T * d * p


class _stacker:
    """Stack the calls of one forward along a token axis after the batch.

    The per-example gradient of a weight used in several calls is the sum over calls (and tokens) of
    each call's bilinear term (``sum_t g_t a_t^T`` for Linear), which is what the rule computes for one
    call on the concatenated tokens: exact. ``a_features``/``g_features`` count the trailing feature dims
    kept (Linear: 1 and 1; Embedding: 0 and 1; LayerNorm: len(normalized_shape) for both). A class, not a
    closure, so that a net pickled during a fit (a checkpoint) can carry its clipper (review_s35 c02).
    """

    def __init__(self, a_features, g_features):
        self.a_features, self.g_features = a_features, g_features

    @staticmethod
    def _flat(x, k):
        return x.reshape(x.shape[0], -1, *(x.shape[x.dim() - k:] if k else ()))

    def __call__(self, module, calls):
        return (torch.cat([self._flat(a, self.a_features) for a, _ in calls], 1),
                torch.cat([self._flat(g, self.g_features) for _, g in calls], 1))


#: Cancellation (review_s38 F1, s38b F-A). An example's squared norm computed from a sum whose terms' magnitudes
#: add up to E (the ghost norm's sum_{t,s} (a_t . a_s)(g_t . g_s), or its share of a clipped sum recomputed from
#: a and g over the tokens) carries a rounding error of up to about n eps E (n terms accumulated, eps the unit
#: roundoff). A record whose terms cancel (a large offset through a per-channel normalisation, or a layer called
#: twice whose outputs are subtracted) makes E dwarf its norm, and its float32 norm, or its share of the sum, can
#: then be off by any factor: its contribution was measured at 5 C. Hence:
#:
#: - the ghost norms' Gram matrices are computed in float64 (_WIDE), where a product of two float32 values is
#:   exact and n eps64 E stays far below the norm (n: the Gram's inner length plus its number of entries);
#: - the share of a sum recomputed in the working dtype (error about eps sqrt(E ns) per example) is trusted while
#:   eps E <= _CANCELLATION ns;
#: - examples failing either bound get their per-example gradients instantiated, and each gives both its norm
#:   and its share of the clipped sum, so that its contribution is at most C whatever the rounding.
_CANCELLATION = 1e-4
_WIDE = torch.float64

def _precision_leaves():
    """The per-backend float32 precision settings of torch's fp32_precision API (torch >= 2.9), or () when any is
    missing (the legacy TF32 flags then)."""
    found = []
    for path in ("cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn"):
        leaf = torch.backends
        for part in path.split("."):
            leaf = getattr(leaf, part, None)
        if leaf is None or not hasattr(leaf, "fp32_precision"):
            return ()
        found.append(leaf)
    return tuple(found)


#: TF32 or bfloat16 in these settings would round a norm and its share of the sum differently.
_PRECISION_LEAVES = _precision_leaves()
#: One rules pass at a time: the settings are process-global (review s38c G4).
_PRECISION_LOCK = threading.RLock()


@contextlib.contextmanager
def _settings_ieee():
    if _PRECISION_LEAVES:
        saved = [(leaf, leaf.fp32_precision) for leaf in _PRECISION_LEAVES]
        restore = lambda: [setattr(leaf, "fp32_precision", value) for leaf, value in saved]  # noqa: E731
        for leaf, _ in saved:
            leaf.fp32_precision = "ieee"
    else:  # torch < 2.9: the legacy settings (review s38d H3; the matmul precision itself, s38e E2: "medium")
        saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
        restore = lambda: (torch.set_float32_matmul_precision(saved[0]),  # noqa: E731
                           setattr(torch.backends.cudnn, "allow_tf32", saved[1]))
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        restore()


@contextlib.contextmanager
def full_float32():
    """Run the rules' arithmetic in full float32 (reviews s38b F-D, s38c G3/G4, s38d H1/H3).

    Under TF32 (cuDNN's default for convolutions on CUDA, ``torch.set_float32_matmul_precision("high")``), a
    bfloat16 oneDNN setting or autocast, a norm and its share of the clipped sum are rounded differently, and a
    record built for it passes the clipping bound. Inside, every per-backend setting is "ieee" (whichever of
    torch's precision APIs the user set it with; the legacy TF32 flags on torch < 2.9) and autocast is off,
    under one lock; the user's settings are restored after. The forward and backward keep them.
    """
    with _PRECISION_LOCK, _settings_ieee(), contextlib.ExitStack() as stack:
        for device_type in _autocast_on():
            stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


#: The device types torch's autocast knows, besides the private backend (``_autocast_on`` adds it by its name).
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu", "xla", "ipu", "mtia", "maia")


def _autocast_on():
    """The device types to turn autocast off for in this thread: CPU, and CUDA where there is one, always; any
    other accelerator whose autocast is on, the private backend included under its registered name (torch_npu's
    "npu"): reviews s38d H1, s39 F2."""
    always = ["cpu", "cuda"][:1 + torch.cuda.is_available()]
    private = getattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")()
    return always + [d for d in dict.fromkeys([*_AUTOCAST_DEVICES[2:], private]) if _autocast_enabled(d, private)]


def _autocast_enabled(device_type, private):
    """Whether autocast is on for ``device_type`` in this thread; False for a type this torch's autocast does not
    know (torch 2.4-2.7 raise for some of ours, e.g. "mps" on 2.4: every lot crashed, review s39d K1)."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: no device type argument; each backend's own getter (review s39b G1)
        return bool(_legacy_autocast_getter(device_type, private)())
    except RuntimeError:  # "unknown device type for autocast": it cannot be on
        return False


def _legacy_autocast_getter(device_type, private):
    """Where torch < 2.4's autocast reads a device type's state: ``torch.xpu.is_autocast_xpu_enabled`` (xpu, hpu),
    the private backend's module (``torch.npu.is_autocast_enabled``), else ``torch.is_autocast_<d>_enabled``
    (ipu, xla); a getter that is missing answers False."""
    module = getattr(torch, device_type, None)
    names = [(module, "is_autocast_enabled")] if device_type == private else [
        (module, f"is_autocast_{device_type}_enabled"), (torch, f"is_autocast_{device_type}_enabled")]
    # Only a callable answers (an attribute of another kind crashed every lot: review s39c H2).
    return next((fn for fn in (getattr(owner, name, None) for owner, name in names) if callable(fn)), lambda: False)


def _untrusted(norm_sq, magnitude, error):
    """Indices of the examples whose ``norm_sq`` may be off by more than ``_CANCELLATION`` of itself, when
    ``error * magnitude`` bounds its rounding error (NaN and infinite values included)."""
    trusted = magnitude * error <= _CANCELLATION * norm_sq
    return torch.nonzero(~trusted).squeeze(1)


def _row_norms(x):
    """Per-example Euclidean norms of ``x`` (B, n) in float64, with neither underflow nor overflow of the squares.

    float32 values are widened first (their squares fit float64); float64 rows are divided by the power of two at
    their largest magnitude (exact) and the norm multiplied back: a float64 input of 1e-156 beside an output
    gradient of 1e154 had ||a||^2 = 0 and a norm of 0 (reviews s38c G2, s38d H2: 16 C with flush-denormal).
    """
    if x.dtype != torch.float64:
        return torch.linalg.vector_norm(x, dim=1, dtype=_WIDE)
    peak = x.detach().abs().flatten(1).amax(1) if x.numel() else x.new_zeros(x.shape[0])
    # 2^(e-1) <= peak < 2^e: 2^e itself is inf for peak >= 2^1023
    scale = torch.where(peak > 0, torch.exp2(torch.frexp(peak).exponent.to(x.dtype) - 1), torch.ones_like(peak))
    return torch.linalg.vector_norm(x / scale.view(-1, 1), dim=1) * scale


def _ghost_allowed(module):
    """The ghost norm's Gram matrices are exact products only of float32 (or narrower) values widened to float64:
    a float64 layer takes the instantiated per-example path, whose norm and share come from one tensor (a float64
    token tiny beside its example's largest input underflowed in the Gram: review s38e E1, 16 C). A float32
    layer on the float64 wide path keeps the ghost norm: its widened inputs multiply exactly (review s38f)."""
    return module.weight.dtype != torch.float64


def _ghost_norm_sq(aa, gg, inner, work_dtype):
    """Squared ghost norms from the float64 Gram matrices ``aa``, ``gg`` of shape (B, ..., T, T) (one per example
    and group) whose entries are inner products of length at most ``inner``: the norms in ``work_dtype``, and the
    rows not to trust (the terms' magnitude E_b = sum over groups of (sum_t ||a_t|| ||g_t||)^2, from the
    diagonals, against both bounds of _CANCELLATION)."""
    B = aa.shape[0]
    norm_sq = (aa * gg).reshape(B, -1).sum(1)
    norms = (aa.diagonal(dim1=-2, dim2=-1) * gg.diagonal(dim1=-2, dim2=-1)).clamp(min=0).sqrt()
    magnitude = norms.sum(-1).pow(2).reshape(B, -1).sum(1)
    terms = inner + (aa[0].numel() if B else 0)
    error = max(terms * torch.finfo(aa.dtype).eps, torch.finfo(work_dtype).eps)
    return norm_sq.to(work_dtype), _untrusted(norm_sq, magnitude, error)


# nn.MultiheadAttention's out_proj is a NonDynamicallyQuantizableLinear: a Linear with Linear's forward.
@register(nn.Linear, nn.modules.linear.NonDynamicallyQuantizableLinear, stack=_stacker(1, 1))
def linear_rule(module, a, g):
    B, d, p = a.shape[0], a.shape[-1], g.shape[-1]
    use_w, use_b = _trainable(module.weight), _trainable(module.bias)
    norm_sq = a.new_zeros(B)
    kept = exact = None
    if a.dim() == 2:
        # ||a g^T||_F = ||a|| ||g|| for one token, in float64: a tiny input's ||a||^2 would underflow to 0 in
        # float32 while its gradient a g^T, with a huge g, does not (review s38c G2: 14 C).
        g_norm = _row_norms(g)
        if use_w:
            norm_sq += (_row_norms(a) * g_norm).pow(2).to(norm_sq.dtype)
        if use_b:
            norm_sq += g_norm.pow(2).to(norm_sq.dtype)
        a2, g2, g_bias = a, g, g
    else:
        a3, g3 = a.reshape(B, -1, d), g.reshape(B, -1, p)
        if use_w:
            rows = None
            if _ghost_allowed(module) and _ghost_is_cheaper(a3.shape[1], d, p):
                # ||sum_t g_t a_t^T||_F^2 = sum_{t,s} (a_t . a_s)(g_t . g_s): two T x T Gram matrices (float64).
                wa, wg = a3.to(_WIDE), g3.to(_WIDE)
                w_sq, rows = _ghost_norm_sq(torch.bmm(wa, wa.transpose(1, 2)), torch.bmm(wg, wg.transpose(1, 2)),
                                            d + p, a.dtype)
            else:
                per_example = torch.einsum("btp,btd->bpd", g3, a3)
                w_sq = per_example.pow(2).sum((1, 2))
                # Kept for the clipped sum when small: sum_b s_b G_b costs B p d instead of the
                # B T p d of recomputing it from a and g (T times less); kept only up to
                # _KEEP_PER_EXAMPLE elements, since every layer's copy lives until the clipping.
                if per_example.numel() <= _KEEP_PER_EXAMPLE:
                    kept = per_example
                else:
                    # The recomputed sum adds terms of magnitude up to E_b = (sum_t ||a_t|| ||g_t||)^2
                    # (Cauchy-Schwarz): where they cancel, the examples are instantiated (see _CANCELLATION).
                    magnitude = (a3.norm(dim=2) * g3.norm(dim=2)).sum(1).pow(2)
                    rows = _untrusted(w_sq, magnitude, torch.finfo(a.dtype).eps)
            if rows is not None and rows.numel():
                exact = (rows, torch.einsum("btp,btd->bpd", g3[rows], a3[rows]))
                w_sq = w_sq.index_copy(0, rows, exact[1].pow(2).sum((1, 2)))
            norm_sq += w_sq
        # One vector gives the bias's norm and its share of the clipped sum, even where its tokens cancel.
        g_bias = g3.sum(1) if use_b else None
        if use_b:
            norm_sq += g_bias.pow(2).sum(1)
        a2, g2 = a3, g3

    def clipped(scale):
        out = []
        if use_w and kept is not None:
            out.append((module.weight, torch.tensordot(scale.to(kept.dtype), kept, dims=1)))
        elif use_w:
            # The instantiated examples take no share of the recomputed sum: theirs comes from their gradients.
            s = scale if exact is None else scale.index_fill(0, exact[0], 0)
            w = (g2 * s.view(-1, *([1] * (g2.dim() - 1)))).reshape(-1, p).t() @ a2.reshape(-1, d)
            if exact is not None:
                w = w + torch.tensordot(scale[exact[0]].to(w.dtype), exact[1], dims=1)
            out.append((module.weight, w))
        if use_b:
            out.append((module.bias, scale.to(g_bias.dtype) @ g_bias))
        return out

    return norm_sq, clipped


# Per-example convolution weight gradients, two ways (benchmarks/results/dpsgd_layer_rules.md, 256 examples, 1 and
# 2 threads): a batched matmul of the unfolded input (a strided view copied once) with the output gradients, or one
# convolution-weight gradient with the batch folded into the groups. On CPU the grouped convolution is fast when
# each group's input channels fill oneDNN's blocks of 8 (1.2-4.4x faster than the matmul there); off the blocks it
# is up to 1.4x slower at 1 thread and 5x at 2 (it runs serially), and wins by at most 1.24x (few output
# channels). Unfold when a group has up to UNFOLD_CHANNELS input channels, not a multiple of 8 (the largest
# measured), or the whole unfolded input has at most UNFOLD_LIMIT elements.
UNFOLD_CHANNELS = 24
UNFOLD_LIMIT = 2 ** 20
#: Largest unfolded input (elements) built at once: more examples are taken in chunks (memory stays bounded).
UNFOLD_CHUNK = 2 ** 23


def _unfold_is_cheaper(B, G, C, D, T, device="cpu"):
    """Whether ``B`` examples' per-example weight gradients are cheaper unfolded: ``G`` groups of ``C`` input
    channels, patches of ``D = C * prod(kernel)`` values, ``T`` output positions. The channel rule was measured
    on CPU (oneDNN); elsewhere only small inputs unfold, as before it."""
    cpu_rule = torch.device(device).type == "cpu" and C % 8 != 0 and C <= UNFOLD_CHANNELS
    return cpu_rule or B * G * D * T <= UNFOLD_LIMIT


class _ConvGeometry:
    """A convolution's input as the layer pads it, with explicit zero padding.

    String padding ("same", "valid") and padding modes other than zeros pad the input before the
    convolution (``module._reversed_padding_repeated_twice``, as torch does for "same": the odd pixel on
    the right); the rules then see an ordinary convolution with padding 0 on the padded input.
    """

    def __init__(self, module, a):
        nd = a.dim() - 2
        self.nd, self.groups = nd, module.groups
        stride, dilation, kernel = module.stride, module.dilation, module.kernel_size
        if isinstance(module.padding, str) or module.padding_mode != "zeros":
            mode = "constant" if module.padding_mode == "zeros" else module.padding_mode
            a = F.pad(a, module._reversed_padding_repeated_twice, mode=mode)
            padding = (0,) * nd
        else:
            padding = module.padding
        self.a, self.stride, self.padding, self.dilation, self.kernel = a, stride, padding, dilation, kernel
        self.weight_grad = getattr(torch.nn.grad, f"conv{nd}d_weight")

    def unfold(self, start=0, stop=None):
        """Columns ``(b, C*prod(k), T)`` of examples ``start:stop`` (im2col, any number of spatial dims).

        The patches are a strided view of the zero-padded input, copied once by the reshape: patch entry
        (c, k) of output position t is ``a[c, t * stride + k * dilation]``, in the weight's (c, k) order.
        """
        a = self.a[start:stop]
        if any(self.padding):
            a = F.pad(a, [p for p in reversed(self.padding) for _ in (0, 1)])
        B, C, spatial, st = a.shape[0], a.shape[1], a.shape[2:], a.stride()
        out = [(n - d * (k - 1) - 1) // s + 1
               for n, k, s, d in zip(spatial, self.kernel, self.stride, self.dilation)]
        view = a.as_strided((B, C, *self.kernel, *out),
                            (st[0], st[1], *(d * x for d, x in zip(self.dilation, st[2:])),
                             *(s * x for s, x in zip(self.stride, st[2:]))))
        return view.reshape(B, C * math.prod(self.kernel), math.prod(out))

    def per_example_weight(self, module, g):
        """Per-example weight gradients ``(B, O, C/G * prod(k))``.

        Few input channels per group (off oneDNN's blocks of 8, on CPU) or small inputs: unfold and contract over
        the output positions, in chunks of examples of at most UNFOLD_CHUNK unfolded elements. Otherwise one
        convolution-weight gradient with the batch folded into the groups (example b's channels only meet
        example b's filters).
        """
        a, B, O, G = self.a, self.a.shape[0], module.out_channels, self.groups
        D = module.weight[0].numel()
        T = g[0, 0].numel()
        if _unfold_is_cheaper(B, G, module.weight.shape[1], D, T, a.device):
            # Per example and group, (D x T) columns times (T x O/G) output gradients: (D x O/G).
            g = g.reshape(B * G, O // G, T).transpose(1, 2)
            step = max(1, UNFOLD_CHUNK // max(1, G * D * T))
            parts = [torch.bmm(self.unfold(i, i + step).reshape(-1, D, T), g[i * G:(i + step) * G])
                     for i in range(0, B, step)]
            return (parts[0] if len(parts) == 1 else torch.cat(parts)).reshape(B, G, D, O // G) \
                .transpose(2, 3).reshape(B, O, D)
        w = self.weight_grad(a.reshape(1, -1, *a.shape[2:]), (B * O,) + tuple(module.weight.shape[1:]),
                             g.reshape(1, -1, *g.shape[2:]), self.stride, self.padding, self.dilation, B * G)
        return w.reshape(B, O, D)

    def clipped_weight(self, module, g, scale):
        gs = g * scale.view(-1, *([1] * (g.dim() - 1)))
        return self.weight_grad(self.a, module.weight.shape, gs, self.stride, self.padding, self.dilation,
                                self.groups)


@register(nn.Conv1d, nn.Conv2d, nn.Conv3d)
def conv_rule(module, a, g):
    B, G = a.shape[0], module.groups
    use_w, use_b = _trainable(module.weight), _trainable(module.bias)
    O = g.shape[1]
    geo = _ConvGeometry(module, a)
    g_flat = g.reshape(B, O, -1)                      # (B, O, T)
    norm_sq = a.new_zeros(B)
    per_example = exact = None
    if use_w:
        T = g_flat.shape[-1]
        D, P = module.weight[0].numel(), O // G
        if _ghost_allowed(module) and _ghost_is_cheaper(T, D, P):
            # ||sum_t g_t c_t^T||^2 = sum_{t,s} (c_t . c_s)(g_t . g_s) per group, c_t the unfolded patch.
            # (Gram matrices in float64; where the terms cancel, in the norm or in the clipped sum's
            # convolution, the example's gradient is instantiated instead: see _CANCELLATION.)
            cols = geo.unfold().reshape(B, G, D, T).to(_WIDE)
            gg = g_flat.reshape(B, G, P, T).to(_WIDE)
            w_sq, rows = _ghost_norm_sq(torch.einsum("bgdt,bgds->bgts", cols, cols),
                                        torch.einsum("bgot,bgos->bgts", gg, gg), D + P, a.dtype)
            if rows.numel():
                exact = (rows, _ConvGeometry(module, a[rows]).per_example_weight(module, g[rows]).reshape(-1, G, P, D))
                w_sq = w_sq.index_copy(0, rows, exact[1].pow(2).sum((1, 2, 3)))
            norm_sq += w_sq
        else:
            per_example = geo.per_example_weight(module, g).reshape(B, G, P, D)
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
                # The instantiated examples take no share of the convolution: theirs comes from their gradients.
                w = geo.clipped_weight(module, g, scale if exact is None else scale.index_fill(0, exact[0], 0))
                if exact is not None:
                    w = w + torch.einsum("b,bgod->god", scale[exact[0]], exact[1]).reshape(module.weight.shape)
            out.append((module.weight, w))
        if use_b:
            out.append((module.bias, scale @ g_bias))
        return out

    return norm_sq, clipped


conv2d_rule = conv_rule  # the name earlier releases exported


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


def _embedding_limits(module):
    if module.max_norm is not None:
        return "max_norm renormalises the weight in place in the forward"
    if module.scale_grad_by_freq:
        return "scale_grad_by_freq scales by the token counts of the whole lot"
    if module.sparse:
        return "sparse gradients"
    return None


@register(nn.Embedding, params=("weight",), stack=_stacker(0, 1), limits=_embedding_limits)
def embedding_rule(module, a, g):
    # Example b's gradient has row v = sum of g_t over its tokens t with index v (none for padding_idx).
    # Summing per (example, index) key gives those rows without building (B x vocabulary x dim).
    B, V, p = g.shape[0], module.num_embeddings, g.shape[-1]
    idx = a.reshape(B, -1)
    gg = g.reshape(B, -1, p)
    if module.padding_idx is not None:
        gg = gg * (idx != module.padding_idx).unsqueeze(-1).to(gg.dtype)
    key = (torch.arange(B, device=idx.device).unsqueeze(1) * V + idx).reshape(-1)
    keys, inverse = torch.unique(key, return_inverse=True)
    rows = gg.new_zeros(keys.shape[0], p).index_add_(0, inverse, gg.reshape(-1, p))
    owner, vocab = keys // V, keys % V
    use_w = _trainable(module.weight)
    norm_sq = gg.new_zeros(B)
    if use_w:
        norm_sq = norm_sq.index_add_(0, owner, rows.pow(2).sum(1))

    def clipped(scale):
        if not use_w:
            return []
        w = rows.new_zeros(V, p).index_add_(0, vocab, rows * scale[owner].unsqueeze(1))
        return [(module.weight, w)]

    return norm_sq, clipped


def _layer_norm_stacker(module, calls):
    return _stacker(len(module.normalized_shape), len(module.normalized_shape))(module, calls)


@register(nn.LayerNorm, stack=_layer_norm_stacker)
def layer_norm_rule(module, a, g):
    # weight scales the normalised input elementwise: example b's gradient is sum over its tokens of
    # g * a_hat (bias: of g). Both have the size of normalized_shape: per-example gradients are cheap.
    B = a.shape[0]
    a_hat = F.layer_norm(a, module.normalized_shape, None, None, module.eps)
    per_example = []
    if _trainable(module.weight):
        per_example.append((module.weight, (g * a_hat).reshape(B, -1, *module.normalized_shape).sum(1)))
    if _trainable(module.bias):
        per_example.append((module.bias, g.reshape(B, -1, *module.normalized_shape).sum(1)))
    norm_sq = sum((pe.reshape(B, -1).pow(2).sum(1) for _, pe in per_example), a.new_zeros(B))

    def clipped(scale):
        return [(p, torch.tensordot(scale, pe, dims=1)) for p, pe in per_example]

    return norm_sq, clipped
