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
import functools
import hashlib
import inspect
import logging
import random
import struct
import sys
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


def buffer_versions(module, reuse=None):
    """Snapshots of ``module``'s buffers (see ``parameter_versions``; ``check_buffers_unchanged``)."""
    named = list(module.named_buffers())
    return named, _fingerprints([b for _, b in named], reuse=reuse[1] if reuse else None)


#: Integer dtypes by element size: a tensor's content is compared as integers of its own width.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_NP_BITS = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}
#: Dtypes whose CPU tensors numpy can view without a copy (the fast path of the snapshots).
_NUMPY_VIEWABLE = frozenset({torch.float16, torch.float32, torch.float64, torch.uint8, torch.int8, torch.int16,
                             torch.int32, torch.int64, torch.bool})


def _host_bits(t):
    """A strided CPU tensor's content as a numpy integer array of its element width and shape (a view, no
    copy, any strides), or None where numpy cannot view it (another device or layout, bfloat16, complex,
    a conjugate or negative view): those take ``_bits``."""
    if (t.device.type != "cpu" or t.layout != torch.strided or t.dtype not in _NUMPY_VIEWABLE or t.is_neg()):
        return None
    return t.detach().numpy().view(_NP_BITS[t.element_size()])


def _bits(t):
    """``t``'s content as a flat integer tensor of its element width, or None on the meta device (no content).

    A contiguous tensor gives a view (no copy); a sparse or non-contiguous one a dense copy.
    """
    d = t.detach()
    if d.device.type == "meta":
        return None
    if d.layout != torch.strided:  # sparse: its dense values (rare; a copy)
        d = d.to_dense()
    if d.is_complex():
        d = torch.view_as_real(d.resolve_conj())
    d = d.resolve_neg().contiguous().reshape(-1)
    return d.view(_BITS.get(d.element_size(), torch.uint8))


class _Snapshot:
    """A tensor at one moment: its version counter, storage pointer and an exact copy of its content's bits.

    Bits, not values: a NaN that stays the same NaN is unchanged, ``-0.0`` differs from ``0.0``, and two
    contents match only if every bit does, whatever a write keeps (sums, positions, signs: the checksums
    this replaced needed a position-weighted sum for moves between elements, and missed an x <-> -x swap
    until the final review of 2026-11-25). The version counter misses writes through ``.data``
    (``p.data.add_``, ``p.data = x``) and numpy views; the storage pointer and the bits catch those.

    Cost per lot: one copy of the tensor (into ``reuse``, the previous lot's snapshot, when it fits: no
    allocation) and one comparison, single passes over memory. On the CPU both run in numpy, on one thread
    whatever torch's thread count (a parallel kernel waits for a descheduled worker on a busy machine);
    elsewhere in torch on the tensor's device. ``changed`` compares a live tensor with the snapshot without
    copying it; two snapshots compare with ``==``.
    """

    __slots__ = ("version", "ptr", "host", "bits")

    def __init__(self, t, reuse=None):
        # (A sparse tensor has no single storage: its content stands for it.)
        self.version, self.ptr = t._version, t.data_ptr() if t.layout == torch.strided else 0
        host = _host_bits(t)
        self.host = self.bits = None
        if host is not None:
            old = reuse.host if reuse is not None else None
            if old is not None and old.shape == host.shape and old.dtype == host.dtype:
                np.copyto(old, host)
                self.host = old
            else:
                self.host = host.copy()
            return
        bits = _bits(t)
        old = reuse.bits if reuse is not None else None
        if bits is None:
            return
        if old is not None and old.shape == bits.shape and old.dtype == bits.dtype and old.device == bits.device:
            self.bits = old.copy_(bits)
        else:
            self.bits = bits.clone()

    def _header(self):
        return self.version, self.ptr

    def changed(self, t):
        """True when ``t`` (the tensor this snapshot was taken of) moved since: version, storage or any bit."""
        return _changed([(self, t)])[0]

    def __eq__(self, other):
        if not isinstance(other, _Snapshot):
            return NotImplemented
        if self._header() != other._header() or (self.host is None) != (other.host is None):
            return False
        if self.host is not None:
            return self.host.shape == other.host.shape and bool(np.array_equal(self.host, other.host))
        return not _device_bits_differ([(self.bits, other.bits)])[0]

    __hash__ = None


