"""A privacy budget ledger shared by every fit that touches the same data.

Fits record what they spent (basic composition: epsilons and deltas add).
A ledger survives ``sklearn.base.clone`` (``__deepcopy__`` returns ``self``)
so all fits of a ``GridSearchCV`` land in one place.

Two kinds of storage:

* In memory (``path=None``): one process only. Pickling it (``n_jobs=2``
  sends estimators to worker processes by pickle) or inheriting it by fork
  gives a *detached*, read-only snapshot whose spends raise
  ``LedgerDetachedError``: a spend there would never reach the original and
  the budget would fork silently.
* SQLite (``path="budget.db"``): fits in other processes record into the
  same file under SQLite's own locking. The caps live in the file (table
  ``meta``), so every process checks against the data owner's caps, and a
  second opener cannot bring a different cap.

Invariants, whatever is passed to ``spend``: the totals never decrease, are
never NaN, and never pass the caps (up to a relative 1e-9, so that spending
exactly the remainder is allowed). Spends must be finite-or-inf numbers
``>= 0``; an infinite epsilon (a debugging fit without noise) can be
recorded only under an infinite cap.
"""
import contextlib
import math
import numbers
import os
import pathlib
import sqlite3
import threading
import time

from ..exceptions import BudgetExceededError, LedgerDetachedError
from .accounting import check_real

# Relative slack on the caps: spending exactly the remainder must pass even though
# sum(spends) may round one ulp above the cap.
CAP_TOLERANCE = 1e-9

_SCHEMA = (
    # CHECKs refuse NaN (stored by SQLite as NULL) and negative spends at the storage level
    # too, for files written by other code.
    "CREATE TABLE IF NOT EXISTS spends (time REAL, "
    "epsilon REAL NOT NULL CHECK (epsilon >= 0), "
    "delta REAL NOT NULL CHECK (delta >= 0 AND delta <= 1), label TEXT)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value REAL NOT NULL)",
)


def _check_cap_epsilon(epsilon):
    return check_real("epsilon", epsilon, 0.0, math.inf, low_closed=False, high_closed=True,
                      hint="It is the total epsilon the data owner allows; inf for no limit.")


def _check_cap_delta(delta):
    return check_real("delta", delta, 0.0, 1.0, low_closed=True, high_closed=True,
                      hint="It is the total delta the data owner allows.")


def _check_spend(epsilon, delta):
    # A negative spend would refill the budget and a NaN one would make every later
    # comparison False (so every later spend pass): both are refused here.
    epsilon = check_real("epsilon", epsilon, 0.0, math.inf, low_closed=True, high_closed=True,
                         hint="A spend is the epsilon a fit uses: a number >= 0 (inf for a fit "
                              "without noise).")
    delta = check_real("delta", delta, 0.0, 1.0, low_closed=True, high_closed=True,
                       hint="A spend's delta is a probability >= 0 (0 for a fit without noise).")
    return epsilon, delta


def _check_path(path):
    try:
        path = os.fsdecode(os.fspath(path))
    except TypeError:
        raise TypeError(f"path must be a file name (str or os.PathLike) or None, got {path!r} "
                        f"of type {type(path).__name__}.") from None
    if path in ("", ":memory:"):
        raise ValueError(f"path={path!r} is not a file: SQLite would give every connection its own "
                         "empty database and spends would not add up. Use path=None for an in-memory "
                         "ledger or a file name such as path='budget.db'.")
    # Absolute, so that worker processes started in another directory open the same file.
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Cannot create the ledger file {path!r}: its directory {directory!r} "
                                "does not exist. Create it first or choose another path.")
    if os.path.isdir(path):
        raise IsADirectoryError(f"path={path!r} is a directory; give a file name inside it, "
                                "e.g. path='budget.db'.")
    return path


def _over(totals, caps):
    # Fail closed: written as "not <=" so a NaN total counts as over the cap.
    return any(not total <= cap * (1 + CAP_TOLERANCE) for total, cap in zip(totals, caps))


