"""Development data for the tabular classifier pipeline (issue 26's breast-cancer target), never a test split.

bench_tabular.py's pipeline is DPQuantileScaler(0.2 E) + one-hot + DPMomentumClassifier(0.8 E). Here each
of its seeds' *training* parts (the same stratified 75/25 split) is split again 75/25 (dev-train /
dev-validation); the bench's test rows are never read. Variants of the classifier step and of the
scaler's settings are compared by validation AUC over the splits and fresh noise, at total epsilon 1
unless stated. Tables: breast cancer with its string column (bench_tabular's), and scikit-learn's wine
(class 0 against the rest) as a second table.

Run: ``python benchmarks/dev_tabular_classifier.py [--repeats 3] [--seeds 3]``; writes
``benchmarks/results/dev_tabular_classifier.md``.
"""
import argparse
import contextlib
import sys
import time
import warnings

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_wine
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from _common import environment, markdown_table, write_result  # noqa: E402
from bench_tabular import DOMAIN, _numeric, _onehot, _tables  # noqa: E402

from skdp import DPMomentumClassifier, PrivacyLeakWarning  # noqa: E402
from skdp.mechanisms import quantiles  # noqa: E402
from skdp.preprocessing import DPQuantileScaler  # noqa: E402
from skdp.privacy import privacy_spent  # noqa: E402


def _wine():
    data = load_wine(as_frame=True)
    df = data.frame.drop(columns="target")
    df["hue_level"] = pd.cut(df["hue"], [0, 0.8, 1.1, 10], labels=["low", "mid", "high"]).astype(str)
    return df, (data.target.to_numpy() == 0).astype(int), {"hue_level": ["low", "mid", "high"]}


VARIANTS = {
    "default (n_bins=24, rms rows)": dict(),
    "previous scaler (always 2 stages, largest-bin fallback)": dict(previous=True),
    "scaler n_bins=12": dict(scaler=dict(n_bins=12)),
    "scaler n_bins=8": dict(scaler=dict(n_bins=8)),
    "normalize_rows='none'": dict(clf=dict(normalize_rows="none")),
    # Diagnostics (not private, not candidates): which of the two releases limits the AUC.
    "diagnostic: scaler without noise": dict(scaler=dict(epsilon=float("inf"))),
    "diagnostic: classifier without noise": dict(clf=dict(epsilon=float("inf"))),
}


@contextlib.contextmanager
def previous_quantiles(active):
    """The quantile mechanism's reading before 2026-11-25: always two stages, the largest bin as fallback seed."""
    if not active:
        yield
        return
    saved = quantiles.FALLBACK_WIDTH, quantiles.dp_quantiles.__defaults__
    quantiles.FALLBACK_WIDTH, quantiles.dp_quantiles.__defaults__ = 1, (quantiles.REFINE_BINS,)
    try:
        yield
    finally:
        quantiles.FALLBACK_WIDTH, quantiles.dp_quantiles.__defaults__ = saved


def pipeline(df, cats, epsilon, scaler=None, clf=None, previous=False):
    numeric = _numeric(df, cats)
    scaler = {"epsilon": 0.2 * epsilon, "domain": DOMAIN, **(scaler or {})}
    clf = {"epsilon": 0.8 * epsilon, "classes": [0, 1], **(clf or {})}
    pre = ColumnTransformer([("num", DPQuantileScaler(**scaler), numeric), ("cat", _onehot(cats), list(cats))])
    return make_pipeline(pre, DPMomentumClassifier(**clf))


def run(seeds, repeats, epsilons, variants, table_names):
    tables = {k: v for k, v in {"breast_cancer": _tables()["breast_cancer"], "wine (0 vs rest)": _wine}.items()
              if k.split()[0] in table_names}
    rows = []
    for name, load in tables.items():
        df, y, cats = load()
        for seed in range(seeds):
            X_tr, _, y_tr, _ = train_test_split(df, y, test_size=0.25, random_state=seed, stratify=y)  # bench's
            D_tr, D_va, d_tr, d_va = train_test_split(X_tr, y_tr, test_size=0.25, random_state=100 + seed,
                                                      stratify=y_tr)
            for eps in epsilons:
                for variant, kw in variants.items():
                    for rep in range(repeats):
                        t = time.perf_counter()
                        pipe = pipeline(df, cats, eps, **kw)
                        with warnings.catch_warnings(), previous_quantiles(kw.get("previous", False)):
                            warnings.simplefilter("ignore" if variant.startswith("diagnostic") else "error",
                                                  PrivacyLeakWarning)
                            warnings.simplefilter("ignore", UserWarning)
                            pipe.fit(D_tr, d_tr)
                        spent, _, certified = privacy_spent(pipe)
                        auc = roc_auc_score(d_va, pipe.predict_proba(D_va)[:, 1])
                        rows.append(dict(table=name, seed=seed, rep=rep, epsilon=eps, variant=variant, auc=auc,
                                         certified=certified, spent=spent, seconds=time.perf_counter() - t))
                print(name, seed, eps, flush=True)
    return pd.DataFrame(rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epsilons", default="1")
    parser.add_argument("--tables", default="breast_cancer,wine")
    parser.add_argument("--variants", default=",".join(str(i) for i in range(len(VARIANTS))),
                        help="indices into VARIANTS")
    args = parser.parse_args()
    epsilons = [float(e) for e in args.epsilons.split(",")]
    names = list(VARIANTS)
    variants = {names[int(i)]: VARIANTS[names[int(i)]] for i in args.variants.split(",")}
    frame = run(args.seeds, args.repeats, epsilons, variants, args.tables.split(","))
    cells = frame.groupby(["variant", "table", "epsilon"], sort=False)["auc"].agg(
        lambda a: f"{a.mean():.3f} ± {a.std():.3f}")
    columns = list(dict.fromkeys((t, e) for _, t, e in cells.index))
    header = ["variant"] + [f"{t}, eps {e:g}" for t, e in columns]
    table = [[v] + [cells.get((v, t, e), "") for t, e in columns] for v in variants]
    lines = ["# Development data: the tabular classifier pipeline (issue 26)", "",
             environment(), f"{args.seeds} splits x {args.repeats} fresh-noise fits; mean ± sd of dev-validation "
             "AUC. Dev-validation rows are a 25% split of bench_tabular's training part: its test rows are never "
             "read.", "Produced by `python benchmarks/dev_tabular_classifier.py`; the method is in its docstring.",
             "", markdown_table(header, table), "",
             "Every pipeline but the diagnostics certified end to end: "
             f"{bool(frame[~frame.variant.str.startswith('diagnostic')].certified.all())}."]
    write_result("dev_tabular_classifier.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
