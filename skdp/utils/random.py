"""Randomness without global state.

Every random draw in skdp goes through a ``numpy.random.Generator`` made from
``random_state`` or through a ``torch.Generator`` seeded from it. ``None``
means fresh OS entropy: the global numpy and torch generators are never read
or reseeded, so a user's own seeding can neither weaken nor replay our noise.
"""
import numbers

import numpy as np
import torch


def make_rng(random_state):
    """Return a ``numpy.random.Generator`` for ``random_state``.

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


def torch_generator(rng, device="cpu"):
    """A ``torch.Generator`` on ``device`` seeded from the numpy generator ``rng``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(rng.integers(0, 2**63 - 1)))
    return gen
