"""The DP-SGD step's ratio under glibc's default allocator and with its thresholds raised (issue 29, CPU).

On Linux, glibc's ``malloc`` serves a block above its mmap threshold (128 KiB at first, raised
dynamically up to 32 MiB) with a fresh ``mmap``, and hands freed memory at the top of the heap back to
the system once more than the trim threshold is free. A training step that allocates and frees the same
multi-megabyte tensors every step (activations, their gradients, im2col buffers) then takes page faults
on every first touch, every step: on SmallCNN (batch 256) ``aten::fill_`` of one 12.8 MB activation
gradient took about 4.6 ms a step under the profiler. Raising both thresholds
(``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``, glibc's documented tunables; the memory a
step frees is then kept for the next one) removes those faults. It is a setting of the process, not of
skdp: it speeds up the plain step as well, and the ratios below compare each DP step with the plain
step in the same process, under the same allocator.

Each setting runs in its own process (the tunables are read when the process starts); in each, the
non-private step and skdp's default DP step (ghost/mixed clipping, noise drawn ahead, guards on)
alternate, ``--rounds`` times after 3 warm-ups, at 1 and 2 torch threads; medians.

Run: python benchmarks/bench_allocator.py [--rounds 30] [--models mlp,cnn,lenet,resnet_gn]
Writes ``benchmarks/results/dpsgd_allocator.md`` and ``dpsgd_allocator.png``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from _common import RESULTS, environment, markdown_table, write_result

#: The allocator settings compared: (name, environment). 1 GiB / 4 GiB: above any block these steps allocate.
SETTINGS = (("glibc default", {}),
            ("glibc thresholds raised", {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}))


def child(models, rounds, threads):
    """Time the plain and the DP step of each model in this process; print one JSON row per (model, threads)."""
    import bench_dpsgd as b

    for t in threads:
        torch.set_num_threads(t)
        for key in models:
            name, kw = b.MODELS[key]
            torch.manual_seed(0)  # benchmark-only inputs; the library itself never seeds globally
            X, y = torch.randn(b.B, 1, 28, 28), torch.randint(0, 10, (b.B,))
            base, dp = kw["build"](), kw["build"]()
            base_opt = torch.optim.SGD(base.parameters(), lr=0.1, momentum=0.9)
            steps = {"plain": lambda: b.nonprivate_step(base, base_opt, X, y),
                     "skdp": (lambda s: lambda: s(X, y))(
                         b.make_skdp_step(dp, torch.optim.SGD(dp.parameters(), lr=0.1, momentum=0.9), "auto"))}
            times = {k: [] for k in steps}
            for i in range(rounds + 3):
                for k, fn in steps.items():
                    start = time.perf_counter()
                    fn()
                    if i >= 3:
                        times[k].append(time.perf_counter() - start)
            plain, skdp = (statistics.median(times[k]) * 1e3 for k in ("plain", "skdp"))
            print(json.dumps({"model": name, "threads": t, "plain": plain, "skdp": skdp}), flush=True)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    short = {"MLP 784-256-10": "MLP", "GroupNorm ResNet block": "GN ResNet"}  # tick labels that fit
    labels = list(dict.fromkeys((r["model"].split(" (")[0], r["threads"]) for r in rows))
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / len(SETTINGS)
    for j, (setting, _) in enumerate(SETTINGS):
        vals = [next((r["skdp"] / r["plain"] for r in rows if r["setting"] == setting
                      and (r["model"].split(" (")[0], r["threads"]) == lab), 0.0) for lab in labels]
        ax.bar([i + j * width for i in range(len(labels))], vals, width, label=setting)
    ax.axhline(1.2, color="k", ls="--", lw=0.8, label="issue 29 target 1.2x")
    ax.set_xticks([i + width * (len(SETTINGS) - 1) / 2 for i in range(len(labels))])
    ax.set_xticklabels([f"{short.get(m, m)}\n{t} thr" for m, t in labels], fontsize=8)
    ax.set_ylabel("DP step / plain step (same process)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--models", default="mlp,cnn,lenet,resnet_gn")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=2, help="processes per setting, alternating settings")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from the committed table")
    args = parser.parse_args()
    models, threads = args.models.split(","), [int(t) for t in args.threads.split(",")]
    if args.child:
        child(models, args.rounds, threads)
        return
    if args.plot_only:
        cells = [[c.strip() for c in line.strip("|").split("|")]
                 for line in (RESULTS / "dpsgd_allocator.md").read_text().splitlines() if line.startswith("| ")][1:]
        plot([{"model": c[0], "threads": int(c[1]), "setting": c[2], "plain": float(c[3]), "skdp": float(c[4])}
              for c in cells], RESULTS / "dpsgd_allocator.png")
        return
    load_before = os.getloadavg()
    rows = []
    for repeat in range(args.repeats):  # the settings alternate, so a busy spell of the machine hits both
        for setting, env in SETTINGS:
            out = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(args.rounds), "--models",
                                  args.models, "--threads", args.threads], env={**os.environ, **env},
                                 capture_output=True, text=True, check=True, cwd=os.path.dirname(__file__))
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    rows.append({**json.loads(line), "setting": setting, "repeat": repeat})
                    print(rows[-1], flush=True)
    load_after = os.getloadavg()
    table = []
    merged = {}
    for r in rows:  # the median over the repeats of each (model, threads, setting)
        merged.setdefault((r["model"], r["threads"], r["setting"]), []).append(r)
    summary = []
    for (model, t, setting), rs in merged.items():
        plain, skdp = statistics.median(r["plain"] for r in rs), statistics.median(r["skdp"] for r in rs)
        ratios = ", ".join(f"{r['skdp'] / r['plain']:.2f}x" for r in rs)
        table.append((model, t, setting, f"{plain:.2f}", f"{skdp:.2f}", f"{skdp / plain:.2f}x", ratios))
        summary.append({"model": model, "threads": t, "setting": setting, "plain": plain, "skdp": skdp})
    table.sort(key=lambda r: (r[1], r[0], r[2]))
    text = (f"# The DP-SGD step under glibc's default allocator and with its thresholds raised (batch 256, CPU)\n\n"
            f"{environment()}; {args.rounds} interleaved rounds per process, {args.repeats} processes per "
            f"setting (alternating); load average (1, 5, 15 min) before "
            f"{', '.join(f'{v:.2f}' for v in load_before)}, after {', '.join(f'{v:.2f}' for v in load_after)} "
            f"({os.cpu_count()} cores).\n\n{__doc__.split('Run:')[0]}\n"
            + markdown_table(["model", "threads", "allocator", "plain ms", "skdp ms", "ratio",
                              "ratio in each process"], table) + "\n")
    print(text)
    write_result("dpsgd_allocator.md", text)
    plot(summary, RESULTS / "dpsgd_allocator.png")


if __name__ == "__main__":
    main()
