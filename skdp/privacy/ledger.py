"""A privacy budget ledger shared by every fit that touches the same data.

Fits record what they spent: each spend's (epsilon, delta), its adjacency and, when its mechanism has
one, its RDP curve (:class:`~skdp.privacy.composition.Spend`). The totals compose under one adjacency
(the ledger's ``adjacency``, fixed when it is created). ``composition="rdp"`` (the default for a new
ledger) makes the caps an RDP privacy filter at one fixed order chosen from the caps (Feldman & Zrnic
2021): valid when each next fit is chosen after seeing earlier results; ``"basic"`` adds epsilons and
deltas (ledgers written before RDP curves were recorded open as ``"basic"``).
A ledger survives ``sklearn.base.clone`` (``__deepcopy__`` returns ``self``)
so all fits of a ``GridSearchCV`` land in one place.

Three kinds of storage, behind one small interface (``_STORES``, by URL scheme):

* In memory (``path=None``): one process only. Pickling it (``n_jobs=2``
  sends estimators to worker processes by pickle) or inheriting it by fork
  gives a *detached*, read-only snapshot whose spends raise
  ``LedgerDetachedError``: a spend there would never reach the original and
  the budget would fork silently.
* SQLite (``path="budget.db"``): fits in other processes record into the
  same file under SQLite's own locking. The caps live in the file (table
  ``meta``), so every process checks against the data owner's caps, and a
  second opener cannot bring a different cap. ``BudgetLedger("sqlite:///budget.db")`` is the
  same. Single host: SQLite's locks do not hold over network file systems.
* PostgreSQL (``BudgetLedger("postgresql://user@host/db")``): processes on any host share one
  budget. psycopg (v3) directly, not SQLAlchemy: the ledger needs four statements and one row
  lock, and a second abstraction layer would only hide which lock is taken. Check-and-spend is
  one transaction that first locks the caps row (``SELECT ... FOR UPDATE``): concurrent spenders
  queue on that lock, so none can read a total another is about to change; the running totals
  live in the same row, so a check costs O(1) however long the log. A client killed inside the
  transaction leaves nothing (the server rolls it back); a lost server raises
  ``LedgerUnavailableError`` naming the URL, and nothing is recorded.

Every spend records its time, epsilon, delta, label, the estimator that spent it, a digest of
that estimator's parameters and the host; ``records()`` and ``to_frame()`` list them.

Invariants, whatever is passed to ``spend``: the totals never decrease, are
never NaN, and never pass the caps (up to a relative 1e-9, so that spending
exactly the remainder is allowed). Spends must be finite-or-inf numbers
``>= 0``; an infinite epsilon (a debugging fit without noise) can be
recorded only under an infinite cap.
"""
import contextlib
import hashlib
import json
import math
import numbers
import os
import pathlib
import socket
import sqlite3
import threading
import time

from ..exceptions import BudgetExceededError, LedgerDetachedError, LedgerUnavailableError
from .accounting import check_real
from .composition import (ADJACENCIES, CURVELESS_DELTA_SHARE, Spend, basic, compose, filter_order,
                          rdp_epsilon)

COMPOSITIONS = ("rdp", "basic")

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
# Columns added after the first release; older files get them on open (NULL for old rows).
_EXTRA_COLUMNS = (("estimator", "TEXT"), ("params_digest", "TEXT"), ("host", "TEXT"), ("adjacency", "TEXT"),
                  ("cost", "TEXT"))
RECORD_FIELDS = ("time", "epsilon", "delta", "label", "estimator", "params_digest", "host", "adjacency", "cost")


def _record_spend(record):
    """The :class:`Spend` of a stored record (an old record, without cost: known only as (epsilon, delta))."""
    if record.get("cost"):
        try:
            return Spend.from_dict(json.loads(record["cost"]))
        except (ValueError, KeyError, TypeError):
            pass  # a curve at other orders, or damaged: the record's (epsilon, delta) still hold
    return Spend(record["epsilon"], record["delta"], record.get("adjacency") or "add/remove")


def _check_composition(composition):
    if composition is not None and composition not in COMPOSITIONS:
        raise ValueError(f"composition must be one of {COMPOSITIONS} or None, got {composition!r}.")
    return composition


