"""skdp's warnings and errors, in one home.

``warn_privacy`` issues a ``PrivacyLeakWarning`` that points at the user's
line: the first frame outside skdp and the libraries it calls through
(scikit-learn, skorch, joblib, torch), whatever the call depth.
"""
import sys
import warnings

__all__ = ["PrivacyLeakWarning", "BudgetExceededError", "LedgerUnavailableError", "LedgerDetachedError",
           "UnsupportedModelError", "UnsupportedModuleError", "TorchUnavailableError", "StreamedDataError",
           "warn_privacy"]


class PrivacyLeakWarning(RuntimeWarning):
    """A privacy-relevant value was taken from the data, or a guarantee is not certified.

    Raised, for example, when bounds are read off the private data, when
    ``delta >= 1 / n_samples``, when noise is switched off (``epsilon=inf``) or
    when a method from a paper is run in its uncertified, faithful form.
    """


class BudgetExceededError(ValueError):
    """A fit would spend more privacy budget than its ledger has left."""


class LedgerUnavailableError(RuntimeError):
    """The ledger's database (a PostgreSQL server) cannot be reached; nothing was recorded.

    Check-and-spend is one transaction, so a spend cut off by a lost server
    leaves the ledger as it was; retry once the server is back.
    """


class LedgerDetachedError(RuntimeError):
    """A spend on a copy of an in-memory ``BudgetLedger`` that lives in another process.

    An in-memory ledger (``path=None``) that is pickled (for example into a
    ``GridSearchCV(n_jobs=2)`` worker) or inherited by a forked process becomes
    a detached, read-only snapshot: spends recorded there would never reach the
    original ledger, so they are refused instead of being silently lost.
    """


class UnsupportedModelError(TypeError):
    """The hooks cannot clip this model exactly (``clipping="auto"`` then uses torch.func)."""


class UnsupportedModuleError(TypeError):
    """A module breaks per-example sensitivity (mixes examples or stores data); no clipping can fix it."""


class TorchUnavailableError(TypeError):
    """A step of the model has no torch path; use the black-box attack."""


# Frames of these packages are skipped: the warning points at the code that called into them.
_INTERNAL_PACKAGES = frozenset({"skdp", "sklearn", "skorch", "joblib", "torch", "contextlib", "warnings"})


class StreamedDataError(ValueError):
    """Rows read on demand (a memmap, a torch Dataset) were unusable when read again.

    Streamed data are validated in one pass before the ledger is charged;
    rows that are read again during training or prediction and are then not
    finite or of another shape (the file or the Dataset changed) stop the
    fit. The charge made before the first lot stands: the steps already
    taken were released to the model.
    """


def warn_privacy(message, category=PrivacyLeakWarning):
    """Warn with ``category`` at the first frame of the caller's own code.

    The warning is attributed to the first frame outside skdp and the
    libraries it calls through (scikit-learn, skorch, joblib, torch), so
    that it names the user's line (the ``fit`` call), not skdp's internals,
    whatever the call depth; warning filters keyed on the user's module then
    apply. skdp warns this way whenever a guarantee is weakened or void:
    bounds or labels read from the private data, ``epsilon=inf``, seeded
    noise, a too-large delta, a method run in its uncertified form.

    Parameters
    ----------
    message : str
        The warning's text: what is not private, and how to make it so.
    category : type, default=PrivacyLeakWarning
        Warning class to issue (a subclass of ``Warning``).

    See Also
    --------
    PrivacyLeakWarning : The category issued by default.

    Examples
    --------
    >>> import warnings
    >>> from skdp.exceptions import PrivacyLeakWarning, warn_privacy
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_privacy("bounds were read from the private data")
    >>> caught[0].category is PrivacyLeakWarning, str(caught[0].message)
    (True, 'bounds were read from the private data')
    """
    frame, level = sys._getframe(1), 2  # stacklevel 2 is the caller of warn_privacy
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in _INTERNAL_PACKAGES:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
