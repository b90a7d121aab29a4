"""The convolution rule's choice: per-example weight gradients by unfolding or by one grouped convolution.

For a batch of 256 examples, each shape of a grid (input channels, output channels, kernel, map size) times
both ways of computing the per-example weight gradients of ``skdp.engine.layers``' convolution rule:

- *unfold*: the input's patches as a strided view, copied once, times the output gradients (a batched matmul);
- *grouped*: one convolution-weight gradient with the batch folded into the groups.

The rule (``skdp.engine.layers._unfold_is_cheaper``) unfolds when a group has at most ``UNFOLD_CHANNELS``
input channels and their number is not a multiple of 8 (oneDNN's block), or when the whole unfolded input is
small. The table gives the measured ratio
unfold / grouped beside the rule's pick, so the rule is checked against the measurements it came from.
Medians over interleaved rounds, at 1 and 2 torch threads, in one process.

Run: python benchmarks/bench_conv_rule.py [--rounds 9]  ->  results/dpsgd_conv_rule.md and .png
"""
import argparse
import itertools
import os
import statistics
import time

import torch

from _common import RESULTS, environment, markdown_table, write_result
import skdp.engine.layers as layers

B = 256
GRID = dict(C=(1, 3, 4, 6, 8, 12, 16, 24), O=(8, 32), k=(3, 5), H=(14, 32))


def _ways(C, O, k, H):
    conv = torch.nn.Conv2d(C, O, k)
    a = torch.randn(B, C, H, H)
    with torch.no_grad():
        g = torch.randn(conv(a).shape)
    geo = layers._ConvGeometry(conv, a)

    def way(channels, limit):
        def run():
            saved = layers.UNFOLD_CHANNELS, layers.UNFOLD_LIMIT
            layers.UNFOLD_CHANNELS, layers.UNFOLD_LIMIT = channels, limit
            try:
                return geo.per_example_weight(conv, g)
            finally:
                layers.UNFOLD_CHANNELS, layers.UNFOLD_LIMIT = saved
        return run

    return {"unfold": way(float("inf"), 0), "grouped": way(0, 0)}, g[0, 0].numel()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rows = []
    load_before = os.getloadavg()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for C, O, k, H in itertools.product(*GRID.values()):
            ways, T = _ways(C, O, k, H)
            times = {name: [] for name in ways}
            for name, run in ways.items():
                run()  # warm-up
            for _ in range(args.rounds):
                for name, run in ways.items():
                    start = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - start)
            unfold, grouped = (statistics.median(times[n]) * 1e3 for n in ("unfold", "grouped"))
            D = C * k * k
            pick = "unfold" if layers._unfold_is_cheaper(B, 1, C, D, T) else "grouped"
            best = "unfold" if unfold < grouped else "grouped"
            verdict = "yes" if pick == best else f"no: the pick takes {max(unfold, grouped) / min(unfold, grouped):.2f}x"
            rows.append((threads, C, O, k, H, D, f"{unfold:.2f}", f"{grouped:.2f}", f"{unfold / grouped:.2f}",
                         pick, verdict))
            print(rows[-1], flush=True)
    load_after = os.getloadavg()
    agree = sum(r[-1] == "yes" for r in rows)
    text = (f"# The convolution rule: per-example weight gradients by unfolding or by a grouped convolution\n\n"
            f"{environment()}; batch {B}; {args.rounds} interleaved rounds, medians. Load average (1, 5, 15 min) "
            f"before {', '.join(f'{v:.2f}' for v in load_before)}, after "
            f"{', '.join(f'{v:.2f}' for v in load_after)} ({os.cpu_count()} cores).\n\n"
            f"Produced by `python benchmarks/bench_conv_rule.py`. Patch D = C * k * k (one group); the rule unfolds "
            f"when C <= {layers.UNFOLD_CHANNELS} is not a multiple of 8, or the unfolded input has at most "
            f"{layers.UNFOLD_LIMIT} elements.\n\n"
            + markdown_table(["threads", "C in", "C out", "kernel", "map", "patch D", "unfold ms", "grouped ms",
                              "unfold / grouped", "rule picks", "pick is the faster"], rows)
            + f"\n\nThe rule picks the faster way in {agree} of {len(rows)} cells.\n")
    write_result("dpsgd_conv_rule.md", text)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for threads, marker in ((1, "o"), (2, "s")):
        sub = [r for r in rows if r[0] == threads]
        ax.scatter([r[1] * (1 + 0.04 * (r[3] - 4)) for r in sub], [float(r[8]) for r in sub], marker=marker, label=f"{threads} thread(s)")
    ax.axhline(1.0, color="grey", lw=0.8)
    for c in range(8, layers.UNFOLD_CHANNELS + 1, 8):
        ax.axvline(c, color="red", ls="--", lw=0.8, label="rule: grouped at multiples of 8" if c == 8 else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("input channels per group C (kernels 3 and 5 side by side)")
    ax.set_ylabel("unfold time / grouped-convolution time")
    ax.set_title(f"Per-example conv weight gradients, batch {B} (below 1: unfold is faster)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "dpsgd_conv_rule.png", dpi=120)


if __name__ == "__main__":
    main()
