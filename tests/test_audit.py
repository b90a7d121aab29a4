import contextlib
import math

import numpy as np
import pytest
from scipy.stats import binom
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline, make_pipeline

from skdp import (BudgetLedger, DFSRelease, DPFisherClassifier, DPFisherSelector, DPMomentumClassifier,
                  DPMomentumRegressor, PGEGenerator, PrivateSearchCV, SRGANTransformer, search_privacy_cost)
from skdp.attacks import lira_offline_attack, loss_threshold_attack
from skdp.audit import (log_likelihood_score, logit_score, mislabelled_canaries, one_run_audit,
                        one_run_epsilon_lower_bound, one_run_gaussian_lower_bound, one_run_p_value)
from skdp.audit.fdp import one_run_fdp_epsilon_lower_bound
from skdp.mechanisms import gaussian_dp_epsilon
from skdp.preprocessing import RowFunctionTransformer
from skdp.utils import taps
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


# -- the f-DP analysis (Mahloujifar, Melis & Chaudhuri 2024) ------------------------------------
@pytest.mark.parametrize("m,r,correct", [(1000, 100, 100), (1000, 1000, 1000), (1000, 100, 90), (1000, 1000, 900),
                                         (10000, 1000, 750), (1000, 1000, 600), (100, 100, 100)])
def test_fdp_test_with_the_epsilon_delta_curve_gives_the_steinke_bound(m, r, correct):
    # Two derivations of one (epsilon, delta) refutation: the f-DP lemma with the (epsilon, delta) trade-off curve
    # and Steinke et al.'s binomial theorem agree to a few hundredths (3.49 vs 3.47 for 100 of 100 guesses right).
    assert one_run_fdp_epsilon_lower_bound(m, r, correct, 1e-5) == pytest.approx(
        one_run_epsilon_lower_bound(m, r, correct, 1e-5), abs=0.05)


@pytest.mark.parametrize("m,mu,epsilon", [(1000, 2.368, 12.33), (10000, 2.921, 16.11), (100, 1.703, 8.22)])
def test_gaussian_bound_with_every_guess_right(m, mu, epsilon):
    # The ceiling of m canaries: every one guessed, all right (the Steinke bound's ceilings: 5.78 and 7.83).
    assert one_run_gaussian_lower_bound(m, m, m) == pytest.approx(mu, abs=2e-3)
    assert gaussian_dp_epsilon(one_run_gaussian_lower_bound(m, m, m), 1e-5) == pytest.approx(epsilon, abs=0.02)


def test_gaussian_bound_grows_with_right_guesses_and_stays_below_the_ceiling():
    m, r = 1000, 200
    ceiling = max(one_run_gaussian_lower_bound(m, k, k) for k in (10, 100, 200, 500, 1000))
    bounds = [one_run_gaussian_lower_bound(m, r, c) for c in range(100, r + 1, 10)]
    assert bounds[0] == 0.0  # half right: chance
    assert all(a <= b for a, b in zip(bounds, bounds[1:])) and bounds[-1] > 1.0
    assert max(bounds) <= ceiling == pytest.approx(one_run_gaussian_lower_bound(m, m, m))
    # More confidence, a lower bound; more canaries for the same guesses, no higher.
    assert one_run_gaussian_lower_bound(m, r, 180, confidence=0.99) < one_run_gaussian_lower_bound(m, r, 180)
    assert one_run_gaussian_lower_bound(10 * m, r, 180) <= one_run_gaussian_lower_bound(m, r, 180) + 1e-6


def test_gaussian_bound_holds_on_gaussian_canaries():
    # m canaries whose scores are exactly mu-GDP (in: N(mu, 1), out: N(0, 1)): the 95% bound may pass mu in
    # at most 5% of the runs; it passed it in none of 60 (and reaches about 0.6 mu, the one-run efficiency).
    from skdp.audit.one_run import one_run_bounds
    rng = np.random.default_rng(0)
    mu, m, bounds = 1.0, 1000, []
    for _ in range(60):
        included = rng.random(m) < 0.5
        (_, _, _), lower = one_run_bounds(rng.normal(size=m) + mu * included, included, "auto", 1e-5, 0.95, rng)
        bounds.append(lower)
    assert np.mean(np.array(bounds) > mu) <= 0.05 and np.median(bounds) > 0.5


