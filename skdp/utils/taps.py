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
    """1.0, or 0.0 inside a tap that removes the noise: every mechanism multiplies its noise scale by it."""
    mode = _MODE.get()
    return 0.0 if mode is not None and mode.noise_off else 1.0


def noise_removed():
    """Whether an audit tap removes the noise here (fits then report ``privacy_certified_=False``)."""
    return noise_factor() == 0.0


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


def recording():
    """Context yielding a recorder whose ``releases`` list every mechanism call (noise off)."""
    return _active(_Recorder())


def replaying(releases, replace_one=False):
    """Context: each release is checked against the recorded one and replaced by it (noise off).

    ``replace_one``: the neighbour replaces a record rather than adding one; a mechanism that claims its
    sensitivity under add/remove is then allowed twice it (a replacement is a removal and an addition).
    """
    return _active(_Replayer(releases, replace_one))
