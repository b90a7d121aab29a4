"""How the "auto" DP-SGD defaults were chosen: a grid on development data only.

Development data (never a benchmark's test split):
- ``digits-dev``: the *training* part of the benchmark's digits split (80%), split again 75/25;
- ``synth-64`` / ``synth-784``: ``make_classification`` tables (10 classes, 6,000 / 8,000 rows),
  scaled by a fixed public range to [-1, 1].

For each (sample rate, number of steps, learning rate x steps) it reports the validation accuracy
(mean of 2 seeds, fresh noise), at epsilon 1 and 10. The rule in ``skdp.nn._defaults`` is read off
this table; ``benchmarks/results/dev_defaults.md`` keeps it.

Then, with that schedule, rows as given against rows rescaled to RMS 1 (``normalize_rows``), on the
same sets plus ``faces-like`` (an ORL-like table: 40 classes, 6 train rows each, unit-norm rows) and
``mnist-dev`` (the training part of the MNIST benchmark split, split again): ``--rows``, results in
``benchmarks/results/dev_defaults_rows.md``.

Run: python benchmarks/dev_defaults.py [--quick] [--rows]
"""
import argparse
import itertools
import warnings

import numpy as np
from joblib import Parallel, delayed
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split

from _common import environment, markdown_table, write_result
from skdp import DPMomentumClassifier
from skdp.demo import digits_split


def digits_dev(seed):
    Xtr, _, ytr, _ = digits_split(seed)  # the test part is never looked at
    return train_test_split(Xtr, ytr, test_size=0.25, stratify=ytr, random_state=seed)