class BudgetLedger:
    """Total budget, spends and what remains.

    Parameters
    ----------
    epsilon : float or None, default=None
        Total epsilon the data owner allows, > 0 (``inf`` for no limit).
        None means: the cap stored in the ledger file ``path`` when it
        exists, else ``inf``.
    delta : float or None, default=None
        Total delta the data owner allows, in [0, 1]. None means: the cap
        stored in ``path`` when it exists, else 1.0.
    path : str, os.PathLike or None, default=None
        SQLite file to record spends and caps in, so processes share one
        ledger (its directory must exist; the file is created). The first
        opener writes the caps; a later opener passing different caps is
        refused (a budget cannot be raised by reopening its file). None
        keeps the ledger in this process's memory.

    Attributes
    ----------
    epsilon, delta : float
        The caps (read-only; for a file ledger, those stored in the file).
    path : str or None
        Absolute path of the SQLite file.

    Raises
    ------
    TypeError, ValueError
        On a cap that is not a number or out of range, or caps that differ
        from those stored in ``path``.
    FileNotFoundError
        If the directory of ``path`` does not exist.

    Examples
    --------
    >>> ledger = BudgetLedger(epsilon=3.0, delta=1e-5)
    >>> ledger.spend(1.0, 1e-6, label="first fit")
    >>> ledger.remaining()
    (2.0, 9e-06)
    """

    def __init__(self, epsilon=None, delta=None, path=None):
        eps_cap = None if epsilon is None else _check_cap_epsilon(epsilon)
        delta_cap = None if delta is None else _check_cap_delta(delta)
        self.path = None if path is None else _check_path(path)
        self._entries = []
        self._lock = threading.Lock()
        self._owner_pid = os.getpid()
        self._detached = False
        if self.path is None:
            self._epsilon = math.inf if eps_cap is None else eps_cap
            self._delta = 1.0 if delta_cap is None else delta_cap
        else:
            self._epsilon, self._delta = self._open(eps_cap, delta_cap)

    @property
    def epsilon(self):
        """Total epsilon allowed (float, read-only)."""
        return self._epsilon

    @property
    def delta(self):
        """Total delta allowed (float, read-only)."""
        return self._delta

    # ---- SQLite storage -----------------------------------------------------------------
    def _connect(self, create=False):
        # mode=rw: a spend must not silently create an empty file (a fresh, full budget) when
        # the ledger file was deleted or moved after it was opened.
        uri = pathlib.Path(self.path).as_uri() + ("?mode=rwc" if create else "?mode=rw")
        try:
            return sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None)
        except sqlite3.OperationalError as exc:
            raise FileNotFoundError(f"Cannot open the ledger file {self.path!r} ({exc}); it was "
                                    "deleted or moved after this ledger opened it.") from exc

    @contextlib.contextmanager
    def _write_transaction(self, create=False):
        """One connection, one ``BEGIN IMMEDIATE`` transaction: committed if the block ends, rolled back if not."""
        con = self._connect(create=create)
        try:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        finally:
            con.close()

    def _stored_caps(self, con):
        try:
            rows = dict(con.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError as exc:
            raise ValueError(f"The ledger file {self.path!r} has no caps ({exc}): it was replaced or "
                             "not written by BudgetLedger; spends against it are refused.") from exc
        if not rows:
            return None
        try:
            return _check_cap_epsilon(rows["epsilon"]), _check_cap_delta(rows["delta"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"The ledger file {self.path!r} holds invalid caps {rows}: {exc}") from exc

    def _require_caps(self, con):
        caps = self._stored_caps(con)
        if caps is None:
            raise ValueError(f"The ledger file {self.path!r} has no caps (its meta table is empty): "
                             "it was altered outside BudgetLedger; spends against it are refused.")
        return caps

    def _open(self, eps_cap, delta_cap):
        """Create the tables, then write the caps (first opener) or compare them (later openers)."""
        with self._write_transaction(create=True) as con:  # two first openers must not both write caps
            for statement in _SCHEMA:
                con.execute(statement)
            stored = self._stored_caps(con)
            if stored is None:
                stored = (math.inf if eps_cap is None else eps_cap,
                          1.0 if delta_cap is None else delta_cap)
                con.executemany("INSERT INTO meta VALUES (?, ?)",
                                [("epsilon", stored[0]), ("delta", stored[1])])
            elif ((eps_cap is not None and eps_cap != stored[0])
                  or (delta_cap is not None and delta_cap != stored[1])):
                asked = (stored[0] if eps_cap is None else eps_cap,
                         stored[1] if delta_cap is None else delta_cap)
                raise ValueError(
                    f"The ledger file {self.path!r} was created with the caps (epsilon={stored[0]!r}, "
                    f"delta={stored[1]!r}); this BudgetLedger asks for (epsilon={asked[0]!r}, "
                    f"delta={asked[1]!r}). A budget cannot be changed by reopening its file: open it "
                    f"with BudgetLedger(path={self.path!r}) to use the stored caps, or use a new "
                    "file for a new budget."
                )
            # Files written before the CHECK constraints may hold refills or NaNs (NULL).
            bad = con.execute("SELECT COUNT(*) FROM spends WHERE epsilon IS NULL OR epsilon < 0 "
                              "OR delta IS NULL OR delta < 0 OR delta > 1").fetchone()[0]
            if bad:
                raise ValueError(f"The ledger file {self.path!r} holds {bad} invalid spends (NaN or "
                                 "negative): its total cannot be trusted. Start a new ledger file.")
        return stored

    @staticmethod
    def _sql_totals(con):
        return tuple(con.execute("SELECT COALESCE(SUM(epsilon), 0.0), COALESCE(SUM(delta), 0.0) "
                                 "FROM spends").fetchone())

    # ---- in-memory storage --------------------------------------------------------------
    @staticmethod
    def _sum(entries):
        # The one summation used both to check a spend and to report totals, so that what
        # was checked is exactly what is reported.
        return (sum((e[0] for e in entries), 0.0), sum((e[1] for e in entries), 0.0))

    def _require_attached(self):
        if self.path is None and (self._detached or os.getpid() != self._owner_pid):
            raise LedgerDetachedError(
                "This in-memory BudgetLedger was copied into another process or unpickled: it is a "
                "read-only snapshot, and spends recorded here would be lost to the original ledger. "
                "Use BudgetLedger(path='budget.db') to share one ledger across processes "
                "(e.g. GridSearchCV(n_jobs=2)), or run with n_jobs=1."
            )

    # ---- public API ---------------------------------------------------------------------
    @property
    def entries(self):
        """List of ``(epsilon, delta, label)`` spends, oldest first."""
        if self.path is None:
            with self._lock:
                return list(self._entries)
        con = self._connect()
        try:
            rows = con.execute("SELECT epsilon, delta, label FROM spends ORDER BY rowid").fetchall()
        finally:
            con.close()
        return [tuple(r) for r in rows]

    def total(self):
        """``(epsilon, delta)`` spent so far, by basic composition (sums of the spends)."""
        if self.path is None:
            with self._lock:
                return self._sum(self._entries)
        con = self._connect()
        try:
            return self._sql_totals(con)
        finally:
            con.close()

    def remaining(self):
        """``(epsilon, delta)`` still allowed: cap minus total, at least 0 (inf under an inf cap)."""
        eps, delta = self.total()
        # An infinite cap stays infinite even after an infinite spend (inf - inf is NaN).
        return tuple(math.inf if math.isinf(cap) else max(cap - spent, 0.0)
                     for cap, spent in ((self.epsilon, eps), (self.delta, delta)))

    def _raise_exceeded(self, epsilon, delta, spent, caps):
        raise BudgetExceededError(
            f"Privacy budget exceeded: spending (epsilon={epsilon:.4g}, delta={delta:.3g}) on top "
            f"of (epsilon={spent[0]:.4g}, delta={spent[1]:.3g}) already spent would pass the "
            f"total (epsilon={caps[0]:.4g}, delta={caps[1]:.3g})."
        )

    def check(self, epsilon, delta):
        """Raise ``BudgetExceededError`` if spending ``(epsilon, delta)`` would overdraw.

        A check only; use ``spend`` to check and record atomically.

        Parameters
        ----------
        epsilon : float
            Epsilon of the planned spend, >= 0 (inf allowed).
        delta : float
            Delta of the planned spend, in [0, 1].

        Raises
        ------
        TypeError, ValueError
            On a spend that is not a number or out of range.
        BudgetExceededError
            If the spend would pass a cap.
        LedgerDetachedError
            On a detached copy of an in-memory ledger.
        """
        epsilon, delta = _check_spend(epsilon, delta)
        self._require_attached()
        if self.path is None:
            with self._lock:
                spent, caps = self._sum(self._entries), (self.epsilon, self.delta)
        else:
            con = self._connect()
            try:
                spent, caps = self._sql_totals(con), self._require_caps(con)
            finally:
                con.close()
        if _over((spent[0] + epsilon, spent[1] + delta), caps):
            self._raise_exceeded(epsilon, delta, spent, caps)

    def spend(self, epsilon, delta, label=""):
        """Check and record a spend atomically (across processes when ``path`` is set).

        Parameters
        ----------
        epsilon : float
            Epsilon spent, >= 0. ``inf`` (a fit without noise) is recorded only
            under an infinite cap; under a finite cap it raises
            ``BudgetExceededError``.
        delta : float
            Delta spent, in [0, 1].
        label : str, default=""
            What spent it, for the record.

        Raises
        ------
        TypeError, ValueError
            On a spend that is not a number, NaN or out of range; nothing is recorded.
        BudgetExceededError
            If the spend would pass a cap; nothing is recorded.
        LedgerDetachedError
            On a detached copy of an in-memory ledger (see the class docstring).
        """
        epsilon, delta = _check_spend(epsilon, delta)
        label = str(label)
        self._require_attached()
        entry = (epsilon, delta, label)
        if self.path is None:
            with self._lock:
                # Check the totals that will be reported after the spend, not a re-derivation.
                new_totals = self._sum(self._entries + [entry])
                if _over(new_totals, (self.epsilon, self.delta)):
                    self._raise_exceeded(epsilon, delta, self._sum(self._entries),
                                         (self.epsilon, self.delta))
                self._entries.append(entry)
            return
        with self._write_transaction() as con:  # write lock: no other process checks meanwhile
            # The caps come from the file, inside the transaction: this object's attributes
            # could be stale or altered, the file is the data owner's record.
            caps = self._require_caps(con)
            spent = self._sql_totals(con)
            con.execute("INSERT INTO spends VALUES (?, ?, ?, ?)", (time.time(), *entry))
            # Same query as total(): what is checked is what will be reported.
            if _over(self._sql_totals(con), caps):
                self._raise_exceeded(epsilon, delta, spent, caps)

    # ---- copies -------------------------------------------------------------------------
    def __deepcopy__(self, memo):
        # clone() deep-copies parameters; a ledger must stay one shared object.
        return self

    def __copy__(self):
        # A shallow copy would be a second in-memory ledger with its own entries: a fork.
        return self

    def __getstate__(self):
        with self._lock:
            state = self.__dict__.copy()
            state["_entries"] = list(self._entries)  # snapshot
        del state["_lock"]
        return state

    def __setstate__(self, state):
        state.setdefault("_owner_pid", None)
        self.__dict__.update(state)
        self._lock = threading.Lock()
        # An unpickled in-memory ledger is a copy, in this process or (n_jobs > 1) another:
        # its spends would never reach the original. It stays readable, spends raise.
        # A file ledger keeps writing to the shared file.
        self._detached = self.path is None

    def __repr__(self):
        eps, delta = self.total()
        detached = ", detached" if self.path is None and self._detached else ""
        return (f"BudgetLedger(epsilon={self.epsilon}, delta={self.delta}, "
                f"spent=({eps:.4g}, {delta:.3g}), path={self.path!r}{detached})")


def charge(ledger, epsilon, delta, label):
    """Spend ``(epsilon, delta)`` on ``ledger`` if there is one.

    Parameters
    ----------
    ledger : BudgetLedger or None
        Where to record; None records nothing.
    epsilon, delta : float
        The spend. Only a spend of exactly nothing, ``(0, 0)``, is skipped:
        a NaN or negative epsilon reaches ``spend`` and is refused there (it
        used to be skipped silently by ``epsilon > 0``), and ``(0, delta)``
        with ``delta > 0`` is recorded.
    label : str
        What spent it.
    """
    if ledger is None:
        return
    if all(isinstance(v, numbers.Real) and not isinstance(v, bool) and v == 0 for v in (epsilon, delta)):
        return
    ledger.spend(epsilon, delta, label)
