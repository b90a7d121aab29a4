"""Hostile inputs to the privacy core: ledgers, accountant and calibration.

Each test here was written against a reproduced bug and failed before its fix.
Tests of former hangs assert the error only; a short ``signal.alarm`` turns a
regression into a failure instead of a stuck test run.
"""
import contextlib
import copy
import math
import os
import pickle
import signal
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skdp import BudgetExceededError, BudgetLedger, PrivacyAccountant, calibrate_noise_multiplier, compute_epsilon
from skdp.exceptions import LedgerDetachedError
from skdp.privacy.ledger import charge


@contextlib.contextmanager
def deadline(seconds=30):
    """Fail (instead of hanging the run) if the block takes longer than ``seconds``."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def _alarm(signum, frame):
        raise TimeoutError(f"took longer than {seconds}s: a search loop did not stop")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(params=["memory", "sqlite"])
def make_ledger(request, tmp_path):
    """Factory for a fresh ledger of either kind (a new file per call for SQLite)."""
    counter = iter(range(10**6))

    def make(epsilon=None, delta=None):
        kwargs = {} if epsilon is None else {"epsilon": epsilon}
        if delta is not None:
            kwargs["delta"] = delta
        if request.param == "sqlite":
            kwargs["path"] = str(tmp_path / f"ledger{next(counter)}.db")
        return BudgetLedger(**kwargs)

    return make


# ---- 1. a ledger cannot be refilled or switched off ---------------------------------

def test_ledger_refuses_negative_spend(make_ledger):
    ledger = make_ledger(1.0)
    ledger.spend(1.0, 0.0)
    with pytest.raises(ValueError, match="epsilon.*-5"):
        ledger.spend(-5.0, 0.0)
    assert ledger.total() == (1.0, 0.0)
    with pytest.raises(BudgetExceededError):
        ledger.spend(0.5, 0.0)


@pytest.mark.parametrize("epsilon,delta,arg", [(math.nan, 0.0, "epsilon"), (0.1, math.nan, "delta"),
                                                (0.1, -1e-6, "delta"), (0.1, 1.5, "delta"),
                                                (0.1, math.inf, "delta"), (-math.inf, 0.0, "epsilon")])
def test_ledger_refuses_nan_negative_and_out_of_range(make_ledger, epsilon, delta, arg):
    ledger = make_ledger(1.0)
    with pytest.raises(ValueError, match=arg):
        ledger.spend(epsilon, delta)
    assert ledger.entries == [] and ledger.total() == (0.0, 0.0)
    ledger.spend(1.0, 0.0)
    with pytest.raises(BudgetExceededError):
        ledger.spend(0.1, 0.0)
    assert not math.isnan(ledger.total()[0])


@pytest.mark.parametrize("epsilon,delta,arg", [("1", 0.0, "epsilon"), (None, 0.0, "epsilon"),
                                                (0.1, "0", "delta"), (0.1, None, "delta"),
                                                (True, 0.0, "epsilon")])
def test_ledger_refuses_non_numbers(make_ledger, epsilon, delta, arg):
    ledger = make_ledger(1.0)
    with pytest.raises(TypeError, match=arg):
        ledger.spend(epsilon, delta)
    assert ledger.entries == []


def test_ledger_infinite_spend_only_under_infinite_cap(make_ledger):
    finite = make_ledger(1.0)
    with pytest.raises(BudgetExceededError):
        finite.spend(math.inf, 0.0)
    assert finite.entries == []
    unlimited = make_ledger()
    unlimited.spend(math.inf, 0.0, "debugging fit, no noise")
    unlimited.spend(1.0, 0.0)
    assert unlimited.total() == (math.inf, 0.0)
    assert unlimited.remaining() == (math.inf, None)  # not inf - inf = nan; no delta cap: None, not 1


def test_charge_does_not_skip_nan_or_delta_only_spends():
    ledger = BudgetLedger(epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        charge(ledger, math.nan, 0.0, "nan")
    charge(ledger, 0.0, 1e-6, "delta only")
    charge(ledger, 0.0, 0.0, "nothing")
    assert ledger.entries == [(0.0, 1e-6, "delta only")]


@pytest.mark.parametrize("epsilon,delta", [(math.nan, 1.0), (-1.0, 1.0), (0.0, 1.0), ("3", 1.0),
                                           (1.0, math.nan), (1.0, -0.1), (1.0, 1.5)])
def test_ledger_refuses_bad_caps(epsilon, delta):
    with pytest.raises((ValueError, TypeError), match="epsilon" if epsilon != 1.0 else "delta"):
        BudgetLedger(epsilon=epsilon, delta=delta)


# ---- 2. the cap lives in the ledger's storage -----------------------------------------

def test_sqlite_ledger_refuses_second_opener_with_other_cap(tmp_path):
    path = str(tmp_path / "budget.db")
    owner = BudgetLedger(epsilon=1.0, path=path)
    with pytest.raises(ValueError) as info:
        BudgetLedger(epsilon=10.0, path=path)
    assert "epsilon=1" in str(info.value) and "epsilon=10" in str(info.value)
    owner.spend(0.9, 0.0)
    with pytest.raises(BudgetExceededError):
        owner.spend(0.2, 0.0)
    assert owner.total()[0] == pytest.approx(0.9)


def test_sqlite_ledger_adopts_stored_cap(tmp_path):
    path = str(tmp_path / "budget.db")
    BudgetLedger(epsilon=2.0, delta=1e-5, path=path, composition="basic")  # one exact spend: basic
    other = BudgetLedger(path=path)
    assert (other.epsilon, other.delta) == (2.0, 1e-5)
    assert BudgetLedger(epsilon=2.0, delta=1e-5, path=path).epsilon == 2.0  # same caps: fine
    other.spend(2.0, 1e-5)
    with pytest.raises(BudgetExceededError):
        other.spend(0.1, 0.0)


def test_sqlite_spend_checks_against_stored_cap(tmp_path):
    path = str(tmp_path / "budget.db")
    ledger = BudgetLedger(epsilon=1.0, path=path)
    with pytest.raises(AttributeError):
        ledger.epsilon = 10.0  # the caps are read-only
    ledger._epsilon = 10.0  # a stale or tampered attribute must not raise the cap either
    with pytest.raises(BudgetExceededError):
        ledger.spend(5.0, 0.0)
    assert ledger.entries == []


def test_ledger_path_in_missing_directory(tmp_path):
    path = str(tmp_path / "missing" / "x.db")
    with pytest.raises(FileNotFoundError, match="missing.*does not exist"):
        BudgetLedger(path=path)


def test_ledger_path_must_be_a_file():
    with pytest.raises(ValueError, match="path"):
        BudgetLedger(path=":memory:")


# ---- 3. an in-memory ledger never silently forks ---------------------------------------

def test_unpickled_memory_ledger_is_detached():
    ledger = BudgetLedger(epsilon=3.0)
    ledger.spend(1.0, 0.0, "first")
    copy_ = pickle.loads(pickle.dumps(ledger))
    assert copy_.entries == [(1.0, 0.0, "first")] and copy_.total() == (1.0, 0.0)
    with pytest.raises(LedgerDetachedError, match="path="):
        copy_.spend(0.5, 0.0)
    with pytest.raises(LedgerDetachedError, match="path="):
        copy_.check(0.5, 0.0)
    assert ledger.total() == (1.0, 0.0)
    ledger.spend(0.5, 0.0)  # the original keeps working


def test_copies_of_a_ledger_are_the_ledger():
    ledger = BudgetLedger(epsilon=3.0)
    assert copy.deepcopy(ledger) is ledger
    assert copy.copy(ledger) is ledger


def test_path_ledger_pickles_and_keeps_writing(tmp_path):
    ledger = BudgetLedger(epsilon=3.0, path=str(tmp_path / "b.db"))
    restored = pickle.loads(pickle.dumps(ledger))
    restored.spend(1.0, 0.0)
    assert ledger.total() == (1.0, 0.0)


def _spend_in_forked_child(ledger, queue):
    try:
        ledger.spend(0.5, 0.0, "child")
        queue.put("spent")
    except Exception as exc:  # report the class to the parent
        queue.put(type(exc).__name__)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_memory_ledger_inherited_by_fork_is_detached():
    import multiprocessing

    ledger = BudgetLedger(epsilon=3.0)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_spend_in_forked_child, args=(ledger, queue))
    child.start()
    result = queue.get(timeout=60)
    child.join(60)
    assert result == "LedgerDetachedError"
    ledger.spend(0.5, 0.0)  # the parent's ledger is the ledger


def test_sqlite_ledger_refuses_file_with_refills(tmp_path):
    import sqlite3

    path = str(tmp_path / "old.db")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE spends (time REAL, epsilon REAL, delta REAL, label TEXT)")
    con.executemany("INSERT INTO spends VALUES (0, ?, 0, '')", [(1.0,), (-5.0,), (None,)])
    con.commit()
    con.close()
    with pytest.raises(ValueError, match="2 invalid spends"):
        BudgetLedger(epsilon=1.0, path=path)


def test_sqlite_ledger_path_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ledger = BudgetLedger(epsilon=1.0, path="budget.db")
    assert ledger.path == str(tmp_path / "budget.db")
    monkeypatch.chdir("/")  # e.g. a worker started elsewhere: still the same file
    ledger.spend(0.5, 0.0)
    assert BudgetLedger(path=str(tmp_path / "budget.db")).total() == (0.5, 0.0)


def test_sqlite_spend_after_file_deleted_is_refused(tmp_path):
    path = tmp_path / "budget.db"
    ledger = BudgetLedger(epsilon=1.0, path=str(path))
    ledger.spend(1.0, 0.0)
    path.unlink()  # a fresh file would be a fresh, full budget
    with pytest.raises(FileNotFoundError, match="deleted or moved"):
        ledger.spend(1.0, 0.0)
    assert not path.exists()


def _search(ledger, **kwargs):
    from sklearn.datasets import make_blobs
    from sklearn.model_selection import GridSearchCV

    from skdp import DPFisherClassifier

    X, y = make_blobs(40, 4, centers=2, random_state=0)
    search = GridSearchCV(DPFisherClassifier(bounds=(-20, 20), classes=[0, 1], ledger=ledger),
                          {"epsilon": [0.5, 1.0]}, cv=3, n_jobs=2, **kwargs)
    return search.fit(X, y)


def test_parallel_search_with_memory_ledger_refuses():
    ledger = BudgetLedger(epsilon=100.0)
    with pytest.raises(ValueError, match="path="):
        _search(ledger)
    # Every worker's spend was refused, none was lost: the ledger is consistent.
    assert ledger.entries == [] and ledger.total() == (0.0, 0.0)


def test_parallel_search_with_path_ledger(tmp_path):
    # 6 fold fits cost 3 x 0.5 + 3 x 1.0 = 4.5; the refit costs the best candidate's epsilon,
    # 0.5 or 1.0 depending on the noisy validation scores. A cap of 4.8 leaves room for the
    # fold fits (in two worker processes) and none for any refit.
    capped = BudgetLedger(epsilon=4.8, path=str(tmp_path / "capped.db"))
    with pytest.raises(BudgetExceededError):
        _search(capped, error_score="raise")
    assert capped.total()[0] == pytest.approx(4.5) and len(capped.entries) == 6
    ledger = BudgetLedger(epsilon=100.0, path=str(tmp_path / "ample.db"))
    search = _search(ledger)
    assert ledger.total()[0] == pytest.approx(3 * 0.5 + 3 * 1.0 + search.best_params_["epsilon"])
    assert len(ledger.entries) == 7


# ---- 4. the accountant and calibration refuse nonsense ---------------------------------

@pytest.mark.parametrize("delta", [1.0, 1.5, 0.0, -1e-5, math.nan, math.inf])
def test_accountant_refuses_bad_delta(delta):
    acc = PrivacyAccountant()
    acc.step(1.0, 0.01, 100)
    with pytest.raises(ValueError, match=r"delta.*\(0, 1\)"):
        acc.get_epsilon(delta)
    with pytest.raises(ValueError, match="delta"):
        compute_epsilon(1.0, 0.01, 100, delta)


@pytest.mark.parametrize("sigma,q,steps,arg", [
    (-1.0, 0.01, 100, "noise_multiplier"), (math.nan, 0.01, 100, "noise_multiplier"),
    (math.inf, 0.01, 100, "noise_multiplier"), (1.0, 0.0, 100, "sample_rate"),
    (1.0, 1.5, 100, "sample_rate"), (1.0, math.nan, 100, "sample_rate"),
    (1.0, -0.1, 100, "sample_rate"), (1.0, 0.01, 3.5, "n_steps"), (1.0, 0.01, -1, "n_steps"),
    (1.0, 0.01, math.nan, "n_steps"), (1.0, 0.01, math.inf, "n_steps"),
])
def test_accountant_step_refuses_bad_events(sigma, q, steps, arg):
    acc = PrivacyAccountant()
    with pytest.raises(ValueError, match=arg):
        acc.step(sigma, q, steps)
    assert acc.history == [] and acc.n_steps == 0


def test_accountant_step_types_and_integral_steps():
    acc = PrivacyAccountant()
    with pytest.raises(TypeError, match="noise_multiplier"):
        acc.step("1.0", 0.01, 10)
    with pytest.raises(TypeError, match="n_steps"):
        acc.step(1.0, 0.01, "10")
    acc.step(1.0, 0.01, 10.0)  # an integral float is a step count
    acc.step(1.0, 0.01, 0)  # nothing released
    assert acc.history == [(1.0, 0.01, 10)] and isinstance(acc.n_steps, int)


@pytest.mark.parametrize("kwargs,arg", [
    ({"delta": 1.5}, "delta"), ({"delta": 1.0}, "delta"), ({"delta": 0.0}, "delta"),
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"), ({"epsilon": math.nan}, "epsilon"),
    ({"sample_rate": 0.0}, "sample_rate"), ({"sample_rate": math.nan}, "sample_rate"),
    ({"sample_rate": 2.0}, "sample_rate"), ({"n_steps": 3.5}, "n_steps"), ({"n_steps": 0}, "n_steps"),
    ({"rel_tol": 0.0}, "rel_tol"), ({"rel_tol": -1e-3}, "rel_tol"), ({"rel_tol": 1.0}, "rel_tol"),
    ({"rel_tol": math.nan}, "rel_tol"), ({"accounting": "gdp"}, "accounting"),
])
def test_calibration_refuses_bad_arguments(kwargs, arg):
    args = {"epsilon": 1.0, "delta": 1e-5, "sample_rate": 0.01, "n_steps": 100, **kwargs}
    with deadline(30), pytest.raises(ValueError, match=arg):
        calibrate_noise_multiplier(**args)


def test_calibration_delta_zero_says_delta_not_epochs():
    with deadline(30), pytest.raises(ValueError) as info:
        calibrate_noise_multiplier(1.0, 0.0, 0.01, 100)
    assert "(0, 1)" in str(info.value) and "epochs" not in str(info.value)


# ---- 5. no hangs ------------------------------------------------------------------------

@pytest.mark.parametrize("sigma,q", [(math.nan, 0.01), (math.inf, 0.01), (1.0, math.nan)])
def test_accountant_does_not_hang_on_nan_or_inf(sigma, q):
    acc = PrivacyAccountant()
    with deadline(30), pytest.raises(ValueError):
        acc.step(sigma, q, 100)
        acc.get_epsilon(1e-5)


def test_calibration_stops_at_float_precision():
    # rel_tol below float resolution: bisection stalls at adjacent floats and must stop.
    with deadline(60):
        sigma = calibrate_noise_multiplier(1.0, 1e-5, 0.01, 100, rel_tol=1e-30)
    assert compute_epsilon(sigma, 0.01, 100, 1e-5) <= 1.0


# ---- property: the ledger's total is monotone, finite-or-capped, never NaN ------------

finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-2.0, 5.0),
                          st.sampled_from([0.0, 1e-9, 1.0]))
deltas = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0.0, 1.0))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cap=st.one_of(st.floats(1e-3, 50.0), st.just(math.inf)), cap_delta=st.floats(0.0, 1.0),
       attempts=st.lists(st.tuples(finite_or_not, deltas), max_size=12))
def test_ledger_total_is_monotone_never_nan_and_capped(kind, cap, cap_delta, attempts):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ledger.db") if kind == "sqlite" else None
        ledger = BudgetLedger(epsilon=cap, delta=cap_delta, path=path)
        before = ledger.total()
        for epsilon, delta in attempts:
            try:
                ledger.spend(epsilon, delta, "attempt")
            except (ValueError, TypeError):  # BudgetExceededError is a ValueError
                pass
            after = ledger.total()
            assert not any(math.isnan(v) for v in after)
            assert after[0] >= before[0] and after[1] >= before[1]
            assert after[0] <= cap * (1 + 1e-9) and after[1] <= cap_delta * (1 + 1e-9)
            before = after
