"""The rules' arithmetic and dtypes (reviews s38b F-B/F-D and s38c G1-G4; each test failed before its fix).

- G1: half-precision parameters are refused on every lot, not only when the engine is built.
- G2: the one-token Linear norm ||a||^2 ||g||^2 is computed in float64 (it underflowed to 0 in float32).
- G3: the rules run whichever of torch's precision APIs the user set TF32 with (the legacy getter raised).
- G4: two threads clipping at once each run their rules in full float32, and the user's settings survive.
- s38d H1: autocast (bfloat16) around the step or inside the forward does not reach the norms or the shares.
- s38d H2: float64 norms and Gram matrices are taken of inputs rescaled by powers of two (no underflow).
- s38d H3: on a torch without the fp32_precision API (< 2.9), the legacy TF32 flags are turned off instead.
- s38e E1: float64 inputs take the instantiated path (a token tiny beside its example's largest input
  underflowed in the ghost Gram); E2: the legacy branch restores the user's matmul precision ("medium").
- s38f: a float32 layer keeps its ghost norm on the float64 wide path (instantiating every layer in float64 took
  38x the time and 680 MB more); float64 row norms near 2^1023 and of zero-length rows.
"""
import contextlib
import subprocess
import sys
import threading
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import skdp.engine.hooks as hooks
import skdp.engine.layers as layers
from skdp.engine import DPSGDEngine, check_module, make_clipper
from skdp.exceptions import UnsupportedModuleError


def _ce(model, X, y):
    return F.cross_entropy(model(X).float(), y, reduction="none")


def _mse(model, X, y):
    return (model(X).reshape(X.shape[0], -1).sum(1) - y).pow(2)


@contextlib.contextmanager
def _denormals_flushed(flush=True):
    """Subnormal results flushed to 0 (as on some CPUs, or by the user's choice) inside; restored after."""
    if flush and not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def _record_moves(clipper, loss, X, y, C):
    """How far record 0 moves the first parameter's clipped sum, in units of C, and the lot's norms."""
    _, with_x, norms = clipper.clipped_sum(loss, (X, y), C)
    _, without_x, _ = clipper.clipped_sum(loss, (X[1:], y[1:]), C)
    return float((with_x[0][1].double() - without_x[0][1].double()).norm()) / C, norms


#: Run first in a subprocess: torch as before 2.9, without the per-backend fp32_precision API.
_WITHOUT_FP32_PRECISION_API = """
import torch, torch.backends.cudnn, torch.backends.mkldnn
for cls, names in ((type(torch.backends.cudnn), ("conv", "fp32_precision")),
                   (type(torch.backends.mkldnn), ("matmul", "conv", "rnn", "fp32_precision"))):
    for n in names:
        if n in cls.__dict__:
            delattr(cls, n)
from skdp.engine.layers import full_float32
"""


# G1: F-B after the check. The module check runs when the engine is built (and in the hooks' first-lot probe);
# a model converted to half precision afterwards trains and releases (1.0083 C bf16 ghost, 1.0059 C bf16 vmap).
@pytest.mark.parametrize("clipping", ["ghost", "vmap"])
def test_a_model_converted_to_half_precision_after_the_check_is_refused(clipping):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=8,
                         generator=torch.Generator().manual_seed(0), clipping=clipping)
    engine.draw_noise_ahead = False  # as on a CUDA generator, where no noise is drawn ahead
    X, y = torch.randn(8, 16), torch.arange(8) % 3
    engine.private_gradients(_ce, (X, y))  # a float32 first lot: checked and probed
    model.to(torch.bfloat16)
    for p in model.parameters():
        p.grad = None
    with pytest.raises(UnsupportedModuleError, match="float32"):
        engine.private_gradients(_ce, (X.to(torch.bfloat16), y))
    assert all(p.grad is None for p in model.parameters())


# G2: the one-token Linear norm ||a||^2 ||g||^2 underflows in float32: a record with a tiny input and a large output
# gradient (a regression target ~1e19) gets norm 0, scale 1, and its unclipped gradient: 14.4 C with flush-denormal
# on (d=64), 2.88 C at C=0.01 with torch's defaults (d=4096). vmap: 1.0 C.
@pytest.mark.parametrize("flush, d, C, tiny", [(False, 4096, 0.01, 2.5e-23), (True, 64, 1.0, 1e-19)])
def test_a_tiny_input_with_a_huge_output_gradient_is_clipped(flush, d, C, tiny):
    with _denormals_flushed(flush):
        torch.manual_seed(0)
        model = nn.Linear(d, 1, bias=False)
        X, y = torch.randn(32, d) / d ** 0.5, torch.randn(32)
        clipper = make_clipper(model, "ghost")
        clipper.clipped_sum(_mse, (X, y), C)
        X[0], y[0] = tiny, 9e18  # loss 8.1e37 and ||g||^2 = 3.2e38: finite, the float32 path
        moved, _ = _record_moves(clipper, _mse, X, y, C)
        clipper.remove()
    assert moved <= 1 + 1e-3, f"a record moved the clipped sum by {moved:.4g} C"


