"""Ledger backends by URL (SQLite, PostgreSQL): races, a killed spender, a lost server, Dask sweeps.

The PostgreSQL tests run against a real throwaway server on loopback (``skdp.utils.pgserver``).
Outside CI they skip when PostgreSQL is not installed; ``.ci/run`` installs it and sets
``SKDP_REQUIRE_POSTGRES=1``, under which a missing server fails instead of skipping.
"""
import multiprocessing as mp
import os
import signal
import time
import uuid

import numpy as np
import pytest

from skdp import BudgetExceededError, BudgetLedger, DPMomentumClassifier, LedgerUnavailableError
from skdp.utils.pgserver import server_binaries, throwaway_postgres

NEEDS_POSTGRES = "PostgreSQL server binaries not installed (apt-get install postgresql; .ci/run does)"


def _postgres_or_skip():
    if server_binaries() is None:
        if os.environ.get("SKDP_REQUIRE_POSTGRES") == "1":
            pytest.fail(NEEDS_POSTGRES + ", and SKDP_REQUIRE_POSTGRES=1")
        pytest.skip(NEEDS_POSTGRES)


@pytest.fixture(scope="session")
def postgres_server():
    _postgres_or_skip()
    with throwaway_postgres() as server:
        yield server


def _new_database(server):
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.url, autocommit=True) as con:
        con.execute(f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'budget.db'}"
    return _new_database(request.getfixturevalue("postgres_server"))


def test_url_backends_record_caps_spends_and_metadata(ledger_url):
    ledger = BudgetLedger(ledger_url, epsilon=3.0, delta=1e-5)
    ledger.spend(1.0, 1e-6, label="first", estimator="DPMomentumClassifier", params={"lr": 0.1})
    ledger.spend(0.5, 0.0, label="second")
    assert ledger.total() == pytest.approx((1.5, 1e-6)) and ledger.remaining()[0] == pytest.approx(1.5)
    records = ledger.records()
    assert [r["label"] for r in records] == ["first", "second"]
    assert records[0]["estimator"] == "DPMomentumClassifier" and len(records[0]["params_digest"]) == 16
    assert records[0]["host"] and records[0]["time"] <= time.time()
    frame = ledger.to_frame()
    assert list(frame["epsilon"]) == [1.0, 0.5] and "host" in frame.columns
    with pytest.raises(BudgetExceededError):
        ledger.spend(1.6, 0.0)
    assert ledger.total() == pytest.approx((1.5, 1e-6)) and len(ledger.records()) == 2  # nothing recorded
    reopened = BudgetLedger(ledger_url)  # the stored caps, the same spends
    assert (reopened.epsilon, reopened.delta) == (3.0, 1e-5) and reopened.total() == ledger.total()
    with pytest.raises(ValueError, match="cannot be changed by reopening"):
        BudgetLedger(ledger_url, epsilon=100.0)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError):
            ledger.spend(bad, 0.0)


def test_bad_urls_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="sqlite:///"):
        BudgetLedger("mysql://x@y/z")
    with pytest.raises(TypeError, match="by keyword"):
        BudgetLedger(5.0)
    with pytest.raises(ValueError, match="not both"):
        BudgetLedger("sqlite:///a.db", path="b.db")


def _spender(url, n, eps, out):
    ledger = BudgetLedger(url)
    done = 0
    for i in range(n):
        try:
            ledger.spend(eps, 0.0, label=f"{os.getpid()}-{i}")
            done += 1
        except BudgetExceededError:
            pass
    out.put(done)


def _race(target, args, n_procs=8):
    """Run ``target(*args, out)`` in ``n_procs`` processes at once; the sum of what they put in ``out``."""
    ctx = mp.get_context("fork")  # children only open the ledger: fork spares 8 imports of torch
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, out)) for _ in range(n_procs)]
    for p in procs:
        p.start()
    done = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    return done


