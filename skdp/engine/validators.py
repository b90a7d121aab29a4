"""Modules DP-SGD cannot train privately, whatever the clipping.

Per-example clipping bounds the sensitivity only when example i's loss depends
on example i alone, and when nothing but the noisy gradients leaves the step.
Two kinds of module break that:

- modules that mix the examples of a lot (BatchNorm in train mode normalises by
  the lot's mean and variance: one record moves every other example's
  gradient, so clipping each one bounds nothing);
- modules that update buffers from the data (running statistics), which are
  released with the model and carry no noise.

Validators are registered per module type (looked up along the MRO, so
subclasses such as SyncBatchNorm and LazyBatchNorm1d are covered); each returns
a message or None. ``check_dp_compatible`` raises one ``UnsupportedModuleError``
listing every offending module by path. Modules of unregistered types that
update buffers in the forward are caught at run time by
``buffer_versions``/``check_buffers_unchanged``.
"""
import collections.abc
import hashlib
import logging
import random
import threading
import types

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

from ..exceptions import UnsupportedModuleError


VALIDATORS = {}

_BN_FIX = ("replace it with GroupNorm (or LayerNorm), or freeze it with fixed statistics: "
           ".eval(), requires_grad_(False) and track_running_stats=True with its running statistics "
           "computed on public data (a module put back in train mode, e.g. by a skorch fit, is refused again)")


def register_validator(*module_types):
    """Register a validator that refuses modules of ``module_types`` DP-SGD cannot train privately.

    A validator ``fn(module) -> str or None`` returns why the module breaks
    the privacy of DP-SGD whatever the clipping (it mixes the examples of a
    lot, or releases data without noise), with the fix, or None when this
    instance is fine (e.g. a norm layer in eval mode with fixed statistics).
    Validators are looked up along the MRO, so one registered for a base
    class covers its subclasses; :func:`check_module` and
    :func:`check_dp_compatible` run them before any clipped step.

    Parameters
    ----------
    *module_types : type
        The ``torch.nn.Module`` classes the validator is for.

    Returns
    -------
    decorator : callable
        Registers the function it decorates and returns it unchanged.

    See Also
    --------
    check_dp_compatible : Raise for every module a validator refuses.
    check_module : The full check, validators and clipping paths.
    register : Register a per-layer clipping rule instead.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from skdp.engine import check_module, register_validator
    >>> class RunningMean(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.register_buffer("mean", torch.zeros(3))
    ...         self.weight = nn.Parameter(torch.ones(3))
    ...     def forward(self, x):
    ...         self.mean.mul_(0.9).add_(0.1 * x.mean(0).detach())
    ...         return (x - self.mean) * self.weight
    >>> @register_validator(RunningMean)
    ... def _running_mean(module):
    ...     return "stores a running mean of the data without noise" if module.training else None
    >>> check_module(nn.Sequential(nn.Linear(3, 3), RunningMean())).paths()
    {'1': 'refused', '0': 'rule'}
    """
    def deco(fn):
        for t in module_types:
            VALIDATORS[t] = fn
        return fn
    return deco


@register_validator(_BatchNorm)  # BatchNorm1d/2d/3d, SyncBatchNorm, LazyBatchNorm*
def _batch_norm(module):
    if module.training:
        return ("mixes the examples of a lot: in train mode it normalises by the lot's mean and variance "
                "and stores running statistics without noise; " + _BN_FIX)
    if module.running_mean is None or module.running_var is None:
        return ("mixes the examples of a lot: without running statistics it normalises by the lot's mean "
                "and variance even in eval mode; " + _BN_FIX)
    return None


@register_validator(nn.Embedding, nn.EmbeddingBag)
def _embedding_max_norm(module):
    # With max_norm, every forward rescales the looked-up rows in place (embedding_renorm_), outside
    # autograd and without noise: the released weights show which tokens the private data held.
    if module.max_norm is not None:
        return (f"renormalises in place, without noise, the rows each lot looks up (max_norm="
                f"{module.max_norm!r}): the released weights would show which tokens the private data "
                "held; use max_norm=None (normalise the looked-up vectors in forward instead, e.g. "
                "torch.nn.functional.normalize)")
    return None


