"""Accuracy of DPMomentumClassifier against epsilon on real data.

- load_digits (scikit-learn), stratified 80/20, pixels scaled by their public range [0, 16];
- MNIST test set from ../shared/data/mnist-t10k (or $SKDP_DATA/mnist-t10k), stratified 8k / 2k,
  pixels scaled by their public range [0, 255].
Epsilon in {0.5, 1, 2, 5, 10} at delta = 1e-5, mean and std over seeds; the non-private line is
scikit-learn's LogisticRegression (the same model class as the default module, trained without DP).

Run: python benchmarks/bench_classifier.py [--seeds 3] [--skip-mnist] [--cnn]
"""
import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from _common import RESULTS, SHARED_DATA, environment, markdown_table, write_result
from skdp import DPMomentumClassifier
from skdp.datasets import load_mnist_folder
from skdp.demo import digits_split, plot_accuracy_vs_epsilon

EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0)
TARGETS = {("digits", "linear (defaults)", 1.0): 0.90,
           ("MNIST 8k", "linear, lots of 1000", 1.0): 0.86,
           ("MNIST 8k", "linear, lots of 1000", 10.0): 0.92,
           ("MNIST 8k", "cnn (8, 16), lots of 1000", 1.0): 0.86,
           ("MNIST 8k", "cnn (8, 16), lots of 1000", 10.0): 0.92}


def mnist_split(seed=0):
    X, y = load_mnist_folder(SHARED_DATA / "mnist-t10k")
    X = X.reshape(len(X), -1) / 127.5 - 1.0
    return train_test_split(X, y, train_size=8000, test_size=2000, stratify=y, random_state=seed)


def sweep(data, name, config, params, seeds, rows, curves):
    Xtr, Xte, ytr, yte = data
    means = []
    for eps in EPSILONS:
        accs, t0 = [], time.perf_counter()
        for seed in seeds:
            clf = DPMomentumClassifier(epsilon=eps, delta=1e-5, classes=range(10), random_state=seed, **params)
            accs.append(clf.fit(Xtr, ytr).score(Xte, yte))
        means.append(np.mean(accs))
        target = TARGETS.get((name, config, eps))
        verdict = "" if target is None else f">= {target}: {'met' if np.mean(accs) >= target else 'NOT met'}"
        rows.append((name, config, f"{eps:g}", f"{np.mean(accs):.4f}", f"{np.std(accs):.4f}",
                     f"{clf.epsilon_:.3f}", f"{(time.perf_counter() - t0) / len(seeds):.1f}", verdict))
        print(rows[-1], flush=True)
    curves[(name, config)] = means


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip-mnist", action="store_true")
    parser.add_argument("--cnn", action="store_true", help="also the small CNN on MNIST (slower)")
    args = parser.parse_args()
    seeds = tuple(range(args.seeds))
    warnings.simplefilter("ignore")
    rows, curves, baselines = [], {}, {}
    datasets = [("digits", digits_split(), [("linear (defaults)", {})])]
    if not args.skip_mnist:
        mnist_configs = [("linear, lots of 1000", dict(batch_size=1000, max_epochs=40, lr=0.1))]
        if args.cnn:
            mnist_configs.append(("cnn (8, 16), lots of 1000",
                                  dict(module="cnn", module__channels=(8, 16), batch_size=1000,
                                       max_epochs=20, lr=1.0)))
        datasets.append(("MNIST 8k", mnist_split(), mnist_configs))
    for name, data, configs in datasets:
        Xtr, Xte, ytr, yte = data
        baselines[name] = LogisticRegression(max_iter=1000).fit(Xtr, ytr).score(Xte, yte)
        rows.append((name, "non-private LogisticRegression", "inf", f"{baselines[name]:.4f}", "-", "-", "-", ""))
        for config, params in configs:
            sweep(data, name, config, params, seeds, rows, curves)
    table = markdown_table(["data", "model", "epsilon", "accuracy (mean)", "std", "certified epsilon",
                            "fit s", "target"], rows)
    text = (f"# DPMomentumClassifier: accuracy against epsilon (delta = 1e-5)\n\n{environment()}; "
            f"{len(seeds)} seeds per cell.\n\n{table}\n")
    write_result("classifier_accuracy.md", text)
    for (name, config), means in curves.items():
        slug = f"{name}_{config.split(',')[0].split(' ')[0]}".replace(" ", "_").lower()
        path = plot_accuracy_vs_epsilon(RESULTS / f"accuracy_vs_epsilon_{slug}.png", EPSILONS, means,
                                        baselines[name], title=f"{name}: {config}")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
