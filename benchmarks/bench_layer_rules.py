"""The clipping rules' cost choices, checked against measurements (issue 29).

The per-layer rules of ``skdp.engine.layers`` choose from the layer's shapes alone:

1. **Ghost norm or instantiated per-example gradients** (``_ghost_is_cheaper(T, d, p)``; Linear over tokens and
   convolutions, as mixed ghost clipping does). The ghost norm costs about ``T^2 (d + p)`` per example (two
   T x T Gram matrices, in float64: charged ``GHOST_COST`` = 2) and its clipped sum recomputes ``g^T a``; the
   instantiated gradient costs ``T d p`` and, when small, is kept for the clipped sum. The rule takes the ghost
   norm when ``GHOST_COST T^2 (d + p) < T d p``.
2. **Per-example convolution weight gradients by unfolding or by one grouped convolution**
   (``_unfold_is_cheaper``): the input's patches as a strided view copied once, times the output gradients (a
   batched matmul), or one convolution-weight gradient with the batch folded into the groups. The rule unfolds
   when a group has at most ``UNFOLD_CHANNELS`` input channels and their number is not a multiple of 8
   (oneDNN's block), or when the whole unfolded input is small.

For each cell of a grid of shapes, both ways are forced and timed (the rule's norm and clipped sum for 1, the
per-example weight gradients for 2), beside the rule's pick; medians over interleaved rounds, at 1 and 2 torch
threads, in one process.

Run: python benchmarks/bench_layer_rules.py [--rounds 9] [--device cuda]  ->  results/dpsgd_layer_rules.md and .png
(``dpsgd_layer_rules_cuda.md`` on a GPU, at torch's own thread count: the CUDA kernels do not use them).
"""
import argparse
import contextlib
import itertools
import os
import statistics
import time

import torch

from _common import RESULTS, environment, markdown_table, write_result
import skdp.engine.layers as layers

GHOST_B = 64
GHOST_LINEAR = dict(T=(4, 8, 16, 32, 64, 128), d=(64, 256), p=(64, 256))
GHOST_CONV = dict(C=(16, 64), O=(16, 64), H=(2, 4, 7, 14))
CONV_B = 256
CONV_GRID = dict(C=(1, 3, 4, 6, 8, 12, 16, 24), O=(8, 32), k=(3, 5), H=(14, 32))
DEVICE = torch.device("cpu")


