"""PGEGenerator's neural score network under DP-SGD (issue 28): measured, not a default.

``module="auto"`` picks the Gaussian score whenever DP-SGD adds noise (finite epsilon); the neural
score networks of the paper are taken only when asked for: ``module="mlp"`` (the residual MLP,
which "auto" takes without noise) or ``module="cnn"`` (with ``image_shape``). This measures the MLP
path where a user would meet it, with the rest of the settings at their defaults (lr 3e-3, one
projection per example, 30 epochs, lots of 4 sqrt(n) = 152), beside the Gaussian default.

Protocol (as ``bench_defaults.py``'s PGE row): load_digits, stratified 80/20 split by seed, public
pixel range [0, 16]; the generator is fitted on the 80% at epsilon 1 and 10 (delta 1e-5), 10x
synthetic records are sampled, LogisticRegression(max_iter=150) is trained on them (pixels / 16)
and scored on the real 20%. Fresh noise in every fit; fit and sampling seconds on 2 cores. Nothing
here chooses a default. The "skdp code" column says which code was measured: a commit (run on an
export of it, ``git archive`` on PYTHONPATH) or the shared working tree (with other sessions'
uncommitted changes to the DP-SGD engine's guard, which do not touch the MLP's training).

Run: python benchmarks/bench_pge_neural.py --module mlp --epsilons 1 10 --seeds 0 1 2 --code <commit>
(--report: rewrite the table and figure from the CSV, no fits)
Each run adds its fits to ``results/pge_neural.csv`` (a rerun of a fit replaces it) and rewrites
``results/pge_neural.md`` and ``results/pge_neural.png`` from all of them.
"""
import argparse
import csv
import time
import warnings

import matplotlib
import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from _common import RESULTS, environment, markdown_table, write_result
from skdp import PGEGenerator
from skdp.generative import downstream_accuracy

CSV = RESULTS / "pge_neural.csv"
FIELDS = ["code", "module", "epsilon", "seed", "accuracy", "fit_s", "sample_s", "n_steps", "noise_multiplier"]


def run(module, eps, seed, code):
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
    gen = PGEGenerator(module, epsilon=eps, bounds=(0.0, 16.0), classes=range(10), random_state=seed, verbose=0)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen.fit(Xtr, ytr)
        fit_s = time.perf_counter() - start
        Xs, ys = gen.sample(10 * len(Xtr), random_state=seed)
        sample_s = time.perf_counter() - start - fit_s
        acc = downstream_accuracy(Xs / 16.0, ys, Xte / 16.0, yte, LogisticRegression(max_iter=150))
    return {"code": code, "module": gen.module_, "epsilon": f"{eps:g}", "seed": seed, "accuracy": f"{acc:.4f}",
            "fit_s": f"{fit_s:.1f}", "sample_s": f"{sample_s:.1f}", "n_steps": getattr(gen, "n_steps_", ""),
            "noise_multiplier": f"{getattr(gen, 'noise_multiplier_', float('nan')):.3f}"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", default="mlp", choices=["mlp", "gaussian"])
    parser.add_argument("--epsilons", type=float, nargs="+", default=(1.0, 10.0))
    parser.add_argument("--seeds", type=int, nargs="+", default=(0, 1, 2))
    parser.add_argument("--report", action="store_true", help="no fits: the table and figure from the CSV")
    parser.add_argument("--code", default="", help="the skdp code measured (a commit), kept in the table")
    args = parser.parse_args()
    rows = list(csv.DictReader(CSV.open())) if CSV.exists() else []
    for eps in () if args.report else args.epsilons:
        for seed in args.seeds:
            new = run(args.module, eps, seed, args.code)
            print(new, flush=True)
            key = (new["code"], new["module"], new["epsilon"], str(new["seed"]))
            rows = [r for r in rows if (r["code"], r["module"], r["epsilon"], str(r["seed"])) != key] + [new]
            with CSV.open("w", newline="") as f:
                writer = csv.DictWriter(f, FIELDS)
                writer.writeheader()
                writer.writerows(rows)
    groups = {}
    for r in rows:
        groups.setdefault((r["code"], r["module"], r["epsilon"]), []).append(r)
    table = [(code, module, eps, f"{np.mean([float(r['accuracy']) for r in v]):.3f} ± "
              f"{np.std([float(r['accuracy']) for r in v]):.3f}", len(v),
              f"{np.mean([float(r['fit_s']) for r in v]):.1f}", f"{np.mean([float(r['sample_s']) for r in v]):.1f}",
              v[0]["n_steps"], v[0]["noise_multiplier"])
             for (code, module, eps), v in sorted(groups.items(), key=lambda kv: (kv[0][1] != "mlp", kv[0][0],
                                                                                     float(kv[0][2])))]
    text = (f"# PGEGenerator's neural score network under DP-SGD (digits)\n\n{environment()}\n\n"
            f"{__doc__.split('Run:')[0]}\n"
            + markdown_table(["skdp code", "module", "epsilon", "accuracy (LogisticRegression on 10x synthetic)", "seeds",
                              "fit s", "sample s", "lots", "noise multiplier"], table) + "\n")
    print(text)
    write_result("pge_neural.md", text)
    plot({(m, e): v for (_, m, e), v in groups.items()})


def plot(groups):
    """Accuracy against epsilon, one bar per module (mean and std over seeds)."""
    modules = sorted({m for m, _ in groups}, key=lambda m: m != "gaussian")
    epsilons = sorted({float(e) for _, e in groups})
    fig, ax = plt.subplots(figsize=(5, 3.2))
    width = 0.8 / len(modules)
    for i, module in enumerate(modules):
        accs = [[float(r["accuracy"]) for r in groups.get((module, f"{e:g}"), [])] for e in epsilons]
        ax.bar(np.arange(len(epsilons)) + i * width, [np.mean(a) if a else 0 for a in accs], width,
               yerr=[np.std(a) if a else 0 for a in accs], label=f"module={module!r}")
    ax.set_xticks(np.arange(len(epsilons)) + width * (len(modules) - 1) / 2, [f"epsilon {e:g}" for e in epsilons])
    ax.set_ylabel("LogisticRegression on 10x synthetic")
    ax.set_ylim(0, 1.15)
    ax.set_title("PGEGenerator on digits (test split)")
    ax.legend(loc="upper center", ncol=2, fontsize="small")
    fig.tight_layout()
    fig.savefig(RESULTS / "pge_neural.png", dpi=120)
    print("wrote", RESULTS / "pge_neural.png")


if __name__ == "__main__":
    main()