@register_validator(_InstanceNorm)
def _instance_norm(module):
    # Per example and channel, so no mixing; but in train mode with track_running_stats it stores the
    # running mean and variance of the data, released without noise.
    if module.training and module.track_running_stats:
        return ("stores running statistics of the data without noise (track_running_stats=True in train "
                "mode); use track_running_stats=False (the default), or GroupNorm")
    return None


def _validator(module):
    for cls in type(module).__mro__:
        fn = VALIDATORS.get(cls)
        if fn is not None:
            return fn
    return None


def check_dp_compatible(module):
    """Raise ``UnsupportedModuleError`` naming every submodule DP-SGD cannot train privately.

    Per-example clipping bounds the sensitivity only when example i's loss
    depends on example i alone and nothing but the noisy gradients leaves the
    step. The registered validators find the modules that break this
    (BatchNorm in train mode mixes the examples of a lot; running statistics
    are released without noise); the error lists each one by path, with its
    fix. The clippers call it at construction and on every lot, since
    train/eval modes may change.

    Parameters
    ----------
    module : torch.nn.Module
        The model, in the train/eval modes it will be trained in.

    Raises
    ------
    UnsupportedModuleError
        If any submodule is refused by its validator.

    See Also
    --------
    check_module : The same refusals, with each layer's clipping path, as a report.
    register_validator : Register a validator for another module type.
    skdp.nn.fix_module : Swap BatchNorm for GroupNorm, and the like.

    Examples
    --------
    >>> from torch import nn
    >>> from skdp.engine import check_dp_compatible
    >>> from skdp.exceptions import UnsupportedModuleError
    >>> check_dp_compatible(nn.Sequential(nn.Linear(4, 4), nn.GroupNorm(2, 4)))
    >>> try:
    ...     check_dp_compatible(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))
    ... except UnsupportedModuleError as exc:
    ...     print(str(exc).split(":")[0])
    Module '1' (BatchNorm1d) mixes the examples of a lot
    """
    problems = []
    for name, sub in module.named_modules():
        fn = _validator(sub)
        message = fn(sub) if fn is not None else None
        if message:
            problems.append(f"Module {name or '<root>'!r} ({type(sub).__name__}) {message}.")
    if problems:
        raise UnsupportedModuleError(" ".join(problems))


def buffer_versions(module):
    """Fingerprints of ``module``'s buffers: version counter, storage and sums (an update changes one)."""
    named = list(module.named_buffers())
    return named, _fingerprints([b for _, b in named])


#: Integer dtypes by element size: a tensor's bits are summed as integers of its own width.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


#: Per (device, number of words, thread): fixed odd int64 weights and a scratch tensor for the weighted bit sum.
_WEIGHTS = {}


def _weighted_sum(halves):
    """``sum_i w_i * halves_i`` modulo 2^64: fixed pseudo-random odd int64 weights, one per integer of at most
    32 bits (``halves``: the tensor's bits as int32, int16 or uint8), widened to int64 in the product.

    The plain sums are linear and blind to position: a unit moved from one element to another (one ulp, one
    count between bins, two values swapped) keeps both. Here a move of ``u`` (``|u| < 2^32``) at position i
    changes the sum by ``w_i * u``, never 0 modulo 2^64 for an odd ``w_i``; moves at several positions cancel
    only by a ~2^-64 coincidence of the random weights. (Weighting whole 64-bit words instead saw their top
    bit only through parity: an even number of sign-bit flips, an x <-> -x swap, kept every checksum; final
    review of 2026-11-25.) The weights are not secret (this guards against modules that write by accident or
    naively, not against code that reads the engine), and the product goes to a cached scratch tensor.
    """
    key = (halves.device, halves.numel(), threading.get_ident())  # a scratch per thread: engines may step at once
    if key not in _WEIGHTS:
        gen = torch.Generator().manual_seed(0x5EED)
        weights = torch.randint(-2 ** 62, 2 ** 62, (halves.numel(),), generator=gen, dtype=torch.int64) * 2 + 1
        _WEIGHTS[key] = (weights.to(halves.device), torch.empty_like(weights, device=halves.device))
    weights, scratch = _WEIGHTS[key]
    return torch.mul(halves, weights, out=scratch).sum(dtype=torch.int64)


