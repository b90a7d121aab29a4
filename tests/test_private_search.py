"""PrivateSearchCV: a search whose choice is itself DP (Papernot & Steinke's random stopping)."""
import contextlib
import math
import pickle

import numpy as np
import pytest
from scipy.stats import loguniform
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from skdp import BudgetLedger, BudgetExceededError, DPMomentumClassifier, PrivacyLeakWarning, PrivateSearchCV
from skdp.model_selection import random_stopping_epsilon, random_stopping_rdp
from skdp.preprocessing import RowFunctionTransformer
from skdp.utils import taps
from skdp.model_selection._tuning import sample_tnb, tnb_expected_trials, tnb_gamma_for_mean
from conftest import quiet


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    X = rng.normal(0, 0.3, (300, 4)) + np.eye(3, 4)[y]
    return X, y


def _clf(**kwargs):
    params = dict(classes=[0, 1, 2], max_epochs=2, batch_size=32, lr=0.5, random_state=0)
    params.update(kwargs)
    return DPMomentumClassifier(**params)


def _search(**kwargs):
    params = dict(param_grid={"lr": [0.1, 0.5], "batch_size": [32, 64]}, epsilon=2.0, n_trials_mean=2.0,
                  random_state=0)
    params.update(kwargs)
    estimator = params.pop("estimator", _clf())
    return PrivateSearchCV(estimator, **params)


# -- the theorem, pinned by hand -----------------------------------------------------------------
def test_theorem_2_pinned_to_a_hand_computation():
    # Base: a Gaussian mechanism with sigma = 2, RDP lambda / (2 sigma^2) = lambda / 8, at orders 2, 4, 8.
    # K logarithmic (eta = 0), gamma = 0.1: E[K] = (1/gamma - 1) / log(1/gamma) = 9 / ln 10 = 3.908650.
    # Theorem 2: eps'(l) = l/8 + min_lhat [(1 - 1/lhat) lhat/8 + ln(10)/lhat] + ln(E[K]) / (l - 1);
    #   lhat = 1: 2.302585, 2: 0.125 + 1.151293 = 1.276293, 4: 0.375 + 0.575646 = 0.950646,
    #   8: 0.875 + 0.287823 = 1.162823  -> 0.950646 at lhat = 4.
    #   eps'(2) = 0.25 + 0.950646 + 1.363191 = 2.563837; eps'(4) = 0.5 + 0.950646 + 0.454397 = 1.905043;
    #   eps'(8) = 1 + 0.950646 + 0.194742 = 2.145388.
    # Conversion at delta = 1e-5: eps = eps'(l) + ln(1 - 1/l) - (ln(delta) + ln(l)) / (l - 1):
    #   l = 8: 2.145388 - 0.133531 + (11.512925 - 2.079442) / 7 = 3.359497 (the minimum;
    #   l = 4 gives 4.992905, l = 2 gives 13.026094).
    orders = np.array([2.0, 4.0, 8.0])
    assert tnb_expected_trials(0.0, 0.1) == pytest.approx(3.908650, abs=1e-6)
    tuned = random_stopping_rdp(orders, orders / 8, "truncated_negative_binomial", eta=0.0, gamma=0.1)
    assert tuned == pytest.approx([2.563837, 1.905043, 2.145388], abs=1e-5)
    eps, order = random_stopping_epsilon(orders, orders / 8, 1e-5, "truncated_negative_binomial",
                                         eta=0.0, gamma=0.1)
    assert order == 8 and eps == pytest.approx(3.359497, abs=1e-5)


def test_theorem_2_with_eta_one_is_the_geometric_law():
    # eta = 1: E[K] = 1/gamma; the lambda_hat term doubles. gamma = 0.25, base lambda/8, orders 2 and 4.
    # lhat = 1: 2 ln 4 = 2.772589; 2: 2 (1/8 + ln4/2) = 1.636294; 4: 2 (3/8 + ln4/4) = 1.443147 -> 1.443147.
    # eps'(4) = 0.5 + 1.443147 + ln(4)/3 = 2.405245.
    tuned = random_stopping_rdp(np.array([2.0, 4.0]), np.array([0.25, 0.5]), "truncated_negative_binomial",
                                eta=1.0, gamma=0.25)
    assert tuned[1] == pytest.approx(2.405245, abs=1e-5)


