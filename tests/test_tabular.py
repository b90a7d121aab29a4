"""Tabular steps that pay for what they learn: DPQuantileScaler, DPMedianImputer, and the quantile mechanism."""
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder
from sklearn.utils.estimator_checks import parametrize_with_checks

from skdp import (BudgetExceededError, BudgetLedger, DPFisherClassifier, DPMomentumClassifier, PrivacyLeakWarning,
                  insecure_noise_seed)
from skdp.mechanisms import dp_quantiles, histogram_edges
from skdp.preprocessing import DPMedianImputer, DPQuantileScaler
from skdp.privacy import privacy_spent
from skdp.utils import taps

from conftest import quiet


def _two_scales(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = np.c_[rng.normal(1000 + 400 * y, 100), rng.normal(0.1 - 0.04 * y, 0.01), rng.normal(-50, 5, n)]
    return X, y


@parametrize_with_checks([DPQuantileScaler(), DPMedianImputer()])
def test_sklearn_compatible(estimator, check, seeded_noise):
    with seeded_noise():
        quiet(check, estimator)


# -- the mechanism ----------------------------------------------------------------------------------
def test_log_grid_is_public_and_covers_the_domain():
    edges = histogram_edges(0, 1e4)
    assert edges[0] == 0 and edges[-1] == 1e4 and np.all(np.diff(edges) > 0)
    assert edges[1] == pytest.approx(1e-8)  # 12 decades below 1e4, then one bin down to 0
    with pytest.raises(ValueError, match="low < high"):
        histogram_edges(5, 5)


def test_quantiles_found_at_every_scale():
    # Fresh noise: a miss of 0.35 widths happens in under 1 % of draws (3.7 % with 8 refined bins before "auto"
    # took up to 32), so 2 of 3 draws must hit (a false failure about 1e-4).
    X, _ = _two_scales()
    true_lo, true_hi = np.quantile(X, [0.01, 0.99], axis=0)
    width = true_hi - true_lo
    hits = 0
    for _ in range(3):
        lo, hi = DPQuantileScaler(epsilon=1.0).fit(X).bounds_
        hits += bool(np.all(np.abs(lo - true_lo) < 0.35 * width) and np.all(np.abs(hi - true_hi) < 0.35 * width))
    assert hits >= 2


def test_noise_matters_at_tiny_epsilon():
    # Twin of the test above: at epsilon 1e-4 the released ranges are far from the data's.
    X, _ = _two_scales()
    true_lo, true_hi = np.quantile(X, [0.01, 0.99], axis=0)
    errors = [np.max(np.abs(DPQuantileScaler(epsilon=1e-4).fit(X).bounds_[1] - true_hi) / (true_hi - true_lo))
              for _ in range(3)]
    assert np.median(errors) > 1.0


def test_one_gaussian_release_of_sensitivity_sqrt_d_per_stage():
    X, _ = _two_scales(200)
    with warnings.catch_warnings(), taps.recording() as rec:
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        DPQuantileScaler(epsilon=1.0).fit(X)
    # (The number of records, public by skdp's assumption, passes the tap first: the replay pins it.)
    assert [r.mechanism for r in rec.releases] == ["public:n_samples"] + ["gaussian:histograms"] * 2
    releases = rec.releases[1:]
    assert all(r.sensitivity == pytest.approx(np.sqrt(3)) and r.norm == "l2" for r in releases)
    # Each record is counted once per column: every column's counts sum to n (NaN counts nowhere).
    first = releases[0].value
    assert first.sum() == pytest.approx(3 * 200)


def test_one_stage_with_the_whole_budget_when_refined_bins_would_drown_in_noise():
    # 300 records over 30 columns at epsilon 0.2: an average refined bin (300 / 8 records) is far below the
    # two-stage noise (sd ~125), so "auto" makes one release with the whole budget (mu**2 not halved).
    from skdp.mechanisms import gaussian_dp_mu, quantiles

    rng = np.random.default_rng(0)
    X = rng.lognormal(3, 0.5, (300, 30))
    with taps.recording() as rec:
        DPQuantileScaler(epsilon=0.2).fit(X)
    assert [r.mechanism for r in rec.releases] == ["public:n_samples", "gaussian:histograms"]
    assert quantiles._refine_bins(300, 30, gaussian_dp_mu(0.2, 1e-5), "auto") is None
    assert quantiles._refine_bins(7500, 3, gaussian_dp_mu(0.2, 1e-5), "auto") is True
    mu = gaussian_dp_mu(1.0, 1e-5)
    sigma = np.sqrt(2 * 3) / mu
    assert quantiles._refine_bins(int(np.ceil(8 * quantiles.REFINE_MIN_Z * sigma)), 3, mu, "auto") is True
    assert quantiles._refine_bins(int(np.ceil(8 * quantiles.REFINE_MIN_Z * sigma)) - 1, 3, mu, "auto") is None
    # The number of bins: the most whose average, n_hat / bins records, stands REFINE_BIN_Z noise sds out, where
    # n_hat is the first release's noisy total per column (never n itself).
    def bins(total):
        return quantiles._bins_from_counts([np.full(10, total / 10), np.full(4, total / 4)], sigma)
    assert bins(12.5 * quantiles.REFINE_BIN_Z * sigma) == 12
    assert bins(3 * quantiles.REFINE_BIN_Z * sigma) == quantiles.REFINE_BINS
    assert bins(1e9) == quantiles.MAX_REFINE_BINS
    assert quantiles._refine_bins(300, 30, gaussian_dp_mu(0.2, 1e-5), 8) == 8  # given: kept


def test_fallback_seed_finds_records_spread_over_bins_more_often_than_the_largest_bin(monkeypatch):
    # No bin stands out of the noise alone (200 records in each of 3 bins, noise sd 100, 49 bins: the seed level
    # is 4.8 sd): the run of up to 3 bins with the largest sum / sqrt(width) finds them more often (0.90 of the
    # draws here) than the largest bin did (0.78).
    from skdp.mechanisms import quantiles

    rng = np.random.default_rng(1)  # the test's own draws: no estimator is fitted here
    edges = [np.arange(50.0)]
    counts = np.zeros(49)
    counts[20:23] = 200.0

    def hit_rate():
        hits = 0
        for _ in range(600):
            noisy = [counts + rng.normal(scale=100.0, size=49)]
            lo, hi = quantiles.quantiles_from_histograms(noisy, edges, (0.5, 0.5), 100.0)[:, 0]
            hits += 20 <= lo <= 23
        return hits / 600

    matched = hit_rate()
    monkeypatch.setattr(quantiles, "FALLBACK_WIDTH", 1)  # the largest bin alone, as before
    largest = hit_rate()
    assert matched > largest + 0.06, (matched, largest)


def test_outside_the_domain_is_clipped_and_nan_is_skipped():
    X = np.r_[np.full((50, 1), 5.0), [[1e9]], [[np.nan]]]
    edges = [histogram_edges(0, 10, grid="linear", n_bins=10)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        values = dp_quantiles(X, (0.0, 1.0), edges, np.inf, 1e-5, np.random.default_rng())
    assert 0 <= values.min() and values.max() <= 10


def test_fresh_noise_every_fit_and_seeded_noise_is_not_certified():
    X, _ = _two_scales(500)
    a, b = DPQuantileScaler(epsilon=1.0).fit(X), DPQuantileScaler(epsilon=1.0).fit(X)
    assert not np.array_equal(a.bounds_[1], b.bounds_[1])
    assert a.privacy_certified_ and a.noise_seeded_ is False
    with warnings.catch_warnings(), insecure_noise_seed(0):
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        c = DPQuantileScaler(epsilon=1.0).fit(X)
    assert c.privacy_certified_ is False and "insecure_noise_seed" in c.privacy_notes_[0]


def test_epsilon_inf_warns_and_is_not_certified():
    X, _ = _two_scales(200)
    with pytest.warns(PrivacyLeakWarning, match="NOT private"):
        sc = DPQuantileScaler(epsilon=np.inf).fit(X)
    assert sc.privacy_certified_ is False


def test_ledger_is_charged_before_the_data_are_read():
    X, _ = _two_scales(300)
    ledger = BudgetLedger(epsilon=0.5)
    with pytest.raises(BudgetExceededError):
        DPQuantileScaler(epsilon=1.0, ledger=ledger).fit(X)
    sc = DPQuantileScaler(epsilon=0.5, ledger=ledger).fit(X)
    assert ledger.total() == pytest.approx((0.5, 1e-5)) and sc.epsilon_ == 0.5


def test_bad_parameters_are_refused_before_the_charge():
    X, _ = _two_scales(100)
    ledger = BudgetLedger(epsilon=10)
    for bad, match in [(dict(quantiles=(0.9, 0.1)), "quantiles"), (dict(domain=(1, 0)), "domain"),
                       (dict(domain={"a": (0, 1)}), "column names"), (dict(feature_range=(1, 1)), "feature_range")]:
        with pytest.raises(ValueError, match=match):
            DPQuantileScaler(ledger=ledger, **bad).fit(X)
    assert ledger.total() == (0.0, 0.0)


def test_transform_clips_scales_keeps_nan_and_inverts():
    X, _ = _two_scales(2000)
    sc = DPQuantileScaler(epsilon=2.0, feature_range=(0, 1)).fit(X)
    Z = sc.transform(np.r_[X, [[np.nan, 1e12, -1e12]]])
    assert np.nanmin(Z) >= 0 and np.nanmax(Z) <= 1 and np.isnan(Z[-1, 0])
    inside = (X >= sc.bounds_[0]) & (X <= sc.bounds_[1])
    np.testing.assert_allclose(sc.inverse_transform(Z[:-1])[inside], X[inside])


def test_domain_by_column_name():
    pd = pytest.importorskip("pandas")
    X, _ = _two_scales(1000)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    sc = DPQuantileScaler(domain={"a": (0, 1e4), "b": (0, 1), "c": (-100, 0)}).fit(df)
    np.testing.assert_array_equal(sc.domain_[0], [0, 0, -100])
    assert list(sc.get_feature_names_out()) == ["a", "b", "c"]


# -- certified end to end -----------------------------------------------------------------------------
def test_pipeline_with_fisher_is_certified_end_to_end_and_learns():
    X, y = _two_scales()
    pipe = make_pipeline(DPQuantileScaler(epsilon=0.5),
                         DPFisherClassifier(epsilon=0.5, bounds=(-1, 1), classes=[0, 1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # nothing is read from the data for free
        pipe.fit(X, y)
        eps, delta, certified = privacy_spent(pipe)
    assert (eps, certified) == (1.0, True) and delta == pytest.approx(2e-5)
    assert pipe.score(X, y) > 0.9


def test_column_transformer_with_public_categories_and_momentum_classifier_is_certified():
    pd = pytest.importorskip("pandas")
    X, y = _two_scales(600)
    df = pd.DataFrame(X, columns=["a", "b", "c"]).assign(colour=np.where(y == 1, "red", "blue"))
    pre = ColumnTransformer([("num", DPQuantileScaler(epsilon=0.3), ["a", "b", "c"]),
                             ("cat", OneHotEncoder(categories=[["blue", "green", "red"]], handle_unknown="ignore"),
                              ["colour"])])
    pipe = make_pipeline(pre, DPMomentumClassifier(epsilon=0.7, classes=[0, 1], max_epochs=3, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        pipe.fit(df, y)
        eps, _, certified = privacy_spent(pipe)
    assert 0.99 < eps <= 1.0 and certified  # the classifier spends at most its 0.7
    # The same with categories read from the data: warned and not certified.
    pre_leaky = ColumnTransformer([("num", DPQuantileScaler(epsilon=0.3), ["a", "b", "c"]),
                                   ("cat", OneHotEncoder(), ["colour"])])
    leaky = make_pipeline(pre_leaky, DPFisherClassifier(epsilon=0.7, bounds=(-1, 1), classes=[0, 1])).fit(df, y)
    with pytest.warns(PrivacyLeakWarning, match="OneHotEncoder"):
        assert privacy_spent(leaky)[2] is False


# -- missing values -----------------------------------------------------------------------------------
def _with_missing(n=3000):
    X, y = _two_scales(n)
    X = X.copy()
    X[::7, 0] = np.nan
    X[::11, 2] = np.nan
    return X, y


@pytest.mark.parametrize("strategy", ["mean", "median", "most_frequent"])
def test_learning_imputers_are_flagged_as_non_private(strategy):
    X, y = _with_missing(400)
    pipe = make_pipeline(SimpleImputer(strategy=strategy), DPQuantileScaler(epsilon=0.5),
                         DPFisherClassifier(epsilon=0.5, bounds=(-1, 1), classes=[0, 1])).fit(X, y)
    with pytest.warns(PrivacyLeakWarning, match="SimpleImputer"):
        assert privacy_spent(pipe)[2] is False


def test_constant_fill_and_dp_median_imputer_keep_the_pipeline_certified():
    X, y = _with_missing()
    for imputer, spent in [(SimpleImputer(strategy="constant", fill_value=0.0), 1.0), (DPMedianImputer(epsilon=0.5), 1.5)]:
        pipe = make_pipeline(imputer, DPQuantileScaler(epsilon=0.5),
                             DPFisherClassifier(epsilon=0.5, bounds=(-1, 1), classes=[0, 1]))
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrivacyLeakWarning)
            pipe.fit(X, y)
            eps, _, certified = privacy_spent(pipe)
        assert certified and eps == pytest.approx(spent)


def test_dp_median_is_close_and_fills_every_nan():
    X, _ = _with_missing()
    imp = DPMedianImputer(epsilon=1.0).fit(X)
    true = np.nanmedian(X, axis=0)
    spread = np.nanquantile(X, 0.9, axis=0) - np.nanquantile(X, 0.1, axis=0)
    assert np.all(np.abs(imp.statistics_ - true) < 0.5 * spread)
    filled = imp.transform(X)
    assert not np.isnan(filled).any() and np.array_equal(filled[~np.isnan(X)], X[~np.isnan(X)])


def _replayed_neighbour(estimator, data, neighbour):
    """The generic harness on one pair: fit a clone on ``data`` recording every release (noise shared), fit
    another on ``neighbour`` replaying them; returns both fits, the recording and their differences."""
    from test_sensitivity_harness import _differences

    first, second = clone(estimator), clone(estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_noise_seed(0), taps.recording() as rec:
            first.fit(*data)
        with insecure_noise_seed(0), taps.replaying(rec.releases):
            second.fit(*neighbour)
    return first, second, rec, _differences(first, second)


def test_pipeline_neighbour_replays_to_the_same_model():
    # The generic harness on the composition: scaler -> Fisher, one outlier record added.
    X, y = _two_scales(300)
    X2, y2 = np.r_[X, [[1e5, -1e5, 1e5]]], np.r_[y, 1]
    pipe = make_pipeline(DPQuantileScaler(epsilon=1.0), DPFisherClassifier(epsilon=1.0, bounds=(-1, 1), classes=[0, 1]))
    _, _, rec, differences = _replayed_neighbour(pipe, (X, y), (X2, y2))
    assert len([r for r in rec.releases if not r.mechanism.startswith("public:")]) == 2 + 3
    assert not differences


# -- PGEGenerator on mixed tables ----------------------------------------------------------------------
def _mixed_frame(n=600, seed=0):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(seed)
    colour = rng.choice(["red", "green", "blue"], n, p=[0.6, 0.3, 0.1])
    return pd.DataFrame({"age": np.clip(rng.normal(40, 10, n), 18, 90).round().astype(int),
                         "colour": colour,
                         "income": np.where(colour == "red", rng.normal(50, 5, n), rng.normal(20, 5, n)),
                         "member": rng.random(n) < 0.3,
                         "grade": pd.Categorical(rng.choice(["a", "b"], n), categories=["a", "b", "c"])})


PUBLIC = dict(categories={"colour": ["red", "green", "blue"]}, bounds={"age": (0, 100), "income": (0, 100)})
FAST_PGE = dict(max_epochs=3, n_levels=3, n_repeats=1, n_leapfrog=3)


def _pge(**kwargs):
    from skdp.generative import PGEGenerator

    return PGEGenerator(**{**FAST_PGE, **kwargs})


def test_pge_samples_the_table_with_its_columns_dtypes_and_public_categories():
    df = _mixed_frame()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # every category and bound is public
        gen = _pge(epsilon=5.0, **PUBLIC).fit(df)
    assert gen.privacy_certified_ and gen.n_features_in_ == 5 and list(gen.feature_names_in_) == list(df.columns)
    assert gen.bounds_[0].shape == (1 + 3 + 1 + 2 + 3,)  # one coordinate per number, one per category
    sample = gen.sample(400, random_state=0)
    assert list(sample.columns) == list(df.columns) and dict(sample.dtypes) == dict(df.dtypes)
    assert set(sample["colour"]) <= {"red", "green", "blue"} and isinstance(sample["colour"].iloc[0], str)
    assert sample["age"].between(0, 100).all() and sample["grade"].dtype == df["grade"].dtype


def test_pge_category_proportions_follow_the_data():
    # The sampler at its defaults (the fast settings above barely move the chains); no noise, few epochs.
    from skdp.generative import PGEGenerator

    df = _mixed_frame(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        gen = PGEGenerator(epsilon=np.inf, module="gaussian", max_epochs=4, lr=0.05, **PUBLIC).fit(df)
    share = gen.sample(3000, random_state=0)["colour"].value_counts(normalize=True)
    assert share["red"] > share["green"] > share["blue"]
    assert abs(share["red"] - 0.6) < 0.15


def test_pge_gaussian_fit_is_not_bent_by_clipping():
    # No noise, clipping at the default max_grad_norm=1, default epochs: the class-conditional Gaussian must
    # land near its maximum-likelihood values (a one-hot coordinate: mean 2p - 1, sd 2 sqrt(p (1 - p))). The
    # sliced loss's per-example gradients grow like 1 / var^2, so clipping muted the minority category's
    # records and the variance collapsed (ISLR Default, 'student' 30 % -> 3 % of class 0's samples; fitted
    # sd of its coordinates 0.15 against 0.91).
    import pandas as pd
    from skdp.generative import PGEGenerator

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"flag": np.where(rng.random(600) < 0.25, "yes", "no"), "x": rng.normal(50, 10, 600)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # epsilon=inf: no noise, said once
        gen = PGEGenerator(epsilon=np.inf, module="gaussian", categories={"flag": ["no", "yes"]}, cells=None,
                           bounds={"x": (0, 100)}).fit(df)  # the category as one-hot coordinates of the model
    Z = gen.codec_.transform(df)
    module = gen.net_.module_
    mean, sd = module.mean[0].detach().numpy(), module.log_var[0].detach().exp().sqrt().numpy()
    assert np.allclose(mean, Z.mean(0), atol=0.1), (mean, Z.mean(0))
    assert np.allclose(sd[:2], Z[:, :2].std(0), atol=0.1), (sd, Z.std(0))  # the category's coordinates
    share = gen.sample(2000, random_state=0)["flag"].value_counts(normalize=True)
    assert abs(share.get("yes", 0.0) - 0.25) < 0.07, share


def test_pge_gaussian_draws_categories_in_their_proportions():
    # The diagonal Gaussian module's estimate of P(category) is its mean (2 p - 1); drawing a category from a
    # *sampled* block (weights max((z + 1) / 2, 0) of noisy coordinates) flattened p towards uniform: the
    # truncation at 0 gave rare categories mass they do not have (credit_data's Home: a TV of 0.14 from the
    # draw alone). No noise: the sampled shares must match the data's.
    import pandas as pd
    from skdp.generative import PGEGenerator

    rng = np.random.default_rng(1)
    levels, p = ["a", "b", "c", "d"], np.array([0.55, 0.3, 0.1, 0.05])
    df = pd.DataFrame({"kind": rng.choice(levels, 1500, p=p), "x": rng.normal(50, 10, 1500)})
    data = df["kind"].value_counts(normalize=True).reindex(levels).to_numpy()
    tvs = []
    for _ in range(3):  # the fit's own randomness (initialisation, lots): a TV of 0.004-0.037 over 15 fits
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyLeakWarning)  # epsilon=inf: no noise, said once
            gen = PGEGenerator(epsilon=np.inf, module="gaussian", categories={"kind": levels}, cells=None,
                               bounds={"x": (0, 100)}).fit(df)
        share = gen.sample(4000, random_state=0)["kind"].value_counts(normalize=True).reindex(levels, fill_value=0)
        tvs.append(0.5 * np.abs(share.to_numpy() - data).sum())
    # The median of three fits (one fit passed 0.04 in a run of the whole suite); the flattened draw gave 0.105.
    assert np.median(tvs) < 0.05, tvs


def test_pge_categories_read_from_the_data_warn_and_uncertify():
    df = _mixed_frame()
    with pytest.warns(PrivacyLeakWarning, match="'colour' has no public categories"):
        gen = _pge(epsilon=5.0, bounds=PUBLIC["bounds"]).fit(df)
    assert gen.privacy_certified_ is False and "categories read from the private data" in gen.privacy_notes_
    with pytest.warns(PrivacyLeakWarning, match="'income' has no public bounds"):
        gen = _pge(epsilon=5.0, categories=PUBLIC["categories"], bounds={"age": (0, 100)}).fit(df)
    assert "bounds read from the private data" in gen.privacy_notes_


def test_pge_table_errors_name_the_problem():
    df = _mixed_frame()
    with pytest.raises(ValueError, match=r"'colour' holds \d+ value\(s\) not among its categories"):
        _pge(categories={"colour": ["green", "blue"]}, bounds=PUBLIC["bounds"]).fit(df)
    with pytest.raises(ValueError, match="DataFrame"):
        _pge(categories={"colour": ["red"]}, bounds=(0, 1)).fit(np.zeros((10, 2)))
    with pytest.raises(ValueError, match="does not have"):
        _pge(categories={"colour ": ["red"]}, bounds=PUBLIC["bounds"]).fit(df)


def test_pge_table_neighbour_replays_to_the_same_model():
    df = _mixed_frame(80)
    y = np.arange(80) % 2
    extra = df.iloc[:1].assign(age=100, income=1e4, colour="blue")
    gen = _pge(epsilon=2.0, classes=[0, 1], random_state=0, **PUBLIC)
    assert not _cells_neighbours(gen, df, y, extra, 1)[3]


# -- PGEGenerator's cells: the model conditioned on the joint categories of public columns ---------------
def _cells_neighbours(gen, df, y, extra, extra_y):
    import pandas as pd

    neighbour = (pd.concat([df, extra], ignore_index=True), None if y is None else np.r_[y, extra_y])
    return _replayed_neighbour(gen, (df, y), neighbour)


@pytest.mark.parametrize("classes", [[0, 1], None])
def test_pge_cells_neighbour_replays_to_the_same_model(classes):
    # A record in a rare cell (blue, label 1) moves one count of the joint table by 1 and the clipped sum
    # by at most C: replayed within those, the neighbour's model is the same in every attribute.
    df = _mixed_frame(80)
    y = None if classes is None else np.arange(80) % 2
    extra = df.iloc[:1].assign(age=100, income=1e4, colour="blue")
    gen = _pge(epsilon=2.0, classes=classes, cells=["colour"], random_state=0, **PUBLIC)
    first, _, rec, differences = _cells_neighbours(gen, df, y, extra, 1)
    assert first.cell_columns_ == ["colour"] and first.cell_prior_.shape == (len(classes or [0]), 3)
    assert any(r.mechanism == "laplace:class_counts" for r in rec.releases)
    assert not differences


def test_pge_cells_auto_reads_the_public_count_only():
    # "auto" takes cells while n / 100 allows them; n is public (the replay hands the neighbour the recorded
    # count), so a neighbour across a multiple of 100 keeps the same cells and the same model.
    df = _mixed_frame(300)
    extra = df.iloc[:1].assign(colour="blue")
    gen = _pge(epsilon=2.0, random_state=0, **PUBLIC)
    first, second, _, differences = _cells_neighbours(gen, df.iloc[:299], None, extra, None)
    assert first.cell_columns_ == [] and second.cell_columns_ == [] and not differences  # n = 299: cap 2 < 3
    first, second, _, differences = _cells_neighbours(gen, df, None, extra, None)
    assert first.cell_columns_ == ["colour"] == second.cell_columns_ and not differences


@pytest.mark.parametrize("classes", [[0, 1], None])
def test_pge_cells_plan_matches_the_certified_spend(classes):
    # The plan (public quantities only) must foresee the counts' release: a search or a pipeline's plan
    # prices the fit before it runs.
    df = _mixed_frame(600)  # cap 6 cells: 2 classes x 3 colours
    y = None if classes is None else np.arange(600) % 2
    gen = _pge(epsilon=1.0, classes=classes, **PUBLIC)
    planned = gen._planned_privacy(len(df))
    costs = gen._planned_costs(len(df))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        gen.fit(df, y)
    assert gen.cell_columns_ == ["colour"] and gen.privacy_certified_
    assert planned[0] == pytest.approx(gen.epsilon_, rel=1e-9) and planned[1] == gen.delta_
    assert len(costs) == 2 and costs[1].epsilon == pytest.approx(0.05)  # the counts' pure release
    ledger = BudgetLedger()
    clone(gen).set_params(ledger=ledger).fit(df, y)
    assert [round(s, 9) for s in sorted(ledger.to_frame()["epsilon"])][0] == pytest.approx(0.05)


def test_pge_cells_condition_the_numbers_on_the_categories():
    # income is about 50 for red and 20 otherwise. Conditioned on the colour's cell, the samples keep that;
    # the one-hot coordinates of a diagonal Gaussian cannot (each coordinate is drawn alone).
    from skdp.generative import PGEGenerator

    df = _mixed_frame(1000)
    means = {}
    for cells in ("colour", None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyLeakWarning)
            gen = PGEGenerator(epsilon=np.inf, module="gaussian", max_epochs=10, lr=0.05,
                               cells=["colour"] if cells else None, **PUBLIC).fit(df)
        sample = gen.sample(2000, random_state=0)
        means[cells] = sample.groupby("colour")["income"].mean()
    assert gen.cell_columns_ == [] and means["colour"]["red"] - means["colour"]["green"] > 20, means
    assert abs(means[None]["red"] - means[None]["green"]) < 10, means


def test_pge_cells_given_labels_draw_cells_of_their_class():
    # colour depends on the label: sample(y=...) must draw each record's cell from its class's row.
    import pandas as pd
    from skdp.generative import PGEGenerator

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 1000)
    df = pd.DataFrame({"colour": np.where(y == 1, "red", np.where(rng.random(1000) < 0.5, "green", "blue")),
                       "x": rng.normal(50, 10, 1000)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        gen = PGEGenerator(epsilon=np.inf, module="gaussian", max_epochs=2, classes=[0, 1], cells=["colour"],
                           categories={"colour": ["red", "green", "blue"]}, bounds={"x": (0, 100)}).fit(df, y)
    assert gen.cell_columns_ == ["colour"]
    np.testing.assert_allclose(gen.class_prior_, np.bincount(y) / 1000, atol=1e-9)
    labels = np.repeat([0, 1], 500)
    sample, got = gen.sample(1000, y=labels, random_state=0)
    assert (np.asarray(got) == labels).all()
    assert (sample["colour"][labels == 1] == "red").all() and not (sample["colour"][labels == 0] == "red").any()
    unlabelled, drawn = gen.sample(2000, random_state=0)
    drawn = np.asarray(drawn)
    assert (unlabelled["colour"][drawn == 1] == "red").all() and abs(drawn.mean() - y.mean()) < 0.05


def test_pge_cells_errors_name_the_problem():
    df = _mixed_frame(100)
    with pytest.raises(ValueError, match=r"cells=\['size'\] must name distinct keys of categories"):
        _pge(cells=["size"], **PUBLIC).fit(df)
    with pytest.raises(ValueError, match="DataFrame"):
        _pge(cells=["colour"], categories={"colour": ["a"]}, bounds=(0, 1)).fit(np.zeros((10, 2)))