def test_guesses_split_where_the_scores_separate():
    # 530 of 1000 canaries in: guessing all 1000 at the scores' gap gets all right (the median split got 30 wrong).
    from skdp.audit.one_run import one_run_guesses
    rng = np.random.default_rng(0)
    included = np.arange(1000) < 530
    scores = np.where(included, 5.0, 0.0) + rng.normal(0, 0.1, 1000)
    assert np.all(one_run_guesses(scores, 1000, rng) == np.where(included, 1, -1))
    few = one_run_guesses(scores, 100, rng)
    assert np.sum(few != 0) == 100 and np.all(few[few != 0] == np.where(included, 1, -1)[few != 0])
    # Two tied values, the larger also the median (a Fisher model without noise: 210 canaries in, 190 out):
    # the split from the median had stalled there and guessed "out" for all 400 (190 right).
    tied = np.where(np.arange(400) < 210, 161.374631, 159.551122)
    assert np.all(one_run_guesses(tied, 400, rng) == np.where(np.arange(400) < 210, 1, -1))


def test_guesses_are_bounded_by_the_canaries():
    from skdp.audit.one_run import _guess_counts
    assert _guess_counts("auto", 1000) == [100, 1000] and _guess_counts("auto", 4) == [1, 4]
    with pytest.raises(ValueError, match="n_guesses.*n_canaries=50"):
        _guess_counts(100, 50)


# -- white-box gradient canaries of DP-SGD ----------------------------------------------------------
# Small fits: 200 records, 2 informative features and many that are always 0 (their weights are moved by the
# canaries alone), full lots (q = 1: no subsampling, so the PRV accountant's claim is close to what the
# mechanism spends) and plain SGD (the score reads the releases: any optimizer gives the same). Twins: the
# noise removed, and the clipping bound doubled while the noise stays calibrated to the old one (each audited
# record then moves the sum by 2 C): the audit must refute the same claim.
TWINS = {"shipped": contextlib.nullcontext, "noise off": taps.noise_off, "clip doubled": lambda: taps.scaled_noise(0.5)}


