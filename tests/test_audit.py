import math

import numpy as np
import pytest
from scipy.stats import binom
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from skdp import (BudgetLedger, DPFisherClassifier, DPFisherSelector, DPMomentumClassifier,
                  search_privacy_cost)
from skdp.attacks import lira_offline_attack, loss_threshold_attack
from skdp.audit import mislabelled_canaries, one_run_audit, one_run_epsilon_lower_bound, one_run_p_value
from conftest import quiet




# -- the bound itself ------------------------------------------------------------------------
@pytest.mark.parametrize("m,r,correct,expected", [
    (1000, 10, 10, 1.01), (1000, 100, 100, 3.47), (1000, 100, 90, 1.63), (1000, 1000, 900, 2.02),
    (10000, 1000, 750, 0.97), (1000, 1000, 600, 0.30)])
def test_one_run_bound_matches_the_reference_implementation(m, r, correct, expected):
    # Values computed with Steinke, Nasr & Jagielski's reference code (shared/notes/anchors.md §3.2).
    assert one_run_epsilon_lower_bound(m, r, correct, 1e-5) == pytest.approx(expected, abs=0.01)


def test_one_run_p_value_without_delta_is_the_binomial_tail():
    q = math.exp(1.0) / (1 + math.exp(1.0))
    assert one_run_p_value(1.0, 100, 50, 40, 0.0) == pytest.approx(binom.sf(39, 50, q))
    assert one_run_epsilon_lower_bound(100, 50, 25, 1e-5) == 0.0  # chance level refutes nothing


# -- audits with teeth -----------------------------------------------------------------------
def _digits_and_random_canaries(m=1000):
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(X))[:200]
    canaries = (rng.random((m, 64)) < 0.3).astype(float)  # out-of-distribution, random labels
    return X[idx] / 16, y[idx], canaries, rng.integers(0, 10, m)


def _momentum_audit(epsilon):
    X, y, Xc, yc = _digits_and_random_canaries()
    clf = DPMomentumClassifier(epsilon=epsilon, classes=range(10), random_state=0, module="mlp",
                               module__hidden_sizes=(512,), max_epochs=60, lr=0.5, batch_size=64)
    return quiet(one_run_audit, clf, X, y, Xc, yc, n_guesses=100, random_state=1)


def test_momentum_classifier_audit_stays_below_its_claim():
    result = _momentum_audit(2.0)
    assert result.claimed_epsilon <= 2.0 and result.delta == 1e-5
    assert result.epsilon_lower_bound <= 2.0 and result.consistent


def test_momentum_classifier_audit_catches_missing_noise():
    assert _momentum_audit(math.inf).epsilon_lower_bound >= 1.0


def _fisher_audit(epsilon, m=400):
    """Dirac canaries: canary i is the only record with a non-zero value in feature 2 + i."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    X = np.hstack([rng.uniform(0, 1, (200, 2)), np.zeros((200, m))])
    Xc = np.hstack([np.full((m, 2), 0.5), np.eye(m)])
    clf = DPFisherClassifier(epsilon=epsilon, bounds=(0, 1), classes=[0, 1], random_state=0)
    return quiet(one_run_audit, clf, X, y, Xc, np.zeros(m, dtype=int), n_guesses=100, random_state=1)


def test_fisher_classifier_audit_stays_below_its_claim():
    assert _fisher_audit(1.0).epsilon_lower_bound <= 1.0


def test_fisher_classifier_audit_catches_missing_noise():
    assert _fisher_audit(math.inf).epsilon_lower_bound >= 1.0


def test_mislabelled_canaries_never_keep_the_true_label():
    X, y = np.arange(40.0).reshape(20, 2), np.arange(20) % 4
    Xc, yc = mislabelled_canaries(X, y, classes=range(4), random_state=0)
    assert np.all(yc != y) and set(yc) <= {0, 1, 2, 3} and np.array_equal(Xc, X)


# -- membership inference --------------------------------------------------------------------
@pytest.fixture(scope="module")
def membership_split():
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(X))
    return X[idx[:150]] / 16, y[idx[:150]], X[idx[150:300]] / 16, y[idx[150:300]], \
        X[idx[300:]] / 16, y[idx[300:]]


def _overfit():
    return DPMomentumClassifier(epsilon=math.inf, classes=range(10), random_state=0, module="mlp",
                                module__hidden_sizes=(256,), max_epochs=60, lr=0.5, batch_size=32,
                                max_grad_norm=10.0)


def test_membership_attacks_find_members_of_an_overfit_model(membership_split):
    X_in, y_in, X_out, y_out, X_ref, y_ref = membership_split
    fitted = quiet(_overfit().fit, X_in, y_in)
    assert loss_threshold_attack(fitted, X_in, y_in, X_out, y_out).auc > 0.6
    lira = quiet(lira_offline_attack, fitted, _overfit(), X_ref, y_ref, X_in, y_in, X_out, y_out,
                 n_reference=4, random_state=0)
    assert lira.auc > 0.6 and 0 <= lira.tpr_at_low_fpr <= 1


def test_membership_attack_is_near_chance_on_a_private_model(membership_split):
    # Twin of the test above: the same attack on a model trained at epsilon = 0.5.
    X_in, y_in, X_out, y_out, _, _ = membership_split
    private = _overfit().set_params(epsilon=0.5, max_grad_norm=1.0)
    fitted = quiet(private.fit, X_in, y_in)
    assert loss_threshold_attack(fitted, X_in, y_in, X_out, y_out).auc < 0.6


# -- budget across searches ------------------------------------------------------------------
def test_grid_search_in_processes_records_every_fit_and_the_cost_matches(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    X = rng.normal(size=(300, 5)) + y[:, None]
    ledger = BudgetLedger(path=str(tmp_path / "ledger.sqlite"))
    pipe = Pipeline([("select", DPFisherSelector(3, bounds=(-4, 5), classes=[0, 1], ledger=ledger,
                                                 random_state=0)),
                     ("clf", DPFisherClassifier(bounds=(-4, 5), classes=[0, 1], ledger=ledger,
                                                random_state=0))])
    search = GridSearchCV(pipe, {"clf__epsilon": [0.5, 1.0, 2.0]}, cv=3, n_jobs=2).fit(X, y)
    # 3 candidates x 3 folds + the refit = 10 fits, each charging its two steps.
    assert len(ledger.entries) == 20
    eps, delta = search_privacy_cost(search)
    assert eps == pytest.approx(ledger.total()[0]) and delta == pytest.approx(ledger.total()[1])
    assert eps == pytest.approx(3 * (3 * 1.0) + 3 * (0.5 + 1 + 2) + (1.0 + search.best_params_["clf__epsilon"]))


def test_search_cost_needs_a_fitted_search():
    with pytest.raises(ValueError, match="fitted"):
        search_privacy_cost(GridSearchCV(DPFisherClassifier(), {"epsilon": [1]}))