def _checksums(t):
    """Three int64 checksums of ``t``'s content: the wrapped sum of its bits as int64 words, its sum's bits,
    and a position-weighted sum of the words (``_weighted_sum``).

    The bit sum is exact modular integer arithmetic (deterministic at any thread count; any single word
    written changes it); the sum of the values catches writes that keep it; the weighted sum of the 32-bit
    halves catches moves between positions that keep both (r02 of 2026-11-25: one ulp moved inside a buffer,
    one count moved between bins; and an x <-> -x swap, final review). None allocates a copy of ``t`` per call (the earlier ``t.double().square().sum()`` did,
    twice per lot: 1.6 MB per 200k-weight layer, 0.4 to 50 ms per lot on a busy 2-core machine).
    """
    d = t.detach()
    if d.layout != torch.strided:  # sparse: its dense values (rare; a copy)
        d = d.to_dense()
    bits = _BITS.get(d.element_size())
    if d.device.type == "meta" or bits is None or d.is_complex():
        d = (d.double() if not d.is_complex() else torch.view_as_real(d).double()).reshape(-1)
        return torch.stack([d.sum(), d.square().sum(), _weighted_sum(d.view(torch.int32)).view(torch.float64)]
                           ).view(torch.int64)
    flat = d.contiguous().reshape(-1)
    if (flat.numel() * flat.element_size()) % 8 == 0 and flat.data_ptr() % 8 == 0:
        words = flat.view(torch.int64)  # whole 8-byte words: one pass of 64-bit additions
    else:
        words = flat.view(bits)
    halves = flat.view(torch.int32) if flat.element_size() >= 4 else flat.view(bits)
    total = flat.sum() if flat.is_floating_point() else flat.sum(dtype=torch.int64)
    return torch.stack([words.sum(dtype=torch.int64), total.double().view(torch.int64), _weighted_sum(halves)])


def _fingerprints(tensors):
    """Per tensor: version counter, storage pointer and two checksums of its content (``_checksums``).

    The version counter misses writes through ``.data`` (``p.data.add_``, ``p.data = x``); the storage
    pointer and the checksums catch those. The checksums are computed on each tensor's device and brought
    to the host once per device (one synchronisation on a GPU).
    """
    by_device = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append((i, _checksums(t)))
    sums = [None] * len(tensors)
    for items in by_device.values():
        host = torch.stack([v for _, v in items]).cpu().tolist()
        for (i, _), checks in zip(items, host):
            sums[i] = tuple(checks)
    # (A sparse tensor has no single storage: its content checksums stand for it.)
    return [(t._version, t.data_ptr() if t.layout == torch.strided else 0, *pair) for t, pair in zip(tensors, sums)]


def parameter_versions(module):
    """Fingerprints of ``module``'s parameters (see ``check_parameters_unchanged``)."""
    named = list(module.named_parameters())
    return named, _fingerprints([p for _, p in named])


def check_parameters_unchanged(module, versions):
    """Raise if computing the clipped sum wrote a parameter in place: a data-dependent change, no noise."""
    named, before = versions
    now = _fingerprints([p for _, p in named])
    changed = [name for (name, _), a, b in zip(named, now, before) if not _same(a, b)]
    if changed:
        raise UnsupportedModuleError(
            f"The forward pass changed parameter(s) {', '.join(map(repr, changed))} in place, from the data "
            "and without noise (e.g. Embedding(max_norm=...) renormalising the rows a lot looks up): the "
            "released weights would carry it. Do not write parameters in forward. The parameters already "
            "hold this lot's change: discard the model.")


def _same(now, before):
    # NaN sums compare unequal to themselves: a NaN parameter that stayed NaN has not changed.
    return all(a == b or (a != a and b != b) for a, b in zip(now, before))


def check_buffers_unchanged(module, versions):
    """Raise if a forward pass updated a buffer in place: data released without noise."""
    named, before = versions
    now = _fingerprints([b for _, b in named])
    changed = [name for (name, _), a, b in zip(named, now, before) if not _same(a, b)]
    if changed:
        owners = dict(module.named_modules())
        names = []
        for name in changed:
            path = name.rpartition(".")[0]
            names.append(f"{path or '<root>'!r} ({type(owners[path]).__name__}) buffer {name!r}")
        raise UnsupportedModuleError(
            "The forward pass updated " + ", ".join(names) + " from the data: buffers are released without "
            "noise (and a running statistic of the lot mixes examples). Keep buffers fixed in train mode "
            "(compute statistics on public data), or replace the module (GroupNorm/LayerNorm for a norm "
            "layer). The buffers already hold this lot's update: discard the model.")


