"""Regression tests for the review of issue 23's fixes (/work/review23): seams the first round left open.

1. any estimator with a parameter named ``epsilon`` (Adam's, SGD's or SVR's loss epsilon) counted as a DP step;
5. ``RowFunctionTransformer`` was public whatever ``func`` did (a streaming standardiser learnt the mean);
6b. ``OneHotEncoder(categories=[...])`` with ``handle_unknown="error"`` printed a private value while public;
7. ``PrivateSearchCV`` charged the budget for candidates whose network cannot be built or run;
9. a kept ``best_estimator_`` reported its trial's epsilon, below the search's that releasing it costs;
10. ``return_curator_results=True`` (the secret K, exact accuracies) still certified;
11. the number of warnings a search emitted counted its secret number of trials;
12. ``TrainOnSynthetic`` (DP by its generator) was flagged as a learning step by ``privacy_spent``.
(The harness's own findings, 12, are tested in tests/test_sensitivity_harness.py.)
"""
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import HuberRegressor, PassiveAggressiveRegressor, SGDClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder
from sklearn.svm import SVR, LinearSVR

from skdp import (BudgetLedger, DPFisherClassifier, DPFisherSelector, DPMomentumClassifier, PGEGenerator,
                  PrivacyLeakWarning, PrivateSearchCV, TrainOnSynthetic, privacy_spent)
from skdp.model_selection import _tuning
from skdp.preprocessing import RowFunctionTransformer
from skdp.privacy import non_private_steps, set_privacy_attributes
from conftest import quiet


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(0)
    X = rng.random((80, 3)).astype(np.float32)
    return X, (X[:, 0] > 0.5).astype(int)


def _strict(fn, *args):
    """``fn(*args)`` with every PrivacyLeakWarning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        return fn(*args)


# ---- 1: a parameter named epsilon is not a mechanism ----------------------------------------------------
@pytest.mark.parametrize("make", [lambda: SGDClassifier(random_state=0), lambda: MLPClassifier((4,), max_iter=20),
                                  HuberRegressor, SVR, LinearSVR, PassiveAggressiveRegressor],
                         ids=["SGDClassifier", "MLPClassifier", "HuberRegressor", "SVR", "LinearSVR",
                              "PassiveAggressiveRegressor"])
@pytest.mark.filterwarnings("ignore:Class PassiveAggressiveRegressor is deprecated:FutureWarning")
def test_an_epsilon_parameter_does_not_make_a_step_private(table, make):
    X, y = table
    est = quiet(make().fit, X, y)
    name = type(est).__name__.lower()
    assert [path for path, _ in non_private_steps(est)] == [name]
    with pytest.warns(PrivacyLeakWarning, match=f"{name}.*epsilon"):
        assert privacy_spent(est) == (0.0, 0.0, False)


def test_a_dp_selector_before_an_epsilon_named_learner_is_not_certified(table):
    X, y = table
    pipe = make_pipeline(DPFisherSelector(epsilon=1.0, n_features_to_select=2, bounds=(0, 1), classes=[0, 1]),
                         SGDClassifier(random_state=0))
    quiet(pipe.fit, X, y)
    with pytest.warns(PrivacyLeakWarning, match="sgdclassifier"):
        eps, _, certified = privacy_spent(pipe)
    assert eps == pytest.approx(1.0) and not certified


class _UserDPRegressor(RegressorMixin, BaseEstimator):
    """A user's own DP estimator: it opts in by reporting its privacy attributes at the end of fit."""

    def __init__(self, epsilon=1.0):
        self.epsilon = epsilon

    def fit(self, X, y):
        self.coef_ = np.zeros(np.shape(X)[1])
        return set_privacy_attributes(self, self.epsilon, 0.0)

    def predict(self, X):
        return np.asarray(X) @ self.coef_


def test_a_user_estimator_opts_in_by_reporting_its_spend(table):
    X, y = table
    assert non_private_steps(_UserDPRegressor())  # unfitted, nothing says it spends privacy
    fitted = _UserDPRegressor(epsilon=0.5).fit(X, y)
    assert _strict(privacy_spent, fitted) == (0.5, 0.0, True)
    assert _strict(privacy_spent, make_pipeline(RowFunctionTransformer(np.tanh), _UserDPRegressor(0.5)).fit(X, y))[2]


