"""``skdp demo``: DPMomentumClassifier on scikit-learn's digits at several epsilons."""
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from .classifier import DPMomentumClassifier

DEFAULT_EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0)


def digits_split(seed=0):
    """Digits scaled by their public pixel range [0, 16] to [-1, 1]; stratified 80/20."""
    X, y = load_digits(return_X_y=True)
    X = X / 8.0 - 1.0
    return train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)


def run_demo(out_dir="skdp-demo", epsilons=DEFAULT_EPSILONS, delta=1e-5, seeds=(0, 1, 2), verbose=0):
    Xtr, Xte, ytr, yte = digits_split()
    t0 = time.perf_counter()
    baseline = LogisticRegression(max_iter=2000).fit(Xtr, ytr).score(Xte, yte)
    rows = [("non-private (LogisticRegression)", "-", "-", f"{baseline:.3f}", "-",
             f"{time.perf_counter() - t0:.2f}")]
    print(f"load_digits: {len(Xtr)} train / {len(Xte)} test; DPMomentumClassifier (softmax "
          f"regression, DP-SGD with momentum) with its defaults (only epsilon, delta and the public "
          f"label set given; lot size, epochs and learning rate from public quantities), mean over "
          f"{len(seeds)} seeds")
    means = []
    for eps in epsilons:
        accs, spent, t0 = [], [], time.perf_counter()
        for seed in seeds:
            clf = DPMomentumClassifier(epsilon=eps, delta=delta, classes=range(10), random_state=seed,
                                       verbose=verbose)
            clf.fit(Xtr, ytr)
            accs.append(clf.score(Xte, yte))
            spent.append(clf.epsilon_)
        means.append(np.mean(accs))
        rows.append(("DPMomentumClassifier", f"{eps:g}", f"{delta:g}",
                     f"{np.mean(accs):.3f} ± {np.std(accs):.3f}", f"{max(spent):.3f}",
                     f"{(time.perf_counter() - t0) / len(seeds):.2f}",
                     f"{clf.batch_size_} / {clf.max_epochs_} / {clf.lr_:.3g}"))
    header = ("model", "target epsilon", "delta", "test accuracy", "certified epsilon spent", "fit seconds",
              "auto lot / epochs / lr")
    rows[0] = rows[0] + ("-",)
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot_path = plot_accuracy_vs_epsilon(out / "accuracy_vs_epsilon.png", epsilons, means, baseline,
                                         title="DPMomentumClassifier on load_digits")
    print(f"plot: {plot_path}")
    return rows


def plot_accuracy_vs_epsilon(path, epsilons, accuracies, baseline, title, label="DP-SGD with momentum"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    ax.plot(epsilons, accuracies, "o-", label=label)
    ax.axhline(baseline, color="grey", ls="--", label="non-private")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon (delta = 1e-5)")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig.savefig(path)
    plt.close(fig)
    return path