# The torch.nn.Module attributes every module has: its registries (compared below by identity) and the
# hook tables (skdp's own clippers register hooks, outside the forward).
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
_REGISTRIES = ("_parameters", "_buffers", "_modules")


def _shallow(value):
    """A cheap fingerprint of an attribute: identity and, for a tensor, its version and storage; for a
    container, its length and its items' identities (an ``append`` of the lot counts as a change)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value), value._version, value.data_ptr() if value.layout == torch.strided else 0)
    if isinstance(value, (bool, int, float, complex, str, bytes, type(None))):
        return ("value", value)
    if isinstance(value, (list, tuple)):
        return ("seq", id(value), len(value), tuple(id(v) for v in value))
    if isinstance(value, dict):
        return ("map", id(value), len(value), tuple((k, id(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return ("set", id(value), len(value))
    return ("object", id(value))


_SCALARS = (bool, int, float, complex, str, bytes, type(None))
# Objects a forward may use without keeping data in them (randomness, logging, code): compared by identity.
_OPAQUE = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
           torch.Generator, torch.device, torch.dtype, np.random.Generator, np.random.RandomState,
           np.random.BitGenerator, np.random.SeedSequence, random.Random, logging.Logger, logging.LoggerAdapter,
           logging.Handler)
# Bounds of one deep walk (it runs on a fit's first lots only): deeper or further, compared by identity.
_DEEP_DEPTH, _DEEP_ENTRIES = 16, 100_000


def _digest(data):
    return hashlib.blake2b(data, digest_size=16).digest()


def _tensor_fingerprint(t):
    """Identity, dtype, shape and a hash of the content (a write in place changes the hash)."""
    if t.layout != torch.strided or t.device.type == "meta":
        return ("tensor", id(t), t._version)
    flat = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return ("tensor", id(t), str(t.dtype), tuple(t.shape), _digest(flat.view(torch.uint8).cpu().numpy().tobytes()))


def _deep(value, path, out, seen, tracked, depth=0):
    """Add to ``out`` the fingerprints of ``value`` and of everything reachable from it, keyed by path.

    Containers (lists, tuples, deques, dicts, sets) and plain objects (``__dict__``, ``__slots__``) are
    entered; tensors and arrays are hashed by content; ``tracked`` objects (the tree's parameters, buffers
    and modules, which the guards above and the per-submodule walk cover) by identity, as are objects
    reached twice (cycles) and the ``_OPAQUE`` types.
    """
    if isinstance(value, _SCALARS):
        out[path] = ("value", value)
        return
    key = id(value)
    if key in tracked:
        out[path] = ("tracked", key)
        return
    if key in seen:
        out[path] = ("seen", seen[key])
        return
    seen[key] = path
    if depth > _DEEP_DEPTH or len(out) > _DEEP_ENTRIES or isinstance(value, _OPAQUE):
        out[path] = ("object", type(value).__qualname__, key)
    elif isinstance(value, torch.Tensor):
        out[path] = _tensor_fingerprint(value)
    elif isinstance(value, np.ndarray) and value.dtype != object:
        out[path] = ("array", key, value.dtype.str, value.shape, _digest(np.ascontiguousarray(value).tobytes()))
    elif isinstance(value, np.generic):
        out[path] = ("value", value.dtype.str, value.tobytes())
    elif isinstance(value, (collections.abc.Set, frozenset)):
        out[path] = ("set", type(value).__qualname__, key, frozenset(value))
    else:
        if isinstance(value, collections.abc.Mapping):
            kind, items = "map", [(f"{path}[{k!r}]", k, v) for k, v in list(value.items())]
        elif isinstance(value, (list, tuple, collections.deque, np.ndarray)):
            flat = value.ravel().tolist() if isinstance(value, np.ndarray) else list(value)
            kind, items = "seq", [(f"{path}[{i}]", i, v) for i, v in enumerate(flat)]
        else:
            attrs = dict(vars(value)) if hasattr(value, "__dict__") else {}
            for cls in type(value).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                        attrs[slot] = getattr(value, slot)
            kind, items = "object", [(f"{path}.{k}", k, v) for k, v in attrs.items()]
        # Scalar items are kept in the container's own entry (a long list of numbers is one entry), the others
        # get theirs.
        scalars = tuple((k, v) for _, k, v in items if isinstance(v, _SCALARS))
        out[path] = (kind, type(value).__qualname__, key, len(items), getattr(value, "shape", None), scalars)
        for sub_path, _, v in items:
            if not isinstance(v, _SCALARS) and len(out) <= _DEEP_ENTRIES:
                _deep(v, sub_path, out, seen, tracked, depth + 1)


def module_state(module, deep=False):
    """What a forward could leave behind in ``module``'s tree: per submodule, its attributes and registries.

    Parameters and buffers are compared by identity here (``p.data`` writes by the fingerprints above):
    ``self.running_mean = 0.9 * self.running_mean + 0.1 * x.mean(0)`` rebinds a buffer to a new tensor,
    and ``self.last_lot = x.detach()`` adds an attribute; both carry the data out of the step unnoised.
    ``deep=False``: each attribute's identity, a tensor's version, a container's length and items (cheap,
    every lot). ``deep=True`` (a fit's first lots): everything reachable from the attributes, tensors and
    arrays by content (:func:`_deep`), so that a deque of recent lots, a helper object's running mean, a
    tensor in a dict or an array written in place show.
    """
    state = {}
    tracked = seen = None
    if deep:
        tracked = {id(t) for t in (*module.parameters(), *module.buffers(), *module.modules())}
        seen = {}
    for name, sub in module.named_modules():
        # torch's own layers keep no data from a forward outside their buffers (checked by the fingerprints),
        # and some rebuild private caches when their parameters are swapped (functional_call on nn.LSTM
        # rebuilds _flat_weights): only their registries are compared. A class of the user's: everything.
        own = type(sub).__module__.startswith("torch.")
        attrs = {}
        for k, v in vars(sub).items():
            if k in _MODULE_INTERNALS or (own and k.startswith("_")):
                continue
            if deep:
                _deep(v, k, attrs, seen, tracked)
            else:
                attrs[k] = _shallow(v)
        for registry in _REGISTRIES:
            attrs[registry] = tuple((k, id(v)) for k, v in getattr(sub, registry).items())
        attrs["training"] = ("value", sub.training)
        state[name] = (id(sub), attrs)
    return state


def check_state_unchanged(module, before, deep=False, owner="module"):
    """Raise ``UnsupportedModuleError`` if a training forward changed the state of ``module``'s tree.

    Whatever a forward stores (a new attribute, a buffer or parameter replaced, a tensor attribute written,
    a list it appends to; with ``deep``, anything reachable written in place) is released with the model
    without noise. Naming what changed (the attribute's path, ``owner``: "module", "criterion"), with the fix.
    """
    now = module_state(module, deep=deep)
    changes = []
    for name in sorted(set(now) | set(before)):
        if name not in before or name not in now or now[name][0] != before[name][0]:
            changes.append(f"submodule {name or '<root>'!r} added, removed or replaced")
            continue
        a, b = before[name][1], now[name][1]
        for key in sorted(set(a) | set(b)):
            if key in _REGISTRIES and key in a and key in b and a[key] != b[key]:
                old, new = dict(a[key]), dict(b[key])
                changes += [f"{name or '<root>'!r}.{entry} ({key[1:-1]} entry added, removed or replaced)"
                            for entry in sorted(set(old) | set(new)) if old.get(entry) != new.get(entry)]
            elif a.get(key) != b.get(key):
                what = ("attribute added" if key not in a else "attribute removed" if key not in b
                        else "registered parameters/buffers/submodules changed" if key in _REGISTRIES
                        else "train/eval mode switched" if key == "training" else "attribute changed")
                changes.append(f"{name or '<root>'!r}.{key} ({what})")
    if changes:
        shown = ", ".join(changes[:6]) + (f" and {len(changes) - 6} more" if len(changes) > 6 else "")
        raise UnsupportedModuleError(
            f"The training forward changed the {owner}'s state: " + shown + ". Anything a forward "
            "stores (a new attribute, a buffer rebound or written, a list or deque appended to, a helper object's "
            "attribute, a tensor or array written in place) is computed from the lot and released with the model "
            "without noise. Keep state out of forward: compute statistics on public data, or pass them in as "
            "constants; keep debugging buffers and monitors outside the module (callbacks see released values).")
