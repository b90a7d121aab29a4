"""Cost of one DP-SGD step against a non-private step (and Opacus when installed).

Models: MLP 784-256-10 and a small CNN on 28x28 inputs; batch 256; CPU by default,
``--device cuda`` on a GPU (results then go to ``dpsgd_speed_cuda.md``, with the GPU's name).
Each variant runs a forward, backward (per-example clipping + noise for DP)
and an SGD-with-momentum step; we report the median time over rounds, with
the variants interleaved in each round so machine noise hits all alike, and
the ratio to the non-private step measured in the same process.

Sequence models (issue 16; ``dpsgd_speed_sequence.md`` and ``.png``): an LSTM (1 layer, hidden
128, 28 steps of 28 features) and a TransformerEncoder (2 layers, d_model 128, 4 heads,
sequence 64). The non-private step runs the plain torch model (fused nn.LSTM,
nn.MultiheadAttention); skdp runs ``skdp.nn.fix_module`` of it (DPLSTM, DPMultiheadAttention)
on the hooks; Opacus runs its own drop-ins (``opacus.layers.DPLSTM``, ``ModuleValidator.fix``).
No torch.func row for these: per-example gradients of the whole model are far slower.

Run: python benchmarks/bench_dpsgd.py [--rounds 30] [--device cuda] [--models mlp,cnn,transformer,lstm,encoder]
"""
import argparse
import os
import statistics
import time
import warnings

import torch
from torch import nn

from _common import RESULTS, environment, markdown_table, write_result
from skdp.engine import DPSGDEngine
from skdp.nn import SmallCNN, fix_module

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


class RowLSTM(nn.Module):
    """LSTM over the 28 rows of a 28x28 image (28 steps of 28 features), hidden 128, last step -> 10 classes."""

    def __init__(self, lstm_class=nn.LSTM):
        super().__init__()
        self.rnn = lstm_class(28, 128, batch_first=True)
        self.head = nn.Linear(128, 10)

    def forward(self, X):
        return self.head(self.rnn(X.reshape(len(X), 28, 28))[0][:, -1])


def lstm():
    return RowLSTM()


def opacus_lstm():
    from opacus.layers import DPLSTM as OpacusDPLSTM
    return RowLSTM(OpacusDPLSTM)


SEQ, D_MODEL = 64, 128