# G3: torch's new precision API (recommended since 2.9) makes torch.get_float32_matmul_precision() raise, so
# _full_float32 raises on every lot of the hooks: the fit crashes after its charge.
@pytest.mark.parametrize("line", ["torch.backends.cuda.matmul.fp32_precision = 'tf32'",
                                  "torch.backends.fp32_precision = 'tf32'"])
def test_the_hooks_run_under_the_new_precision_api(line):
    code = f"""
import torch, torch.nn.functional as F
from torch import nn
from skdp.engine import make_clipper
{line}
model = nn.Linear(4, 3)
c = make_clipper(model, "ghost")
c.clipped_sum(lambda m, X, y: F.cross_entropy(m(X), y, reduction="none"), (torch.randn(6, 4), torch.arange(6) % 3), 1.0)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)  # the flags are global
    assert out.stdout.strip() == "ok", out.stderr[-300:]


# G4: _full_float32 saves and restores process-global flags: two fits in two threads interleave, and one thread's
# rules run under the user's TF32 (the other's exit restored it); afterwards the user's setting is lost. The flags
# are read through the new API's leaves (their getters never raise, whichever API set them).
def _precision_state():
    b = torch.backends
    return tuple(leaf.fp32_precision for leaf in (b, b.cuda.matmul, b.cudnn, b.cudnn.conv, b.cudnn.rnn, b.mkldnn,
                                                   b.mkldnn.matmul, b.mkldnn.conv, b.mkldnn.rnn))


def test_the_rules_run_in_full_float32_when_two_threads_clip(monkeypatch):
    rule, seen = layers.linear_rule, {}
    in_b, a_done = threading.Event(), threading.Event()

    def spy(module, a, g):
        if getattr(module, "armed", False):
            if threading.current_thread().name == "A":
                in_b.wait(2)
            else:
                in_b.set()
                a_done.wait(2)
            seen[threading.current_thread().name] = _precision_state()
        return rule(module, a, g)

    monkeypatch.setitem(layers.LAYER_RULES, nn.Linear, spy)
    user = _precision_state()
    cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    try:
        users_tf32 = _precision_state()
        X, y = torch.randn(8, 4), torch.arange(8) % 3
        ca, cb = make_clipper(nn.Linear(4, 3), "ghost"), make_clipper(nn.Linear(4, 3), "ghost")
        ca.clipped_sum(_ce, (X, y), 1.0)
        cb.clipped_sum(_ce, (X, y), 1.0)
        ca.module.armed = True
        ca.clipped_sum(_ce, (X, y), 1.0)          # alone: the state the rules must see
        alone, in_b = seen.pop("MainThread"), threading.Event()
        cb.module.armed = True

        def run_a():
            ca.clipped_sum(_ce, (X, y), 1.0)
            a_done.set()

        def run_b():
            in_b.wait(0.5)
            cb.clipped_sum(_ce, (X, y), 1.0)

        ta, tb = threading.Thread(target=run_a, name="A"), threading.Thread(target=run_b, name="B")
        ta.start(); tb.start(); ta.join(); tb.join()
        after = _precision_state()
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = cudnn
    assert alone != users_tf32
    assert seen["A"] == alone and seen["B"] == alone, (seen, alone)
    assert after == users_tf32


def test_the_rules_run_in_full_float32_whatever_the_users_precision(monkeypatch):
    # Review s38b F-D: TF32 (cuDNN's default for convolutions on CUDA, or set_float32_matmul_precision("high"))
    # rounds a norm and its share of the sum differently (1.008 C emulated). The rules run with every per-backend
    # setting at "ieee"; the user's settings are restored after. (No GPU here: the settings are what is checked.)
    seen = []
    rule = layers.linear_rule

    def spy(module, a, g):
        seen.append(_precision_state())
        return rule(module, a, g)

    monkeypatch.setitem(layers.LAYER_RULES, nn.Linear, spy)
    cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    try:
        users = _precision_state()
        clipper = make_clipper(nn.Sequential(nn.Linear(4, 3)), "ghost")
        clipper.clipped_sum(_ce, (torch.randn(6, 4), torch.arange(6) % 3), 1.0)
        clipper.remove()
        inside = seen[-1]  # the released pass (the first-lot probe only compares, in float64)
        leaves = dict(zip(("all", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul",
                           "mkldnn.conv", "mkldnn.rnn"), inside))
        assert leaves["cuda.matmul"] == leaves["cudnn.conv"] == leaves["mkldnn.matmul"] == "ieee"
        assert _precision_state() == users
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = cudnn


def _flat(pairs, model):
    got = {id(p): g for p, g in pairs}
    return torch.cat([got[id(p)].double().flatten() if id(p) in got else torch.zeros(p.numel(), dtype=torch.float64)
                      for p in model.parameters()])


# H1: autocast reaches the clipped sum with float32 parameters (check_precision sees float32). The user wraps the
# step in torch.autocast (the usual mixed-precision pattern): the hooks' probe refuses, "auto" takes the vmap path,
# whose contraction then runs in bfloat16 beside float32 norms: 1.0031 C (MLP), 1.0038 C (CNN), released in bf16.
@pytest.mark.parametrize("clipping", ["auto", "vmap"])
def test_a_step_under_autocast_moves_the_clipped_sum_by_at_most_C(clipping):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 3))
    X, y = torch.randn(64, 64) * 3, torch.arange(64) % 3
    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1e-9, expected_batch_size=1.0,
                         generator=torch.Generator(), clipping=clipping)
    engine.draw_noise_ahead = False

    def release(X, y):  # the same (negligible) noise each time: the difference is the clipped sums'
        engine.generator.manual_seed(0)
        engine.private_gradients(_ce, (X, y))
        return torch.cat([p.grad.double().flatten() for p in model.parameters()])

    worst = 0.0
    for i in range(4):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with_x = release(X, y)
            without_x = release(torch.cat([X[:i], X[i + 1:]]), torch.cat([y[:i], y[i + 1:]]))
        worst = max(worst, float((with_x - without_x).norm()))
    engine.close()
    assert worst <= 1 + 1e-3, f"a record moved the clipped sum by {worst:.5f} C"


# H1': a forward that runs its layers under autocast (on a bf16 input) hands the hooks bf16 a and g; the first-lot
# probe passes and the rules' norms and shares are bf16: 1.0043 C (MLP, ghost), released in bf16.
class _AutocastForward(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.body(x.bfloat16()).float()


def test_layers_run_under_autocast_are_clipped_to_C():
    worst = 0.0
    for seed in range(3):
        torch.manual_seed(seed)
        model = _AutocastForward(nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 3)))
        X, y = torch.randn(64, 64) * 3, torch.arange(64) % 3
        clipper = make_clipper(model, "ghost")
        for i in range(4):
            _, with_x, _ = clipper.clipped_sum(_ce, (X, y), 1.0)
            _, without_x, _ = clipper.clipped_sum(_ce, (torch.cat([X[:i], X[i + 1:]]), torch.cat([y[:i], y[i + 1:]])), 1.0)
            worst = max(worst, float((_flat(with_x, model) - _flat(without_x, model)).norm()))
        clipper.remove()
    assert worst <= 1 + 1e-3, f"a record moved the clipped sum by {worst:.5f} C"


# H2: G2 in a float64 model. ||a||^2 (2-D Linear, torch's vector_norm does not rescale) and the ghost Grams a_t . a_s
# (3-D Linear, conv) underflow in float64 as they did in float32: with flush-denormal on, a record with a ~1e-156
# input and a ~1e154 output gradient gets norm 0, scale 1 and its whole gradient: 16 C (2-D), 5.1 C (4 tokens).
@pytest.mark.parametrize("tokens, p, big", [(0, 1, 1e154), (4, 64, 1e152)])
def test_a_float64_model_clips_a_tiny_input_with_a_huge_output_gradient(tokens, p, big):
    with _denormals_flushed():
        torch.manual_seed(0)
        d, C = 64, 0.01
        model = nn.Linear(d, p, bias=False).double()
        X = torch.randn(32, *((tokens,) if tokens else ()), d, dtype=torch.float64) / d ** 0.5
        y = torch.randn(32, dtype=torch.float64)
        clipper = make_clipper(model, "ghost")
        clipper.clipped_sum(_mse, (X, y), C)
        X[0], y[0] = 1e-156, big
        moved, _ = _record_moves(clipper, _mse, X, y, C)
        clipper.remove()
    assert moved <= 1 + 1e-3, f"a record moved the clipped sum by {moved:.4g} C"


# H3: setup.cfg allows torch>=2.1; the per-backend fp32_precision leaves exist from 2.9. On 2.1-2.8 (emulated:
# the leaves removed from torch's backend modules) `import skdp` fails (AttributeError: module 'torch.backends.cudnn'
# has no attribute 'conv'); with the leaves merely filtered out, full_float32 would do nothing and TF32 stay on.
def test_full_float32_turns_tf32_off_on_a_torch_without_the_fp32_precision_leaves():
    code = _WITHOUT_FP32_PRECISION_API + """
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
with full_float32():
    inside = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
