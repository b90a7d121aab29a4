"""Cost of one DP-SGD step against a non-private step (and Opacus when installed).

Models (issue 29): MLP 784-256-10, SmallCNN (2 conv 3x3, 28x28), a LeNet-style CNN (5x5 kernels,
max pooling) and a small GroupNorm ResNet block; batch 256; at 1 and 2 torch threads (``--threads``);
CPU by default, ``--device cuda`` on a GPU (results then go to ``dpsgd_speed_cuda.md``, with the GPU's name).
Beside each step's median time, its peak memory: the most bytes allocated at once during one step
beyond what was allocated before it (torch.profiler's memory events on CPU, ``max_memory_allocated``
on a GPU). ``--breakdown``: where skdp's MLP step spends its time, phase by phase.
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

``--floor``: what the parts of skdp's MLP step cost (``dpsgd_floor.md``; see ``floor``).

Run: python benchmarks/bench_dpsgd.py [--rounds 30] [--threads 1,2] [--device cuda] [--vmap] [--breakdown] [--floor]
                                     [--models mlp,cnn,lenet,resnet_gn,transformer,lstm,encoder]
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


def lenet():
    """LeNet-style: conv 5x5 (6) - ReLU - maxpool 2 - conv 5x5 (16) - ReLU - maxpool 2 - 256-120-84-10."""
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


class ResNetGN(nn.Module):
    """A small GroupNorm ResNet: stem conv 3x3 stride 2 (16 ch, 14x14), one residual block of two
    conv 3x3 + GroupNorm(4, 16), global average pooling, linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, padding=1), nn.GroupNorm(4, 16))
        self.head = nn.Linear(16, 10)

    def forward(self, X):
        h = self.stem(X)
        h = torch.relu(h + self.block(h))
        return self.head(h.mean((2, 3)))


def resnet_gn():
    return ResNetGN()


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


def make_skdp_step(model, opt, clipping, noise_ahead=True):
    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=B,
                         generator=torch.Generator(DEVICE).manual_seed(0), clipping=clipping)
    engine.draw_noise_ahead = noise_ahead

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


def peak_memory(fn, X, y):
    """The largest rise of allocated bytes during one call of ``fn(X, y)`` (MB).

    CPU: torch.profiler's memory events of every thread (the helper thread's noise draws included), in
    time order; the rise is measured from the lowest point before the peak, so gradients freed by the
    step's ``zero_grad`` and allocated again count once. GPU: ``max_memory_allocated`` over the step
    minus the memory allocated before it.
    """
    if DEVICE.type == "cuda":
        sync()
        torch.cuda.reset_peak_memory_stats(DEVICE)
        before = torch.cuda.memory_allocated(DEVICE)
        fn(X, y)
        sync()
        return (torch.cuda.max_memory_allocated(DEVICE) - before) / 1e6
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(X, y)
    low = cur = rise = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        cur += event.self_cpu_memory_usage
        low = min(low, cur)
        rise = max(rise, cur - low)
    return rise / 1e6


def bench(name, build, rounds, shape=(1, 28, 28), dp_build=None, opacus_build=None, vmap=True, memory=True):
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
    if DEVICE.type == "cpu":  # the same step with each lot's noise drawn at its step (no helper thread)
        m = (dp_build or build)().to(DEVICE)
        variants["skdp (ghost/mixed), noise at the step"] = \
            make_skdp_step(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), "auto", noise_ahead=False)
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
            failed.append((name, f"opacus 1.6 {mode}", f"fails: {type(exc).__name__}", "", ""))
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
    mem = {}
    if memory:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mem = {k: peak_memory(fn, X, y) for k, fn in variants.items()}
    base_t = statistics.median(times["non-private"])
    return [(name, k, f"{statistics.median(v) * 1e3:.2f}", f"{statistics.median(v) / base_t:.2f}x",
             f"{mem[k]:.1f}" if k in mem else "") for k, v in times.items()] + failed


MODELS = {
    "mlp": ("MLP 784-256-10", dict(build=mlp)),
    "cnn": ("SmallCNN (2 conv 3x3, 28x28)", dict(build=cnn)),
    "lenet": ("LeNet-5x5 (2 conv 5x5, max pool)", dict(build=lenet)),
    "resnet_gn": ("GroupNorm ResNet block (16 ch, 14x14)", dict(build=resnet_gn)),
    "transformer": ("Transformer (2 layers, d 128, 4 heads, 28 rows)", dict(build=transformer)),
}
SEQUENCE_MODELS = {
    "lstm": ("LSTM (1 layer, hidden 128, 28 steps x 28)",
             dict(build=lstm, dp_build=lambda: fix_module(lstm()), opacus_build=opacus_lstm, vmap=False)),
    "encoder": ("TransformerEncoder (2 layers, d 128, 4 heads, seq 64)",
                dict(build=encoder, dp_build=lambda: fix_module(encoder()), opacus_build=opacus_fixed(encoder),
                     shape=(SEQ, D_MODEL), vmap=False)),
}


