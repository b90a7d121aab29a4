"""PGEGenerator's defaults on development data only (issue 28): the EMA of the weights, lots and epochs.

Development data: ``digits-dev`` (the training part of the benchmark's digits split, 80%, split again
75/25; the test part is never looked at). The generator is fitted on the 75% at epsilon 1 (and 10),
10x synthetic records are sampled, LogisticRegression(max_iter=150) is trained on them and scored on
the 25%. Mean of 2 seeds, fresh noise in every fit; fit and sampling times on 2 cores (1 fit at a time).

Run: python benchmarks/dev_pge.py [--neural]
"""
import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression

from _common import environment, markdown_table, write_result
from dev_defaults import digits_dev
from skdp import PGEGenerator
from skdp.generative import downstream_accuracy

GAUSSIAN = {
    "defaults (ema=None, 30 epochs, lr 1e-2)": {"ema": None},
    "ema auto": {"ema": "auto"},
    "ema auto, 60 epochs": {"ema": "auto", "max_epochs": 60},
    "lr 3e-2": {"lr": 3e-2},
    "ema auto, lr 3e-2 (issue 26's tables)": {"ema": "auto", "lr": 3e-2},
}
NEURAL = {"mlp (the neural score network, module='mlp')": {"module": "mlp"}}


def run(name, params, eps, seed):
    Xa, Xv, ya, yv = digits_dev(seed)
    params = dict(params)
    if isinstance(params.get("batch_size"), float):
        params["batch_size"] = int(round(params["batch_size"] * len(Xa)))
    # digits_dev's rows are the pixels mapped by their public range [0, 16] to [-1, 1].
    gen = PGEGenerator(epsilon=eps, bounds=(-1.0, 1.0), classes=range(10), random_state=seed, verbose=0,
                       **params)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen.fit(Xa, ya)
        fit_s = time.perf_counter() - start
        Xs, ys = gen.sample(10 * len(Xa), random_state=seed)
        acc = downstream_accuracy(Xs, ys, Xv, yv, LogisticRegression(max_iter=150))
    return name, eps, acc, fit_s, time.perf_counter() - start - fit_s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--neural", action="store_true", help="the neural score network (slow)")
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    configs = NEURAL if args.neural else GAUSSIAN
    epsilons = (1.0, 10.0) if args.neural else (1.0,)
    table = {}
    for name, params in configs.items():
        for eps in epsilons:
            for seed in range(args.seeds):
                out = run(name, params, eps, seed)
                print(out, flush=True)
                table.setdefault((name, eps), []).append(out[2:])
    rows = [(name, f"{eps:g}", f"{np.mean([a for a, _, _ in v]):.3f} ± {np.std([a for a, _, _ in v]):.3f}",
             f"{np.mean([f for _, f, _ in v]):.1f}", f"{np.mean([s for _, _, s in v]):.1f}")
            for (name, eps), v in table.items()]
    text = (f"# PGEGenerator on development data ({'neural' if args.neural else 'Gaussian'} score)\n\n"
            f"{environment()}\n\n{__doc__.split('Run:')[0]}\n"
            + markdown_table(["configuration", "epsilon", "validation accuracy", "fit s", "sample s"], rows) + "\n")
    print(text)
    write_result("dev_pge_neural.md" if args.neural else "dev_pge.md", text)


if __name__ == "__main__":
    main()
