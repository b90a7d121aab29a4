"""Audit taps: the one place where a mechanism's exact input can be seen, and its noise removed.

Every mechanism in skdp passes the value it is about to noise through
:func:`release` (with the sensitivity it claims and the norm it is measured
in) and scales its noise by :func:`noise_factor`. Outside a tap both are the
identity and cost one context-variable read. Inside one, which only tests and
:mod:`skdp.audit` open:

- :func:`noise_off`: every mechanism adds zero noise. Whatever is fitted inside
  reports ``privacy_certified_=False`` ("noise removed by an audit tap"), so an
  audit twin can claim its epsilon without ever certifying it. (It replaces the
  subclass flag ``PrivateSearchCV._noise_off_for_audit``, which any subclass
  could set while the search still certified.)
- :func:`recording`: noise off, and each release is recorded
  (:class:`Release`: mechanism, exact value, claimed sensitivity, norm).
- :func:`replaying`: noise off, and the i-th release is compared with the i-th
  recorded one: their distance must be at most the claimed sensitivity (else
  :class:`SensitivityExceeded`), and the *recorded* value is returned in its
  place. A fit on a neighbouring data set replayed this way releases exactly
  what the first fit released, mechanism by mechanism; so every array the two
  fitted estimators hold must then be equal, unless something reached the
  released model without going through a mechanism (a leak). This is the
  generic sensitivity harness of ``tests/test_sensitivity_harness.py``.
- :func:`scaled_noise`: every mechanism's noise multiplied by a factor (0.5: a
  sensitivity silently doubled, the audits' second twin); not certified either.
- :func:`gradient_canaries` (opened by :func:`skdp.audit.one_run_audit` only):
  the noise stays, and every DP-SGD release also gets the clipped gradients of
  synthetic Dirac canaries, Poisson-sampled into the lots like records. Not
  certified: the fit trained on records that are not the user's.

The state is a ``contextvars.ContextVar``: local to the thread (and asyncio
task), never sent to joblib workers, restored when the block ends.
"""
import contextlib
import contextvars
import math
from dataclasses import dataclass

import numpy as np

_MODE = contextvars.ContextVar("skdp_audit_tap", default=None)

#: Relative and absolute slack of the replay's sensitivity check (float32 sums of clipped gradients).
RTOL, ATOL = 1e-4, 1e-6


class SensitivityExceeded(AssertionError):
    """A replayed release moved by more than the sensitivity its mechanism claims."""


@dataclass
class Release:
    """One mechanism call: its name, the exact value it noised, the sensitivity it claimed, the norm."""
    mechanism: str
    value: object
    sensitivity: float
    norm: str
    adjacency: str = "add/remove"


def _flat(value):
    """The value as one float64 vector (arrays, scalars, tensors, lists of tensors)."""
    import torch

    if isinstance(value, (list, tuple)):
        parts = [_flat(v) for v in value]
        return np.concatenate(parts) if parts else np.zeros(0)
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.float64).reshape(-1).numpy()
    return np.asarray(value, dtype=np.float64).reshape(-1)


def _copy(value):
    import torch

    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def distance(a, b, norm):
    """``||a - b||`` in ``norm`` ("l1", "l2" or "linf"); inf when the shapes differ."""
    a, b = _flat(a), _flat(b)
    if a.shape != b.shape:
        return math.inf
    d = np.abs(a - b)
    if norm == "l1":
        return float(d.sum())
    if norm == "linf":
        return float(d.max(initial=0.0))
    return float(np.sqrt(np.sum(d ** 2)))


class _Recorder:
    noise_off = True

    def __init__(self):
        self.releases = []

    def release(self, mechanism, value, sensitivity, norm, adjacency="add/remove"):
        self.releases.append(Release(mechanism, _copy(value), float(sensitivity), norm, adjacency))
        return value


