"""A record whose gradient terms cancel must not move the hooks' clipped sum by more than C (review_s38 F1).

A record x = V + s * noise before a layer whose output is normalised per channel (or per feature over the
tokens): its true weight gradient sum_t g_t a_t^T ignores V (sum_t g_t = 0), while the ghost norm
sum_{t,s} (a_t . a_s)(g_t . g_s) and a clipped sum recomputed from a and g carry terms of size V^2 (V) that
cancel in float32. The record's contribution ||S(D) - S(D without x)|| must stay at most C on every path that
builds a norm or a clipped sum from such sums: the conv and Linear ghost norms, and the Linear clipped sum
recomputed when the per-example gradients are too large to keep.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import skdp.engine.layers as layers
from skdp.engine import make_clipper


def _ce(model, X, y):
    return F.cross_entropy(model(X), y, reduction="none")


def _flat(pairs, model):
    got = {id(p): g for p, g in pairs}
    return torch.cat([got[id(p)].flatten() if id(p) in got else torch.zeros(p.numel()) for p in model.parameters()])


class _TokenNorm(nn.Module):
    """Each output feature normalised over the tokens: sum_t g_t = 0 per feature."""

    def __init__(self, p):
        super().__init__()
        self.norm = nn.GroupNorm(p, p)

    def forward(self, h):
        return self.norm(h.transpose(1, 2))


def _conv(nd):
    conv = {2: nn.Conv2d, 3: nn.Conv3d}[nd]
    # Short outputs (T = 2**nd) and 64 channels: the ghost branch.
    model = nn.Sequential(conv(1, 64, 3), nn.GroupNorm(64, 64), nn.Tanh(), nn.Flatten(), nn.Linear(64 * 2 ** nd, 3))
    return model, (1,) + (4,) * nd


def _linear():
    T, d, p = 8, 64, 64  # T^2 (d + p) < T d p: the ghost branch
    return nn.Sequential(nn.Linear(d, p), _TokenNorm(p), nn.Tanh(), nn.Flatten(), nn.Linear(p * T, 3)), (T, d)


CASES = {
    "conv2d_ghost": (lambda: _conv(2), {}),
    "conv3d_ghost": (lambda: _conv(3), {}),
    "linear_ghost": (_linear, {}),
    # Instantiated norms, but per-example gradients too large to keep: the clipped sum is recomputed from a, g.
    "linear_recomputed_sum": (_linear, {"_ghost_is_cheaper": lambda *_: False, "_KEEP_PER_EXAMPLE": 0}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_an_offset_records_contribution_stays_within_C(monkeypatch, name):
    build, patches = CASES[name]
    for attr, value in patches.items():
        monkeypatch.setattr(layers, attr, value)
    C, worst = 1.0, 0.0
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        model, shape = build()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        X, y = torch.randn(16, *shape, generator=gen), torch.arange(16) % 3
        clipper = make_clipper(model, "ghost")
        try:
            clipper.clipped_sum(_ce, (X, y), C)  # a clean first lot: the probe passes
            for V, s in [(100.0, 1e-3), (1e3, 0.1), (10.0, 1e-3), (1e3, 1e-2)]:
                X2 = X.clone()
                X2[0] = V + s * torch.randn(shape, generator=gen)
                _, with_x, _ = clipper.clipped_sum(_ce, (X2, y), C)
                _, without_x, _ = clipper.clipped_sum(_ce, (X2[1:], y[1:]), C)
                worst = max(worst, float((_flat(with_x, model) - _flat(without_x, model)).norm()) / C)
        finally:
            clipper.remove()
    assert worst <= 1 + 1e-3, f"a record moved the clipped sum by {worst:.4f} C"