print(inside, (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)  # the flags are global
    assert out.stdout.strip() == "(False, False) (True, True)", out.stderr[-300:]


def test_a_float64_conv_ghost_clips_a_tiny_input_with_a_huge_output_gradient(monkeypatch):
    # H2 on the conv ghost branch: float64 Grams of the unfolded patches underflowed (2.17 C).
    monkeypatch.setattr(layers, "_ghost_is_cheaper", lambda *_: True)
    with _denormals_flushed():
        torch.manual_seed(0)
        C = 0.01
        model = nn.Conv2d(8, 64, 3, bias=False).double()
        X, y = torch.randn(16, 8, 6, 6, dtype=torch.float64) / 8, torch.randn(16, dtype=torch.float64)
        clipper = make_clipper(model, "ghost")
        clipper.clipped_sum(_mse, (X, y), C)
        X[0], y[0] = 1e-156, 1e151
        moved, _ = _record_moves(clipper, _mse, X, y, C)
        clipper.remove()
    assert moved <= 1 + 1e-3, f"a record moved the clipped sum by {moved:.4g} C"


# Review s38e.
@pytest.mark.parametrize("conv", [False, True])
def test_a_float64_ghost_clips_a_token_tiny_beside_its_examples_largest_input(conv, monkeypatch):
    def last_token_mse(m, X, y):  # reads the last token's output only: the other tokens get g_t = 0
        out = m(X)
        return ((out[:, :, -1] if conv else out[:, -1]).sum(-1) - y).pow(2)
    monkeypatch.setattr(layers, "_ghost_is_cheaper", lambda *_: True)
    with _denormals_flushed():
        torch.manual_seed(0)
        C = 0.01
        model = (nn.Conv1d(64, 64, 1, bias=False) if conv else nn.Linear(64, 64, bias=False)).double()
        X, y = torch.randn(16, 64, 2, dtype=torch.float64) / 8, torch.randn(16, dtype=torch.float64)
        if not conv:
            X = X.transpose(1, 2).contiguous()  # (B, T, d)
        clipper = make_clipper(model, "ghost")
        clipper.clipped_sum(last_token_mse, (X, y), C)
        X[0] = 0
        if conv:
            X[0, 0, 0], X[0, 1, -1] = 1e149, 1e-6
        else:
            X[0, 0, 0], X[0, -1, 1] = 1e149, 1e-6
        y[0] = 1e4
        moved, norms = _record_moves(clipper, last_token_mse, X, y, C)
        clipper.remove()
    assert moved <= 1 + 1e-3, f"a record moved the clipped sum by {moved:.4g} C"
    # (utility, same regression: at X[0, 0, 0] = 1e151 the factor (sa * sg)^2 overflows and the record, of norm
    # 0.16, is dropped as non-finite; 7cec569 clipped it normally)
    assert torch.isfinite(norms[0])


# E2: on torch < 2.9 (2.1-2.8: setAllowTF32CuBLAS(b) sets the precision to HIGH/HIGHEST) the legacy branch restores
# a user's "medium" (oneDNN bf32 matmuls on CPU there) as allow_tf32 = True, i.e. "high"; the emulation on 2.13
# leaves get_float32_matmul_precision() raising (legacy and new APIs mixed).
def test_full_float32_restores_a_users_matmul_precision_on_a_torch_without_the_leaves():
    code = _WITHOUT_FP32_PRECISION_API + """
torch.set_float32_matmul_precision("medium")
with full_float32():
    inside = torch.get_float32_matmul_precision()
print(inside, torch.get_float32_matmul_precision())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "highest medium", out.stderr[-300:]


# Review s38f.
def test_the_wide_path_of_a_float32_model_keeps_the_ghost_norm(monkeypatch):
    monkeypatch.setattr(layers, "_ghost_is_cheaper", lambda *_: True)
    torch.manual_seed(0)
    model = nn.Linear(16, 16, bias=False)  # float32 parameters
    X, y = torch.randn(8, 3, 16), torch.randn(8)

    def mse(m, X, y):
        return (m(X).sum((1, 2)) - y).pow(2)
    clipper = make_clipper(model, "ghost")
    clipper.clipped_sum(mse, (X, y), 1.0)  # first lot: probed
    X[0, 0, 0] = 1e30  # its float32 squared norm is inf: the lot takes the float64 wide path
    seen, einsum = [], torch.einsum
    monkeypatch.setattr(torch, "einsum", lambda eq, *ops: seen.append((eq, ops[0].shape[0])) or einsum(eq, *ops))
    _, out, norms = clipper.clipped_sum(mse, (X, y), 1.0)
    clipper.remove()
    assert torch.isfinite(norms[1:]).all()
    # float32 values widened to float64 multiply exactly: the Gram matrices, not B per-example gradients
    assert not [s for s in seen if s[0] == "btp,btd->bpd" and s[1] > 1], seen


# F2 (pre-existing since s38d H2): a float64 row whose peak is >= 2^1023 (8.99e307) gets scale 2^1024 = inf and a
# NaN norm (its true norm 1e308 is finite: the record is dropped); a row of zero length raises IndexError in amax
# (nn.Linear(3, 0).double(), nn.Linear(0, 3).double() under "ghost").
def test_row_norms_of_float64_rows_near_the_top_of_the_range_and_of_zero_length():
    rows = torch.tensor([[1e308, 0.0], [-9e307, 0.0], [2.0 ** 1023, 0.0]], dtype=torch.float64)
    assert torch.equal(layers._row_norms(rows), rows.abs().amax(1))
    assert layers._row_norms(torch.zeros(4, 0, dtype=torch.float64)).tolist() == [0.0] * 4


class _ComplexGain(nn.Module):
    """A layer with a complex parameter: the output's real part of x * w (a user's own module)."""

    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d, dtype=torch.complex64))

    def forward(self, X):
        return (X.to(torch.complex64) * self.w).real


# Noticed in review s38c: a complex parameter reached the first lot and crashed there (a view or reshape error
# inside the rules or the guards) instead of being refused by name before anything ran. Per-example clipping of
# a complex gradient is not covered by the rules or the accountant's real Gaussian noise: refused like half
# precision, by the module check and on every lot.
@pytest.mark.parametrize("clipping", ["auto", "ghost", "vmap"])
def test_complex_parameters_are_refused_by_name_before_any_release(clipping):
    from skdp.engine import check_module
    model = nn.Sequential(_ComplexGain(8), nn.Linear(8, 3))
    report = check_module(model, clipping)
    refused = {r.name: r.reason for r in report.refusals}
    assert "0" in refused and "complex64" in refused["0"], report.refusals
    X, y = torch.randn(6, 8), torch.arange(6) % 3
    with pytest.raises(UnsupportedModuleError, match="complex64"):
        engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=6,
                             generator=torch.Generator().manual_seed(0), clipping=clipping)
        engine.private_gradients(_ce, (X, y))
    assert all(p.grad is None for p in model.parameters())


# Noticed in review s38d (H1's fix covered CPU and CUDA only): autocast on another accelerator (xpu, mps, hpu, ...)
# around the step reached the rules, whose norms and shares then ran in half precision there. full_float32 turns
# autocast off for every device type it is on for. (No such device here: torch's autocast state is faked.)
def test_full_float32_turns_autocast_off_on_every_device_type(monkeypatch):
    on = {"xpu", "mps"}
    entered = []
    real_autocast = torch.autocast

    class Recorded:
        def __init__(self, device_type, enabled=True, **kwargs):
            self.device_type, self.enabled = device_type, enabled
            self.real = None if device_type in on else real_autocast(device_type, enabled=enabled, **kwargs)

        def __enter__(self):
            entered.append((self.device_type, self.enabled))
            if self.real is not None:
                return self.real.__enter__()
            on.discard(self.device_type)  # what entering autocast(enabled=False) does to the faked state

        def __exit__(self, *exc):
            if self.real is not None:
                return self.real.__exit__(*exc)
            on.add(self.device_type)
            return False

    real_enabled = torch.is_autocast_enabled
    monkeypatch.setattr(torch, "is_autocast_enabled",
                        lambda device_type="cuda": device_type in on or real_enabled(device_type))
    monkeypatch.setattr(torch, "autocast", Recorded)
    with layers.full_float32():
        inside = {d for d in ("xpu", "mps") if torch.is_autocast_enabled(d)}
    assert ("xpu", False) in entered and ("mps", False) in entered, entered
    assert not inside


_FLOAT8 = [d for d in (getattr(torch, n, None) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                                         "float8_e5m2fnuz", "float8_e8m0fnu")) if d is not None]


class _Float8Gain(nn.Module):
    def __init__(self, d, dtype):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d).to(dtype))

    def forward(self, X):
        return X * self.w.float()


# Review s39 F1: float8 parameters can require grad; the dtype check (then _low_precision) refused f16/bf16/complex
# only, so the module check passed them (path "vmap" or "rule") and the first lot crashed inside the step.
@pytest.mark.parametrize("dtype", _FLOAT8, ids=str)
def test_float8_parameters_are_refused_by_name_before_any_release(dtype):
    model = nn.Sequential(_Float8Gain(8, dtype), nn.Linear(8, 3))
    refused = {r.name: r.reason for r in check_module(model).refusals}
    assert "0" in refused and str(dtype) in refused["0"], refused
    with pytest.raises(UnsupportedModuleError, match=str(dtype).split(".")[1]):  # at the engine's check
        engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=6,
                             generator=torch.Generator().manual_seed(0), clipping="vmap")
        engine.private_gradients(lambda m, X, y: nn.functional.cross_entropy(m(X), y, reduction="none"),
                                 (torch.randn(6, 8), torch.arange(6) % 3))
    assert all(p.grad is None for p in model.parameters())


# Review s39 F2: autocast of the private backend (privateuse1, e.g. torch_npu's "npu") is not in _AUTOCAST_DEVICES.
def test_full_float32_turns_autocast_off_for_the_private_backend(monkeypatch):
    name = torch._C._get_privateuse1_backend_name()
    real = torch.is_autocast_enabled
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda d="cuda": d == name or real(d))
    assert name in layers._autocast_on()


# Review s39 F4: TF32 emulated on the CPU: every float32 operand of a matmul or a convolution is rounded to TF32's
# 10 mantissa bits whenever torch's settings say TF32 when the op runs. The five paths of tests/test_cuda.py, with
# their power checked in the same test (full_float32 made a no-op must fail each path), whatever kernels a GPU picks.
_aten = torch.ops.aten
_MM = {_aten.mm.default, _aten.bmm.default, _aten.addmm.default, _aten.baddbmm.default, _aten.mv.default,
       _aten.dot.default}
_CONV = {_aten.convolution.default, _aten.convolution_backward.default}


def _tf32(t):
    if not (isinstance(t, torch.Tensor) and t.dtype == torch.float32):
        return t
    return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32).reshape(t.shape)


class _EmulatedTF32(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if ((func in _MM and torch.backends.cuda.matmul.fp32_precision == "tf32")
                or (func in _CONV and torch.backends.cudnn.conv.fp32_precision == "tf32")):
            args = tuple(_tf32(a) for a in args)
        return func(*args, **(kwargs or {}))


#: The rule paths the TF32 tests force (here on the CPU under emulated TF32, and in tests/test_cuda.py on a GPU).
TF32_PATHS = ["linear-ghost", "linear-instantiated", "conv-ghost", "conv-unfold", "conv-grouped"]


def tf32_case(path, monkeypatch, large=False):
    """A layer, its input ``X`` and the loss weights ``w`` for one rule ``path``, which is forced.

    Every value is +-(1 + 2^-12): exact in float32, rounded to +-1 by TF32, so a rule left in TF32 is off by about
    2^-11 relative in every gradient entry and full float32 by about 2^-24. The layer's input is the data and its
    output gradient the loss's weight (no matmul before the rules): both exact under any setting. ``large``: shapes
    for which cuBLAS and cuDNN take their TF32 kernels (they run small ones exact in any mode).
    """
    gen = torch.Generator().manual_seed(0)  # the test's data only

    def pm(*shape):
        return (torch.randint(0, 2, shape, generator=gen) * 2 - 1).float() * (1 + 2.0 ** -12)
    kind, way = path.split("-")
    B, side, d, p, T, out = (16, 14, 128, 128, 64, 32) if large else (8, 6, 32, 24, 8, 8)
    if kind == "linear":
        layer, X = nn.Linear(d, p), pm(B, T, d)
    else:
        layer = nn.Conv2d({"ghost": 2 * out, "unfold": 3, "grouped": 16}[way], out, 3, padding=1)
        X = pm(B, layer.in_channels, side, side)
    with torch.no_grad():
        layer.weight.copy_(pm(*layer.weight.shape))
        layer.bias.copy_(pm(*layer.bias.shape))
        w = pm(*layer(X).shape)
    monkeypatch.setattr(layers, "_ghost_is_cheaper", lambda *_: way == "ghost")
    monkeypatch.setattr(layers, "UNFOLD_CHANNELS", 0)  # the per-example weight gradients' way, forced
    monkeypatch.setattr(layers, "UNFOLD_LIMIT", float("inf") if way == "unfold" else 0)
    return layer, X, w


def tf32_errors(layer, X, w, run=contextlib.nullcontext):
    """The rules' largest relative error in a per-example norm and in the (unclipped) sum, against float64 on the
    CPU one example at a time; the clipper runs inside ``run()`` (a TF32 setting, emulated or real)."""
    import copy
    ref = copy.deepcopy(layer).double().cpu()
    per_example = [torch.cat([g.flatten() for g in torch.autograd.grad(
        (ref(X[i:i + 1].double().cpu()) * w[i:i + 1].double().cpu()).sum(), list(ref.parameters()))])
        for i in range(len(X))]
    want_norms, want_sum = torch.stack([g.norm() for g in per_example]), sum(per_example)
    with run():
        clipper = make_clipper(layer, "ghost")
        _, pairs, norms = clipper.clipped_sum(lambda m, X, w: (m(X) * w).flatten(1).sum(1), (X, w), 1e9)
        clipper.remove()
    got = {id(p): s for p, s in pairs}
    got_sum = torch.cat([got[id(p)].double().cpu().flatten() for p in layer.parameters()])
    return (float(((norms.double().cpu() - want_norms).abs() / want_norms).max()),
            float((got_sum - want_sum).norm() / want_sum.norm()))


@contextlib.contextmanager
def _emulated_tf32():
    leaves = (torch.backends.cuda.matmul, torch.backends.cudnn.conv)
    saved = [leaf.fp32_precision for leaf in leaves]
    try:
        for leaf in leaves:
            leaf.fp32_precision = "tf32"
        with _EmulatedTF32():
            yield
    finally:
        for leaf, value in zip(leaves, saved):
            leaf.fp32_precision = value


@pytest.mark.parametrize("rules", ["full_float32", "no-op (power)"])
@pytest.mark.parametrize("path", TF32_PATHS)
def test_the_rules_ignore_emulated_tf32(path, rules, monkeypatch):
    if not layers._PRECISION_LEAVES:
        pytest.skip("torch < 2.9: no fp32_precision leaves to emulate TF32 under")
    layer, X, w = tf32_case(path, monkeypatch)
    if rules != "full_float32":
        monkeypatch.setattr(hooks, "full_float32", contextlib.nullcontext)
    err = max(tf32_errors(layer, X, w, _emulated_tf32))
    if rules == "full_float32":
        assert err < 1e-5, f"{path}: off by {err:.2g} relative under the user's TF32"
    else:
        assert err > 1e-4, f"{path}: no power (off by {err:.2g} with full_float32 turned off)"


# Review s39b G1: on torch < 2.4 (setup.cfg allows 2.1) is_autocast_enabled() takes no device type, and autocast reads
# the private backend's state from its device module (torch.<name>.is_autocast_enabled()), xpu's and hpu's from
# torch.xpu.is_autocast_xpu_enabled / torch.hpu.is_autocast_hpu_enabled: none is a top-level
# torch.is_autocast_<d>_enabled, so the fallback never names them (torch 2.1-2.3 autocast_mode.__enter__).
@pytest.mark.parametrize("device, module_getter", [("npu", "is_autocast_enabled"),
                                                    ("xpu", "is_autocast_xpu_enabled"),
                                                    ("hpu", "is_autocast_hpu_enabled")])
def test_autocast_on_finds_the_backends_on_torch_before_2_4(monkeypatch, device, module_getter):
    def old_is_autocast_enabled(*args):  # torch < 2.4: the CUDA getter, no argument
        if args:
            raise TypeError("is_autocast_enabled() takes 0 positional arguments but 1 was given")
        return False
    monkeypatch.setattr(torch, "is_autocast_enabled", old_is_autocast_enabled)
    if device == "npu":
        monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "npu")
    monkeypatch.setattr(torch, device, types.SimpleNamespace(**{module_getter: lambda: True}), raising=False)
    assert device in layers._autocast_on()


# Review s39b G2: a model mixing float32 and float64 trainable parameters passes the allow-list and the module check,
# then crashes inside the first lot with torch's dtype error (ghost: layers.py clipped, "expected m1 and m2 to have
# the same dtype"; vmap: functional._clip tensordot, "both inputs should have same dtype"), as float8 did (s39 F1).
class _Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 3).double()

    def forward(self, X):
        return self.b(torch.relu(self.a(X)).double())


@pytest.mark.parametrize("clipping", ["ghost", "vmap"])
def test_mixed_float32_float64_parameters_train_or_are_refused_by_name(clipping):
    model = _Mixed()
    try:
        engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=6,
                             generator=torch.Generator().manual_seed(0), clipping=clipping)
        engine.private_gradients(lambda m, X, y: nn.functional.cross_entropy(m(X).float(), y, reduction="none"),
                                 (torch.randn(6, 8), torch.arange(6) % 3))
    except UnsupportedModuleError as error:  # refused by name before any release is fine
        assert "float64" in str(error) and "float32" in str(error)
        assert all(p.grad is None for p in model.parameters())
    else:
        assert all(p.grad is not None and p.grad.dtype == p.dtype for p in model.parameters())


# Review s39c H1: the G2 root row is named "" like the root's own layer row, so paths() (a dict by name) drops the
# refusal when the root has trainable parameters of its own (a float64 temperature beside float32 layers).
class _RootParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 3)
        self.temperature = nn.Parameter(torch.ones((), dtype=torch.float64))

    def forward(self, X):
        return self.body(X) / self.temperature.float()


def test_paths_keeps_the_root_refusal_of_a_mixed_model_whose_root_has_parameters():
    report = check_module(_RootParam())
    assert not report.ok
    assert "refused" in report.paths().values()


# Review s39c H2: on torch < 2.4, a device module whose getter attribute is present but not callable crashes every lot
# (TypeError out of the except handler) instead of answering False like a missing getter.
def test_legacy_autocast_getter_with_a_non_callable_attribute(monkeypatch):
    def old_is_autocast_enabled(*args):
        if args:
            raise TypeError("is_autocast_enabled() takes 0 positional arguments but 1 was given")
        return False
    monkeypatch.setattr(torch, "is_autocast_enabled", old_is_autocast_enabled)
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "npu")
    monkeypatch.setattr(torch, "npu", types.SimpleNamespace(is_autocast_enabled=None), raising=False)
    assert layers._autocast_on() == ["cpu", "cuda"][:1 + torch.cuda.is_available()]


# Review s39d K1: torch.is_autocast_enabled(device_type) exists from torch 2.4, but raises RuntimeError ("unknown
# device type for autocast in get_autocast_dispatch_key_from_device_type") for a type missing from its switch: the
# tables below are read from each wheel's torch/include/ATen/autocast_mode.h.
_AUTOCAST_TYPES = {
    "2.4": {"cuda", "cpu", "xpu", "ipu", "hpu", "xla", "privateuseone"},
    "2.5-2.6": {"cuda", "cpu", "xpu", "ipu", "hpu", "xla", "privateuseone", "mps"},
    "2.7": {"cuda", "cpu", "mtia", "xpu", "ipu", "hpu", "xla", "privateuseone", "mps"},
}


@pytest.mark.parametrize("version", sorted(_AUTOCAST_TYPES))
def test_a_lot_trains_on_a_torch_whose_autocast_knows_fewer_device_types(version, monkeypatch):
    known, real = _AUTOCAST_TYPES[version], torch.is_autocast_enabled

    def is_autocast_enabled(device_type="cuda"):
        if device_type not in known:
            raise RuntimeError("unknown device type for autocast in get_autocast_dispatch_key_from_device_type")
        return real(device_type)
    monkeypatch.setattr(torch, "is_autocast_enabled", is_autocast_enabled)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))
    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=6,
                         generator=torch.Generator().manual_seed(0))
    engine.private_gradients(lambda m, X, y: nn.functional.cross_entropy(m(X), y, reduction="none"),
                             (torch.randn(6, 8), torch.arange(6) % 3))
    assert all(p.grad is not None for p in model.parameters())


# Review s39d K2: a child named "<root>" (nn.Module.add_module accepts it) takes the mixed-dtype row's name: paths()
# loses the refusal again, as in review s39c H1.
def test_paths_keeps_the_mixed_refusal_beside_a_child_named_root():
    model = nn.Module()
    model.add_module("<root>", nn.Linear(8, 3))
    model.add_module("head", nn.Linear(3, 3).double())
    report = check_module(model)
    assert not report.ok
    assert "refused" in report.paths().values()


# Review s39d K3: the table printed the root's own layer row ("") and the mixed-dtype row ("<root>") under one label
# with two paths.
def test_the_table_names_the_mixed_row_apart_from_the_roots_own_layer():
    class RootParam(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 3)
            self.temperature = nn.Parameter(torch.ones((), dtype=torch.float64))
    labels = [line.split(":")[0] for line in str(check_module(RootParam())).splitlines()]
    assert len(labels) == len(set(labels)), labels


# Review s39e N2: a root refused by a validator (a BatchNorm in train mode) whose children mix float32 and float64
# lost the mixed-dtype reason: the user learnt of it only after fixing the first refusal.
def test_a_validator_refused_root_still_names_the_mixed_dtypes():
    class BNRoot(nn.BatchNorm1d):
        def __init__(self):
            super().__init__(3)
            self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3).double()
    report = check_module(BNRoot().train())
    assert not report.ok and "float64" in report.message() and "mixes the examples" in report.message()
    assert list(report.paths()).count("") == 1
