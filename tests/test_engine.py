import contextlib

import numpy as np
import pytest
import torch
from torch import nn

from skdp import compute_epsilon
from skdp.audit import epsilon_lower_bound
from skdp.engine import DPSGDEngine, PoissonBatchSampler, make_clipper
from skdp.engine.functional import FunctionalClipper
from skdp.engine.hooks import HookClipper
from skdp.engine.layers import _ghost_is_cheaper


def ce_loss(forward, X, y):
    return nn.functional.cross_entropy(forward(X), y, reduction="none")


def naive_clipped_sum(model, X, y, C):
    """Reference: one backward per example, clip, sum."""
    total = [torch.zeros_like(p) for p in model.parameters()]
    norms = []
    for i in range(len(X)):
        model.zero_grad()
        nn.functional.cross_entropy(model(X[i:i + 1]), y[i:i + 1], reduction="sum").backward()
        grads = [p.grad.clone() for p in model.parameters()]
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        norms.append(norm)
        for t, g in zip(total, grads):
            t += g * min(1.0, C / (norm.item() + 1e-6))
    return total, torch.stack(norms)


class Scale(nn.Module):
    """A layer no rule covers (its own parameter, its own forward): the vmap path."""

    def __init__(self, d):
        super().__init__()
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, d))

    def forward(self, x):
        return x * self.gain


def models():
    g = torch.Generator().manual_seed(0)
    return {
        "mlp": (nn.Sequential(nn.Linear(20, 16), nn.Tanh(), nn.Linear(16, 4)), torch.randn(12, 20, generator=g)),
        "cnn_grouped_prelu": (nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.PReLU(4),
                                            nn.Conv2d(4, 6, 3, stride=2, groups=2), nn.ReLU(),
                                            nn.Flatten(), nn.Linear(54, 4)), torch.randn(12, 1, 8, 8, generator=g)),
        # 1x2 maps with 16 channels: the ghost norm is cheaper than per-example gradients here.
        "cnn_ghost_branch": (nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.Flatten(), nn.Linear(32, 4)),
                             torch.randn(12, 16, 1, 2, generator=g)),
        "linear_on_sequence": (nn.Sequential(nn.Linear(5, 7), nn.Flatten(), nn.Linear(21, 4)),
                               torch.randn(12, 3, 5, generator=g)),
        "groupnorm": (nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.PReLU(4), nn.Flatten(),
                                    nn.Linear(64, 4)), torch.randn(12, 1, 4, 4, generator=g)),
        "layernorm": (nn.Sequential(nn.Linear(5, 7), nn.LayerNorm(7), nn.Linear(7, 4)),
                      torch.randn(12, 5, generator=g)),
        "custom_fallback": (nn.Sequential(nn.Linear(5, 7), Scale(7), nn.Linear(7, 4)),
                            torch.randn(12, 5, generator=g)),
    }


