"""Cost of one DP-SGD step against a non-private step (and Opacus when installed).

Models: MLP 784-256-10 and a small CNN on 28x28 inputs; batch 256; CPU.
Each variant runs a forward, backward (per-example clipping + noise for DP)
and an SGD-with-momentum step; we report the median time over rounds, with
the variants interleaved in each round so machine noise hits all alike, and
the ratio to the non-private step measured in the same process.

Run: python benchmarks/bench_dpsgd.py [--rounds 30]
"""
import argparse
import statistics
import time
import warnings

import torch
from torch import nn

from _common import environment, markdown_table, write_result
from skdp.engine import DPSGDEngine
from skdp.nn import SmallCNN

B = 256


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return SmallCNN(n_classes=10, image_shape=(28, 28), activation="relu")


def loss_fn(forward, X, y):
    return nn.functional.cross_entropy(forward(X), y, reduction="none")


def nonprivate_step(model, opt, X, y):
    opt.zero_grad()
    nn.functional.cross_entropy(model(X), y).backward()
    opt.step()


def make_skdp_step(model, opt, clipping):
    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=B,
                         generator=torch.Generator().manual_seed(0), clipping=clipping)

    def step(X, y):
        opt.zero_grad()
        engine.private_gradients(loss_fn, (X, y))
        opt.step()
    return step


def make_opacus_step(build, mode):
    from opacus import PrivacyEngine
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping  # noqa: F401

    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.utils.data.TensorDataset(torch.randn(B * 4, 1, 28, 28), torch.randint(0, 10, (B * 4,)))
    loader = torch.utils.data.DataLoader(data, batch_size=B)
    engine = PrivacyEngine()
    kwargs = dict(module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
                  max_grad_norm=1.0, poisson_sampling=False)
    if mode == "ghost":
        criterion = nn.CrossEntropyLoss()
        model, opt, criterion, _ = engine.make_private(criterion=criterion, grad_sample_mode="ghost", **kwargs)

        def step(X, y):
            opt.zero_grad()
            loss = criterion(model(X), y)
            loss.backward()
            opt.step()
    else:
        model, opt, _ = engine.make_private(grad_sample_mode="hooks", **kwargs)

        def step(X, y):
            opt.zero_grad()
            nn.functional.cross_entropy(model(X), y).backward()
            opt.step()
    return step


def bench(name, build, rounds):
    torch.manual_seed(0)  # benchmark-only inputs; the library itself never seeds globally
    X, y = torch.randn(B, 1, 28, 28), torch.randint(0, 10, (B,))
    variants = {}
    base = build()
    base_opt = torch.optim.SGD(base.parameters(), lr=0.1, momentum=0.9)
    variants["non-private"] = lambda X, y: nonprivate_step(base, base_opt, X, y)
    for clipping in ("auto", "vmap"):
        m = build()
        variants[f"skdp ({'ghost/mixed' if clipping == 'auto' else 'torch.func'})"] = \
            make_skdp_step(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), clipping)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            variants["opacus 1.6 hooks"] = make_opacus_step(build, "hooks")
            variants["opacus 1.6 ghost"] = make_opacus_step(build, "ghost")
    except ImportError:
        pass
    times = {k: [] for k in variants}
    for _ in range(3):  # warm-up
        for fn in variants.values():
            fn(X, y)
    for _ in range(rounds):
        for k, fn in variants.items():
            t = time.perf_counter()
            fn(X, y)
            times[k].append(time.perf_counter() - t)
    base_t = statistics.median(times["non-private"])
    return [(name, k, f"{statistics.median(v) * 1e3:.2f}", f"{statistics.median(v) / base_t:.2f}x")
            for k, v in times.items()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    rows = bench("MLP 784-256-10", mlp, args.rounds) + bench("CNN (2 conv, 28x28)", cnn, args.rounds)
    table = markdown_table(["model", "step", "median ms", "vs non-private"], rows)
    text = (f"# DP-SGD step cost (batch {B}, CPU)\n\n{environment()}\n\n{table}\n\n"
            "Targets: skdp <= 1.5x non-private for the MLP, <= 2x for the CNN.\n")
    print(text)
    write_result("dpsgd_speed.md", text)


if __name__ == "__main__":
    main()