def _dead_features(n=200, dead=2000, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    return np.hstack([rng.normal(size=(n, 2)) + y[:, None], np.zeros((n, dead))]), y


def _sgd(twin, **params):
    """DP-SGD settings shared by the small audits (plain SGD: ``momentum=0``); the clip-doubled twin's bound is 2 C."""
    return dict(noise_multiplier=2.8, batch_size=200, max_epochs=4, lr=0.1, accounting="prv",
                max_grad_norm=2.0 if twin == "clip doubled" else 1.0, random_state=0, **params)


def _gradient_audit(estimator, X, y, twin, n_canaries):
    with TWINS[twin]():
        return quiet(one_run_audit, estimator, X, y, canaries="gradient", n_canaries=n_canaries, random_state=1)


def _check_twin(result, twin):
    assert result.canaries == "gradient" and result.delta == 1e-5
    if twin == "shipped":  # both bounds (DP-SGD's curve is Gaussian) stay below the claim
        assert result.epsilon_lower_bound <= result.claimed_epsilon
        assert result.gaussian_epsilon_lower_bound <= result.claimed_epsilon
    elif twin == "noise off":  # the (epsilon, delta) claim itself is refuted
        assert result.epsilon_lower_bound > result.claimed_epsilon
    else:  # twice the sensitivity: mu is refuted (classifier: 3.8-4.2 against a claim of 3.0 in 3 runs)
        assert result.gaussian_epsilon_lower_bound > result.claimed_epsilon


@pytest.mark.parametrize("twin", TWINS)
def test_gradient_audit_of_the_classifier(twin):
    X, y = _dead_features()
    result = _gradient_audit(DPMomentumClassifier(classes=[0, 1], momentum=0.0, **_sgd(twin)), X, y, twin, 4000)
    assert result.n_canaries == 4000 and result.claimed_epsilon == pytest.approx(3.0, abs=0.05)
    _check_twin(result, twin)


@pytest.mark.parametrize("twin", ["shipped", "clip doubled"])
def test_gradient_audit_sees_through_momentum_and_weight_decay(twin):
    # Momentum weighs the steps unevenly and weight decay shrinks every weight towards 0: neither reaches the
    # score, read from the releases (the noisy sums) rather than the final weights; the doubled clip is caught.
    X, y = _dead_features()
    clf = DPMomentumClassifier(classes=[0, 1], momentum=0.9, optimizer__weight_decay=0.5, **_sgd(twin))
    _check_twin(_gradient_audit(clf, X, y, twin, 4000), twin)


@pytest.mark.parametrize("twin", ["shipped", "clip doubled"])
def test_gradient_audit_of_the_regressor(twin):
    X, y = _dead_features(dead=4000)
    _check_twin(_gradient_audit(DPMomentumRegressor(momentum=0.0, **_sgd(twin)), X, X[:, 0] + y, twin, 4000), twin)


@pytest.mark.parametrize("twin", ["shipped", "clip doubled"])
def test_gradient_audit_of_a_pipeline(twin):
    X, y = _dead_features()
    pipe = make_pipeline(RowFunctionTransformer(np.tanh),
                         DPMomentumClassifier(classes=[0, 1], momentum=0.0, **_sgd(twin)))
    _check_twin(_gradient_audit(pipe, X, y, twin, 4000), twin)


@pytest.mark.parametrize("twin", ["shipped", "noise off"])
def test_gradient_audit_of_a_private_search(twin):
    # Every trial trains with the canaries; the released winner is scored against the whole search's claim.
    X, y = _dead_features(dead=500)
    search = PrivateSearchCV(DPMomentumClassifier(classes=[0, 1], momentum=0.0, **{**_sgd(twin), "batch_size": 150,
                                                                     "noise_multiplier": None}),
                             {"lr": [0.1, 0.2]}, epsilon=3.0, n_trials_mean=1.5, validation_fraction=0.1,
                             random_state=0)
    _check_twin(_gradient_audit(search, X, y, twin, 1000), twin)


@pytest.mark.parametrize("twin", ["shipped", "noise off"])
def test_gradient_audit_of_the_generator(twin):
    # PGE trains with Adam; the score reads the releases, not the weights Adam moved. Its doubled-clip twin
    # needs more canaries than this test affords (Gaussian bound 2.0-2.9 against 3.0 with 400 canaries).
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    X = np.hstack([rng.uniform(-0.5, 0.5, (200, 2)) + 0.3 * y[:, None], np.zeros((200, 250))])
    gen = PGEGenerator(module="gaussian", n_projections=1, bounds=(-1, 1), classes=[0, 1], **_sgd(twin))
    _check_twin(_gradient_audit(gen, X, y, twin, 400), twin)


@pytest.mark.parametrize("twin", ["shipped", "noise off"])
def test_gradient_audit_of_the_private_super_resolution(twin):
    # Two engines (generator and discriminator, Adam): each canary has a coordinate in both, and its score adds
    # the two. Like PGE's, its doubled-clip twin escapes 300 canaries (Gaussian bound 1.7-2.4 against 2.8).
    X = np.random.default_rng(0).uniform(0, 1, (32, 4, 4))
    params = {**_sgd(twin), "lr": 1e-2, "batch_size": 32, "noise_multiplier": 3.0}
    del params["max_epochs"]  # pretrain_epochs + gan_epochs
    sr = SRGANTransformer(scale=2, n_filters=4, discriminator_filters=4, n_residual_blocks=1, pretrain_epochs=2,
                          gan_epochs=2, **params)
    _check_twin(_gradient_audit(sr, X, None, twin, 300), twin)


def test_gradient_canaries_join_lots_at_the_records_rate():
    included = np.arange(1000) < 600
    mode = taps._GradientCanaries(included, np.random.default_rng(0))
    counts = np.zeros(1000)
    for _ in range(400):
        mode.lot_drawn(0.25)
        counts += mode.in_lot
    assert np.all(counts[600:] == 0)  # an excluded canary is in no lot
    assert counts[:600].mean() == pytest.approx(100, rel=0.03) and counts[:600].var() == pytest.approx(75, rel=0.2)


def test_gradient_canary_fits_are_never_certified_and_leave_the_engine_alone():
    X, y = _dead_features(dead=50)
    clf = DPMomentumClassifier(classes=[0, 1], momentum=0.0, **_sgd("shipped"))
    included = np.arange(100) < 50
    with taps.gradient_canaries(included, np.random.default_rng(0)) as mode:
        inside = quiet(clone(clf).fit, X, y)
    assert not inside.privacy_certified_ and mode.lots == 4 and mode.engines[0]["releases"] == 4
    assert "noise removed by an audit tap (not private)" in inside.privacy_notes_
    outside = quiet(clone(clf).fit, X, y)  # no tap: nothing added, certified as before
    assert outside.privacy_certified_ and not taps.noise_removed()
    assert taps.add_gradient_canaries([], ["sum"], 1.0) == ["sum"]


def test_gradient_canaries_are_refused_where_they_cannot_work():
    X, y = _dead_features(dead=10)
    with pytest.raises(ValueError, match="no DP-SGD release.*canaries='input'"):
        quiet(one_run_audit, DPFisherClassifier(bounds=(-5, 5), classes=[0, 1]), X, y, canaries="gradient",
              n_canaries=10)
    with pytest.raises(ValueError, match="n_canaries=100 .*26 trainable parameters"):
        quiet(one_run_audit, DPMomentumClassifier(classes=[0, 1], momentum=0.0, **_sgd("shipped")), X, y,
              canaries="gradient",
              n_canaries=100)
    with pytest.raises(ValueError, match="neither X_canary, y_canary nor score"):
        one_run_audit(DPMomentumClassifier(), X, y, X[:5], y[:5], canaries="gradient")
    with pytest.raises(ValueError, match="needs X_canary and y_canary"):
        one_run_audit(DPMomentumClassifier(), X, y)
    with pytest.raises(ValueError, match="canaries must be one of"):
        one_run_audit(DPMomentumClassifier(), X, y, canaries="output")


# -- input canaries: the Fisher-type estimators and their compositions ----------------------------------
def _dirac(m=400, seed=0):
    """200 records with 2 features in [0, 1], then m features that are 0 except in canary i (1 in feature 2 + i)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 200)
    X = np.hstack([rng.uniform(0, 1, (200, 2)), np.zeros((200, m))])
    return X, y, np.hstack([np.full((m, 2), 0.5), np.eye(m)]), np.zeros(m, dtype=int)


INPUT_AUDITS = {  # the estimator and the epsilon it claims
    "DPFisherClassifier": (lambda: DPFisherClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1], random_state=0),
                           1.0),
    # Selection (half the features: choosing all of them releases nothing) then the classifier: 0.5 + 0.5.
    "DFS + Fisher": (lambda: make_pipeline(
        DPFisherSelector(202, epsilon=0.5, bounds=(0, 1), classes=[0, 1], random_state=0),
        DPFisherClassifier(epsilon=0.5, bounds=(0, 1), classes=[0, 1], random_state=0)), 1.0),
    # The classifier learns from the released rows without noise: post-processing of the release's epsilon 1,
    # which privacy_spent cannot see (it reports inf), so the claim is the release's.
    "DFSRelease + Fisher": (lambda: make_pipeline(
        DFSRelease(402, epsilon=1.0, bounds=(0, 1), classes=[0, 1], random_state=0),
        DPFisherClassifier(epsilon=math.inf, priors="uniform")), 1.0),
}


@pytest.mark.parametrize("twin", ["shipped", "noise off"])
@pytest.mark.parametrize("name", INPUT_AUDITS)
def test_input_audit_of_the_fisher_estimators(name, twin):
    # Dirac records: the model's log-odds of canary i's label (logit_score) read feature 2 + i alone. The twin
    # keeps its claim and loses its noise.
    X, y, Xc, yc = _dirac()
    make, claim = INPUT_AUDITS[name]
    with TWINS[twin]():
        result = quiet(one_run_audit, make(), X, y, Xc, yc, random_state=1)
    assert result.canaries == "input"
    assert math.isinf(result.claimed_epsilon) if "Release" in name else result.claimed_epsilon == pytest.approx(claim)
    if twin == "shipped":
        assert result.epsilon_lower_bound <= claim
    else:
        assert result.epsilon_lower_bound > 2 * claim


def test_logit_score_tells_apart_what_the_log_likelihood_saturates():
    # A Fisher model sure of class 0 at every canary: log p = 0.0 for all 400 (a 0/1000 audit on digits with
    # the noise removed), while the log-odds keep the canary's own feature (4.67 > 4 there).
    from scipy.stats import spearmanr
    X, y, Xc, yc = _dirac()
    X, Xc = np.hstack([X, np.zeros((200, 40))]), np.hstack([Xc, np.full((400, 40), 1.0)])  # far from class 1
    with taps.noise_off():
        model = quiet(DPFisherClassifier(bounds=(0, 1), classes=[0, 1]).fit, np.vstack([X, Xc[:200]]),
                      np.concatenate([y, yc[:200]]))
    assert np.all(log_likelihood_score(model, Xc, yc) == 0.0)
    logits = logit_score(model, Xc, yc)
    assert np.all(np.isfinite(logits)) and logits[:200].min() > logits[200:].max()
    # Where nothing saturates the two scores rank alike (the log-odds grow with p).
    log_p = log_likelihood_score(model, X, y)
    inside = (log_p > -600) & (log_p < -1e-6)
    assert inside.sum() > 50 and spearmanr(logit_score(model, X, y)[inside], log_p[inside])[0] > 0.999


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
    # The median over three initialisations: one model's AUC moves between 0.59 and 0.65 with the
    # initialisation and with torch's thread count (float summation order), all at training accuracy 1.
    X_in, y_in, X_out, y_out, X_ref, y_ref = membership_split
    models = [quiet(_overfit().set_params(random_state=seed).fit, X_in, y_in) for seed in range(3)]
    aucs = [loss_threshold_attack(m, X_in, y_in, X_out, y_out).auc for m in models]
    assert np.median(aucs) > 0.6
    fitted = models[int(np.argsort(aucs)[1])]
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
    added = 3 * (3 * 1.0) + 3 * (0.5 + 1 + 2) + (1.0 + search.best_params_["clf__epsilon"])
    assert sum(e for e, _, _ in ledger.entries) == pytest.approx(added)
    assert eps < added  # composed: the Gaussian spends' RDP beats adding them (14.9 against 22.5)


def test_search_cost_needs_a_fitted_search():
    with pytest.raises(ValueError, match="fitted"):
        search_privacy_cost(GridSearchCV(DPFisherClassifier(), {"epsilon": [1]}))