class _Replayer:
    noise_off = True

    def __init__(self, releases, replace_one=False):
        self.releases = list(releases)
        self.replace_one = replace_one
        self.position = 0
        self.distances = []

    def release(self, mechanism, value, sensitivity, norm, adjacency="add/remove"):
        if self.position >= len(self.releases):
            raise SensitivityExceeded(f"{mechanism}: release {self.position} has no recorded counterpart "
                                      f"({len(self.releases)} recorded): the neighbour made more releases.")
        ref = self.releases[self.position]
        self.position += 1
        if ref.mechanism != mechanism:
            raise SensitivityExceeded(f"release {self.position - 1} is {mechanism!r} here and "
                                      f"{ref.mechanism!r} in the recording.")
        moved = distance(value, ref.value, norm)
        self.distances.append((mechanism, moved, float(sensitivity)))
        bound = max(float(sensitivity), ref.sensitivity)
        if self.replace_one and adjacency == "add/remove":
            bound *= 2  # a replacement is a removal then an addition (group privacy of 2, as skdp accounts it)
        if not moved <= bound * (1 + RTOL) + ATOL:
            raise SensitivityExceeded(f"{mechanism}: one record moved the release by {moved:.6g} in {norm}, "
                                      f"above the claimed sensitivity {bound:.6g} ({moved / max(bound, 1e-300):.3g}x).")
        if mechanism.startswith("public:"):
            return ref.value
        return _copy(ref.value)


class _NoiseOff:
    noise_off = True

    @staticmethod
    def release(mechanism, value, sensitivity, norm, adjacency="add/remove"):
        return value


class _ScaledNoise(_NoiseOff):
    noise_off = False

    def __init__(self, factor):
        self.noise_scale = float(factor)


class _GradientCanaries:
    """Dirac gradient canaries in every DP-SGD release; any outer tap (noise off, scaled) still applies.

    Canary i is a synthetic record whose clipped gradient, in each engine, is ``C e_c``: the engine's
    clipping bound C in one coordinate c of its flattened trainable parameters (its own, distinct, chosen
    at the engine's first release), 0 elsewhere: the largest contribution one record may make to the sum.
    An included canary joins each lot independently with the lot's Poisson rate q (``lot_drawn``, called by
    the sampler as it draws the records' lot) and every release on that lot adds its gradient to the
    clipped sum before the noise: the same clipping bound, noise and accountant as the real records.

    Each engine's entry also keeps, per canary, the running sum over releases of the released noisy sum at
    the canary's coordinate less the records' clipped sum there, in units of C (``residual``): the records'
    value is read in :meth:`add_canaries` before the canaries are added (``pending``), the noisy sum in
    :meth:`released` after the engine wrote it. That is exactly ``(releases on lots the canary joined) +
    noise``; beside it the noise's variance in the same units (``noise_var``) and, per lot, its Poisson rate
    and the engine's releases on it (``lots``), from which :mod:`skdp.audit.gradient` scores it. This
    book-keeping (m floats per engine, two numbers per lot) lives in the tap only.
    """
    alters = True

    def __init__(self, included, rng, outer=None):
        self.included = np.asarray(included, dtype=bool)
        self.rng, self.outer = rng, outer
        self.in_lot = np.zeros(len(self.included), dtype=bool)
        self.lots, self.sample_rate = 0, 0.0
        self.engines = []  # one dict per engine seen: params, the canaries' coordinates, their residual sums

    @property
    def noise_off(self):
        return self.outer is not None and self.outer.noise_off

    @property
    def noise_scale(self):
        return 1.0 if self.outer is None else getattr(self.outer, "noise_scale", 1.0)

    def release(self, mechanism, value, sensitivity, norm, adjacency="add/remove"):
        return value if self.outer is None else self.outer.release(mechanism, value, sensitivity, norm, adjacency)

    def lot_drawn(self, sample_rate):
        self.lots += 1
        self.sample_rate = float(sample_rate)
        self.in_lot = self.included & (self.rng.random(len(self.included)) < sample_rate)

    def check_engine(self, params):
        """Refuse an engine with fewer trainable coordinates than canaries (called before any charge)."""
        size, m = sum(p.numel() for p in params), len(self.included)
        if m > size:
            raise ValueError(f"n_canaries={m} gradient canaries need {m} distinct coordinates, but a network "
                             f"trained here has {int(size)} trainable parameters; use n_canaries <= {int(size)}.")

    def _find(self, params):
        for entry in self.engines:
            if len(entry["params"]) == len(params) and all(a is b for a, b in zip(entry["params"], params)):
                return entry
        return None

    def _engine(self, params, clipped):
        entry = self._find(params)
        if entry is not None:
            return entry
        self.check_engine(params)
        sizes = np.array([p.numel() for p in params])
        m = len(self.included)
        # The coordinates where the records' clipped gradient on this first lot is smallest (ties at random):
        # there the data least masks a canary (a weight of an input that is always 0 is never moved by the
        # data). The choice depends on the records and the lot, never on which canaries are included.
        magnitude = np.abs(np.concatenate([_flat(g) for g in clipped]))
        coords = np.lexsort((self.rng.random(len(magnitude)), magnitude))[:m]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        which = np.searchsorted(starts, coords, side="right") - 1
        offsets = coords - starts[which]
        groups = []  # per parameter tensor holding canaries: their rows (canary indices), their flat offsets
        for j in range(len(params)):
            rows = np.flatnonzero(which == j)
            if len(rows):
                groups.append((j, rows, offsets[rows]))
        entry = {"params": list(params), "which": which, "offsets": offsets, "groups": groups, "releases": 0,
                 "residual": np.zeros(m), "noise_var": 0.0, "lots": {}, "pending": None}
        self.engines.append(entry)
        return entry

    @staticmethod
    def _at_canaries(entry, tensors):
        """The values of ``tensors`` (one per parameter) at the canaries' coordinates, float64, canary order."""
        out = np.zeros(len(entry["which"]))
        for j, rows, offsets in entry["groups"]:
            out[rows] = _flat(tensors[j].detach().reshape(-1)[offsets])
        return out

    def add_canaries(self, params, clipped, max_grad_norm):
        import torch

        entry = self._engine(params, clipped)
        entry["releases"] += 1
        rate_and_releases = entry["lots"].setdefault(self.lots, [self.sample_rate, 0])
        rate_and_releases[1] += 1
        clipped = list(clipped)
        # The records' clipped sum at the canaries' coordinates, before the canaries (kept until the release).
        entry["pending"] = (self._at_canaries(entry, clipped), float(max_grad_norm))
        for j in np.unique(entry["which"][self.in_lot]):
            rows = self.in_lot & (entry["which"] == j)
            g = clipped[j].detach().reshape(-1).clone()
            offsets = torch.as_tensor(entry["offsets"][rows], device=g.device)
            g.index_add_(0, offsets, torch.full((len(offsets),), float(max_grad_norm), dtype=g.dtype, device=g.device))
            clipped[j] = g.reshape(clipped[j].shape)
        return clipped

    def released(self, params, lot_size, noise_std):
        """After the engine wrote ``p.grad = (records + canaries + noise) / lot_size``: add ``canaries + noise``.

        ``noise_std``: the standard deviation of each coordinate of ``p.grad``'s noise (``noise / lot_size``).
        """
        entry = self._find(list(params))
        if entry is None or entry["pending"] is None:
            return
        records, bound = entry["pending"]
        noisy_sum = self._at_canaries(entry, [p.grad for p in entry["params"]]) * float(lot_size)
        entry["residual"] += (noisy_sum - records) / bound
        entry["noise_var"] += (float(noise_std) * float(lot_size) / bound) ** 2
        entry["pending"] = None