def test_poisson_bound_exceeds_the_base_and_grows_with_the_mean():
    orders = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    small = random_stopping_rdp(orders, orders / 8, "poisson", mu=2.0)
    large = random_stopping_rdp(orders, orders / 8, "poisson", mu=20.0)
    assert np.all(small >= orders / 8 + math.log(2.0) / (orders - 1)) and np.all(large > small)


def test_truncated_negative_binomial_sampler_has_the_right_mean():
    rng = np.random.default_rng(0)
    for eta in (0.0, 1.0, -0.5):
        gamma = tnb_gamma_for_mean(eta, 5.0)
        assert tnb_expected_trials(eta, gamma) == pytest.approx(5.0)
        draws = [sample_tnb(eta, gamma, rng) for _ in range(20000)]
        assert min(draws) >= 1 and np.mean(draws) == pytest.approx(5.0, rel=0.1)


# -- the search ----------------------------------------------------------------------------------
def test_parameters_are_stored_unchanged():
    grid = {"lr": [0.1, 0.5]}
    search = PrivateSearchCV(_clf(), grid, epsilon=3, delta=1e-6, n_trials_mean=7, eta=0.5, score_noise=2.5)
    params = search.get_params(deep=False)
    assert params["param_grid"] is grid and params["epsilon"] == 3 and params["delta"] == 1e-6
    assert params["n_trials_mean"] == 7 and params["eta"] == 0.5 and params["score_noise"] == 2.5
    assert clone(search).get_params(deep=False)["param_grid"] == grid


def test_released_total_matches_an_independent_recomputation(blobs):
    """epsilon_ recomputed from budget_split_ with Opacus alone and Theorem 2 written out here."""
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
    from skdp.privacy.accounting import RDP_ORDERS

    X, y = blobs
    search = _search(epsilon=1.5).fit(X, y)
    split = search.budget_split_
    assert search.epsilon_ <= 1.5 and search.epsilon_ > 1.45  # calibrated, not just bounded
    n = split["n_train"]
    orders = np.array(RDP_ORDERS, dtype=float)
    curves = [compute_rdp(q=b / n, noise_multiplier=s, steps=round(n / b) * e, orders=RDP_ORDERS)
              for (b, e), s in split["noise_multipliers"].items()]
    base = np.maximum(np.nan_to_num(np.max(curves, axis=0), nan=np.inf), orders / (2 * split["score_noise"] ** 2))
    gamma = split["gamma"]
    expected_k = (1 / gamma - 1) / math.log(1 / gamma)
    assert expected_k == pytest.approx(2.0)
    hat = min(math.log(1 / gamma), float(np.min((1 - 1 / orders) * base + math.log(1 / gamma) / orders)))
    tuned = base + hat + math.log(expected_k) / (orders - 1)
    eps, _ = get_privacy_spent(orders=list(orders), rdp=tuned, delta=1e-5)
    assert search.epsilon_ == pytest.approx(eps, rel=1e-9)
    assert search.delta_ == 1e-5 and search.privacy_certified_ and search.privacy_notes_ == ()
    # each trial alone is cheaper than the whole search
    assert 0 < search.trial_epsilon_ < search.epsilon_


def test_fitted_attributes_and_delegation(blobs):
    X, y = blobs
    search = _search().fit(X, y)
    assert set(search.best_params_) == {"lr", "batch_size"}
    assert search.best_params_ in list(__import__("sklearn.model_selection").model_selection.ParameterGrid(
        search.param_grid))
    assert np.array_equal(search.classes_, [0, 1, 2]) and search.n_features_in_ == 4
    assert np.array_equal(search.predict(X), search.best_estimator_.predict(X))
    assert search.predict_proba(X).shape == (300, 3) and search.decision_function(X).shape == (300, 3)
    assert search.score(X, y) > 0.6 and -1 < search.best_score_ < 2
    assert not hasattr(search, "n_trials_") and not hasattr(search, "cv_results_")
    assert not hasattr(search, "curator_results_")  # nothing uncovered unless asked for
    assert search.budget_split_["n_train"] + search.budget_split_["n_validation"] == 300


def test_curator_results_only_on_request_and_not_certified(blobs):
    X, y = blobs
    search = _search(return_curator_results=True).fit(X, y)
    trials = search.curator_results_["trials"]
    assert search.curator_results_["n_trials"] == len(trials) >= 1
    assert max(t["noisy_score"] for t in trials) == pytest.approx(search.best_score_)
    assert not search.privacy_certified_ and search.best_estimator_.privacy_certified_  # the secret K is in it