def test_every_skdp_estimator_with_an_epsilon_parameter_is_declared_dp():
    import inspect

    from skdp._public import public_objects
    from skdp.privacy.public_steps import declares_dp

    with_epsilon = [obj for _, _, obj in public_objects() if inspect.isclass(obj) and hasattr(obj, "fit")
                    and "epsilon" in inspect.signature(obj.__init__).parameters]
    assert len(with_epsilon) >= 8
    assert [cls.__name__ for cls in with_epsilon if not declares_dp(cls)] == []
    assert declares_dp(TrainOnSynthetic)  # a DP meta-estimator: its generator spends
    assert not declares_dp(SGDClassifier) and not declares_dp(MLPClassifier)


# ---- 12 (r15): TrainOnSynthetic certifies, and privacy_spent agrees ----------------------------------------
class _UserDPGenerator(BaseEstimator):
    """A DP generator of the user's (class means plus noise, reported by set_privacy_attributes)."""

    def __init__(self, epsilon=1.0):
        self.epsilon = epsilon

    def fit(self, X, y):
        self.classes_, self.class_prior_ = np.array([0, 1]), np.array([0.5, 0.5])
        self.means_ = np.random.default_rng().normal(0.5, 1 / self.epsilon, (2, np.shape(X)[1]))
        return set_privacy_attributes(self, self.epsilon, 0.0)

    def sample(self, n, y, random_state=None):
        return self.means_[np.asarray(y)] + np.random.default_rng(random_state).normal(0, 0.1, (n, 3)), y


def test_train_on_synthetic_is_a_dp_step(table):
    X, y = table
    est = TrainOnSynthetic(_UserDPGenerator(epsilon=2.0), synthetic_ratio=1, random_state=0).fit(X, y)
    assert est.privacy_certified_
    assert non_private_steps(TrainOnSynthetic(PGEGenerator())) == []  # declared DP before it is fitted too
    assert _strict(privacy_spent, est) == (2.0, 0.0, True)
    assert _strict(privacy_spent, make_pipeline(RowFunctionTransformer(np.tanh), est).fit(X, y))[2]


# ---- 5: RowFunctionTransformer refuses a func that learns ------------------------------------------------
class _StreamingStandardiser:
    """Welford running mean: standardises each row by the statistics seen so far (r04a)."""

    def __init__(self):
        self.n, self.mean = 0, None

    def __call__(self, row):
        self.n += 1
        self.mean = row[0].copy() if self.mean is None else self.mean + (row[0] - self.mean) / self.n
        return np.clip(row - self.mean, -1, 1)


def _remember(row, seen):
    seen.append(float(row[0, 0]))
    return row


def test_a_row_function_that_learns_is_refused(table):
    X, y = table
    pipe = make_pipeline(RowFunctionTransformer(_StreamingStandardiser()),
                         DPFisherClassifier(epsilon=1.0, bounds=(-1, 1), classes=[0, 1]))
    with pytest.raises(ValueError, match="func.*changed"):
        quiet(pipe.fit, X, y)
    with pytest.raises(ValueError, match="kw_args.*changed"):
        RowFunctionTransformer(_remember, kw_args={"seen": []}).fit_transform(X)


def test_a_stateless_row_function_is_still_public(table):
    X, y = table
    offset = np.float32(0.5)
    pipe = make_pipeline(RowFunctionTransformer(lambda row: np.tanh(row - offset)),
                         DPFisherClassifier(epsilon=1.0, bounds=(-1, 1), classes=[0, 1]))
    assert _strict(privacy_spent, quiet(pipe.fit, X, y))[2]


# ---- 6b: a public encoder must not raise with the private value ------------------------------------------
def test_a_public_encoder_must_not_print_unknown_values():
    Xc = np.array([["a"], ["b"], ["a"], ["Smith-Jones, J. (HIV+)"]], dtype=object)
    yc = np.array([0, 1, 0, 1])
    clf = DPFisherClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1])
    raising = make_pipeline(ColumnTransformer([("oh", OneHotEncoder(categories=[["a", "b"]]), [0])]), clf)
    assert [path for path, _ in non_private_steps(raising)] == ["columntransformer__oh"]
    assert "handle_unknown" in non_private_steps(raising)[0][1]
    assert non_private_steps(OrdinalEncoder(categories=[["a", "b"]]))  # handle_unknown="error" too
    assert non_private_steps(OneHotEncoder(categories=[["a", "b"]], handle_unknown="warn"))  # warns that one exists
    public = make_pipeline(ColumnTransformer([("oh", OneHotEncoder(categories=[["a", "b"]],
                                                                   handle_unknown="ignore"), [0])]), clf)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = public.fit(Xc, yc)
        assert privacy_spent(fitted)[2]
    assert not any("Smith" in str(w.message) for w in caught)
    assert not non_private_steps(OrdinalEncoder(categories=[["a", "b"]], handle_unknown="use_encoded_value",
                                                unknown_value=-1))