def synth(seed, n, d):
    X, y = make_classification(n_samples=n, n_features=d, n_informative=min(d // 2, 40), n_redundant=d // 8,
                               n_classes=10, n_clusters_per_class=1, class_sep=1.5, random_state=seed)
    X = np.clip(X, -6, 6) / 6  # a fixed, public range
    return train_test_split(X, y, test_size=0.25, stratify=y, random_state=seed)


def faces_like(seed):
    """ORL-like: 40 classes, 9 rows each, 154 features, centred and unit-norm rows (as CenterNormalize gives)."""
    X, y = make_classification(n_samples=360, n_features=154, n_informative=60, n_redundant=40, n_classes=40,
                               n_clusters_per_class=1, class_sep=4.0, random_state=seed)
    X = X - X.mean(0)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return train_test_split(X, y, test_size=1 / 3, stratify=y, random_state=seed)


def mnist_dev(seed):
    """The training part (8k) of the benchmark's MNIST split, split again 75/25 (needs ../shared/data)."""
    from bench_classifier import mnist_split

    Xtr, _, ytr, _ = mnist_split(seed)
    return train_test_split(Xtr, ytr, test_size=0.25, stratify=ytr, random_state=seed)


DATA = {"digits-dev": digits_dev, "synth-64": lambda s: synth(s, 6000, 64),
        "synth-784": lambda s: synth(s, 8000, 784)}
ROWS_DATA = {**DATA, "faces-like": faces_like, "mnist-dev": mnist_dev}


def run(data, seed, eps, q, steps, lr_steps):
    Xa, Xv, ya, yv = DATA[data](seed)
    n = len(Xa)
    batch = max(1, min(n, int(round(q * n))))
    epochs = max(1, int(round(steps * batch / n)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=eps, classes=range(10), batch_size=batch, max_epochs=epochs,
                                   lr=lr_steps / steps, random_state=seed).fit(Xa, ya)
    # n * mu of the fit, read off the plan: B * sqrt(T) / sigma (the CLT limit of subsampled Gaussians)
    n_mu = batch * np.sqrt(clf.n_steps_) / clf.noise_multiplier_
    return data, eps, q, steps, lr_steps, clf.score(Xv, yv), n_mu


def rows_run(data, seed, eps, normalize_rows):
    Xa, Xv, ya, yv = ROWS_DATA[data](seed)
    delta = 1e-3 if data == "faces-like" else 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=eps, delta=delta, classes=np.unique(ya), normalize_rows=normalize_rows,
                                   random_state=seed).fit(Xa, ya)
    return data, eps, normalize_rows, clf.score(Xv, yv)


def compare_row_normalisation():
    """The second choice: the auto schedule with rows as given against rows rescaled to RMS 1."""
    jobs = [(d, s, e, r) for d in ROWS_DATA for e in ((5.0, 10.0) if d == "faces-like" else (1.0, 10.0))
            for r in ("none", "rms") for s in (0, 1)]
    results = Parallel(n_jobs=2, verbose=5)(delayed(rows_run)(*j) for j in jobs)
    table = {}
    for data, eps, norm, acc in results:
        table.setdefault((data, eps), {}).setdefault(norm, []).append(acc)
    rows = [(d, e, f"{np.mean(v['none']):.3f}", f"{np.mean(v['rms']):.3f}",
             f"{np.mean(v['rms']) - np.mean(v['none']):+.3f}") for (d, e), v in sorted(table.items())]
    text = (f"# Row normalisation under the auto schedule (development data)\n\n{environment()}\n\n"
            "Validation accuracy, mean of 2 seeds: `normalize_rows=\"none\"` against `\"rms\"`.\n\n"
            + markdown_table(["data", "epsilon", "rows as given", "rows at RMS 1", "difference"], rows) + "\n")
    print(text)
    write_result("dev_defaults_rows.md", text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", action="store_true", help="only the row-normalisation comparison")
    args = parser.parse_args()
    if args.rows:
        return compare_row_normalisation()
    qs = (0.25, 1.0)
    steps = (100, 300)
    lr_steps = (3, 10, 30, 100, 300, 1000)  # lr * steps: the total distance the optimizer may travel
    jobs = [(d, s, e, q, t, ls) for d, e, q, t, ls, s in
            itertools.product(DATA, (1.0, 10.0), qs, steps, lr_steps, (0, 1))]
    if args.quick:
        jobs = [j for j in jobs if j[0] == "digits-dev"]
    results = Parallel(n_jobs=2, verbose=5)(delayed(run)(*j) for j in jobs)
    table, n_mu = {}, {}
    for data, eps, q, t, ls, acc, nm in results:
        table.setdefault((data, eps, q, t, ls), []).append(acc)
        n_mu[(data, eps, q, t, ls)] = nm
    rows = [(*k, f"{np.mean(v):.3f}", f"{n_mu[k]:.0f}", f"{k[-1] / n_mu[k]:.3f}") for k, v in sorted(table.items())]
    best = {}
    for (data, eps, q, t, ls), v in table.items():
        if np.mean(v) > best.get((data, eps), (0,))[0]:
            best[(data, eps)] = (np.mean(v), q, t, ls)
    best_rows = [(d, e, f"{a:.3f}", q, t, ls, f"{ls / n_mu[(d, e, q, t, ls)]:.3f}")
                 for (d, e), (a, q, t, ls) in sorted(best.items())]
    text = (f"# Choosing the DP-SGD defaults on development data\n\n{environment()}\n\n"
            "Validation accuracy of DPMomentumClassifier (linear, momentum 0.9, max_grad_norm 1), mean of 2 seeds.\n\n"
            "## Best per data set and epsilon\n\n"
            + markdown_table(["data", "epsilon", "accuracy", "sample rate", "steps", "lr x steps",
                             "lr x steps / (B sqrt(T) / sigma)"], best_rows)
            + "\n\n## Every configuration\n\n"
            + markdown_table(["data", "epsilon", "sample rate", "steps", "lr x steps", "accuracy",
                             "B sqrt(T) / sigma", "ratio"], rows) + "\n")
    print(text)
    write_result("dev_defaults.md", text)


if __name__ == "__main__":
    main()