def composed_total(spends, caps, composition, adjacency="add/remove"):
    """``(epsilon, delta)`` the ledger reports for ``spends`` under its caps and composition.

    Basic: the sums, under one adjacency. RDP: the tighter of the sums and of
    the RDP composition converted at the delta cap (at the sum of deltas when
    the ledger has no caps), at the best order: the cost of the spends as
    recorded. An epsilon cap without a delta cap filters, and so reports, by
    basic composition.
    """
    spends = [s.under(adjacency) for s in spends]
    if composition == "basic" or (filter_order(*caps) is None and (math.isfinite(caps[0]) or caps[1] < 1)):
        # (An epsilon cap without a usable delta cap filters by basic composition: what is reported is what
        # is checked.)
        return basic(spends)
    eps, delta, _ = compose(spends, delta=caps[1] if caps[1] < 1 else None)
    return eps, delta


def filter_epsilon(spends, caps, composition, adjacency="add/remove"):
    """The epsilon that the filter compares with the cap (and whether the deltas fit).

    Basic: the sum of epsilons, admitted while the deltas' sum fits. RDP: the
    RDP composition at the filter's fixed order (:func:`filter_order` of the
    caps) converted at ``(1 - CURVELESS_DELTA_SHARE)`` of the delta cap,
    curve-less spends added by basic composition within the other share: an
    RDP filter at one order and one conversion delta, both fixed by the caps
    (Feldman & Zrnic 2021), valid under adaptive choice. All spends are stated
    under the ledger's ``adjacency``, fixed when it was created. Without a
    usable delta cap (0 or 1), or with an infinite epsilon cap, it filters by
    basic composition.
    """
    spends = [s.under(adjacency) for s in spends]
    eps_b, delta_b = basic(spends)
    if composition == "basic":
        return eps_b, delta_b
    order = filter_order(*caps)
    if order is None:
        return eps_b, delta_b
    eps = rdp_epsilon(spends, caps[1], order=order, reserve=CURVELESS_DELTA_SHARE * caps[1])
    return eps, caps[1]


