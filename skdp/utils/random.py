"""Randomness without global state, and mechanism noise that nobody can replay.

Two kinds of randomness, kept apart:

- **Non-mechanism randomness** (weight initialisation, random projections of a
  loss, sampling from a released model) goes through a ``numpy.random.Generator``
  made from ``random_state`` by :func:`make_rng`. A fixed ``random_state`` makes
  it reproducible; that is harmless because privacy does not rest on it.
- **Mechanism randomness** (Gaussian noise of DP-SGD, Poisson lots, Laplace on
  counts, the exponential mechanism, randomized response) comes from
  :func:`mechanism_rng`: fresh OS entropy for every fit, never derived from
  ``random_state`` and never stored on a fitted estimator. If it could be
  regenerated, an attacker holding the released estimator could subtract the
  noise, and two fits on neighbouring data would reveal the differing record.

Reproducible noise for experiments is an explicit, warned opt-in:
``with skdp.insecure_noise_seed(0): ...``. Fits inside it warn with
``PrivacyLeakWarning``, set ``noise_seeded_ = True`` and
``privacy_certified_ = False``. The global numpy and torch generators are
never read or reseeded.
"""
import contextlib
import numbers
import threading

import numpy as np
import torch

from ..exceptions import warn_privacy

_STATE = threading.local()


def make_rng(random_state) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` for ``random_state`` (non-mechanism randomness only).

    ``None`` -> seeded from OS entropy; int -> deterministic; a ``Generator``
    is used as it is; a legacy ``RandomState`` seeds a new generator from one
    of its draws (so it is advanced, like scikit-learn does).
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be non-negative, got {random_state}.")
        return np.random.default_rng(int(random_state))
    raise ValueError(
        f"random_state must be None, an int, a numpy Generator or RandomState; got {random_state!r}."
    )


@contextlib.contextmanager
def insecure_noise_seed(seed: int):
    """Make mechanism noise reproducible inside the block: for experiments only, NOT private.

    Every fit inside the block draws its noise, lots and other mechanism
    randomness from ``seed`` (the same seed gives the same noise, fit after
    fit), warns with ``PrivacyLeakWarning`` and reports ``noise_seeded_=True``
    and ``privacy_certified_=False``. Whoever knows the seed can subtract the
    noise. The setting is local to the thread and is not sent to joblib worker
    processes: fits there draw fresh noise. Blocks nest; the previous seed
    (or none) is restored on exit. Only mechanism randomness is affected:
    ``random_state`` still seeds the rest, and the global numpy and torch
    generators are never touched.

    Parameters
    ----------
    seed : int
        Non-negative seed of the mechanism noise inside the block.

    Yields
    ------
    None
        Nothing; the seed holds until the ``with`` block ends.

    Raises
    ------
    ValueError
        If ``seed`` is not a non-negative int.

    See Also
    --------
    skdp.exceptions.PrivacyLeakWarning : Issued by every fit inside the block.
    skdp.privacy.set_privacy_attributes : Reports ``privacy_certified_=False`` for such fits.

    Examples
    --------
    >>> import warnings
    >>> from skdp import DPFisherClassifier, PrivacyLeakWarning, insecure_noise_seed
    >>> X, y = [[0.0], [1.0], [0.2], [0.9]], [0, 1, 0, 1]
    >>> with warnings.catch_warnings(), insecure_noise_seed(7):
    ...     warnings.simplefilter("ignore", PrivacyLeakWarning)
    ...     a = DPFisherClassifier(bounds=(0, 1), classes=[0, 1]).fit(X, y).means_
    ...     b = DPFisherClassifier(bounds=(0, 1), classes=[0, 1]).fit(X, y).means_
    >>> bool((a == b).all())
    True
    """
    if not (isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and seed >= 0):
        raise ValueError(f"insecure_noise_seed needs a non-negative int seed, got {seed!r}.")
    previous = getattr(_STATE, "seed", None)
    _STATE.seed = int(seed)
    try:
        yield
    finally:
        _STATE.seed = previous


def noise_is_seeded() -> bool:
    """Whether an :func:`insecure_noise_seed` block is active in this thread."""
    return getattr(_STATE, "seed", None) is not None


def mechanism_rng(owner=None) -> np.random.Generator:
    """A fresh ``numpy.random.Generator`` for a mechanism's randomness.

    OS entropy, unless inside :func:`insecure_noise_seed`. With ``owner`` (the
    estimator being fitted) it sets ``owner.noise_seeded_`` and warns when the
    noise is seeded. Callers must not keep the generator on a fitted object.
    """
    seed = getattr(_STATE, "seed", None)
    if owner is not None:
        owner.noise_seeded_ = seed is not None
    if seed is None:
        return np.random.default_rng()
    warn_privacy(f"{type(owner).__name__ if owner is not None else 'mechanism'}: noise is seeded by "
        "insecure_noise_seed: reproducible, NOT differentially private (privacy_certified_=False).")
    return np.random.default_rng(seed)


#: torch's CPU generator state (``get_state()``, 5,056 bytes): a 64-bit initial seed, two ints and a 64-bit
#: index, then MT19937's 624 words, each stored in 64 bits.
_MT_WORDS, _MT_OFFSET = 624, 24


def torch_generator(rng: np.random.Generator, device="cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` whose whole state comes from the numpy generator ``rng``.

    torch's CPU generator (MT19937) keeps only the low 32 bits of ``manual_seed``: seeded that way, the
    mechanism noise drawn from it would come from one of 2**32 streams, few enough to enumerate. Its 624
    state words are drawn from ``rng`` instead (about 19,937 bits: all of ``rng``'s entropy). A CUDA
    generator (Philox) takes the whole 64-bit seed. A function of ``rng``: a seeded one gives the same
    generator.
    """
    gen = torch.Generator(device=device)
    if gen.device.type != "cpu":
        gen.manual_seed(int(rng.integers(0, 2**63 - 1)))
        return gen
    seed = int(rng.integers(1, 2**32))
    gen.manual_seed(seed)  # a valid state to overwrite: next draw regenerates the words (left = 1)
    state = gen.get_state().numpy().copy()
    words = state[_MT_OFFSET:_MT_OFFSET + 8 * _MT_WORDS].view("<u8")
    if state.size != 5056 or int(words[0]) != seed or int(words[1]) != (1812433253 * (seed ^ (seed >> 30)) + 1) % 2**32:
        raise RuntimeError(f"torch {torch.__version__}: the CPU generator's state is not laid out as skdp expects "
                           "(MT19937 words at byte 24); skdp will not seed mechanism noise from 32 bits.")
    drawn = rng.integers(0, 2**32, size=_MT_WORDS, dtype=np.uint64)
    if not drawn.any():  # MT19937's one invalid state (probability 2**-19968)
        drawn[0] = 1
    words[:] = drawn
    gen.set_state(torch.from_numpy(state))
    return gen