def breakdown(rounds):
    """Where skdp's MLP step spends its time: median ms per phase over ``rounds`` steps (wrapped timers)."""
    import skdp.engine.dpsgd as dpsgd
    import skdp.engine.hooks as hooks

    torch.manual_seed(0)
    X, y = torch.randn(B, 1, 28, 28, device=DEVICE), torch.randint(0, 10, (B,), device=DEVICE)
    base = mlp().to(DEVICE)
    base_opt = torch.optim.SGD(base.parameters(), lr=0.1, momentum=0.9)
    model = mlp().to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=B,
                         generator=torch.Generator(DEVICE).manual_seed(0))
    acc = {}

    def timed(label, fn):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            acc[label] = acc.get(label, 0.0) + time.perf_counter() - t
            return out
        return wrapper

    # The guards, part by part: the parameter/buffer snapshots (bit copies) before the lot and their
    # comparison after it, the module-state walk before and the walk + comparison after.
    guard_parts = {"parameter_versions": "guards: parameter/buffer snapshots (copies)",
                   "buffer_versions": "guards: parameter/buffer snapshots (copies)",
                   "check_parameters_unchanged": "guards: parameter/buffer comparison",
                   "check_buffers_unchanged": "guards: parameter/buffer comparison",
                   "module_state": "guards: module state walk, before",
                   "check_state_unchanged": "guards: module state walk + comparison, after"}
    patches = [(dpsgd, name, timed(label, getattr(dpsgd, name))) for name, label in guard_parts.items()]
    patches += [(dpsgd.DPSGDEngine, "_noise", timed("noise (wait for the draw ahead, or draw)",
                                                    dpsgd.DPSGDEngine._noise)),
                (hooks.HookClipper, "_forward", timed("forward + loss (hooks record a, out)",
                                                      hooks.HookClipper._forward)),
                (hooks, "_apply_rules", timed("per-example norms (rules)", hooks._apply_rules)),
                (torch.autograd, "grad", timed("backward to the layer outputs", torch.autograd.grad)),
                (dpsgd.DPSGDEngine, "_clipped_sum", timed("clipped_sum", dpsgd.DPSGDEngine._clipped_sum))]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    steps, plain = [], []
    try:
        for obj, name, fn in patches:
            setattr(obj, name, fn)
        for i in range(rounds + 5):
            t = time.perf_counter()
            nonprivate_step(base, base_opt, X, y)
            sync()
            t_plain = time.perf_counter() - t
            acc.clear()
            t = time.perf_counter()
            opt.zero_grad()
            engine.private_gradients(loss_fn, (X, y))
            t_private = time.perf_counter() - t
            opt.step()
            sync()
            total = time.perf_counter() - t
            if i >= 5:
                plain.append(t_plain)
                clipped = acc.pop("clipped_sum", 0.0)
                phases = dict(acc)
                noise = phases.get("noise (wait for the draw ahead, or draw)", 0.0)
                inside = sum(v for k, v in phases.items() if not k.startswith("noise"))  # all run in clipped_sum
                phases["guards (all parts)"] = sum(v for k, v in phases.items() if k.startswith("guards:"))
                phases["clipping factors + clipped sums (rest of clipped_sum)"] = clipped - inside
                phases["add noise to the sum, taps, rest"] = t_private - clipped - noise
                phases["optimizer step"] = total - t_private
                phases["total DP step"] = total
                steps.append(phases)
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
        engine.close()
    base_t = statistics.median(plain)
    labels = list(dict.fromkeys(k for st in steps for k in st))
    return [(k, f"{statistics.median([st.get(k, 0.0) for st in steps]) * 1e3:.3f}",
             f"{statistics.median([st.get(k, 0.0) for st in steps]) / base_t:.2f}x") for k in labels] + \
        [("non-private step", f"{base_t * 1e3:.3f}", "1.00x")]


