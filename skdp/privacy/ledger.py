"""A privacy budget ledger shared by every fit that touches the same data.

Fits record what they spent (basic composition: epsilons and deltas add).
A ledger survives ``sklearn.base.clone`` (``__deepcopy__`` returns ``self``)
so all fits of a ``GridSearchCV`` land in one place. With ``path`` it is
backed by an SQLite file, and fits in other processes (``n_jobs=2``) record
into the same file under SQLite's own locking.
"""
import math
import sqlite3
import threading
import time

from ..exceptions import BudgetExceededError


class BudgetLedger:
    """Total budget, spends and what remains.

    Parameters
    ----------
    epsilon : float, default=inf
        Total epsilon the data owner allows.
    delta : float, default=1.0
        Total delta the data owner allows.
    path : str or None, default=None
        SQLite file to record spends in, so processes share one ledger.

    Examples
    --------
    >>> ledger = BudgetLedger(epsilon=3.0, delta=1e-5)
    >>> ledger.spend(1.0, 1e-6, label="first fit")
    >>> ledger.remaining()
    (2.0, 9e-06)
    """

    def __init__(self, epsilon=math.inf, delta=1.0, path=None):
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}.")
        if not 0 <= delta <= 1:
            raise ValueError(f"delta must be in [0, 1], got {delta}.")
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.path = path
        self._entries = []
        self._lock = threading.Lock()
        if path is not None:
            with self._connect() as con:
                con.execute(
                    "CREATE TABLE IF NOT EXISTS spends "
                    "(time REAL, epsilon REAL, delta REAL, label TEXT)"
                )

    def _connect(self):
        return sqlite3.connect(self.path, timeout=60, isolation_level=None)

    @property
    def entries(self):
        """List of ``(epsilon, delta, label)`` spends, oldest first."""
        if self.path is None:
            return list(self._entries)
        with self._connect() as con:
            rows = con.execute("SELECT epsilon, delta, label FROM spends ORDER BY rowid").fetchall()
        return [tuple(r) for r in rows]

    def total(self):
        """``(epsilon, delta)`` spent so far, by basic composition."""
        entries = self.entries
        return (sum(e[0] for e in entries), sum(e[1] for e in entries))

    def remaining(self):
        eps, delta = self.total()
        return (max(self.epsilon - eps, 0.0), max(self.delta - delta, 0.0))

    def check(self, epsilon, delta):
        """Raise ``BudgetExceededError`` if spending (epsilon, delta) would overdraw."""
        self._check_against(self.total(), epsilon, delta)

    def _check_against(self, spent, epsilon, delta):
        eps_spent, delta_spent = spent
        # A tiny tolerance so that spending exactly the remainder is allowed.
        if eps_spent + epsilon > self.epsilon * (1 + 1e-9) or delta_spent + delta > self.delta * (1 + 1e-9):
            raise BudgetExceededError(
                f"Privacy budget exceeded: spending (epsilon={epsilon:.4g}, delta={delta:.3g}) on top "
                f"of (epsilon={eps_spent:.4g}, delta={delta_spent:.3g}) already spent would pass the "
                f"total (epsilon={self.epsilon:.4g}, delta={self.delta:.3g})."
            )

    def spend(self, epsilon, delta, label=""):
        """Check and record a spend atomically (across processes when ``path`` is set)."""
        if self.path is None:
            with self._lock:
                self._check_against(self.total(), epsilon, delta)
                self._entries.append((float(epsilon), float(delta), str(label)))
            return
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")  # write lock: no other process checks meanwhile
            row = con.execute("SELECT COALESCE(SUM(epsilon), 0), COALESCE(SUM(delta), 0) FROM spends").fetchone()
            try:
                self._check_against(row, epsilon, delta)
            except BudgetExceededError:
                con.execute("ROLLBACK")
                raise
            con.execute("INSERT INTO spends VALUES (?, ?, ?, ?)",
                        (time.time(), float(epsilon), float(delta), str(label)))
            con.execute("COMMIT")
        finally:
            con.close()

    def __deepcopy__(self, memo):
        # clone() deep-copies parameters; a ledger must stay one shared object.
        return self

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self):
        eps, delta = self.total()
        return (f"BudgetLedger(epsilon={self.epsilon}, delta={self.delta}, "
                f"spent=({eps:.4g}, {delta:.3g}), path={self.path!r})")


def charge(ledger, epsilon, delta, label):
    """Spend on ``ledger`` if there is one; spends of nothing are not recorded."""
    if ledger is not None and epsilon > 0:
        ledger.spend(epsilon, delta, label)