def _device_bits_differ(pairs):
    """Per ``(a, b)`` pair of flat bit tensors (or Nones): True when they differ in any bit; compared on their
    device and brought to the host once per device (one synchronisation on a GPU)."""
    out = [False] * len(pairs)
    by_device = {}
    for i, (a, b) in enumerate(pairs):
        if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
            out[i] = a is not None or b is not None
        else:
            by_device.setdefault(a.device, []).append((i, torch.ne(a, b.to(a.device)).any()))
    for items in by_device.values():
        for (i, _), differ in zip(items, torch.stack([v for _, v in items]).cpu().tolist()):
            out[i] = bool(differ)
    return out


def _changed(pairs):
    """Per ``(snapshot, tensor)`` pair: True when the tensor's version, storage or content moved since."""
    out = [False] * len(pairs)
    on_device = []
    for i, (s, t) in enumerate(pairs):
        if (s.version, s.ptr) != (t._version, t.data_ptr() if t.layout == torch.strided else 0):
            out[i] = True
        elif s.host is not None:
            live = _host_bits(t)
            out[i] = live is None or live.shape != s.host.shape or not bool((live == s.host).all())
        else:
            on_device.append((i, s.bits, _bits(t)))
    for (i, _, _), differ in zip(on_device, _device_bits_differ([(a, b) for _, a, b in on_device])):
        out[i] = differ
    return out


def _fingerprints(tensors, reuse=None):
    """Per tensor, a ``_Snapshot``; ``reuse``: earlier snapshots whose copies may be overwritten (same shapes)."""
    reuse = list(reuse or ())
    return [_Snapshot(t, reuse[i] if i < len(reuse) else None) for i, t in enumerate(tensors)]


def parameter_versions(module, reuse=None):
    """Snapshots of ``module``'s parameters (see ``check_parameters_unchanged``).

    ``reuse``: what an earlier call returned, no longer needed; its copies are overwritten instead of
    allocating new ones (one engine keeps one set across lots).
    """
    named = list(module.named_parameters())
    return named, _fingerprints([p for _, p in named], reuse=reuse[1] if reuse else None)


def check_parameters_unchanged(module, versions):
    """Raise if computing the clipped sum wrote a parameter in place: a data-dependent change, no noise."""
    named, before = versions
    changed = [name for (name, p), moved in zip(named, _changed(list(zip(before, (p for _, p in named))))) if moved]
    if changed:
        raise UnsupportedModuleError(
            f"The forward pass changed parameter(s) {', '.join(map(repr, changed))} in place, from the data "
            "and without noise (e.g. Embedding(max_norm=...) renormalising the rows a lot looks up): the "
            "released weights would carry it. Do not write parameters in forward. The parameters already "
            "hold this lot's change: discard the model.")