class SequenceEncoder(nn.Module):
    """TransformerEncoder on (B, 64, 128): 2 layers, 4 heads, feed-forward 256, mean-pooled -> 10 classes."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(D_MODEL, 4, dim_feedforward=256, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, 10)

    def forward(self, X):
        return self.head(self.encoder(X).mean(1))


def encoder():
    return SequenceEncoder()


def opacus_fixed(build):
    def make():
        from opacus.validators import ModuleValidator
        return ModuleValidator.fix(build())
    return make


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


def make_opacus_step(build, mode, shape=(1, 28, 28)):
    from opacus import PrivacyEngine
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping  # noqa: F401

    model = build().to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.utils.data.TensorDataset(torch.randn(B * 4, *shape), torch.randint(0, 10, (B * 4,)))
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


def bench(name, build, rounds, shape=(1, 28, 28), dp_build=None, opacus_build=None, vmap=True):
    """Rows of one model. ``dp_build``: the model skdp trains (default ``build``); ``opacus_build``: Opacus's."""
    torch.manual_seed(0)  # benchmark-only inputs; the library itself never seeds globally
    X, y = torch.randn(B, *shape, device=DEVICE), torch.randint(0, 10, (B,), device=DEVICE)
    variants = {}
    base = build().to(DEVICE)
    base_opt = torch.optim.SGD(base.parameters(), lr=0.1, momentum=0.9)
    variants["non-private"] = lambda X, y: nonprivate_step(base, base_opt, X, y)
    for clipping in ("auto", "vmap") if vmap else ("auto",):
        m = (dp_build or build)().to(DEVICE)
        variants[f"skdp ({'ghost/mixed' if clipping == 'auto' else 'torch.func'})"] = \
            make_skdp_step(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), clipping)
    failed = []
    for mode in ("hooks", "ghost"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                step = make_opacus_step(opacus_build or build, mode, shape)
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


MODELS = {
    "mlp": ("MLP 784-256-10", dict(build=mlp)),
    "cnn": ("CNN (2 conv, 28x28)", dict(build=cnn)),
    "transformer": ("Transformer (2 layers, d 128, 4 heads, 28 rows)", dict(build=transformer)),
}
SEQUENCE_MODELS = {
    "lstm": ("LSTM (1 layer, hidden 128, 28 steps x 28)",
             dict(build=lstm, dp_build=lambda: fix_module(lstm()), opacus_build=opacus_lstm, vmap=False)),
    "encoder": ("TransformerEncoder (2 layers, d 128, 4 heads, seq 64)",
                dict(build=encoder, dp_build=lambda: fix_module(encoder()), opacus_build=opacus_fixed(encoder),
                     shape=(SEQ, D_MODEL), vmap=False)),
}


def plot_ratios(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = list(dict.fromkeys(r[0] for r in rows))
    steps = [s for s in dict.fromkeys(r[1] for r in rows) if s != "non-private"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / max(len(steps), 1)
    for j, step in enumerate(steps):
        vals = [next((float(r[3][:-1]) for r in rows if r[0] == m and r[1] == step and r[3]), 0.0) for m in models]
        ax.bar([i + j * width for i in range(len(models))], vals, width, label=step)
    ax.axhline(2.5, color="k", ls="--", lw=0.8, label="target 2.5x")
    ax.set_xticks([i + width * (len(steps) - 1) / 2 for i in range(len(models))])
    ax.set_xticklabels([m.split(" (")[0] for m in models])
    ax.set_ylabel("DP step / non-private step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default=",".join([*MODELS, *SEQUENCE_MODELS]),
                        help="comma-separated subset of " + ", ".join([*MODELS, *SEQUENCE_MODELS]))
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    chosen = args.models.split(",")
    suffix = "_cuda" if DEVICE.type == "cuda" else ""
    where = f"GPU: {torch.cuda.get_device_name(DEVICE)}" if DEVICE.type == "cuda" else "CPU"
    header = ["model", "step", "median ms", "vs non-private"]
    rows = [r for key, (name, kw) in MODELS.items() if key in chosen for r in bench(name, rounds=args.rounds, **kw)]
    if rows:
        table = markdown_table(header, rows)
        if DEVICE.type == "cuda":
            targets = ("Targets on a GPU (issue 16): skdp <= 1.3x non-private for the MLP and the CNN, faster than "
                       "Opacus ghost.")
        else:
            targets = "Targets: skdp <= 1.5x non-private for the MLP, <= 2x for the CNN."
        text = f"# DP-SGD step cost (batch {B}, {where})\n\n{environment()}\n\n{table}\n\n{targets}\n"
        print(text)
        write_result(f"dpsgd_speed{suffix}.md", text)
    rows = [r for key, (name, kw) in SEQUENCE_MODELS.items() if key in chosen
            for r in bench(name, rounds=args.rounds, **kw)]
    if rows:
        table = markdown_table(header, rows)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        text = (f"# DP-SGD step cost, sequence models (batch {B}, {where})\n\n{environment()}; "
                f"{args.rounds} rounds; load average {load:.1f} at the end of the run\n\n{table}\n\n"
                "Non-private: the plain torch model (fused nn.LSTM; nn.MultiheadAttention). skdp: "
                "`skdp.nn.fix_module` of it (DPLSTM, DPMultiheadAttention) on the hooks. Opacus: "
                "`opacus.layers.DPLSTM` / `ModuleValidator.fix`, same non-private baseline.\n\n"
                "Targets (issue 16, CPU): skdp <= 2.5x non-private and below Opacus.\n")
        print(text)
        write_result(f"dpsgd_speed_sequence{suffix}.md", text)
        plot_ratios(rows, RESULTS / f"dpsgd_speed_sequence{suffix}.png")


if __name__ == "__main__":
    main()