def floor(rounds):
    """Where the MLP's ratio comes from: the step with parts of skdp's engine taken away, interleaved.

    Rows: the non-private step; ghost clipping written out by hand for this MLP (forward, one backward to
    the layer outputs, per-example norms ||a|| ||g||, the clipped sums; no engine, no guards, no noise):
    the arithmetic floor of one-backward clipping; skdp's engine without noise (clipping and the guards
    of every lot: parameter/buffer snapshots and the module-state comparison); the same with the guards
    patched out (a diagnostic only: no estimator runs without them); the engine with noise drawn ahead
    (the default) and drawn at the step; and the Gaussian draw alone (one ``normal_`` per parameter).
    Each round runs every row once, in turn, after the same non-private step.
    """
    import skdp.engine.dpsgd as dpsgd

    torch.manual_seed(0)
    X, y = torch.randn(B, 1, 28, 28, device=DEVICE), torch.randint(0, 10, (B,), device=DEVICE)
    guards = ("parameter_versions", "check_parameters_unchanged", "buffer_versions", "check_buffers_unchanged",
              "module_state", "check_state_unchanged")
    kept = {name: getattr(dpsgd, name) for name in guards}
    off = {"parameter_versions": lambda m, reuse=None: None, "buffer_versions": lambda m, reuse=None: None,
           "module_state": lambda m, deep=False: None}

    def engine_step(sigma, ahead=True, guarded=True):
        model = mlp().to(DEVICE)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=sigma, expected_batch_size=B,
                             generator=torch.Generator(DEVICE).manual_seed(0))
        engine.draw_noise_ahead = ahead

        def step():
            for name in guards:
                setattr(dpsgd, name, kept[name] if guarded else off.get(name, lambda *a, **k: None))
            opt.zero_grad()
            engine.private_gradients(loss_fn, (X, y))
            opt.step()
        return step

    def by_hand():
        model = mlp().to(DEVICE)
        flat, l1, _, l2 = model
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step():
            opt.zero_grad()
            a1 = flat(X)
            h = l1(a1)
            r = torch.relu(h)
            out = l2(r)
            losses = nn.functional.cross_entropy(out, y, reduction="none")
            gh, go = torch.autograd.grad(losses.sum(), [h, out])
            gh2, go2 = gh.pow(2).sum(1), go.pow(2).sum(1)
            norms = (a1.pow(2).sum(1) * gh2 + gh2 + r.detach().pow(2).sum(1) * go2 + go2).sqrt()
            scale = (1.0 / (norms + 1e-6)).clamp(max=1.0)[:, None]
            gh, go = gh * scale, go * scale
            for p, g in ((l1.weight, gh.t() @ a1), (l1.bias, gh.sum(0)), (l2.weight, go.t() @ r.detach()),
                         (l2.bias, go.sum(0))):
                p.grad = g / B
            opt.step()
        return step

    base = mlp().to(DEVICE)
    base_opt = torch.optim.SGD(base.parameters(), lr=0.1, momentum=0.9)
    params = list(mlp().to(DEVICE).parameters())
    gen = torch.Generator(DEVICE).manual_seed(0)
    rows = {"non-private step": lambda: nonprivate_step(base, base_opt, X, y),
            "ghost clipping by hand (no engine, no guards, no noise)": by_hand(),
            "skdp engine, no noise (clipping + guards)": engine_step(0.0),
            "skdp engine, no noise, guards patched out (diagnostic)": engine_step(0.0, guarded=False),
            "skdp engine, noise drawn ahead (default)": engine_step(1.0),
            "skdp engine, noise drawn at the step": engine_step(1.0, ahead=False),
            "the Gaussian draw alone (normal_, every parameter)":
                lambda: [torch.empty_like(p).normal_(0.0, 1.0, generator=gen) for p in params]}
    times = {k: [] for k in rows}
    try:
        for i in range(rounds + 10):
            for k, fn in rows.items():
                t = time.perf_counter()
                fn()
                sync()
                if i >= 10:
                    times[k].append(time.perf_counter() - t)
    finally:
        for name in guards:
            setattr(dpsgd, name, kept[name])
    base_t = statistics.median(times["non-private step"])
    return [(k, f"{statistics.median(v) * 1e3:.3f}", f"{statistics.median(v) / base_t:.2f}x")
            for k, v in times.items()]