@contextlib.contextmanager
def _patched(**values):
    saved = {name: getattr(layers, name) for name in values}
    for name, value in values.items():
        setattr(layers, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(layers, name, value)


def _ghost_ways(rule, module, a, g):
    scale = torch.rand(a.shape[0], device=a.device)

    def way(ghost):
        def run():
            with _patched(_ghost_is_cheaper=lambda *_: ghost):
                _, clipped = rule(module, a, g)
                return clipped(scale)
        return run

    return {"ghost": way(True), "instantiated": way(False)}


def _unfold_ways(C, O, k, H):
    conv = torch.nn.Conv2d(C, O, k).to(DEVICE)
    a = torch.randn(CONV_B, C, H, H, device=DEVICE)
    with torch.no_grad():
        g = torch.randn(conv(a).shape, device=DEVICE)
    geo = layers._ConvGeometry(conv, a)

    def way(limit):
        def run():
            # Forced: any input unfolds under an unbounded UNFOLD_LIMIT, none under zero limits.
            with _patched(UNFOLD_CHANNELS=0, UNFOLD_LIMIT=limit):
                return geo.per_example_weight(conv, g)
        return run

    return {"unfold": way(float("inf")), "grouped": way(0)}, g[0, 0].numel()


def _time(ways, rounds):
    times = {name: [] for name in ways}
    sync = torch.cuda.synchronize if DEVICE.type == "cuda" else (lambda: None)
    for run in ways.values():
        run()  # warm-up
    for _ in range(rounds):
        for name, run in ways.items():
            sync()
            start = time.perf_counter()
            run()
            sync()  # CUDA kernels run asynchronously: timed once the device has finished them
            times[name].append(time.perf_counter() - start)
    return [statistics.median(times[name]) * 1e3 for name in ways]


def _verdict(pick, first, second, names):
    best = names[0] if first < second else names[1]
    return "yes" if pick == best else f"no: the pick takes {max(first, second) / min(first, second):.2f}x"


def ghost_rows(rounds):
    rows = []
    for T, d, p in itertools.product(*GHOST_LINEAR.values()):
        lin = torch.nn.Linear(d, p).to(DEVICE)
        a, g = torch.randn(GHOST_B, T, d, device=DEVICE), torch.randn(GHOST_B, T, p, device=DEVICE)
        ghost, inst = _time(_ghost_ways(layers.linear_rule, lin, a, g), rounds)
        pick = "ghost" if layers._ghost_is_cheaper(T, d, p) else "instantiated"
        rows.append(("Linear", T, d, p, f"{ghost:.2f}", f"{inst:.2f}", f"{ghost / inst:.2f}", pick,
                     _verdict(pick, ghost, inst, ("ghost", "instantiated"))))
    for C, O, H in itertools.product(*GHOST_CONV.values()):
        conv = torch.nn.Conv2d(C, O, 3, padding=1).to(DEVICE)
        a = torch.randn(GHOST_B, C, H, H, device=DEVICE)
        with torch.no_grad():
            g = torch.randn(conv(a).shape, device=DEVICE)
        ghost, inst = _time(_ghost_ways(layers.conv_rule, conv, a, g), rounds)
        T, D = H * H, C * 9
        pick = "ghost" if layers._ghost_is_cheaper(T, D, O) else "instantiated"
        rows.append(("Conv2d 3x3", T, D, O, f"{ghost:.2f}", f"{inst:.2f}", f"{ghost / inst:.2f}", pick,
                     _verdict(pick, ghost, inst, ("ghost", "instantiated"))))
    return rows


def unfold_rows(rounds):
    rows = []
    for C, O, k, H in itertools.product(*CONV_GRID.values()):
        ways, T = _unfold_ways(C, O, k, H)
        unfold, grouped = _time(ways, rounds)
        pick = "unfold" if layers._unfold_is_cheaper(CONV_B, 1, C, C * k * k, T, DEVICE.type) else "grouped"
        rows.append((C, O, k, H, C * k * k, f"{unfold:.2f}", f"{grouped:.2f}", f"{unfold / grouped:.2f}", pick,
                     _verdict(pick, unfold, grouped, ("unfold", "grouped"))))
    return rows


def _agree(rows):
    return f"{sum(r[-1] == 'yes' for r in rows)} of {len(rows)}"


def plot(ghost, unfold, path, on_gpu=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4))
    for threads, marker in zip(sorted({r[0] for r in ghost}), "os"):
        label = "GPU" if on_gpu else f"{threads} thread{'s' if threads > 1 else ''}"
        sub = [r for r in ghost if r[0] == threads]
        # The cost model's ratio GHOST_COST T^2 (d + p) / (T d p): below 1 it picks the ghost norm.
        left.scatter([layers.GHOST_COST * r[2] * r[2] * (r[3] + r[4]) / (r[2] * r[3] * r[4]) for r in sub],
                     [float(r[7]) for r in sub], marker=marker, alpha=0.7, label=label)
        sub = [r for r in unfold if r[0] == threads]
        # Kernel 3 left of the channel count, kernel 5 right of it.
        right.scatter([r[1] + 0.25 * (r[3] - 4) for r in sub], [float(r[8]) for r in sub], marker=marker,
                      alpha=0.7, label=label)
    left.axvline(1.0, color="red", ls="--", lw=0.8, label="rule: ghost left of the line")
    left.set_xscale("log")
    left.set_xlabel(f"cost model: {layers.GHOST_COST} T^2 (d + p) / (T d p)")
    left.set_ylabel("ghost time / instantiated time")
    left.set_title(f"Ghost norm or per-example gradients (batch {GHOST_B})", fontsize=10)
    for c in CONV_GRID["C"]:
        if c % 8 == 0 and not on_gpu:
            right.axvspan(c - 0.6, c + 0.6, color="red", alpha=0.12, lw=0,
                          label="rule: grouped convolution (C a multiple of 8)" if c == 8 else None)
    right.set_xticks(CONV_GRID["C"])
    right.set_xlabel("input channels per group C (kernel 3 left, kernel 5 right of each tick)")
    right.set_ylabel("unfold time / grouped-convolution time")
    right.set_title(f"Per-example conv weight gradients (batch {CONV_B})", fontsize=10)
    for ax in (left, right):
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    on_gpu = DEVICE.type == "cuda"
    ghost, unfold = [], []
    load_before = os.getloadavg()
    for threads in ((torch.get_num_threads(),) if on_gpu else (1, 2)):
        torch.set_num_threads(threads)
        ghost += [(threads, *r) for r in ghost_rows(args.rounds)]
        print(ghost[-1], flush=True)
        unfold += [(threads, *r) for r in unfold_rows(args.rounds)]
        print(unfold[-1], flush=True)
    load_after = os.getloadavg()
    where = f" (GPU: {torch.cuda.get_device_name(DEVICE)})" if on_gpu else ""
    text = (f"# The clipping rules' cost choices, against measurements{where}\n\n"
            f"{environment()}; {args.rounds} interleaved rounds, medians. Load average (1, 5, 15 min) before "
            f"{', '.join(f'{v:.2f}' for v in load_before)}, after {', '.join(f'{v:.2f}' for v in load_after)} "
            f"({os.cpu_count()} cores). Produced by `python benchmarks/bench_layer_rules.py"
            f"{' --device cuda' if on_gpu else ''}`; what is timed is "
            "in its docstring.\n\n"
            f"## 1. Ghost norm or instantiated per-example gradients (batch {GHOST_B})\n\n"
            f"The rule takes the ghost norm when {layers.GHOST_COST} T^2 (d + p) < T d p (T tokens or output "
            "positions, d inputs or patch length, p outputs). Timed: the rule's norms and its clipped sum.\n\n"
            + markdown_table(["threads", "layer", "T", "d", "p", "ghost ms", "instantiated ms",
                              "ghost / instantiated", "rule picks", "pick is the faster"], ghost)
            + f"\n\nThe rule picks the faster way in {_agree(ghost)} cells.\n\n"
            f"## 2. Per-example convolution weight gradients: unfold or grouped convolution (batch {CONV_B})\n\n"
            + (f"On a GPU the rule unfolds only when the unfolded input has at most {layers.UNFOLD_LIMIT} "
               "elements (the channel rule is measured on CPU). " if on_gpu else
               f"The rule unfolds when C <= {layers.UNFOLD_CHANNELS} is not a multiple of 8 (C input channels per "
               f"group), or the unfolded input has at most {layers.UNFOLD_LIMIT} elements. ")
            + "Patch D = C k k.\n\n"
            + markdown_table(["threads", "C in", "C out", "kernel", "map", "patch D", "unfold ms", "grouped ms",
                              "unfold / grouped", "rule picks", "pick is the faster"], unfold)
            + f"\n\nThe rule picks the faster way in {_agree(unfold)} cells.\n")
    suffix = "_cuda" if on_gpu else ""
    write_result(f"dpsgd_layer_rules{suffix}.md", text)
    plot(ghost, unfold, RESULTS / f"dpsgd_layer_rules{suffix}.png", on_gpu)


if __name__ == "__main__":
    main()