def test_refit_false_releases_parameters_only(blobs):
    X, y = blobs
    search = _search(refit=False).fit(X, y)
    assert not hasattr(search, "best_estimator_") and search.best_params_
    with pytest.raises(AttributeError, match="refit=True"):
        search.predict(X)


def test_ledger_charged_once_with_the_total(blobs):
    X, y = blobs
    ledger = BudgetLedger(epsilon=10.0, delta=1e-3)
    search = _search(estimator=_clf(ledger=ledger), ledger=ledger).fit(X, y)
    assert len(ledger.entries) == 1  # trials charge nothing
    assert ledger.total() == pytest.approx((search.epsilon_, 1e-5))
    small = BudgetLedger(epsilon=1.0)
    with pytest.raises(BudgetExceededError):
        _search(ledger=small).fit(X, y)
    assert small.entries == []


def test_pickle_round_trip(blobs):
    X, y = blobs
    search = _search().fit(X, y)
    again = pickle.loads(pickle.dumps(search))
    assert np.array_equal(again.predict(X), search.predict(X)) and again.epsilon_ == search.epsilon_


def test_pipeline_and_parallel_trials(blobs):
    X, y = blobs
    pipe = Pipeline([("shift", RowFunctionTransformer()), ("clf", _clf())])  # row-wise: certified
    search = PrivateSearchCV(pipe, {"clf__lr": [0.1, 0.5], "clf__max_epochs": [1, 2]}, epsilon=2.0,
                             n_trials_mean=2.0, n_jobs=2, random_state=0).fit(X, y)
    assert set(search.best_params_) == {"clf__lr", "clf__max_epochs"} and search.privacy_certified_
    assert search.best_estimator_.named_steps["clf"].noise_multiplier_ > 0
    assert search.score(X, y) > 0.5 and search.epsilon_ <= 2.0


def test_pipeline_step_that_learns_without_dp_is_flagged(blobs):
    X, y = blobs
    pipe = Pipeline([("scale", StandardScaler()), ("clf", _clf())])
    with pytest.warns(PrivacyLeakWarning, match="scale"):
        search = PrivateSearchCV(pipe, {"clf__lr": [0.5]}, epsilon=2.0, n_trials_mean=2.0).fit(X, y)
    assert not search.privacy_certified_ and "scale" in search.privacy_notes_[0]


def test_param_distributions_and_poisson(blobs):
    X, y = blobs
    search = PrivateSearchCV(_clf(), param_distributions={"lr": loguniform(0.05, 1.0), "batch_size": [32, 64]},
                             epsilon=2.0, n_trials_mean=9.0, distribution="poisson").fit(X, y)  # P[K=0] = 1e-4
    assert 0.05 <= search.best_params_["lr"] <= 1.0 and search.best_index_ is None
    assert search.epsilon_ <= 2.0 and "mu" in search.budget_split_


def test_classes_read_from_the_data_warn_and_are_not_certified(blobs):
    X, y = blobs
    with pytest.warns(PrivacyLeakWarning, match="label set"):
        search = _search(estimator=_clf(classes=None)).fit(X, y)
    assert not search.privacy_certified_ and "classes read from the private data" in search.privacy_notes_


def test_auto_score_noise_is_free_and_a_small_one_is_not():
    """"auto" puts the score's RDP under the training's: the split is as if the score had no cost."""
    plans = {(32, 2): (32 / 240, 16), (64, 2): (64 / 240, 8)}

    def split(score_noise):
        search = _search(score_noise=score_noise)
        return search._calibrate(plans, search._law())

    _, auto_noise, auto_eps, _, auto_trial = split("auto")
    _, _, _, _, free_trial = split(1e6)  # a score so noisy it costs nothing
    _, _, _, _, costly_trial = split(3.0)  # below auto (about 3.4 here): the score now costs
    assert auto_eps <= 2.0 and auto_trial == pytest.approx(free_trial, rel=0.01)
    assert costly_trial < 0.99 * auto_trial and 3.0 < auto_noise < 20
    with pytest.raises(ValueError, match="score_noise=0.5 alone costs"):
        split(0.5)


def test_refuses_a_mean_of_one_trial_for_the_negative_binomial(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match="n_trials_mean=1"):
        _search(n_trials_mean=1).fit(X, y)