def test_racing_processes_never_overspend_and_lose_nothing(ledger_url):
    # 8 processes x 50 spends of 0.3 against a cap of 60: 200 fit, 200 must be refused.
    BudgetLedger(ledger_url, epsilon=60.0, delta=1.0)
    succeeded = _race(_spender, (ledger_url, 50, 0.3))
    ledger = BudgetLedger(ledger_url)
    records = ledger.records()
    assert len(records) == succeeded == 200  # every reported spend recorded once, none lost or doubled
    assert len({r["label"] for r in records}) == 200
    assert ledger.total()[0] == pytest.approx(sum(r["epsilon"] for r in records))
    assert ledger.total()[0] <= 60.0 * (1 + 1e-9)


def _stuck_spender(url, marker):
    import skdp.privacy.ledger as module

    def stuck(totals, caps):  # called inside the check-and-spend transaction
        open(marker, "w").close()
        time.sleep(60)
        return False
    module._over = stuck
    BudgetLedger(url).spend(1.0, 0.0, label="killed")


def test_a_spender_killed_mid_transaction_leaves_no_record(ledger_url, tmp_path):
    ledger = BudgetLedger(ledger_url, epsilon=10.0, delta=1.0)
    ledger.spend(1.0, 0.0, label="before")
    marker = tmp_path / "inside"
    proc = mp.get_context("fork").Process(target=_stuck_spender, args=(ledger_url, str(marker)))
    proc.start()
    for _ in range(600):
        if marker.exists():
            break
        time.sleep(0.05)
    assert marker.exists(), "the child never reached the transaction"
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    after = BudgetLedger(ledger_url)
    assert after.total() == (1.0, 0.0) and [r["label"] for r in after.records()] == ["before"]
    after.spend(2.0, 0.0, label="after")  # the lock died with the process
    assert after.total() == (3.0, 0.0)


def test_a_lost_server_is_a_clear_error_and_the_ledger_stays_consistent():
    _postgres_or_skip()
    with throwaway_postgres() as server:
        ledger = BudgetLedger(server.url, epsilon=10.0, delta=1.0)
        ledger.spend(1.0, 0.0, label="before")
        server.stop()
        with pytest.raises(LedgerUnavailableError, match=f"127.0.0.1:{server.port}"):
            ledger.spend(1.0, 0.0, label="during")
        server.start()
        assert ledger.total() == (1.0, 0.0)  # reconnects; the failed spend left nothing
        ledger.spend(2.0, 0.0, label="after")
        assert [r["label"] for r in ledger.records()] == ["before", "after"] and ledger.total() == (3.0, 0.0)


@pytest.mark.slow
def test_grid_search_on_a_dask_cluster_records_every_fit_in_postgres(postgres_server):
    pytest.importorskip("distributed")
    import joblib
    from distributed import Client, LocalCluster
    from sklearn.model_selection import GridSearchCV

    from skdp import search_privacy_cost

    url = _new_database(postgres_server)
    ledger = BudgetLedger(url, epsilon=100.0, delta=1.0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    search = GridSearchCV(DPMomentumClassifier(classes=[0, 1], max_epochs=1, ledger=ledger),
                          {"lr": [0.05, 0.1, 0.2], "epsilon": [0.5, 1.0, 2.0]}, cv=3, error_score="raise")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster), joblib.parallel_backend("dask"):
        search.fit(X, y)
    records = ledger.records()
    assert len(records) == 28  # 9 candidates x 3 folds + the refit
    assert len({r["host"] for r in records}) >= 1 and all(r["estimator"] == "DPMomentumClassifier"
                                                           for r in records)
    # search_costs bounds each fold's spend over the fold sizes a stratified split can give: the ledger's sum
    # (a delta cap of 1 filters by basic composition) lies just under their sum, and the RDP composition of the
    # recorded curves just under search_privacy_cost's
    from skdp.privacy.composition import basic, compose
    from skdp.privacy.ledger import _record_spend
    from skdp.privacy.search import search_costs

    planned = basic(search_costs(search, n_samples=len(X)))[0]
    assert planned * (1 - 0.01) <= ledger.total()[0] <= planned
    cost = search_privacy_cost(search, n_samples=len(X))[0]
    assert cost < planned
    recorded = compose([_record_spend(r) for r in records])[0]
    assert cost * (1 - 0.01) <= recorded <= cost


