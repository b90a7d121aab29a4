"""Cost of one DP-SGD step against a non-private step (and Opacus when installed).

Models: MLP 784-256-10 and a small CNN on 28x28 inputs; batch 256; CPU by default,
``--device cuda`` on a GPU (results then go to ``dpsgd_speed_cuda.md``, with the GPU's name).
Each variant runs a forward, backward (per-example clipping + noise for DP)
and an SGD-with-momentum step; we report the median time over rounds, with
the variants interleaved in each round so machine noise hits all alike, and
the ratio to the non-private step measured in the same process.

Run: python benchmarks/bench_dpsgd.py [--rounds 30] [--device cuda]
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
DEVICE = torch.device("cpu")


def sync():
    # CUDA kernels run asynchronously: a step is timed only once the device has finished it.
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return SmallCNN(n_classes=10, image_shape=(28, 28), activation="relu")


class RowTransformer(nn.Module):
    """A small transformer: the 28 rows of an image as a sequence, 2 encoder layers (d 128, 4 heads)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(28, 128)
        layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=256, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(128, 10)

    def forward(self, X):
        return self.head(self.encoder(self.embed(X.flatten(1, 2))).mean(1))


def transformer():
    return RowTransformer()


def loss_fn(forward, X, y):
    return nn.functional.cross_entropy(forward(X), y, reduction="none")


def nonprivate_step(model, opt, X, y):
    opt.zero_grad()
    nn.functional.cross_entropy(model(X), y).backward()
    opt.step()


def make_skdp_step(model, opt, clipping):
    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=B,
                         generator=torch.Generator(DEVICE).manual_seed(0), clipping=clipping)

    def step(X, y):
        opt.zero_grad()
        engine.private_gradients(loss_fn, (X, y))
        opt.step()
    return step


def make_opacus_step(build, mode):
    from opacus import PrivacyEngine
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping  # noqa: F401

    model = build().to(DEVICE)
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
    X, y = torch.randn(B, 1, 28, 28, device=DEVICE), torch.randint(0, 10, (B,), device=DEVICE)
    variants = {}
    base = build().to(DEVICE)
    base_opt = torch.optim.SGD(base.parameters(), lr=0.1, momentum=0.9)
    variants["non-private"] = lambda X, y: nonprivate_step(base, base_opt, X, y)
    for clipping in ("auto", "vmap"):
        m = build().to(DEVICE)
        variants[f"skdp ({'ghost/mixed' if clipping == 'auto' else 'torch.func'})"] = \
            make_skdp_step(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), clipping)
    failed = []
    for mode in ("hooks", "ghost"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                step = make_opacus_step(build, mode)
                step(X, y)  # a model Opacus cannot take fails here, not in the timing
            variants[f"opacus 1.6 {mode}"] = step
        except ImportError:
            pass
        except Exception as exc:  # noqa: BLE001 - reported in the table
            failed.append((name, f"opacus 1.6 {mode}", f"fails: {type(exc).__name__}", ""))
    times = {k: [] for k in variants}
    for _ in range(3):  # warm-up
        for fn in variants.values():
            fn(X, y)
    sync()
    for _ in range(rounds):
        for k, fn in variants.items():
            t = time.perf_counter()
            fn(X, y)
            sync()
            times[k].append(time.perf_counter() - t)
    base_t = statistics.median(times["non-private"])
    return [(name, k, f"{statistics.median(v) * 1e3:.2f}", f"{statistics.median(v) / base_t:.2f}x")
            for k, v in times.items()] + failed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    rows = (bench("MLP 784-256-10", mlp, args.rounds) + bench("CNN (2 conv, 28x28)", cnn, args.rounds)
            + bench("Transformer (2 layers, d 128, 4 heads, 28 rows)", transformer, args.rounds))
    table = markdown_table(["model", "step", "median ms", "vs non-private"], rows)
    if DEVICE.type == "cuda":
        where = f"GPU: {torch.cuda.get_device_name(DEVICE)}"
        targets = "Targets on a GPU (issue 16): skdp <= 1.3x non-private for the MLP and the CNN, faster than Opacus ghost."
        name = "dpsgd_speed_cuda.md"
    else:
        where, name = "CPU", "dpsgd_speed.md"
        targets = "Targets: skdp <= 1.5x non-private for the MLP, <= 2x for the CNN."
    text = (f"# DP-SGD step cost (batch {B}, {where})\n\n{environment()}\n\n{table}\n\n{targets}\n")
    print(text)
    write_result(name, text)


if __name__ == "__main__":
    main()