# -- refusals ------------------------------------------------------------------------------------
@pytest.mark.parametrize("grid,name", [({"epsilon": [1, 2]}, "epsilon"),
                                       ({"noise_multiplier": [1.0]}, "noise_multiplier"),
                                       ({"delta": [1e-6]}, "delta")])
def test_refuses_privacy_parameters_in_the_grid(blobs, grid, name):
    X, y = blobs
    with pytest.raises(ValueError, match=f"'{name}'.*set by PrivateSearchCV"):
        PrivateSearchCV(_clf(), grid, epsilon=1.0).fit(X, y)
    pipe = Pipeline([("clf", _clf())])
    with pytest.raises(ValueError, match=f"clf__{name}"):
        PrivateSearchCV(pipe, {f"clf__{k}": v for k, v in grid.items()}, epsilon=1.0).fit(X, y)


def test_refuses_a_budget_too_small_for_one_trial(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match=r"epsilon=0.001 is too small to pay for one trial"):
        _search(epsilon=1e-3).fit(X, y)


def test_refuses_a_non_dp_estimator_unless_declared_public(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match="not differentially private.*public_estimator=True"):
        PrivateSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, epsilon=1.0).fit(X, y)
    search = PrivateSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, epsilon=1.0, public_estimator=True,
                             n_trials_mean=2.0).fit(X, y)
    assert search.epsilon_ == math.inf and not search.privacy_certified_
    assert "public_estimator=True" in search.privacy_notes_[0]


@pytest.mark.parametrize("scoring", ["f1_macro", "roc_auc", lambda est, X, y: 1.0])
def test_refuses_a_scorer_that_is_not_dp(blobs, scoring):
    X, y = blobs
    with pytest.raises(ValueError, match="not supported.*count of correct predictions"):
        _search(scoring=scoring).fit(X, y)


def test_refuses_distributions_over_plan_parameters_and_infinite_budget(blobs):
    X, y = blobs
    from scipy.stats import randint
    with pytest.raises(ValueError, match="batch_size.*must be a list"):
        PrivateSearchCV(_clf(), param_distributions={"batch_size": randint(16, 64)}, epsilon=1.0).fit(X, y)
    with pytest.raises(ValueError, match="epsilon"):
        _search(epsilon=math.inf).fit(X, y)  # refused by the parameter constraints
    with pytest.raises(ValueError, match="not both"):
        PrivateSearchCV(_clf(), {"lr": [0.1]}, {"lr": [0.1]}, epsilon=1.0).fit(X, y)


# -- the one-run audit of the whole search ---------------------------------------------------------
def _search_audit(noise_off=False):
    from sklearn.datasets import load_digits
    from skdp.audit import one_run_audit

    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(X))[:200]
    canaries = (rng.random((1000, 64)) < 0.3).astype(float)
    clf = DPMomentumClassifier(classes=range(10), random_state=0, module="mlp", module__hidden_sizes=(512,),
                               max_epochs=15, lr=0.5, batch_size=64)
    search = PrivateSearchCV(clf, {"lr": [0.5]}, epsilon=2.0, n_trials_mean=1.5, validation_fraction=0.05,
                             random_state=0)
    # The twin: trials train and score without noise (skdp.utils.taps, test-only), the claim stays.
    with taps.noise_off() if noise_off else contextlib.nullcontext():
        return quiet(one_run_audit, search, X[idx] / 16, y[idx], canaries, rng.integers(0, 10, 1000),
                     n_guesses=100, random_state=1)


def test_search_audit_stays_below_its_claim():
    result = _search_audit()
    assert result.claimed_epsilon <= 2.0 and result.delta == 1e-5
    assert result.epsilon_lower_bound <= result.claimed_epsilon


def test_search_audit_catches_trials_without_noise():
    result = _search_audit(noise_off=True)
    assert result.claimed_epsilon <= 2.0  # the twin claims the same budget ...
    assert result.epsilon_lower_bound >= 1.0  # ... and the audit refutes it


def test_seeded_noise_is_not_certified(blobs, seeded_noise):
    X, y = blobs
    with seeded_noise(0):
        search = _search().fit(X, y)
    assert search.noise_seeded_ and not search.privacy_certified_
    assert "noise seeded by insecure_noise_seed" in search.privacy_notes_