def plot_ratios(rows, path, target=2.5):
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
    ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target}x")
    ax.set_xticks([i + width * (len(steps) - 1) / 2 for i in range(len(models))])
    ax.set_xticklabels([m.split(" (")[0].split(" @")[0] + ("\n@" + m.split(" @")[-1] if " @" in m else "")
                        for m in models], fontsize=7)
    ax.set_ylabel("DP step / non-private step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts (CPU)")
    parser.add_argument("--vmap", action="store_true", help="add the torch.func (vmap) rows (slow on the MLP)")
    parser.add_argument("--breakdown", action="store_true", help="the MLP step's phases, at each thread count")
    parser.add_argument("--note", default="", help="a line on the machine's load, written under the table")
    parser.add_argument("--floor", action="store_true",
                        help="only the MLP's floor rows (what the engine's parts cost), to dpsgd_floor.md")
    parser.add_argument("--models", default=",".join(["mlp", "cnn", "lenet", "resnet_gn"]),
                        help="comma-separated subset of " + ", ".join([*MODELS, *SEQUENCE_MODELS]))
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    chosen = args.models.split(",")
    suffix = "_cuda" if DEVICE.type == "cuda" else ""
    where = f"GPU: {torch.cuda.get_device_name(DEVICE)}" if DEVICE.type == "cuda" else "CPU"
    threads = [torch.get_num_threads()] if DEVICE.type == "cuda" else [int(t) for t in args.threads.split(",")]
    header = ["model", "step", "median ms", "vs non-private", "peak MB"]
    load_before = os.getloadavg()
    if args.floor:
        rows, phases = [], []
        for t in threads:
            torch.set_num_threads(t)
            rows += [(t, *r) for r in floor(args.rounds)]
            phases += [(t, *r) for r in breakdown(args.rounds * 3)]
        load_after = os.getloadavg()
        text = (f"# Where the DP-SGD MLP step's ratio comes from (batch {B}, MLP 784-256-10, {where})\n\n"
                f"{environment()}; {args.rounds} interleaved rounds per thread count, medians. Load average "
                f"(1, 5, 15 min) before {', '.join(f'{v:.2f}' for v in load_before)}, after "
                f"{', '.join(f'{v:.2f}' for v in load_after)} ({os.cpu_count()} cores). {args.note}\n\n"
                f"Produced by `python benchmarks/bench_dpsgd.py --floor`; the rows are in `floor`'s docstring.\n\n"
                + markdown_table(["threads", "step", "median ms", "vs non-private"], rows) + "\n"
                + "\n## The default step's phases (wrapped timers, the guards part by part)\n\n"
                + markdown_table(["threads", "phase", "median ms", "vs non-private step"], phases) + "\n")
        print(text)
        write_result(f"dpsgd_floor{suffix}.md", text)
        return
    rows, phases = [], []
    for t in threads:
        torch.set_num_threads(t)
        if args.breakdown:
            phases += [(t, *r) for r in breakdown(args.rounds * 3)]
        rows += [(r[0], t, *r[1:]) for key, (name, kw) in MODELS.items() if key in chosen
                 for r in bench(name, rounds=args.rounds, **{**kw, "vmap": kw.get("vmap", True) and args.vmap})]
    load_after = os.getloadavg()
    if rows:
        table = markdown_table(["model", "threads", *header[1:]], rows)
        if DEVICE.type == "cuda":
            targets = ("Targets on a GPU (issue 29): skdp <= 1.3x non-private for the MLP and the CNN, faster than "
                       "Opacus ghost.")
        else:
            targets = ("Targets (issue 29, CPU): skdp <= 1.2x non-private for the MLP and SmallCNN at 1 and 2 "
                       "threads, <= 1.3x for LeNet-5x5; every skdp row faster than Opacus ghost.")
        load = (f"Load average (1, 5, 15 min) before the run {', '.join(f'{v:.2f}' for v in load_before)}, after "
                f"{', '.join(f'{v:.2f}' for v in load_after)} ({os.cpu_count()} cores). {args.note}")
        text = (f"# DP-SGD step cost (batch {B}, {where})\n\n{environment()}; {args.rounds} interleaved rounds "
                f"per thread count, medians\n\n{load}\n\n{table}\n\n{targets}\n\n"
                "Peak MB: the largest rise of allocated memory during one step (parameters, momentum and "
                "inputs allocated before it are not counted). skdp draws the next lot's noise on a helper "
                "thread while the lot computes (`DPSGDEngine.draw_noise_ahead`): its time is off the critical "
                "path when a core is free for it, and the noise is counted in the step's memory.\n")
        if phases:
            text += ("\n## Where skdp's MLP step spends its time (median ms per phase, wrapped timers)\n\n"
                     + markdown_table(["threads", "phase", "median ms", "vs non-private step"], phases) + "\n")
        print(text)
        write_result(f"dpsgd_speed{suffix}.md", text)
        plot_ratios([(f"{r[0]} @{r[1]} thread{'s' if r[1] > 1 else ''}", *r[2:]) for r in rows],
                    RESULTS / f"dpsgd_speed{suffix}.png", target=1.3 if DEVICE.type == "cuda" else 1.2)
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