@pytest.mark.parametrize("name", list(models()))
@pytest.mark.parametrize("clipping", ["auto", "vmap"])
def test_clipped_sum_matches_per_example_reference(name, clipping):
    model, X = models()[name]
    y = torch.arange(12) % 4
    ref, ref_norms = naive_clipped_sum(model, X, y, C=0.5)
    clipper = make_clipper(model, clipping)
    losses, pairs, norms = clipper.clipped_sum(ce_loss, (X, y), 0.5)
    clipper.remove()
    got = {id(p): g for p, g in pairs}
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(got[id(p)], r, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(norms, ref_norms, atol=1e-4, rtol=1e-4)
    assert losses.shape == (12,)


def test_conv_per_example_gradients_by_grouped_convolution(monkeypatch):
    # Large maps take the grouped-convolution path instead of unfolding; same clipped sums.
    import skdp.engine.layers as layers
    monkeypatch.setattr(layers, "UNFOLD_LIMIT", 0)
    monkeypatch.setattr(layers, "UNFOLD_CHANNELS", 0)
    test_clipped_sum_matches_per_example_reference("cnn_grouped_prelu", "auto")
    test_clipped_sum_matches_per_example_reference("groupnorm", "auto")


def test_auto_clipping_uses_hooks_where_it_can():
    model, _ = models()["cnn_grouped_prelu"]
    assert isinstance(make_clipper(model, "auto"), HookClipper)
    model, _ = models()["custom_fallback"]
    assert isinstance(make_clipper(model, "auto"), FunctionalClipper)
    assert _ghost_is_cheaper(2, 144, 16) and not _ghost_is_cheaper(16, 144, 16) and not _ghost_is_cheaper(784, 9, 16)


def test_layer_called_twice_without_a_stacking_rule_is_refused_by_hooks():
    conv = nn.Conv2d(1, 1, 3, padding=1)
    model = nn.Sequential(conv, nn.Tanh(), conv, nn.Flatten(), nn.Linear(9, 3))
    clipper = HookClipper(model)
    with pytest.raises(TypeError, match="twice"):
        clipper.clipped_sum(ce_loss, (torch.randn(3, 1, 3, 3), torch.tensor([0, 1, 2])), 1.0)


def test_linear_called_twice_is_stacked_exactly_by_hooks():
    # Per-example gradient of a Linear used twice: g1 a1^T + g2 a2^T, the one-call gradient of the two
    # calls stacked along a token axis.
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    model = nn.Sequential(lin, nn.Tanh(), lin)
    X, y = 3 * torch.randn(6, 4), torch.arange(6) % 4
    ref, ref_norms = naive_clipped_sum(model, X, y, C=0.5)
    clipper = HookClipper(model)
    _, pairs, norms = clipper.clipped_sum(ce_loss, (X, y), 0.5)
    assert clipper._verified
    got = {id(p): g for p, g in pairs}
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(got[id(p)], r, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(norms, ref_norms, atol=1e-4, rtol=1e-4)


def _engine(model, sigma, L=10, seed=0):
    return DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=sigma, expected_batch_size=L,
                       generator=torch.Generator().manual_seed(seed))


def test_empty_lot_is_pure_noise_with_the_right_scale():
    model = nn.Linear(50, 40)
    engine = _engine(model, sigma=2.0, L=10)
    engine.private_gradients(ce_loss, (torch.zeros(0, 50), torch.zeros(0, dtype=torch.long)))
    noise = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert noise.std().item() == pytest.approx(2.0 * 1.0 / 10, rel=0.05)
    assert abs(noise.mean().item()) < 0.01


def test_no_noise_gives_the_clipped_mean_and_same_seed_same_noise():
    model, X = models()["mlp"]
    y = torch.arange(12) % 4
    ref, _ = naive_clipped_sum(model, X, y, C=1.0)
    _engine(model, sigma=0.0, L=12).private_gradients(ce_loss, (X, y))
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, r / 12, atol=1e-6, rtol=1e-5)
    _engine(model, sigma=1.0, L=12, seed=5).private_gradients(ce_loss, (X, y))
    first = [p.grad.clone() for p in model.parameters()]
    _engine(model, sigma=1.0, L=12, seed=5).private_gradients(ce_loss, (X, y))
    assert all(torch.equal(a, p.grad) for a, p in zip(first, model.parameters()))


def test_poisson_sampler_rate_and_empty_lots():
    sampler = PoissonBatchSampler(1000, 0.05, 400, np.random.default_rng(0))
    sizes = [len(b) for b in sampler]
    assert len(sizes) == 400
    assert np.mean(sizes) == pytest.approx(50, rel=0.05)
    assert np.var(sizes) == pytest.approx(1000 * 0.05 * 0.95, rel=0.25)  # binomial, not fixed size
    tiny = PoissonBatchSampler(5, 0.1, 200, np.random.default_rng(1))
    assert any(len(b) == 0 for b in tiny)


