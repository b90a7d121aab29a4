"""Warnings and errors that carry privacy meaning."""


class PrivacyLeakWarning(RuntimeWarning):
    """A privacy-relevant value was taken from the data, or a guarantee is not certified.

    Raised, for example, when bounds are read off the private data, when
    ``delta >= 1 / n_samples``, when noise is switched off (``epsilon=inf``) or
    when a method from a paper is run in its uncertified, faithful form.
    """


class DPCompatibilityWarning(RuntimeWarning):
    """A scikit-learn option was ignored because it would break the DP guarantee."""


class BudgetExceededError(ValueError):
    """A fit would spend more privacy budget than its ledger has left."""


class LedgerDetachedError(RuntimeError):
    """A spend on a copy of an in-memory ``BudgetLedger`` that lives in another process.

    An in-memory ledger (``path=None``) that is pickled (for example into a
    ``GridSearchCV(n_jobs=2)`` worker) or inherited by a forked process becomes
    a detached, read-only snapshot: spends recorded there would never reach the
    original ledger, so they are refused instead of being silently lost.
    """
