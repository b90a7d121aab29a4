"""PGEGenerator's ``cells="auto"`` rule on development data only (issue 26): how many records per cell.

Development data: for each seed, bench_tabular.py's stratified 75/25 split of ISLR ``Default`` and
modeldata ``credit_data`` (the same tables and public categories), whose *training* part is split again
75/25 (dev-train / dev-validation); the bench's test rows are never read. As in the bench, at total epsilon
E: DPQuantileScaler (0.2 E) releases each numeric column's range and PGEGenerator (0.8 E) is fitted on
dev-train with those bounds, the public categories and the labels. Metrics: train-on-synthetic AUC of a
LogisticRegression on dev-validation, and the mean total-variation distance of all 1- and 2-way marginals
of a synthetic table of dev-train's size to dev-train (the bench's ``marginal_tv``). Variants:
``cells=None`` (every category as one-hot coordinates of the model) and ``cells="auto"`` with
``CELL_ROWS`` (records per cell on average) in a few values. Fresh noise in every fit.

Run: ``python benchmarks/dev_pge_cells.py [--seeds 3] [--epsilon 1]``; writes
``benchmarks/results/dev_pge_cells.md``.
"""
import argparse
import sys
import time
import warnings

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from _common import environment, markdown_table, write_result  # noqa: E402
from bench_tabular import _public_ranges, _tables, _tstr, marginal_tv  # noqa: E402

from skdp import PrivacyLeakWarning  # noqa: E402
from skdp.generative import PGEGenerator, pge  # noqa: E402

# A variant's flag (not a parameter): categories drawn from the sampled one-hot coordinates, as before
# the Gaussian module's draws came from its means (PGEGenerator._category_probabilities).
SAMPLED = "categories drawn from the sample"
# name -> (cells, CELL_ROWS, other PGEGenerator parameters)
VARIANTS = {"cells=None": (None, None, {}), "auto, 25 rows/cell": ("auto", 25, {}),
            "auto, 100 rows/cell": ("auto", 100, {}), "auto, 400 rows/cell": ("auto", 400, {}),
            "auto, 100 rows/cell, ema='auto'": ("auto", 100, {"ema": "auto"}),
            "auto, 100 rows/cell, ema='auto', lr 0.03": ("auto", 100, {"ema": "auto", "lr": 0.03}),
            "auto, 100 rows/cell, lr 0.03": ("auto", 100, {"lr": 0.03}),
            "auto, 100 rows/cell, 60 epochs, ema='auto'": ("auto", 100, {"ema": "auto", "max_epochs": 60}),
            "auto, 100 rows/cell, ema='auto', 90 epochs": ("auto", 100, {"ema": "auto", "max_epochs": 90}),
            "cells=None, categories drawn from the sample": (None, None, {SAMPLED: True}),
            "auto, 100 rows/cell, ema='auto', categories drawn from the sample": ("auto", 100, {"ema": "auto",
                                                                                           SAMPLED: True})}


def run_one(name, seed, variant, epsilon):
    df, y, cats = _tables()[name]()
    X_tr, _, y_tr, _ = train_test_split(df, y, test_size=0.25, random_state=seed, stratify=y)
    X_a, X_v, y_a, y_v = train_test_split(X_tr, y_tr, test_size=0.25, random_state=seed, stratify=y_tr)
    cells, rows, params = VARIANTS[variant]
    params = dict(params)
    sampled = params.pop(SAMPLED, False)
    start = time.perf_counter()
    X_fill, _, bounds = _public_ranges(X_a, cats, 0.2 * epsilon)
    X_vfill = X_v.copy()  # NaN -> 0 as in the bench (a constant fill)
    numeric = [c for c in X_v.columns if c not in cats]
    X_vfill[numeric] = X_vfill[numeric].fillna(0.0)
    saved = pge.CELL_ROWS
    try:
        if rows is not None:
            pge.CELL_ROWS = rows
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrivacyLeakWarning)
            gen = PGEGenerator(epsilon=0.8 * epsilon, classes=[0, 1], categories=cats, bounds=bounds,
                               cells=cells, verbose=0, **params).fit(X_fill, y_a)
    finally:
        pge.CELL_ROWS = saved
    if sampled:
        gen._category_probabilities = lambda Z, conditions: Z  # the draw before: from the sampled coordinates
    X_syn, y_syn = gen.sample(len(X_a))
    y_syn = np.asarray(y_syn)
    one, two = marginal_tv(X_syn.assign(y=y_syn), X_fill.assign(y=y_a), cats)
    return dict(table=name, seed=seed, variant=variant, cells=" x ".join(map(str, gen.cell_columns_)) or "-",
                auc=_tstr(X_syn, y_syn, X_vfill, y_v, cats), tv1=one, tv2=two,
                seconds=time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--tables", default="default,credit")
    parser.add_argument("--variants", default=";".join(VARIANTS), help="names of VARIANTS, separated by ;")
    parser.add_argument("--out", default="dev_pge_cells.md", help="the result's file name in benchmarks/results")
    args = parser.parse_args()
    rows = []
    for name in args.tables.split(","):
        for seed in range(args.seeds):
            for variant in args.variants.split(";"):
                rows.append(run_one(name, seed, variant, args.epsilon))
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    frame = pd.DataFrame(rows)
    lines = ["# PGEGenerator's cells on development data (issue 26)", "",
             f"Environment: {environment()}. Total epsilon {args.epsilon:g} per synthetic table (0.2 ranges, "
             f"0.8 generator); {args.seeds} seeds (split); mean ± sd.",
             "Produced by `python benchmarks/dev_pge_cells.py`; the method is in its docstring. Development "
             "splits only: the benchmark's test rows are never read.", ""]
    for name, part in frame.groupby("table", sort=False):
        table = []
        for variant, g in part.groupby("variant", sort=False):
            table.append([variant, g["cells"].iloc[0]] + [f"{g[m].mean():.3f} ± {g[m].std():.3f}"
                                                            for m in ("auc", "tv1", "tv2")]
                         + [f"{g['seconds'].mean():.0f}"])
        lines += [f"## {name}", "", markdown_table(["variant", "cells (seed 0)", "TSTR AUC (dev)", "TV 1-way",
                                                    "TV 2-way", "s / fit+sample"], table), ""]
    write_result(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