# ---- a distinguishing audit of one DP-SGD step, and its twin with the noise removed -----------
def _single_step_epsilon_lower_bound(noise_multiplier, n_runs=1500, delta=1e-5, alpha=0.05):
    """Lower bound on the epsilon of one full-lot step from a threshold test on D vs D + canary."""
    g = torch.Generator().manual_seed(123)
    X = torch.randn(20, 5, generator=g)
    y = torch.randint(0, 2, (20,), generator=g)
    canary_X, canary_y = 50 * torch.ones(1, 5), torch.tensor([0])
    model = nn.Linear(5, 2)
    nn.init.zeros_(model.weight)  # a fixed model on which the canary's gradient is not saturated
    nn.init.zeros_(model.bias)

    engine = _engine(model, noise_multiplier, L=20)  # one engine, re-seeded per run: the test stays fast

    def release(X, y, seed):
        engine.generator.manual_seed(seed)
        engine.private_gradients(ce_loss, (X, y))
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    direction = release(torch.cat([X, canary_X]), torch.cat([y, canary_y]), 0) - release(X, y, 0) \
        if noise_multiplier == 0 else None
    if direction is None:  # the noiseless difference is the canary's clipped gradient
        e0 = _engine(model, 0.0, L=20)
        e0.private_gradients(ce_loss, (canary_X, canary_y))
        direction = torch.cat([p.grad.flatten() for p in model.parameters()])
    s0 = np.array([release(X, y, 1000 + i) @ direction for i in range(n_runs)])
    s1 = np.array([release(torch.cat([X, canary_X]), torch.cat([y, canary_y]), 5000 + i) @ direction
                   for i in range(n_runs)])
    return epsilon_lower_bound(s0, s1, delta, confidence=1 - alpha)


CLAIMED_SIGMA = 3.0
CLAIMED_EPS = compute_epsilon(CLAIMED_SIGMA, 1.0, 1, 1e-5)


def test_one_step_leakage_stays_below_the_claim():
    assert _single_step_epsilon_lower_bound(CLAIMED_SIGMA) <= CLAIMED_EPS


def test_one_step_audit_catches_missing_noise():
    # Twin of the test above: with the noise removed the same audit must refute the claim.
    assert _single_step_epsilon_lower_bound(0.0) > CLAIMED_EPS


def test_without_clipping_or_noise_the_step_is_the_ordinary_mean_gradient():
    # The non-private baselines (the PGE paper's mode) run through the same engine: check its fast path.
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    X, y = torch.randn(12, 6, generator=g), torch.randint(0, 3, (12,), generator=g)
    engine = DPSGDEngine(model, max_grad_norm=float("inf"), noise_multiplier=0.0, expected_batch_size=12,
                         generator=g)
    engine.private_gradients(ce_loss, (X, y))
    fast = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (nn.functional.cross_entropy(model(X), y, reduction="sum") / 12).backward()
    for a, p in zip(fast, model.parameters()):
        assert torch.allclose(a, p.grad, atol=1e-6)
    # ... and it differs from the clipped step, so the test would notice a wrong branch.
    clipped = _engine(model, 0.0, L=12)
    clipped.max_grad_norm = 0.01
    clipped.private_gradients(ce_loss, (X, y))
    assert not torch.allclose(fast[0], next(model.parameters()).grad)


@pytest.mark.parametrize("clipping", ["ghost", "vmap"])
def test_pieces_of_a_lot_give_the_lots_release(clipping):
    # max_physical_batch_size bounds memory only: the clipped sum of a lot cut into pieces is the
    # lot's clipped sum (a sum over examples), and the per-example losses and norms are the same.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    X, y = torch.randn(23, 5), torch.randint(0, 3, (23,))
    out = {}
    for piece in (None, 4, 23, 100):
        engine = DPSGDEngine(model, max_grad_norm=0.3, noise_multiplier=0.0, expected_batch_size=10.0,
                             generator=torch.Generator(), clipping=clipping, max_physical_batch_size=piece)
        losses, norms = engine.private_gradients(ce_loss, (X, y))
        out[piece] = (losses, norms, [p.grad.clone() for p in engine.params])
        engine.close()
    ref_losses, ref_norms, ref_grads = out[None]
    for piece in (4, 23, 100):
        losses, norms, grads = out[piece]
        torch.testing.assert_close(losses, ref_losses)
        torch.testing.assert_close(norms, ref_norms)
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r, atol=1e-6, rtol=1e-5)