@pytest.mark.slow
def test_private_search_on_a_dask_cluster_charges_the_postgres_ledger_once(postgres_server):
    pytest.importorskip("distributed")
    import joblib
    from distributed import Client, LocalCluster

    from skdp import PrivateSearchCV

    url = _new_database(postgres_server)
    ledger = BudgetLedger(url, epsilon=10.0, delta=1e-3)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    search = PrivateSearchCV(DPMomentumClassifier(classes=[0, 1], max_epochs=2), {"lr": [0.05, 0.2]},
                             epsilon=4.0, delta=1e-5, n_trials_mean=3, ledger=ledger, n_jobs=2)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster), joblib.parallel_backend("dask"):
        search.fit(X, y)
    records = ledger.records()
    assert len(records) == 1 and records[0]["epsilon"] == pytest.approx(search.epsilon_) and search.epsilon_ <= 4.0
    assert search.predict(X).shape == (400,)


# -- RDP curves in every backend (issue 27) -------------------------------------------------------------
def _rdp_spender(url, n, out):
    from skdp.privacy.composition import Spend

    ledger, cost, done = BudgetLedger(url), Spend.gaussian(0.3, 1e-6), 0
    for i in range(n):
        try:
            ledger.spend(cost.epsilon, cost.delta, label=f"{os.getpid()}-{i}", cost=cost)
            done += 1
        except BudgetExceededError:
            pass
    out.put(done)


def test_racing_rdp_spenders_fill_the_filter_exactly_and_never_overspend(ledger_url):
    from skdp.privacy.composition import LEDGER_ORDERS, Spend, rdp_budget

    BudgetLedger(ledger_url, epsilon=3.0, delta=1e-5)
    succeeded = _race(_rdp_spender, (ledger_url, 4))
    ledger = BudgetLedger(ledger_url)
    assert ledger.composition == "rdp" and ledger.filter_order == 8.0
    # The filter at order 8 admits exactly floor(budget / rdp(8)) identical Gaussian spends, basic only 2.
    one = Spend.gaussian(0.3, 1e-6).rdp[LEDGER_ORDERS.index(8.0)]
    fits = int(rdp_budget(8.0, 3.0, 1e-5) // one)
    assert succeeded == len(ledger.records()) == fits >= 4
    assert all(r["adjacency"] == "add/remove" and '"rdp": [' in r["cost"] for r in ledger.records())
    assert ledger.total()[0] <= 3.0 * (1 + 1e-9)


def test_a_ledger_file_written_before_rdp_opens_as_basic_and_keeps_its_records(tmp_path):
    import sqlite3

    from skdp.privacy.composition import Spend

    path = tmp_path / "old.db"
    con = sqlite3.connect(path)  # the first release's schema: no composition, adjacency or cost
    con.execute("CREATE TABLE spends (time REAL, epsilon REAL NOT NULL CHECK (epsilon >= 0), "
                "delta REAL NOT NULL CHECK (delta >= 0 AND delta <= 1), label TEXT)")
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value REAL NOT NULL)")
    con.executemany("INSERT INTO meta VALUES (?, ?)", [("epsilon", 3.0), ("delta", 1e-5)])
    con.executemany("INSERT INTO spends VALUES (?, ?, ?, ?)", [(0.0, 1.0, 1e-6, "a"), (0.0, 0.5, 0.0, "b")])
    con.commit()
    con.close()
    ledger = BudgetLedger(path=str(path))
    assert ledger.composition == "basic" and ledger.total() == pytest.approx((1.5, 1e-6))
    cost = Spend.gaussian(0.3, 1e-6)
    ledger.spend(cost.epsilon, cost.delta, cost=cost)  # recorded with its curve, composed as before
    assert ledger.total() == pytest.approx((1.5 + cost.epsilon, 2e-6))
    with pytest.raises(ValueError, match="composition='rdp'"):
        BudgetLedger(path=str(path), composition="rdp")