def check_buffers_unchanged(module, versions):
    """Raise if a forward pass updated a buffer in place: data released without noise."""
    named, before = versions
    changed = [name for (name, b), moved in zip(named, _changed(list(zip(before, (b for _, b in named))))) if moved]
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
    if isinstance(value, _SCALARS):
        return ("value", _scalar_key(value))
    if isinstance(value, (list, tuple)):
        return ("seq", id(value), len(value), tuple(id(v) for v in value))
    if isinstance(value, dict):
        return ("map", id(value), len(value), tuple((_key(k), id(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return ("set", id(value), len(value))
    return ("object", id(value))


_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def _scalar_key(value):
    """A scalar's type and exact bits: ``==`` sees ``0.0 == -0.0``, ``1 == 1.0 == True`` and NaN payloads as
    equal, and a forward could keep one bit of the lot in any of them."""
    if isinstance(value, float):
        return (type(value).__qualname__, struct.pack("<d", value))
    if isinstance(value, complex):
        return (type(value).__qualname__, struct.pack("<dd", value.real, value.imag))
    return (type(value).__qualname__, value)


#: Top-level packages whose classes hold no data of a fit at class level (their class attributes are not walked).
_LIBRARY_PACKAGES = frozenset({"builtins", "torch", "numpy", "scipy", "sklearn", "skorch", "pandas", "joblib",
                               "typing_extensions"}) | frozenset(getattr(sys, "stdlib_module_names", ()))


def _class_values(cls, instance_attrs):
    """The class-level values of ``cls`` and its bases defined outside the libraries, that an instance reaches.

    Methods, functions, descriptors (properties, ``staticmethod``, ``classmethod``), classes, modules and
    dunder names are code, not state; names the instance shadows are skipped. A helper object with
    ``__call__`` or a container is state.
    """
    out = {}
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in _LIBRARY_PACKAGES:
            continue
        for k, v in vars(klass).items():
            if k.startswith("__") or k in out or k in instance_attrs:
                continue
            v = _unwrap(v)
            if v is not None:
                out[k] = v
    return out


def _unwrap(value):
    """What state a class-level value holds, or None for code: a wrapped callable object, a bound method's
    object, a partial's arguments, a nested class's own values (review_s33 h01)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, types.MethodType):
        return None if isinstance(value.__self__, type) else value.__self__
    if isinstance(value, functools.partial):
        return (value.func, value.args, value.keywords)
    if isinstance(value, type):
        nested = value.__module__.split(".")[0] not in _LIBRARY_PACKAGES
        return _class_values(value, {}) if nested and value.__qualname__.count(".") else None
    if (inspect.isroutine(value) or isinstance(value, (property, types.ModuleType))
            or hasattr(type(value), "__get__")):
        return None
    return value


def _key(value):
    """A set element or a dict key: scalars by type and exact bits (``{0.0} == {-0.0}``), the rest as they are."""
    return _scalar_key(value) if isinstance(value, _SCALARS) else value
# Objects a forward may use without keeping data in them (randomness, logging, code): compared by identity.
_OPAQUE = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
           torch.Generator, torch.device, torch.dtype, np.random.Generator, np.random.RandomState,
           np.random.BitGenerator, np.random.SeedSequence, random.Random, logging.Logger, logging.LoggerAdapter,
           logging.Handler)
# Bounds of one deep walk (it runs on every lot): deeper or further, compared by identity.
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
        out[path] = ("value", _scalar_key(value))
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
        out[path] = ("set", type(value).__qualname__, key, frozenset(_key(v) for v in value))
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
            # ... and its class's values (a helper whose class body holds ``seen = []``).
            attrs.update({f"class:{k}": v for k, v in _class_values(type(value), attrs).items()})
            kind, items = "object", [(f"{path}.{k}", k, v) for k, v in attrs.items()]
        # Scalar items are kept in the container's own entry (a long list of numbers is one entry), the others
        # get theirs.
        scalars = tuple((_key(k), _scalar_key(v)) for _, k, v in items if isinstance(v, _SCALARS))
        out[path] = (kind, type(value).__qualname__, key, len(items), getattr(value, "shape", None), scalars)
        for sub_path, _, v in items:
            if not isinstance(v, _SCALARS) and len(out) <= _DEEP_ENTRIES:
                _deep(v, sub_path, out, seen, tracked, depth + 1)


def module_state(module, deep=False):
    """What a forward could leave behind in ``module``'s tree: per submodule, its attributes and registries.

    Parameters and buffers are compared by identity here (``p.data`` writes by the fingerprints above):
    ``self.running_mean = 0.9 * self.running_mean + 0.1 * x.mean(0)`` rebinds a buffer to a new tensor,
    and ``self.last_lot = x.detach()`` adds an attribute; both carry the data out of the step unnoised.
    ``deep=False``: each attribute's identity, a tensor's version, a container's length and items (cheap).
    ``deep=True`` (the engine, every lot): everything reachable from the attributes and from the user's
    classes' container attributes, tensors and arrays by content (:func:`_deep`), so that a deque of recent
    lots, a helper object's running mean, a tensor in a dict or an array written in place show.
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
        if deep and not own:
            # Class-level values a forward reaches through the instance (``seen = []`` in the class body,
            # ``self.seen.append(...)``, a helper object with ``__call__``).
            for k, v in _class_values(type(sub), vars(sub)).items():
                if f"class:{k}" not in attrs:
                    _deep(v, f"class:{k}", attrs, seen, tracked)
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
    if now == before:  # the common case, compared in C; the walk below names what changed
        return
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
