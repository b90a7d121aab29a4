"""One adjacency and RDP composition (issue 23 item 10, issue 27): privacy_spent, planned_spend, the search
cost and the ledger's privacy filter, cross-checked against Google's dp-accounting."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from skdp import DFSRelease, DPFisherClassifier, DPMomentumClassifier
from skdp.exceptions import BudgetExceededError
from skdp.mechanisms import gaussian_dp_epsilon, gaussian_dp_mu
from skdp.privacy import BudgetLedger, planned_spend, privacy_spent, search_privacy_cost
from skdp.privacy.accounting import dpsgd_cost
from skdp.privacy.composition import LEDGER_ORDERS, Spend, compose, filter_order, rdp_to_epsilon

RNG = np.random.default_rng(0)
X = RNG.random((120, 6))
Y = (X[:, 0] + 0.1 * RNG.standard_normal(120) > 0.5).astype(int)
# One DP-SGD fit of the auto schedule on 80% of digits at epsilon 1 (sigma, q, steps as planned).
DIGITS_FIT = (17.65625, 359 / 1437, 300)


def _dfs_then_fisher(eps_release=2.0, eps_clf=1.0):
    return make_pipeline(DFSRelease(3, epsilon=eps_release, delta=1e-6, bounds=(0, 1), classes=[0, 1]),
                         DPFisherClassifier(epsilon=eps_clf, delta=1e-6, bounds=(-3, 4), classes=[0, 1]))


# -- issue 23 item 10: epsilons of different adjacency are never added ---------------------------------
def test_replace_one_and_add_remove_are_composed_under_replace_one():
    # DFSRelease is replace-one (2.0); the classifier's add/remove 1.0 is at least 1.455 under replace-one
    # (its sensitivity grows by sqrt(2) at least): the composition is at least 3.455, never 3.0.
    pipe = _dfs_then_fisher()
    assert planned_spend(pipe)[0] >= 3.455
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(X, Y)
    eps, delta, certified = privacy_spent(pipe)
    assert eps >= 3.455 and certified
    assert pipe[0].privacy_cost_.adjacency == "replace-one"
    assert pipe[-1].privacy_cost_.adjacency == "add/remove"


@pytest.mark.parametrize("composition", ["rdp", "basic"])
def test_the_ledger_composes_mixed_adjacency_under_replace_one(composition):
    ledger = BudgetLedger(composition=composition, adjacency="replace-one")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make_pipeline(DFSRelease(3, epsilon=2.0, delta=1e-6, bounds=(0, 1), classes=[0, 1], ledger=ledger),
                      DPFisherClassifier(epsilon=1.0, delta=1e-6, bounds=(-3, 4), classes=[0, 1],
                                         ledger=ledger)).fit(X, Y)
    assert {r["adjacency"] for r in ledger.records()} == {"replace-one", "add/remove"}
    assert ledger.total()[0] >= 3.455


def test_search_cost_states_a_replace_one_pipeline_under_replace_one():
    search = GridSearchCV(_dfs_then_fisher(), {"dpfisherclassifier__var_smoothing": [1e-2, 1e-1]}, cv=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search.fit(X, Y)
    # 5 fits of the pipeline, each at least 3.455 under replace-one; basic adds, RDP may be tighter.
    eps, _ = search_privacy_cost(search)
    assert eps >= 3.455 and eps <= 5 * (2.0 + 2.13)


def test_a_replace_one_spend_never_becomes_add_remove():
    with pytest.raises(ValueError, match="does not imply an add/remove"):
        Spend.approx(1.0, 1e-6, "replace-one").under("add/remove")


def test_replace_one_conversions():
    eps, delta = 1.0, 1e-6
    assert Spend.pure(eps).under("replace-one").epsilon == 2.0  # exact group privacy for pure DP
    approx = Spend.approx(eps, delta).under("replace-one")
    assert (approx.epsilon, approx.delta) == pytest.approx((2.0, (1 + math.e) * delta))
    mu = gaussian_dp_mu(eps, delta)
    assert Spend.gaussian(mu, delta).under("replace-one").epsilon == pytest.approx(gaussian_dp_epsilon(2 * mu, delta))
    # Mironov's group bound on a DP-SGD curve: 3 rdp(2a), inf where 2a is not an order.
    sgd = dpsgd_cost([DIGITS_FIT], 1.0, 1e-5)
    r1 = sgd.under("replace-one")
    at = dict(zip(LEDGER_ORDERS, sgd.rdp))
    assert r1.rdp[LEDGER_ORDERS.index(4.0)] == pytest.approx(3 * at[8.0])
    assert r1.rdp[-1] == math.inf


# -- issue 27: RDP composition and the privacy filter -----------------------------------------------------
def test_ten_dpsgd_fits_compose_to_at_most_4():
    # A GridSearchCV of 3 candidates x 3 folds + refit at epsilon 1 on digits: 10 fits (today 10.0).
    ledger = BudgetLedger(epsilon=100.0, delta=1e-5)  # (a finite cap: the filter converts at the delta cap)
    for _ in range(10):
        cost = dpsgd_cost([DIGITS_FIT], 1.0, 1e-5)
        ledger.spend(cost.epsilon, cost.delta, cost=cost)
    eps, delta = ledger.total()
    assert eps <= 4.0 and delta == 1e-5


def test_a_cap_of_3_admits_at_least_6_fits_at_epsilon_1_and_is_never_exceeded():
    ledger = BudgetLedger(epsilon=3.0, delta=1e-5)
    cost = dpsgd_cost([DIGITS_FIT], 1.0, 1e-5)
    admitted = 0
    with pytest.raises(BudgetExceededError, match="order 8"):
        for _ in range(50):
            ledger.spend(cost.epsilon, cost.delta, cost=cost)
            admitted += 1
    assert admitted >= 6
    # Never exceeded: the filter's own statement (RDP at its fixed order, at the delta cap) stays under 3.
    total = np.sum([cost.rdp] * admitted, axis=0)
    i = LEDGER_ORDERS.index(ledger.filter_order)
    assert rdp_to_epsilon([ledger.filter_order], [total[i]], 1e-5)[0] <= 3.0
    assert ledger.total()[0] <= 3.0 and len(ledger.records()) == admitted


def test_basic_composition_is_kept_on_request_and_for_a_single_exact_spend():
    ledger = BudgetLedger(epsilon=1.0, delta=1e-5, composition="basic")
    cost = dpsgd_cost([DIGITS_FIT], 1.0, 1e-5)
    ledger.spend(1.0, 1e-5, cost=Spend.from_rdp(cost.rdp, 1.0, 1e-5))
    assert ledger.total() == (1.0, 1e-5)
    with pytest.raises(BudgetExceededError):
        ledger.spend(0.01, 0.0)


def test_filter_order_is_fixed_by_the_caps_alone():
    assert filter_order(3.0, 1e-5) == 8.0
    assert filter_order(math.inf, 1e-5) is None and filter_order(3.0, 1.0) is None


def test_real_fits_record_their_rdp_curves_and_a_search_composes():
    ledger = BudgetLedger(epsilon=100.0, delta=1e-5)
    # A fixed noise multiplier: calibrating to epsilon at q = 0.5 costs seconds per fit.
    clf = DPMomentumClassifier(noise_multiplier=2.0, delta=1e-6, classes=[0, 1], max_epochs=2, batch_size=10,
                               ledger=ledger)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = GridSearchCV(clf, {"lr": [0.05, 0.1]}, cv=2).fit(X, Y)
    spends = [r for r in ledger.records() if r["cost"]]
    assert len(spends) == 5 and all('"rdp": [' in r["cost"] for r in spends)
    eps, delta = ledger.total()
    one = max(r["epsilon"] for r in spends)
    assert eps < 0.8 * sum(r["epsilon"] for r in spends) and eps > one and delta == 1e-5  # RDP beats adding
    cost = search_privacy_cost(search, n_samples=len(X))[0]
    assert eps * (1 - 1e-9) <= cost < 0.8 * 5 * one * 1.1


# -- cross-check and properties -----------------------------------------------------------------------------
def test_rdp_composition_matches_dp_accounting():
    dp_accounting = pytest.importorskip("dp_accounting")
    sigma, q, steps = DIGITS_FIT
    acc = dp_accounting.rdp.RdpAccountant(list(LEDGER_ORDERS))
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, steps), count=10)
    ours = compose([dpsgd_cost([DIGITS_FIT], 1.0, 1e-5)] * 10, delta=1e-5)[0]
    theirs = acc.get_epsilon(1e-5)
    assert ours == pytest.approx(theirs, rel=0.03)
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(dp_accounting.SelfComposedDpEvent(event, steps), count=10)
    assert pld.get_epsilon(1e-5) <= ours  # PLD is tighter than RDP, never looser


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 3.0), st.sampled_from(["gaussian", "pure", "approx"])),
                min_size=1, max_size=8))
def test_composed_total_is_between_the_largest_spend_and_basic_composition(specs):
    delta = 1e-6
    spends = [Spend.gaussian(gaussian_dp_mu(e, delta), delta, epsilon=e) if kind == "gaussian"
              else Spend.pure(e) if kind == "pure" else Spend.approx(e, delta) for e, kind in specs]
    eps, total_delta, _ = compose(spends)
    basic_eps = sum(s.epsilon for s in spends)
    assert eps <= basic_eps * (1 + 1e-12)
    assert total_delta == pytest.approx(sum(s.delta for s in spends))
    # A valid guarantee of the whole is one of each part: never below a Gaussian part's exact epsilon there.
    for (e, kind) in specs:
        if kind == "gaussian":
            assert eps >= gaussian_dp_epsilon(gaussian_dp_mu(e, delta), total_delta) * (1 - 1e-9)


# -- second review (tests first; each failed before the fix) ------------------------------------------------
def test_a_pure_dp_budget_refuses_spends_with_a_delta():
    ledger = BudgetLedger(epsilon=10.0, delta=0.0)
    cost = dpsgd_cost([DIGITS_FIT], 1.0, 1e-5)
    with pytest.raises(BudgetExceededError):
        ledger.spend(cost.epsilon, cost.delta, cost=cost)
    assert ledger.total() == (0.0, 0.0)


def _admitted(spends, caps=(1.0, 1e-5)):
    ledger = BudgetLedger(epsilon=caps[0], delta=caps[1])
    try:
        for s in spends:
            ledger.spend(s.epsilon, s.delta, cost=s)
    except BudgetExceededError:
        return False
    return True


def test_the_filter_holds_when_curveless_deltas_are_chosen_adaptively():
    # The reviewer's analyst: a Gaussian release G1 (mu1); having seen y1, either a curve-less (0, D) leak
    # (with probability D, reveal the record) or a second Gaussian G2 with the largest mu2 the ledger admits.
    # The exact delta of the adaptive interaction at the epsilon cap is int max(A(y), B(y)) dy. It was
    # 1.167e-5 against a cap of 1e-5 when curve-less deltas shrank the RDP part's conversion delta.
    from scipy.stats import norm

    eps_cap, delta_cap, mu1 = 1.0, 1e-5, 0.2
    g1 = Spend.gaussian(mu1, delta_cap / 4)
    worst = 0.0
    for D in (0.49 * delta_cap, 0.9 * delta_cap, 0.99 * delta_cap):
        if not _admitted([g1, Spend.approx(0.0, D)]):
            continue  # the leak is refused: path A does not exist
        lo, hi = 0.0, 2.0  # the largest mu2 admitted after g1 (bisection on the ledger itself)
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _admitted([g1, Spend.gaussian(mid, delta_cap / 4)]) else (lo, mid)
        mu2 = lo
        y = np.linspace(-12, 12 + mu1, 200001)
        dy = y[1] - y[0]
        p, q = norm.pdf(y, mu1), norm.pdf(y)
        loss1 = y * mu1 - mu1 ** 2 / 2
        e = eps_cap - loss1
        b = norm.cdf(-e / mu2 + mu2 / 2) - np.exp(e) * norm.cdf(-e / mu2 - mu2 / 2)
        a = p * D + (1 - D) * np.maximum(p - np.exp(eps_cap) * q, 0)
        worst = max(worst, float(np.maximum(a, p * b).sum() * dy))
    assert worst <= delta_cap * (1 + 1e-3)


def test_the_adjacency_of_a_ledger_is_fixed_when_it_is_created():
    # An add/remove ledger filled by add/remove spends, then a replace-one spend, would hold no guarantee
    # under either adjacency: it refuses the replace-one spend, naming the fix; a replace-one ledger
    # converts every spend from the first.
    ledger = BudgetLedger(epsilon=2.0, delta=1e-5)
    g = Spend.gaussian(0.2, 1e-6)
    ledger.spend(g.epsilon, g.delta, cost=g)
    with pytest.raises(ValueError, match="adjacency='replace-one'"):
        ledger.spend(0.1, 1e-7, cost=Spend.approx(0.1, 1e-7, "replace-one"))
    assert len(ledger.records()) == 1
    r1 = BudgetLedger(epsilon=2.0, delta=1e-5, adjacency="replace-one")
    r1.spend(g.epsilon, g.delta, cost=g)
    assert r1.total()[0] >= gaussian_dp_epsilon(0.4, 1e-5)  # the doubled sensitivity, at the ledger's delta


def test_search_cost_uses_curves_only_for_kfold_training_sizes():
    from sklearn.model_selection import ShuffleSplit

    clf = DPMomentumClassifier(epsilon=1.0, delta=1e-6, classes=[0, 1], max_epochs=1, batch_size=20)
    search = GridSearchCV(clf, {"lr": [0.05]}, cv=ShuffleSplit(2, train_size=40, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search.fit(X, Y)
    # Training sizes other than K-fold's: each fit counts its certified epsilon (valid at any size).
    eps, _ = search_privacy_cost(search, n_samples=len(X))
    assert eps == pytest.approx(3.0, rel=1e-3)  # two folds at their epsilon 1, the refit's plan (0.99993)
    with pytest.raises(ValueError, match="noise_multiplier"):
        nm = GridSearchCV(clf.set_params(noise_multiplier=2.0), {"lr": [0.05]},
                          cv=ShuffleSplit(2, train_size=40, random_state=0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nm.fit(X, Y)
        search_privacy_cost(nm, n_samples=len(X))


def test_the_accountant_never_reports_a_negative_epsilon():
    from skdp.privacy import compute_epsilon

    assert compute_epsilon(1e6, 1.0, 10, 1e-3) >= 0.0  # Opacus's conversion gave -0.001


def test_search_cost_does_not_assume_kfold_sizes_for_group_folds():
    # GroupKFold's training sizes follow the groups (here 300 of 1800 for one fold), not n / k: a fixed
    # noise_multiplier's epsilon depends on them, so the cost is refused rather than under-counted
    # (6.99 reported against 9.64 spent, final review).
    from sklearn.model_selection import GroupKFold

    n = 90
    Xg, yg = np.tile(X[:30], (3, 1)), np.tile(Y[:30], 3)
    groups = np.r_[np.zeros(70), np.ones(10), 2 * np.ones(10)]
    clf = DPMomentumClassifier(noise_multiplier=1.0, delta=1e-6, classes=[0, 1], max_epochs=1, batch_size=10)
    search = GridSearchCV(clf, {"lr": [0.05]}, cv=GroupKFold(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search.fit(Xg, yg, groups=groups)
    with pytest.raises(ValueError, match="noise_multiplier"):
        search_privacy_cost(search, n_samples=n)