def params_digest(params):
    """Short SHA-256 digest of a parameter dict (``repr`` of the sorted items), for the ledger's records."""
    if params is None:
        return None
    text = repr(sorted((str(k), repr(v)) for k, v in dict(params).items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


class _SQLiteStore:
    """Spends and caps in an SQLite file (one host): ``BEGIN IMMEDIATE`` serialises writers."""

    def __init__(self, path):
        self.path = path
        self.where = f"the ledger file {path!r}"

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
    def transaction(self, create=False):
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

    @contextlib.contextmanager
    def reading(self):
        con = self._connect()
        try:
            yield con
        finally:
            con.close()

    def stored_caps(self, con):
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

    @staticmethod
    def stored_settings(con):
        """``(composition, adjacency)`` stored with the caps (a file written before them: basic, add/remove)."""
        rows = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('composition_rdp', "
                                "'adjacency_replace_one')").fetchall())
        return ("rdp" if rows.get("composition_rdp") == 1.0 else "basic",
                "replace-one" if rows.get("adjacency_replace_one") == 1.0 else "add/remove")

    def open(self, eps_cap, delta_cap, composition=None, adjacency=None):
        """Create the tables, then write the caps (first opener) or compare them (later openers)."""
        with self.transaction(create=True) as con:  # two first openers must not both write caps
            for statement in _SCHEMA:
                con.execute(statement)
            have = {row[1] for row in con.execute("PRAGMA table_info(spends)")}
            for name, kind in _EXTRA_COLUMNS:
                if name not in have:
                    con.execute(f"ALTER TABLE spends ADD COLUMN {name} {kind}")
            new = self.stored_caps(con) is None
            stored = _agree_caps(self, self.stored_caps(con), eps_cap, delta_cap,
                                 lambda caps: con.executemany("INSERT INTO meta VALUES (?, ?)",
                                                              [("epsilon", caps[0]), ("delta", caps[1])]))
            if new:
                con.executemany("INSERT INTO meta VALUES (?, ?)", [
                    ("composition_rdp", 1.0 if (composition or "rdp") == "rdp" else 0.0),
                    ("adjacency_replace_one", 1.0 if adjacency == "replace-one" else 0.0)])
            settings = _agree_settings(self, self.stored_settings(con), (composition, adjacency))
            # Files written before the CHECK constraints may hold refills or NaNs (NULL).
            bad = con.execute("SELECT COUNT(*) FROM spends WHERE epsilon IS NULL OR epsilon < 0 "
                              "OR delta IS NULL OR delta < 0 OR delta > 1").fetchone()[0]
            if bad:
                raise ValueError(f"The ledger file {self.path!r} holds {bad} invalid spends (NaN or "
                                 "negative): its total cannot be trusted. Start a new ledger file.")
        return stored, settings

    @staticmethod
    def records_in(con):
        rows = con.execute(f"SELECT {', '.join(RECORD_FIELDS)} FROM spends ORDER BY rowid").fetchall()
        return [dict(zip(RECORD_FIELDS, r)) for r in rows]

    def spend(self, record, check):
        """Call ``check(records, caps, settings)`` then insert ``record``, in one write transaction."""
        with self.transaction() as con:  # write lock: no other process checks meanwhile
            # The caps come from the file, inside the transaction: this object's attributes
            # could be stale or altered, the file is the data owner's record.
            caps = _require(self, self.stored_caps(con))
            check(self.records_in(con), caps, self.stored_settings(con))  # raises: rolled back
            con.execute(f"INSERT INTO spends ({', '.join(RECORD_FIELDS)}) VALUES "
                        f"({', '.join('?' * len(RECORD_FIELDS))})", tuple(record[f] for f in RECORD_FIELDS))

    def read(self):
        """``(caps, records)`` from one snapshot."""
        with self.reading() as con:
            return _require(self, self.stored_caps(con)), self.records_in(con)


class _PostgresStore:
    """Spends and caps on a PostgreSQL server: a row lock on the caps serialises check-and-spend."""

    _DDL = (
        "CREATE TABLE IF NOT EXISTS skdp_budget (id INTEGER PRIMARY KEY CHECK (id = 1), "
        "epsilon DOUBLE PRECISION NOT NULL, delta DOUBLE PRECISION NOT NULL, "
        "spent_epsilon DOUBLE PRECISION NOT NULL DEFAULT 0, spent_delta DOUBLE PRECISION NOT NULL DEFAULT 0)",
        "CREATE TABLE IF NOT EXISTS skdp_spends (id BIGSERIAL PRIMARY KEY, time DOUBLE PRECISION, "
        "epsilon DOUBLE PRECISION NOT NULL CHECK (epsilon >= 0), "
        "delta DOUBLE PRECISION NOT NULL CHECK (delta >= 0 AND delta <= 1), label TEXT, estimator TEXT, "
        "params_digest TEXT, host TEXT)",
        # Added with RDP curves; older databases get them on open (NULL: composed as before).
        "ALTER TABLE skdp_budget ADD COLUMN IF NOT EXISTS composition TEXT",
        "ALTER TABLE skdp_budget ADD COLUMN IF NOT EXISTS adjacency TEXT",
        "ALTER TABLE skdp_spends ADD COLUMN IF NOT EXISTS adjacency TEXT",
        "ALTER TABLE skdp_spends ADD COLUMN IF NOT EXISTS cost TEXT",
    )

    def __init__(self, url):
        self.url = url
        self.where = f"the PostgreSQL ledger at {_redact(url)}"
        self._con, self._pid = None, None

    def _connection(self):
        import psycopg

        # One connection per process, kept: connecting costs more than a spend. Dropped on pickling.
        if self._con is None or self._pid != os.getpid() or self._con.closed:
            try:
                self._con = psycopg.connect(self.url, connect_timeout=10)
            except psycopg.OperationalError as exc:
                raise LedgerUnavailableError(f"Cannot reach {self.where}: {exc}".strip()) from exc
            self._pid = os.getpid()
        return self._con

    @contextlib.contextmanager
    def transaction(self):
        import psycopg

        con = self._connection()
        try:
            with con.transaction():
                yield con
        except psycopg.OperationalError as exc:
            # The server went away (restart, network): the transaction did not commit, so
            # nothing was recorded. A new connection is made on the next call.
            with contextlib.suppress(Exception):
                con.close()
            self._con = None
            raise LedgerUnavailableError(
                f"Lost {self.where} ({str(exc).strip() or type(exc).__name__}); nothing was recorded. "
                "Retry once the server is back: the ledger stays consistent.") from exc

    def open(self, eps_cap, delta_cap, composition=None, adjacency=None):
        with self.transaction() as con:
            # Two first openers race to create the tables: serialise them on an advisory lock.
            con.execute("SELECT pg_advisory_xact_lock(7355608)")
            for statement in self._DDL:
                con.execute(statement)
            row = con.execute("SELECT epsilon, delta, composition, adjacency FROM skdp_budget WHERE id = 1").fetchone()
            stored = None if row is None else (_check_cap_epsilon(row[0]), _check_cap_delta(row[1]))
            caps = _agree_caps(self, stored, eps_cap, delta_cap, lambda caps: con.execute(
                "INSERT INTO skdp_budget (id, epsilon, delta, composition, adjacency) VALUES (1, %s, %s, %s, %s)",
                (*caps, composition or "rdp", adjacency or "add/remove")))
            kept = ((composition or "rdp", adjacency or "add/remove") if row is None
                    else (row[2] or "basic", row[3] or "add/remove"))
            return caps, _agree_settings(self, kept, (composition, adjacency))

    @staticmethod
    def _records(con):
        rows = con.execute(f"SELECT {', '.join(RECORD_FIELDS)} FROM skdp_spends ORDER BY id").fetchall()
        return [dict(zip(RECORD_FIELDS, r)) for r in rows]

    def spend(self, record, check):
        with self.transaction() as con:
            # The row lock: every other spender waits here until this transaction ends, so the
            # records read below are all there are when this spend is checked and written.
            row = con.execute("SELECT epsilon, delta, composition, adjacency FROM skdp_budget WHERE id = 1 "
                              "FOR UPDATE").fetchone()
            caps = _require(self, None if row is None else (row[0], row[1]))
            # raises: rolled back, nothing recorded
            check(self._records(con), caps, (row[2] or "basic", row[3] or "add/remove"))
            con.execute("UPDATE skdp_budget SET spent_epsilon = spent_epsilon + %s, "
                        "spent_delta = spent_delta + %s WHERE id = 1", (record["epsilon"], record["delta"]))
            con.execute(f"INSERT INTO skdp_spends ({', '.join(RECORD_FIELDS)}) VALUES "
                        f"({', '.join(['%s'] * len(RECORD_FIELDS))})", tuple(record[f] for f in RECORD_FIELDS))

    def read(self):
        with self.transaction() as con:
            row = con.execute("SELECT epsilon, delta FROM skdp_budget WHERE id = 1").fetchone()
            return _require(self, None if row is None else (row[0], row[1])), self._records(con)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_con"], state["_pid"] = None, None  # a connection does not travel
        return state


def _redact(url):
    # user:password@ -> user@ (a password must not land in logs and error messages)
    if "@" in url and ":" in url.split("://", 1)[-1].split("@", 1)[0]:
        scheme, rest = url.split("://", 1)
        user = rest.split("@", 1)[0].split(":", 1)[0]
        return f"{scheme}://{user}:***@{rest.split('@', 1)[1]}"
    return url


def _require(store, caps):
    if caps is None:
        raise ValueError(f"{store.where[0].upper()}{store.where[1:]} has no caps (its meta table is empty): "
                         "it was altered outside BudgetLedger; spends against it are refused.")
    return caps


def _agree_caps(store, stored, eps_cap, delta_cap, write):
    """The caps to use: ``stored`` if any (refusing different asked caps), else the asked ones, written."""
    if stored is None:
        stored = (math.inf if eps_cap is None else eps_cap, 1.0 if delta_cap is None else delta_cap)
        write(stored)
        return stored
    if (eps_cap is not None and eps_cap != stored[0]) or (delta_cap is not None and delta_cap != stored[1]):
        asked = (stored[0] if eps_cap is None else eps_cap, stored[1] if delta_cap is None else delta_cap)
        reopen = f"path={store.path!r}" if isinstance(store, _SQLiteStore) else repr(_redact(store.url))
        raise ValueError(
            f"{store.where[0].upper()}{store.where[1:]} was created with the caps (epsilon={stored[0]!r}, "
            f"delta={stored[1]!r}); this BudgetLedger asks for (epsilon={asked[0]!r}, "
            f"delta={asked[1]!r}). A budget cannot be changed by reopening it: open it "
            f"with BudgetLedger({reopen}) to use the stored caps, or use a new "
            "ledger for a new budget.")
    return stored


def _agree_settings(store, stored, asked):
    """The stored ``(composition, adjacency)``, refusing others asked (a filter cannot be changed by reopening it)."""
    for name, have, want in zip(("composition", "adjacency"), stored, asked):
        if want is not None and want != have:
            raise ValueError(f"{store.where[0].upper()}{store.where[1:]} was created with {name}={have!r}; this "
                             f"BudgetLedger asks for {name}={want!r}. Open it with {name}=None (or the stored "
                             "one), or use a new ledger.")
    return tuple(stored)


def _store_from_url(url):
    """The storage of a ledger URL: ``sqlite:///path`` or ``postgresql://...`` (registry by scheme)."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a string such as 'sqlite:///budget.db' or 'postgresql://user@host/db', "
                        f"got {url!r}. Pass caps by keyword: BudgetLedger(epsilon=..., delta=...).")
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme not in _STORES:
        raise ValueError(f"Unknown ledger URL {_redact(url)!r}: use 'sqlite:///path/to/budget.db' (one host) or "
                         f"'postgresql://user@host:5432/db' (shared); schemes: {sorted(_STORES)}.")
    return _STORES[scheme](url)


_STORES = {
    "sqlite": lambda url: _SQLiteStore(_check_path(url.split("://", 1)[1][1:] if url.startswith("sqlite:///")
                                                   else url.split("://", 1)[1])),
    "postgresql": _PostgresStore,
    "postgres": _PostgresStore,
}


class BudgetLedger:
    """Total budget, spends and what remains.

    The data owner's caps (``epsilon``, ``delta``) on everything released
    about one data set, and the record of what each fit spent: its (epsilon,
    delta), adjacency and, when its mechanism has one, its RDP curve
    (:class:`~skdp.privacy.composition.Spend`). The ledger refuses
    (``BudgetExceededError``, before any noise is drawn) a spend that would
    take the composed total past a cap.

    - ``composition="rdp"`` (default for a new ledger): the caps are an RDP
      privacy filter (Feldman & Zrnic 2021) at one order fixed from the caps
      (``filter_order``): a spend is admitted while the RDP composition of
      all spends at that order, converted at the delta cap, is within the
      epsilon cap. Valid when each next fit is chosen after seeing earlier
      results. Ten DP-SGD fits at epsilon 1 compose to about 3.6 instead of
      10. It needs a delta cap in (0, 1) (else a finite epsilon cap filters
      as ``"basic"``). Spends known only as (epsilon, delta) (no RDP curve)
      may use at most half the delta cap in total; the RDP part is converted
      at the other half (both fixed by the caps, so that the filter stays
      valid when such spends are chosen adaptively).
    - ``composition="basic"``: a sequence of (epsilon_i, delta_i)-DP releases
      is (sum epsilon_i, sum delta_i)-DP. Exact for one spend; ledgers written
      before RDP curves were recorded open as ``"basic"``.

    Totals are stated under the ledger's ``adjacency``, fixed when it is
    created: an add/remove ledger refuses replace-one spends, a replace-one
    ledger converts add/remove ones. Check and record are one atomic step,
    across threads, and across processes for a stored ledger (SQLite file or
    PostgreSQL server). Estimators take it as their ``ledger`` parameter; it
    survives ``sklearn.base.clone``, so every fit of a search is charged to
    the same ledger. The ledger certifies only the sum of what was
    recorded: a release made without it, or a spend understated by an
    uncertified method, is not covered.

    Parameters
    ----------
    url : str or None, default=None
        Where the ledger lives: ``"sqlite:///budget.db"`` (a file, one host;
        the same as ``path=``) or ``"postgresql://user@host:5432/db"`` (a
        server shared by processes on any host). None: ``path`` or memory.
    epsilon : float or None, default=None
        Total epsilon the data owner allows, > 0 (``inf`` for no limit).
        None means: the cap stored in the ledger's file or database when it
        exists, else ``inf``.
    delta : float or None, default=None
        Total delta the data owner allows, in [0, 1]. None means: the cap
        stored when it exists, else 1.0.
    path : str, os.PathLike or None, default=None
        SQLite file to record spends and caps in, so processes share one
        ledger (its directory must exist; the file is created). The first
        opener writes the caps; a later opener passing different caps is
        refused (a budget cannot be raised by reopening it). None (and no
        ``url``) keeps the ledger in this process's memory.
    composition : {"rdp", "basic"} or None, default=None
        How spends compose against the caps (see above). None: the one
        stored with the ledger, else ``"rdp"``. Stored with the caps: a later
        opener asking for another is refused.
    adjacency : {"add/remove", "replace-one"} or None, default=None
        The neighbouring relation of the ledger's guarantee, fixed when it is
        created (None: the stored one, else ``"add/remove"``). An add/remove
        ledger refuses replace-one spends (``DFSRelease``); a replace-one
        ledger states every spend under replace-one (add/remove spends
        converted: group privacy of two, a Gaussian's doubled sensitivity).

    Attributes
    ----------
    epsilon, delta : float
        The caps (read-only; for a stored ledger, those stored).
    composition : str
        ``"rdp"`` or ``"basic"`` (read-only; for a stored ledger, the one stored).
    adjacency : str
        ``"add/remove"`` or ``"replace-one"`` (read-only; for a stored ledger, the one stored).
    path : str or None
        Absolute path of the SQLite file.
    url : str or None
        The ledger's URL as given (None for memory or ``path=``).

    Raises
    ------
    TypeError, ValueError
        On a cap that is not a number or out of range, caps that differ from
        those stored, or an unknown URL.
    FileNotFoundError
        If the directory of ``path`` does not exist.
    LedgerUnavailableError
        If the PostgreSQL server cannot be reached.

    See Also
    --------
    PrivacyAccountant : The epsilon of one DP-SGD run, which a fit then spends here.
    search_privacy_cost : What a ``GridSearchCV`` spent, by the same composition.
    skdp.model_selection.PrivateSearchCV : A search charged once for its whole output.

    Examples
    --------
    >>> from skdp.privacy import BudgetLedger
    >>> ledger = BudgetLedger(epsilon=3.0, delta=1e-5, composition="basic")
    >>> ledger.spend(1.0, 1e-6, label="first fit")
    >>> ledger.remaining()
    (2.0, 9e-06)
    >>> ledger.entries
    [(1.0, 1e-06, 'first fit')]

    A spend past a cap is refused, and nothing is recorded:

    >>> from skdp.exceptions import BudgetExceededError
    >>> try:
    ...     ledger.spend(2.5, 0.0, label="second fit")
    ... except BudgetExceededError:
    ...     print("refused")
    refused
    >>> ledger.total()
    (1.0, 1e-06)
    """

    def __init__(self, url=None, *, epsilon=None, delta=None, path=None, composition=None, adjacency=None):
        eps_cap = None if epsilon is None else _check_cap_epsilon(epsilon)
        delta_cap = None if delta is None else _check_cap_delta(delta)
        _check_composition(composition)
        if adjacency is not None and adjacency not in ADJACENCIES:
            raise ValueError(f"adjacency must be one of {ADJACENCIES} or None, got {adjacency!r}.")
        if url is not None and path is not None:
            raise ValueError("Give url= or path=, not both (path='budget.db' is url='sqlite:///budget.db').")
        self.url = url
        if url is not None:
            self._store = _store_from_url(url)
        else:
            self._store = None if path is None else _SQLiteStore(_check_path(path))
        self.path = getattr(self._store, "path", None)
        self._entries = []
        self._lock = threading.Lock()
        self._owner_pid = os.getpid()
        self._detached = False
        if self._store is None:
            self._epsilon = math.inf if eps_cap is None else eps_cap
            self._delta = 1.0 if delta_cap is None else delta_cap
            self._composition, self._adjacency = composition or "rdp", adjacency or "add/remove"
        else:
            (self._epsilon, self._delta), (self._composition, self._adjacency) = self._store.open(
                eps_cap, delta_cap, composition, adjacency)

    @property
    def epsilon(self):
        """Total epsilon allowed (float, read-only)."""
        return self._epsilon

    @property
    def delta(self):
        """Total delta allowed (float, read-only)."""
        return self._delta

    @property
    def composition(self):
        """How spends compose against the caps, ``"rdp"`` or ``"basic"`` (str, read-only)."""
        return self._composition

    @property
    def adjacency(self):
        """The neighbouring relation of the ledger's guarantee, ``"add/remove"`` or ``"replace-one"`` (str)."""
        return self._adjacency

    @property
    def filter_order(self):
        """The RDP order of the privacy filter (float), or None when it filters by basic composition."""
        return filter_order(self.epsilon, self.delta) if self.composition == "rdp" else None

    def _caps_records(self):
        if self._store is None:
            with self._lock:
                return (self.epsilon, self.delta), [dict(e) for e in self._entries]
        return self._store.read()

    def _require_attached(self):
        if self._store is None and (self._detached or os.getpid() != self._owner_pid):
            raise LedgerDetachedError(
                "This in-memory BudgetLedger was copied into another process or unpickled: it is a "
                "read-only snapshot, and spends recorded here would be lost to the original ledger. "
                "Use BudgetLedger(path='budget.db') to share one ledger across processes "
                "(e.g. GridSearchCV(n_jobs=2)), or run with n_jobs=1."
            )

    # ---- public API ---------------------------------------------------------------------
    def records(self):
        """Every spend, oldest first, with its time, label, estimator and host.

        Returns
        -------
        records : list of dict
            One dict per spend, oldest first, with keys ``time`` (Unix
            seconds), ``epsilon``, ``delta``, ``label``, ``estimator``,
            ``params_digest`` (a short SHA-256 of the estimator's parameters)
            and ``host``.
        """
        return self._caps_records()[1]

    def to_frame(self):
        """The records as a pandas DataFrame (one row per spend; needs pandas).

        Returns
        -------
        frame : pandas.DataFrame
            One row per spend, oldest first, with the columns of
            :meth:`records`; ``time`` as a timezone-aware UTC datetime (the
            records hold Unix seconds).
        """
        import pandas as pd

        frame = pd.DataFrame(self.records(), columns=list(RECORD_FIELDS))
        frame["time"] = pd.to_datetime(frame["time"].astype(float), unit="s", utc=True)
        return frame

    @property
    def entries(self):
        """List of ``(epsilon, delta, label)`` spends, oldest first."""
        return [(r["epsilon"], r["delta"], r["label"]) for r in self.records()]

    def total(self):
        """``(epsilon, delta)`` spent so far, composed under one adjacency.

        ``"basic"``: the sums of the spends. ``"rdp"``: the tighter of the
        sums and of the RDP composition of the recorded spends converted at
        the delta cap (at the sum of deltas when there is no delta cap), at
        the best order. Under adaptive choice the ledger's guarantee is its
        cap, which its filter enforces (see the class docstring).

        Returns
        -------
        epsilon : float
            Composed epsilon (``inf`` if a fit without noise was recorded).
        delta : float
            Its delta.
        """
        caps, records = self._caps_records()
        return composed_total(map(_record_spend, records), caps, self.composition, self.adjacency)

    def remaining(self):
        """``(epsilon, delta)`` still allowed: cap minus total, at least 0 (inf under an inf cap).

        Returns
        -------
        epsilon : float
            Epsilon cap minus the epsilon spent, at least 0; ``inf`` under an
            infinite cap.
        delta : float or None
            Delta cap minus the delta spent, at least 0. None when the ledger
            has no delta cap (``delta=1``, what a ledger opened without one
            holds): an (epsilon, 1)-guarantee says nothing, so "1 minus the
            deltas spent" is no budget that a next fit could be given (it would
            read as room for a delta near 1). Set a delta cap (e.g. ``1e-5``) to
            have one to report.
        """
        eps, delta = self.total()
        # An infinite cap stays infinite even after an infinite spend (inf - inf is NaN).
        eps_left = math.inf if math.isinf(self.epsilon) else max(self.epsilon - eps, 0.0)
        return eps_left, (None if self.delta >= 1.0 else max(self.delta - delta, 0.0))

    def _check_records(self, cost, records, caps, settings, then=()):
        """Raise ``BudgetExceededError`` if ``cost`` (then ``then``) on top of ``records`` passes the caps."""
        composition, adjacency = settings
        if any(c.adjacency == "replace-one" for c in (cost, *then)) and adjacency == "add/remove":
            raise ValueError(
                "This spend is (epsilon, delta)-DP under replace-one adjacency only (e.g. DFSRelease: a release "
                "of one row per record), which says nothing under add/remove; this ledger's guarantee is "
                "add/remove. Open a ledger with adjacency='replace-one' for these data (every spend is then "
                "stated under replace-one). Nothing was recorded.")
        before = [_record_spend(r) for r in records]
        after = filter_epsilon(before + [cost, *then], caps, composition, adjacency)
        if _over(after, caps):
            spent = composed_total(before, caps, composition, adjacency)
            how = (f"composed by RDP at order {filter_order(*caps):g}, the filter's" if composition == "rdp"
                   and filter_order(*caps) is not None else "composed by basic composition")
            what = (f"(epsilon={cost.epsilon:.4g}, delta={cost.delta:.3g}, {cost.adjacency})" if not then else
                    f"{1 + len(then)} releases (epsilon " + " + ".join(f"{c.epsilon:.4g}" for c in (cost, *then))
                    + f", delta {sum(c.delta for c in (cost, *then)):.3g})")
            raise BudgetExceededError(
                f"Privacy budget exceeded: spending {what} on top of (epsilon={spent[0]:.4g}, delta={spent[1]:.3g}) already spent "
                f"would pass the total (epsilon={caps[0]:.4g}, delta={caps[1]:.3g}) ({how}: "
                f"epsilon {after[0]:.4g}, delta {after[1]:.3g}).")

    def check(self, epsilon, delta, *, cost=None):
        """Raise ``BudgetExceededError`` if spending ``(epsilon, delta)`` would overdraw.

        A check only; use ``spend`` to check and record atomically.

        Parameters
        ----------
        epsilon : float
            Epsilon of the planned spend, >= 0 (inf allowed).
        delta : float
            Delta of the planned spend, in [0, 1].
        cost : Spend or None, default=None
            The spend with its adjacency and RDP curve; None: known only as
            ``(epsilon, delta)``, add/remove.

        Raises
        ------
        TypeError, ValueError
            On a spend that is not a number or out of range.
        BudgetExceededError
            If the spend would pass a cap.
        LedgerDetachedError
            On a detached copy of an in-memory ledger.
        """
        cost = _cost(epsilon, delta, cost)
        self._require_attached()
        caps, records = self._caps_records()
        self._check_records(cost, records, caps, (self.composition, self.adjacency))

    def check_all(self, costs):
        """Raise ``BudgetExceededError`` if the spends ``costs``, made one after the other, would overdraw.

        A check only, of a fit that charges several releases (each is recorded later by ``spend``): a
        fit refused here spends nothing, where checking each release as it is charged would keep the
        first ones spent.

        Parameters
        ----------
        costs : sequence of Spend
            The releases, in the order they will be charged.

        Raises
        ------
        TypeError, ValueError
            On a spend that is not a number or out of range.
        BudgetExceededError
            If the spends together would pass a cap.
        LedgerDetachedError
            On a detached copy of an in-memory ledger.
        """
        costs = [_cost(c.epsilon, c.delta, c) for c in costs]
        if not costs:
            return
        self._require_attached()
        caps, records = self._caps_records()
        self._check_records(costs[0], records, caps, (self.composition, self.adjacency), then=costs[1:])

    def spend(self, epsilon, delta, label="", *, estimator=None, params=None, cost=None):
        """Check and record a spend atomically (across processes for a stored ledger).

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
        estimator : str or None, default=None
            Name of the estimator that spent it (recorded).
        params : dict or None, default=None
            Its parameters; a digest of them is recorded (``params_digest``).
        cost : Spend or None, default=None
            The spend with its adjacency and RDP curve (what estimators
            record); None: known only as ``(epsilon, delta)``, add/remove.

        Raises
        ------
        TypeError, ValueError
            On a spend that is not a number, NaN or out of range; nothing is recorded.
        BudgetExceededError
            If the spend would pass a cap; nothing is recorded.
        LedgerDetachedError
            On a detached copy of an in-memory ledger (see the class docstring).
        LedgerUnavailableError
            If the PostgreSQL server is lost; nothing is recorded.
        """
        cost = _cost(epsilon, delta, cost)
        record = {"time": time.time(), "epsilon": cost.epsilon, "delta": cost.delta, "label": str(label),
                  "estimator": None if estimator is None else str(estimator),
                  "params_digest": params_digest(params), "host": socket.gethostname(),
                  "adjacency": cost.adjacency, "cost": json.dumps(cost.to_dict())}
        self._require_attached()
        if self._store is None:
            with self._lock:
                self._check_records(cost, self._entries, (self.epsilon, self.delta),
                                    (self.composition, self.adjacency))
                self._entries.append(record)
            return
        self._store.spend(record, lambda records, caps, settings: self._check_records(
            cost, records, caps, settings))

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
            state["_entries"] = [dict(e) for e in self._entries]  # snapshot
        del state["_lock"]
        return state

    def __setstate__(self, state):
        state.setdefault("_owner_pid", None)
        self.__dict__.update(state)
        self._lock = threading.Lock()
        # An unpickled in-memory ledger is a copy, in this process or (n_jobs > 1) another:
        # its spends would never reach the original. It stays readable, spends raise.
        # A stored ledger keeps writing to the shared file or server.
        self._detached = self._store is None

    def __repr__(self):
        eps, delta = self.total()
        detached = ", detached" if self._store is None and self._detached else ""
        where = f"url={_redact(self.url)!r}" if self.url is not None else f"path={self.path!r}"
        return (f"BudgetLedger(epsilon={self.epsilon}, delta={self.delta}, composition={self.composition!r}, "
                f"spent=({eps:.4g}, {delta:.3g}), {where}{detached})")


def _cost(epsilon, delta, cost):
    """The :class:`Spend` to record: ``cost`` (its epsilon and delta must be those given), else (epsilon, delta)."""
    epsilon, delta = _check_spend(epsilon, delta)
    if cost is None:
        return Spend(epsilon, delta)
    if not isinstance(cost, Spend):
        raise TypeError(f"cost must be a skdp.privacy.composition.Spend or None, got {type(cost).__name__}.")
    if (cost.epsilon, cost.delta) != (epsilon, 0.0 if math.isinf(epsilon) else delta):
        raise ValueError(f"cost states (epsilon={cost.epsilon!r}, delta={cost.delta!r}) but the spend is "
                         f"(epsilon={epsilon!r}, delta={delta!r}).")
    return cost


def charge(ledger, epsilon, delta, label, cost=None):
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
    cost : Spend or None, default=None
        The spend with its adjacency and RDP curve, when the mechanism knows them.
    """
    if ledger is None:
        return
    if all(isinstance(v, numbers.Real) and not isinstance(v, bool) and v == 0 for v in (epsilon, delta)):
        return
    if cost is None:
        ledger.spend(epsilon, delta, label)
    else:
        ledger.spend(epsilon, delta, label, cost=cost)
