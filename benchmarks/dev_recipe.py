"""Issue 28's recipe on development data only: the EMA decay rule, the CNN's step size, augmentation multiplicity.

Development data (never a benchmark's test split): ``digits-dev`` (the training part of the
benchmark's digits split, split again 75/25) and ``mnist-dev`` (the training part of the MNIST
benchmark split, split again; needs ../shared/data). Validation accuracy, mean of 2 seeds, fresh
noise in every fit, epsilon 1 and 10. Each row changes one rule of ``skdp.nn._defaults`` in the
worker (``EMA_WINDOWS``: the average's memory is steps / EMA_WINDOWS lots; ``NOISE_RADIUS``: the
"auto" learning rate is proportional to it) or one estimator parameter.

Run: python benchmarks/dev_recipe.py [--mnist]
"""
import argparse
import time
import warnings

import numpy as np
import torch
from joblib import Parallel, delayed

from _common import environment, markdown_table, write_result
from dev_defaults import digits_dev, mnist_dev

DATA = {"digits-dev": digits_dev, "mnist-dev": mnist_dev}


def run(data, seed, eps, name, rules, params):
    torch.set_num_threads(1)
    from skdp import DPMomentumClassifier
    from skdp.nn import _defaults

    for key, value in rules.items():
        setattr(_defaults, key, value)
    Xa, Xv, ya, yv = DATA[data](seed)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=eps, classes=range(10), random_state=seed, **params).fit(Xa, ya)
    return data, eps, name, clf.score(Xv, yv), time.perf_counter() - start


def configs(mnist):
    radius = _radius()
    rows = []
    for w in (None, 3.0, 10.0, 30.0):
        name = "linear, no EMA" if w is None else f"linear, EMA_WINDOWS={w:g}"
        rows.append(("digits-dev", name, {} if w is None else {"EMA_WINDOWS": w}, {"ema": None if w is None else "auto"}))
    for f in (1, 3, 10):
        rows.append(("digits-dev", f"cnn, NOISE_RADIUS x{f}", {"NOISE_RADIUS": radius * f}, {"module": "cnn"}))
    for f in (1, 3):
        rows.append(("digits-dev", f"cnn, NOISE_RADIUS x{f}, augment=4", {"NOISE_RADIUS": radius * f},
                     {"module": "cnn", "augment": 4}))
    rows.append(("digits-dev", "linear, augment=4", {}, {"augment": 4}))
    if mnist:
        for w in (None, 10.0):
            rows.append(("mnist-dev", "linear, no EMA" if w is None else f"linear, EMA_WINDOWS={w:g}",
                         {} if w is None else {"EMA_WINDOWS": w}, {"ema": None if w is None else "auto"}))
    return rows


def _radius():
    from skdp.nn import _defaults
    return _defaults.NOISE_RADIUS


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mnist", action="store_true", help="also mnist-dev (needs ../shared/data)")
    args = parser.parse_args()
    jobs = [(data, seed, eps, name, rules, params) for data, name, rules, params in configs(args.mnist)
            for eps in (1.0, 10.0) for seed in (0, 1)]
    start = time.perf_counter()
    results = Parallel(n_jobs=2, verbose=5)(delayed(run)(*j) for j in jobs)
    table = {}
    for data, eps, name, acc, dur in results:
        table.setdefault((data, name, eps), []).append((acc, dur))
    rows = [(data, name, f"{eps:g}", f"{np.mean([a for a, _ in v]):.3f}", f"{np.mean([d for _, d in v]):.1f}")
            for (data, name, eps), v in table.items()]
    text = (f"# Issue 28's recipe on development data\n\n{environment()}; 2 fits at a time, 1 torch thread each; "
            f"whole run {(time.perf_counter() - start) / 60:.1f} min.\n\n{__doc__.split('Run:')[0]}\n"
            + markdown_table(["data", "configuration", "epsilon", "validation accuracy (2 seeds)", "fit s"], rows)
            + "\n")
    print(text)
    write_result("dev_recipe.md", text)


if __name__ == "__main__":
    main()