def engine_planned(params):
    """Called by a DP-SGD fit with each engine's trainable parameters before it charges anything.

    Outside an audit it does nothing; under :func:`gradient_canaries` it refuses an engine with fewer
    coordinates than canaries, so that a refused audit spends no budget.
    """
    mode = _MODE.get()
    if mode is not None and hasattr(mode, "check_engine"):
        mode.check_engine(list(params))


@contextlib.contextmanager
def post_processing():
    """Context for fits that see no private record (a classifier trained on synthetic data): no canaries.

    Gradient canaries stand for private records; a DP-SGD fit on post-processed data must not receive
    them (it would be audited against a claim it is not part of). An outer tap (noise off, scaled noise)
    still applies inside; outside an audit this is the identity.
    """
    mode = _MODE.get()
    if isinstance(mode, _GradientCanaries):
        token = _MODE.set(mode.outer)
        try:
            yield
        finally:
            _MODE.reset(token)
    else:
        yield


def release(mechanism, value, sensitivity, norm="l2", adjacency="add/remove"):
    """Pass a mechanism's exact value through the active tap; returns the value to add noise to.

    Called by every mechanism just before its noise, with the sensitivity it
    claims for ``value`` under one record's change (in ``norm``: "l1", "l2" or
    "linf"; ``adjacency``: "add/remove" or "replace-one"). Outside a tap it
    returns ``value`` itself.
    """
    mode = _MODE.get()
    return value if mode is None else mode.release(mechanism, value, sensitivity, norm, adjacency)


