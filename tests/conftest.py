"""Shared test helpers."""
import contextlib
import warnings

import pytest

from skdp import PrivacyLeakWarning, insecure_noise_seed


def quiet(fn, *args, **kwargs):
    """Call ``fn`` with ``PrivacyLeakWarning`` silenced (tests that read bounds or labels from data on purpose)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        return fn(*args, **kwargs)


@contextlib.contextmanager
def seeded_noise_context(seed=0):
    """Reproducible mechanism noise for tests that need determinism (NOT private; warnings silenced)."""
    with warnings.catch_warnings(), insecure_noise_seed(seed):
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        yield


@pytest.fixture
def seeded_noise():
    """The :func:`seeded_noise_context` factory, as a fixture."""
    return seeded_noise_context


@pytest.fixture
def no_privacy_warnings():
    """Silence ``PrivacyLeakWarning`` for a whole module: ``pytestmark = pytest.mark.usefixtures(...)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        yield
