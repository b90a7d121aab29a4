"""What one run of gradient canaries can show for the digits MLP's mechanism (issue 25's epsilon-8 target).

Ideal canaries in exactly the mechanism the audit meets: the default DPMomentumClassifier(module="mlp") on
load_digits plans its sample rate q, steps T and noise multiplier s; each of m canaries is included with
probability 1/2, joins each lot with probability q, and its coordinate of the release is
(lots joined) + N(0, s^2) per step: the residual score of ``canaries="gradient"`` with the records' sum taken
away perfectly. The 95 % one-run lower bound (Steinke, Nasr & Jagielski 2023, the guesses of
``one_run_bounds``) of these scores is what a real audit can reach at most, up to its own spread.

Usage: ``python benchmarks/sim_audit_ceiling.py [--runs 10]``; writes benchmarks/results/audit_ceiling.md.
"""
import argparse
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

from skdp import DPMomentumClassifier
from skdp.audit.one_run import one_run_bounds
from skdp.mechanisms import gaussian_dp_epsilon


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--canaries", type=int, default=1000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)  # simulation randomness only (no mechanism of skdp draws from it)
    rows = []
    for eps in (1.0, 2.0, 4.0, 8.0):
        c = DPMomentumClassifier(module="mlp", epsilon=eps, classes=range(10)).fit(X / 16, y)
        q, T, s = c.sample_rate_, c.n_steps_, c.noise_multiplier_
        bounds, gauss = [], []
        for _ in range(args.runs):
            inc = rng.random(args.canaries) < 0.5
            joined = ((rng.random((args.canaries, T)) < q) & inc[:, None]).sum(1)
            score = joined + rng.normal(0, s * np.sqrt(T), args.canaries)
            (e, _, _), mu = one_run_bounds(score, inc, "auto", 1e-5, 0.95, rng)
            bounds.append(e)
            gauss.append(gaussian_dp_epsilon(mu, 1e-5))
        rows.append((eps, q, T, s, np.mean(bounds), np.std(bounds), np.mean(gauss), np.std(gauss)))
        print(rows[-1], flush=True)
    lines = ["# One-run audit ceiling of the digits MLP's mechanism (ideal gradient canaries)", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"{args.canaries} canaries, {args.runs} simulated runs per row, mean +- std.", "",
             "| claimed epsilon | q | steps | noise multiplier | (eps, delta) bound | Gaussian bound |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {e:g} | {q:.3f} | {T} | {s:.2f} | {b:.2f} +- {bs:.2f} | {g:.2f} +- {gs:.2f} |"
              for e, q, T, s, b, bs, g, gs in rows]
    out = Path(__file__).parent / "results" / "audit_ceiling.md"
    out.write_text("\n".join(lines) + "\n")
    print(out)


if __name__ == "__main__":
    main()