def public_count(name, value):
    """A count skdp treats as public (the number of records, the sizes of a split), through the tap.

    skdp's analyses assume the number of records is public: it sets DP-SGD's sample rate and the size of
    a search's splits. Neighbouring data sets differ in it by one, so the replay hands the neighbour the
    recorded count: what this assumption declares public is then equal on both sides, and everything
    else must be equal too. Outside a tap it returns ``value``.
    """
    mode = _MODE.get()
    if mode is None or not hasattr(mode, "releases"):
        return value
    return mode.release(f"public:{name}", value, math.inf, "l1", "add/remove")


def noise_factor():
    """1.0; 0.0 inside a tap that removes the noise, the factor of :func:`scaled_noise` inside that one.

    Every mechanism multiplies its noise scale by it.
    """
    mode = _MODE.get()
    if mode is None:
        return 1.0
    return 0.0 if mode.noise_off else getattr(mode, "noise_scale", 1.0)


def noise_removed():
    """Whether an audit tap alters the mechanisms here (noise removed or scaled, canaries added).

    Fits then report ``privacy_certified_=False``.
    """
    mode = _MODE.get()
    return mode is not None and (noise_factor() != 1.0 or getattr(mode, "alters", False))


def lot_drawn(sample_rate):
    """Called by the Poisson sampler as it draws a lot: audit canaries join it with the same rate (else nothing)."""
    mode = _MODE.get()
    if mode is not None and hasattr(mode, "lot_drawn"):
        mode.lot_drawn(sample_rate)


def add_gradient_canaries(params, clipped, max_grad_norm):
    """The DP-SGD clipped sum plus the gradients of the audit canaries in this lot; ``clipped`` outside an audit.

    ``params`` are the engine's trainable parameters and ``clipped`` their clipped gradient sums, in order.
    """
    mode = _MODE.get()
    if mode is None or not hasattr(mode, "add_canaries"):
        return clipped
    return mode.add_canaries(params, clipped, max_grad_norm)


def gradients_released(params, lot_size, noise_std):
    """Called by the DP-SGD engine once it has written the noisy gradients ``param.grad``; nothing outside an audit.

    Under :func:`gradient_canaries` the canaries' scores read the release at their coordinates
    (``param.grad * lot_size``, the noisy sum) and subtract the records' clipped sum there; ``noise_std`` is
    the noise's standard deviation in ``param.grad`` (public: the mechanism's scale).
    """
    mode = _MODE.get()
    if mode is not None and hasattr(mode, "released"):
        mode.released(params, lot_size, noise_std)


@contextlib.contextmanager
def _active(mode):
    token = _MODE.set(mode)
    try:
        yield mode
    finally:
        _MODE.reset(token)


def noise_off():
    """Context: every mechanism adds zero noise; fits inside are not certified (audit twins, tests)."""
    return _active(_NoiseOff())


def scaled_noise(factor):
    """Context: every mechanism's noise is multiplied by ``factor``; fits inside are not certified.

    ``factor=0.5`` is a sensitivity silently doubled (or, with ``max_grad_norm`` doubled, DP-SGD's clipping
    bound doubled while the noise stays calibrated to the old one): an audit twin that must be caught.
    """
    return _active(_ScaledNoise(factor))


def gradient_canaries(included, rng):
    """Context (:func:`skdp.audit.one_run_audit` only): Dirac gradient canaries in every DP-SGD release.

    ``included[i]``: whether canary i is in the training set; ``rng`` draws the canaries' lots and
    coordinates. Yields the mode, whose ``engines`` list each engine's canary coordinates and, per canary,
    the sum over releases of the noisy sum at its coordinate less the records' clipped sum there
    (``residual``). An outer tap (:func:`noise_off`, :func:`scaled_noise`) still applies inside.
    """
    return _active(_GradientCanaries(included, rng, outer=_MODE.get()))


def recording():
    """Context yielding a recorder whose ``releases`` list every mechanism call (noise off)."""
    return _active(_Recorder())


def replaying(releases, replace_one=False):
    """Context: each release is checked against the recorded one and replaced by it (noise off).

    ``replace_one``: the neighbour replaces a record rather than adding one; a mechanism that claims its
    sensitivity under add/remove is then allowed twice it (a replacement is a removal and an addition).
    """
    return _active(_Replayer(releases, replace_one))