# ---- 7: candidates that cannot be built or run are refused before the charge -----------------------------
@pytest.mark.parametrize("grid", [{"module": ["cnn"]}, {"module": ["mlp"], "module__hidden_sizes": [(0,)]},
                                  {"module__typo": [1]}], ids=["cnn-without-image-shape", "zero-width", "typo"])
def test_a_candidate_that_cannot_run_costs_nothing(table, grid):
    X, y = table
    ledger = BudgetLedger()
    search = PrivateSearchCV(DPMomentumClassifier(classes=[0, 1], max_epochs=1, batch_size=8), grid,
                             epsilon=1.0, n_trials_mean=2.0, ledger=ledger)
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        quiet(search.fit, X, y)
    assert ledger.total() == (0.0, 0.0)


class _KeepsLot(torch.nn.Module):
    """Stores the lot it saw in training: state a training forward leaves (refused by the engine)."""

    def __init__(self, input_dim=3, n_classes=2):
        super().__init__()
        self.lin = torch.nn.Linear(input_dim, n_classes)

    def forward(self, x):
        if self.training:
            self.last_lot = x.detach().clone()
        return self.lin(x)


def test_a_candidate_whose_training_forward_keeps_state_costs_nothing(table):
    X, y = table
    ledger = BudgetLedger()
    search = PrivateSearchCV(DPMomentumClassifier(classes=[0, 1], max_epochs=1, batch_size=8),
                             {"module": ["linear", _KeepsLot]}, epsilon=1.0, n_trials_mean=2.0, ledger=ledger)
    with pytest.raises(ValueError, match="_KeepsLot"):
        quiet(search.fit, X, y)
    assert ledger.total() == (0.0, 0.0)


def test_a_pipeline_candidate_is_run_through_its_public_steps(table):
    X, y = table
    ledger = BudgetLedger()
    pipe = Pipeline([("pre", RowFunctionTransformer(np.tanh)),
                     ("clf", DPMomentumClassifier(classes=[0, 1], max_epochs=1, batch_size=8))])
    search = PrivateSearchCV(pipe, {"clf__module__hidden_sizes": [(0,)], "clf__module": ["mlp"]}, epsilon=1.0,
                             n_trials_mean=2.0, ledger=ledger)
    with pytest.raises((ValueError, RuntimeError)):
        quiet(search.fit, X, y)
    assert ledger.total() == (0.0, 0.0)


# ---- 9, 10, 11: what a search releases with its winner, its curator results and its warnings -------------
@pytest.fixture(scope="module")
def searched(table):
    """One search with K = 3 trials (forced), curator results kept, every warning recorded."""
    X, y = table
    search = PrivateSearchCV(DPMomentumClassifier(classes=[0, 1], max_epochs=1, batch_size=16, delta=0.05),
                             {"lr": [0.1, 0.3]}, epsilon=2.0, delta=0.05, n_trials_mean=3.0,
                             return_curator_results=True)
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings(record=True) as caught:
        patch.setattr(_tuning, "sample_tnb", lambda *args: 3)
        warnings.simplefilter("always")
        search.fit(X, y)
    assert search.curator_results_["n_trials"] == 3
    return search, [str(w.message) for w in caught]


def test_the_kept_winner_reports_what_releasing_it_costs(searched):
    search, _ = searched
    best = search.best_estimator_
    assert (best.epsilon_, best.delta_, best.privacy_certified_) == (search.epsilon_, search.delta_, True)
    assert best.privacy_cost_ == search.privacy_cost_
    assert _strict(privacy_spent, best) == (search.epsilon_, search.delta_, True)
    assert best.epsilon_ > search.trial_epsilon_


def test_curator_results_are_not_certified(searched):
    search, _ = searched
    assert not search.privacy_certified_
    assert any("curator_results_" in note for note in search.privacy_notes_)
    assert not quiet(privacy_spent, search)[2]


def test_the_number_of_warnings_does_not_count_the_trials(searched):
    _, messages = searched
    # Each of the 3 trials warns that delta >= 1/n of its training split: shown once, not 3 times.
    assert [m.split(":")[0] for m in messages].count("DPMomentumClassifier") == 1
