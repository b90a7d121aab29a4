"""Attacker's read of PGEGenerator's cells (/work/review_s34 of session 34): each finding's test, written first."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from skdp import BudgetExceededError, BudgetLedger, PrivacyLeakWarning
from skdp.generative import PGEGenerator

PUBLIC = dict(categories={"colour": ["red", "green", "blue"]}, bounds={"income": (0, 100)})
FAST = dict(max_epochs=2, n_levels=3, n_repeats=1, n_leapfrog=3)


def _frame(n=600, seed=0):
    rng = np.random.default_rng(seed)
    colour = rng.choice(["red", "green", "blue"], n, p=[0.6, 0.3, 0.1])
    return pd.DataFrame({"colour": colour,
                         "income": np.where(colour == "red", rng.normal(50, 5, n), rng.normal(20, 5, n))})


@pytest.mark.parametrize("classes", [None, [0, 1]])
def test_a01_exact_counts_are_charged_as_inf_and_auto_takes_no_cells_without_their_noise(classes):
    # noise_multiplier given with epsilon=inf: DP-SGD is noised, the counts' share of an infinite epsilon is not.
    # "auto" took cells and released the exact joint table with no ledger row: a cap of 10 accepted it.
    df, y = _frame(), (None if classes is None else np.arange(600) % 2)
    ledger = BudgetLedger()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        gen = PGEGenerator(noise_multiplier=1.0, epsilon=np.inf, ledger=ledger, classes=classes, **PUBLIC,
                           **FAST).fit(df, y)
    assert gen.cell_columns_ == []
    counted = classes is not None
    assert math.isinf(ledger.to_frame()["epsilon"].sum()) is counted
    assert math.isinf(gen.epsilon_) is counted and gen.privacy_certified_ is not counted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        if counted:
            with pytest.raises(BudgetExceededError):
                PGEGenerator(noise_multiplier=1.0, epsilon=np.inf, classes=classes, ledger=BudgetLedger(epsilon=10),
                             **PUBLIC, **FAST).fit(df, y)


@pytest.mark.parametrize("kwargs", [dict(epsilon=np.inf), dict(epsilon=np.inf, classes=[0, 1]),
                                    dict(epsilon=np.inf, noise_multiplier=1.0, classes=[0, 1])])
def test_a02_the_plan_at_infinite_epsilon_is_a_number(kwargs):
    gen = PGEGenerator(module="gaussian", **PUBLIC, **FAST, **kwargs)
    eps, delta = gen._planned_privacy(600)
    assert not math.isnan(eps)
    costs = gen._planned_costs(600)  # raised on a NaN epsilon
    assert all(not math.isnan(c.epsilon) for c in costs)
    if "classes" in kwargs:
        assert math.isinf(eps)  # the exact class counts


def test_a04_a05_cells_lists_are_checked():
    df = _frame(100)
    with pytest.raises(ValueError, match="cells"):  # silently ignored without categories
        PGEGenerator(cells=["colour"], bounds=(0, 100), **FAST).fit(df)
    with pytest.raises(ValueError, match="distinct"):  # np.str_ and str name the same column
        PGEGenerator(cells=["colour", np.str_("colour")], **PUBLIC, **FAST).fit(df)


def test_a06_auto_cells_count_the_classes_the_fit_conditions_on():
    # classes read from y (warned): "auto" sized the cells with one class and put 6 conditions on n=300 (cap 3).
    df, y = _frame(300), np.arange(300) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        gen = PGEGenerator(**PUBLIC, **FAST).fit(df, y)
    assert gen.cell_columns_ == []


def test_a07_a_ledger_that_cannot_afford_the_fit_is_refused_before_the_counts_are_charged():
    ledger = BudgetLedger(epsilon=0.5)
    gen = PGEGenerator(epsilon=1.0, ledger=ledger, **PUBLIC, **FAST)
    with pytest.raises(BudgetExceededError):
        gen.fit(_frame())
    assert ledger.to_frame().empty and getattr(gen, "cell_prior_", None) is None


def test_a09_cells_stay_few_on_large_data():
    # "auto" allowed n / 100 conditions: per-example gradients and the sampler's one-hot grow with them.
    gen = PGEGenerator(categories={f"c{i}": list("abcd") for i in range(8)}, classes=[0, 1])
    from skdp.generative.pge import MAX_CELLS
    columns = gen._cell_columns(10 ** 6)
    assert 2 * 4 ** len(columns) <= MAX_CELLS


def test_a10_class_proportions_sum_the_noisy_counts_before_clipping():
    # Each cell's noisy count was clipped at 0 before the class totals were summed: with 18 cells a class, a
    # rare class's share was biased up (0.10 -> about 0.14).
    rng = np.random.default_rng(0)
    n = 2000
    y = (rng.random(n) < 0.1).astype(int)
    grades = list("abcdef")
    df = pd.DataFrame({"colour": rng.choice(["red", "green", "blue"], n), "grade": rng.choice(grades, n),
                       "income": rng.normal(50, 10, n)})
    gen = PGEGenerator(epsilon=1.0, classes=[0, 1], cells=["colour", "grade"], bounds={"income": (0, 100)},
                       categories={**PUBLIC["categories"], "grade": grades}, **FAST)
    # 400 releases of the counts alone (no DP-SGD): the mean share's sd is about 0.003.
    shares = [prior[1] for prior in _priors(gen, df, y, 400)]
    assert abs(np.mean(shares) - y.mean()) < 0.015, np.mean(shares)


def _priors(gen, df, y, repeats):
    """``class_prior_`` of ``repeats`` releases of the counts alone (no DP-SGD), each with fresh noise."""
    from sklearn.base import clone
    from skdp.generative.tabular import TableCodec
    from skdp.utils.random import mechanism_rng

    g = clone(gen)
    g.codec_ = TableCodec(g.categories, g.bounds, "PGEGenerator").fit(df)
    codes = g._encode_labels(y, len(df))
    g.cell_columns_ = g._cell_columns(len(df))
    codes, _ = g._join_cells(codes, g.codec_.transform(df))
    out = []
    for _ in range(repeats):
        g._fit_prior(codes, mechanism_rng(g), True)
        out.append(g.class_prior_)
    return out


def test_table_errors_never_print_a_private_value():
    df = _frame(50).assign(colour=lambda f: f["colour"].where(f.index != 7, "secret-value"))
    with pytest.raises(ValueError) as err:
        PGEGenerator(**PUBLIC, **FAST).fit(df)
    assert "secret-value" not in str(err.value) and "'colour'" in str(err.value)


# -- second read (/work/review_s34 "Second read") ---------------------------------------------------------
def test_b01_the_ledger_check_counts_labels_read_from_y():
    # classes=None with y given: the plan (parameters only) held DP-SGD alone, the fit spent the counts too;
    # a cap between the two was charged the counts and then refused DP-SGD.
    df, y = _frame(), np.arange(600) % 2
    ledger = BudgetLedger(epsilon=5.28, delta=1e-5, composition="basic")
    gen = PGEGenerator(epsilon=1.0, noise_multiplier=1.0, cells=None, ledger=ledger, **PUBLIC, **FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        with pytest.raises(BudgetExceededError):
            gen.fit(df, y)
    assert ledger.to_frame().empty


def test_b02_the_ledger_check_composes_the_fits_spends_as_charged():
    # One combined Spend's replace-one view (group privacy of the sum) is looser than the two releases' own:
    # a replace-one ledger capped between them refused a fit its two real charges fit in.
    df, y = _frame(), np.arange(600) % 2
    ledger = BudgetLedger(epsilon=10.0, delta=5e-4, adjacency="replace-one", composition="basic")
    gen = PGEGenerator(epsilon=4.0, classes=[0, 1], cells=None, ledger=ledger, **PUBLIC, **FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        gen.fit(df, y)
    assert len(ledger.to_frame()) == 2


def test_b05_auto_cells_of_an_unconditional_fit_count_one_class():
    # classes given but y=None: the fit is unconditional, so "auto" sizes the cells with one class.
    gen = PGEGenerator(epsilon=1.0, classes=[0, 1], **PUBLIC, **FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        gen.fit(_frame(300))  # cap 3: the 3 colours fit with one class, not with two
    assert gen.cell_columns_ == ["colour"] and gen.classes_ is None


def test_ledger_check_all_checks_spends_made_one_after_the_other():
    from skdp.privacy import Spend

    ledger = BudgetLedger(epsilon=1.0, delta=1e-5, composition="basic")
    ledger.check_all([Spend.pure(0.5), Spend.pure(0.5)])
    with pytest.raises(BudgetExceededError, match=r"spending 2 releases \(epsilon 0.5 \+ 0.6"):
        ledger.check_all([Spend.pure(0.5), Spend.pure(0.6)])  # the message names them all (b08)
    assert ledger.to_frame().empty