class _StridedLSTMReader(nn.Module):
    """nn.LSTM under vmap gives a strided batched output that group_norm's batching rule refuses."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 8, batch_first=True)
        self.norm = nn.GroupNorm(1, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        out, _ = self.rnn(x.reshape(len(x), 4, 3))
        return self.head(self.norm(out[:, -1]))


def test_vmap_failure_falls_back_to_one_example_at_a_time_exactly():
    import warnings

    torch.manual_seed(0)
    model, X, y = _StridedLSTMReader(), torch.randn(6, 12), torch.randint(0, 2, (6,))
    engine = DPSGDEngine(model, max_grad_norm=0.5, noise_multiplier=0.0, expected_batch_size=1.0,
                         generator=torch.Generator(), clipping="vmap")
    with warnings.catch_warnings(), pytest.warns(RuntimeWarning, match="one example at a time"):
        warnings.filterwarnings("ignore", message="There is a performance drop")  # torch's own note
        _, norms = engine.private_gradients(ce_loss, (X, y))
    mine = [p.grad.clone() for p in engine.params]
    assert engine.clipper._loop and "contiguous" in engine.clipper.vmap_error
    ref, ref_norms = naive_clipped_sum(model, X, y, C=0.5)
    torch.testing.assert_close(norms, ref_norms, atol=1e-5, rtol=1e-4)
    for g, r in zip(mine, ref):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)


# ---- the next lot's noise drawn ahead on a helper thread (issue 29) ------------------------------
def _steps(draw_ahead, reseed=None, factors=(1.0,) * 6, seed=7):
    """Releases of 6 lots (one empty) with SGD steps between; ``reseed``: re-seed the generator before lot i."""
    from skdp.utils import taps
    torch.manual_seed(0)  # the same initial model for both paths
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    engine = _engine(model, sigma=1.3, L=5, seed=seed)
    engine.draw_noise_ahead = draw_ahead
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    releases = []
    for i, (n, factor) in enumerate(zip((5, 7, 0, 4, 6, 5), factors)):
        if reseed is not None and i in reseed:
            engine.generator.manual_seed(100 + i)
        X, y = torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)
        with taps.scaled_noise(factor) if factor != 1.0 else contextlib.nullcontext():
            engine.private_gradients(ce_loss, (X, y))
        releases.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    engine.close()
    return releases, engine.generator.get_state()


@pytest.mark.parametrize("case", ["plain", "reseeded", "scale_changed"])
def test_noise_drawn_ahead_releases_exactly_what_the_step_draws(case):
    kw = {"plain": {}, "reseeded": {"reseed": {2, 3}},
          "scale_changed": {"factors": (1.0, 1.0, 2.0, 1.0, 1.0, 1.0)}}[case]
    ahead, state_ahead = _steps(True, **kw)
    inline, state_inline = _steps(False, **kw)
    for a, b in zip(ahead, inline):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    # The generator ends where drawing at each step leaves it: a draw ahead the fit never used is not counted.
    assert torch.equal(state_ahead, state_inline)
    other, _ = _steps(True, seed=8, **kw)
    assert not torch.equal(other[0][0], ahead[0][0])  # the noise comes from the generator, not a fixed stream


def test_noise_drawn_ahead_never_leaves_with_a_copy_of_the_engine():
    import copy
    model = nn.Linear(3, 2)
    engine = _engine(model, sigma=1.0)
    engine.private_gradients(ce_loss, (torch.randn(4, 3), torch.tensor([0, 1, 0, 1])))
    assert engine._ahead is not None
    twin = copy.deepcopy(engine)
    assert engine._ahead is None and twin._ahead is None
    engine.close()


def test_estimator_release_under_insecure_noise_seed_is_the_same_with_noise_drawn_ahead(monkeypatch, seeded_noise):
    from skdp import DPMomentumClassifier
    X = np.random.default_rng(0).normal(size=(120, 5)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    fits = []
    for ahead in (True, False):
        monkeypatch.setattr(DPSGDEngine, "draw_noise_ahead", ahead)
        with seeded_noise(3):
            clf = DPMomentumClassifier(epsilon=1.0, classes=[0, 1], max_epochs=3, batch_size=20,
                                       random_state=0).fit(X, y)
        fits.append([p.detach().clone() for p in clf.net_.module_.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*fits))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("n", [1, 7, 4096])
def test_parameter_fingerprints_see_one_element_moved_by_one_ulp(dtype, n):
    # The guard's snapshot of a tensor (version, storage, an exact copy of its bits) sees one element moved
    # by one ulp (one count, one flipped bool) through .data, which the version counter misses, at any
    # thread count; an unchanged tensor matches its snapshot at any thread count.
    from skdp.engine.validators import _fingerprints
    x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3).to(dtype)
    before = _fingerprints([x])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert _fingerprints([x]) == before and not before[0].changed(x)
    finally:
        torch.set_num_threads(threads)
    for i in {0, n // 2, n - 1}:
        y = x.clone()
        before = _fingerprints([y])
        data = y.data  # the version counter does not see writes through .data
        if dtype == torch.bool:
            data[i] = ~data[i]
        elif dtype.is_floating_point:
            data[i] = torch.nextafter(data[i], torch.tensor(float("inf"), dtype=dtype))
        else:
            data[i] += 1
        assert y._version == before[0].version
        assert _fingerprints([y]) != before and before[0].changed(y)


@pytest.mark.parametrize("case", ["bfloat16 ulp", "complex64 ulp", "transposed view", "zero sign", "nan payload"])
def test_guard_snapshots_see_writes_off_the_numpy_path(case):
    # The snapshot compares bits: bfloat16 and complex take the torch path (numpy cannot view them), a transposed
    # parameter the strided numpy path; -0.0 vs 0.0 and a NaN's payload are changes, the same NaN is not.
    from skdp.engine.validators import _fingerprints
    if case == "bfloat16 ulp":
        t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)
        write = lambda d: d.__setitem__(1, torch.nextafter(d[1], torch.tensor(9.0, dtype=torch.bfloat16)))
    elif case == "complex64 ulp":
        t = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
        write = lambda d: torch.view_as_real(d).__setitem__((1, 1), torch.nextafter(torch.tensor(-1.0),
                                                                                    torch.tensor(0.0)))
    elif case == "transposed view":
        t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
        write = lambda d: d.__setitem__((2, 1), 6.000001)
    elif case == "zero sign":
        t = torch.tensor([0.0, 1.0])
        write = lambda d: d.__setitem__(0, -0.0)
    else:
        t = torch.tensor([float("nan"), 1.0])
        write = lambda d: d.view(torch.int32).__setitem__(0, d.view(torch.int32)[0] + 1)
    before = _fingerprints([t])
    assert _fingerprints([t]) == before and not before[0].changed(t)  # NaN stays equal to itself
    write(t.data)
    assert _fingerprints([t]) != before and before[0].changed(t)


def test_the_engine_guard_reuses_its_snapshots_and_still_sees_a_later_write():
    # The engine overwrites the previous lot's snapshots instead of allocating new ones: a write through .data on
    # the third lot (after two optimizer steps changed every parameter) is still refused, and none before.
    from skdp.exceptions import UnsupportedModuleError

    class LateWriter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x)

    model = LateWriter()
    lots = []

    def per_example_loss(forward, x, y):
        out = forward(x)
        if torch.is_grad_enabled() and len(lots) == 2 and x.shape[0] == 16:
            model.lin.weight.data[0, 0] += 1e-6  # .data: the version counter does not see it
        return nn.functional.cross_entropy(out, y, reduction="none")

    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=16,
                         generator=torch.Generator().manual_seed(0), clipping="ghost")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    for _ in range(2):
        engine.private_gradients(per_example_loss, (x, y))
        opt.step()
        lots.append(1)
    copies = [s.host for s in engine._snapshots[0][1]]
    with pytest.raises(UnsupportedModuleError, match="lin.weight"):
        engine.private_gradients(per_example_loss, (x, y))
    assert all(s.host is c for s, c in zip(engine._snapshots[0][1], copies))  # the same arrays, overwritten
    engine.close()
