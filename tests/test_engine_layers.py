"""Issue 16: more layers on the per-layer (hook) path, the module checker and the DP drop-ins.

Every rule is checked against the one-example-at-a-time reference of
``test_engine.naive_clipped_sum`` (norms and clipped sums), with the hooks
(``clipping="ghost"``: no silent fallback to vmap), and on a hostile record
that takes the float64 path.
"""
import numpy as np
import pytest
import torch
from torch import nn

from skdp.engine import DPSGDEngine, make_clipper
from skdp.engine.hooks import HookClipper
from skdp.exceptions import UnsupportedModelError, UnsupportedModuleError
from skdp.nn import DPGRU, DPLSTM, DPRNN, DPMultiheadAttention, GroupNormCNN, check_module, fix_module
from test_engine import ce_loss, naive_clipped_sum


class Last(nn.Module):
    """Sequence model head: a recurrent layer, its last time step, a Linear."""

    def __init__(self, rnn, hidden, n_out=3):
        super().__init__()
        self.rnn, self.head = rnn, nn.Linear(hidden, n_out)

    def forward(self, x):
        out = self.rnn(x)[0]
        return self.head(out[:, -1] if self.rnn.batch_first else out[-1])


class Tokens(nn.Module):
    def __init__(self, padding_idx=None):
        super().__init__()
        self.emb = nn.Embedding(11, 6, padding_idx=padding_idx)
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.norm(self.emb(x)).mean(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.encoder = fix_module(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


class TwoCalls(nn.Module):
    """One Embedding and one LayerNorm, each called on two inputs per forward (stacked by the hooks)."""

    def __init__(self):
        super().__init__()
        self.emb, self.norm, self.head = nn.Embedding(7, 4), nn.LayerNorm(4), nn.Linear(4, 3)

    def forward(self, x):
        a, b = self.norm(self.emb(x[:, :3])), self.norm(self.emb(x[:, 3:]) * 2)
        return self.head((a.mean(1) + b.mean(1)))


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def layer_models():
    torch.manual_seed(0)
    g = _g()
    ints = torch.randint(0, 11, (8, 5), generator=g)
    ints[0, :2] = 0  # padding tokens in the padding_idx case
    return {
        "conv1d": (nn.Sequential(nn.Conv1d(2, 4, 3, stride=2, padding=1, dilation=2), nn.Tanh(), nn.Flatten(),
                                 nn.LazyLinear(3)), torch.randn(8, 2, 9, generator=g)),
        "conv1d_same_groups": (nn.Sequential(nn.Conv1d(4, 4, 4, padding="same", groups=2), nn.Flatten(),
                                             nn.Linear(24, 3)), torch.randn(8, 4, 6, generator=g)),
        "conv1d_reflect": (nn.Sequential(nn.Conv1d(2, 3, 3, padding=1, padding_mode="reflect"), nn.Flatten(),
                                         nn.Linear(18, 3)), torch.randn(8, 2, 6, generator=g)),
        "conv2d_same_circular": (nn.Sequential(nn.Conv2d(1, 2, 3, padding="same", padding_mode="circular"),
                                               nn.Flatten(), nn.Linear(32, 3)), torch.randn(8, 1, 4, 4, generator=g)),
        "conv3d": (nn.Sequential(nn.Conv3d(2, 4, 3, stride=(1, 2, 1), padding=1, groups=2), nn.ReLU(), nn.Flatten(),
                                 nn.LazyLinear(3)), torch.randn(8, 2, 3, 4, 3, generator=g)),
        # Strided patches (the unfold as a view): stride, dilation and zero padding in both dims, unequal.
        "conv2d_dilated_strided": (nn.Sequential(nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(2, 1),
                                                           dilation=(2, 3)), nn.Tanh(), nn.Flatten(), nn.LazyLinear(3)),
                                   torch.randn(8, 3, 7, 6, generator=g)),
        # A channels-last input: the view follows the tensor's own strides.
        "conv2d_channels_last": (nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                                               nn.Linear(64, 3)),
                                 torch.randn(8, 3, 4, 4, generator=g).contiguous(memory_format=torch.channels_last)),
        "embedding_layernorm": (Tokens(), ints),
        "embedding_padding_idx": (Tokens(padding_idx=0), ints),
        "lstm": (Last(DPLSTM(3, 5, batch_first=True), 5), torch.randn(8, 4, 3, generator=g)),
        "lstm_2layers_bidirectional_time_major": (Last(DPLSTM(3, 4, num_layers=2, bidirectional=True), 8),
                                                  torch.randn(4, 8, 3, generator=g)),
        "gru_2layers": (Last(DPGRU(3, 5, num_layers=2, batch_first=True), 5), torch.randn(8, 4, 3, generator=g)),
        "rnn_relu_bidirectional": (Last(DPRNN(3, 4, nonlinearity="relu", batch_first=True, bidirectional=True), 8),
                                   torch.randn(8, 4, 3, generator=g)),
        "transformer_encoder": (Encoder(), torch.randn(8, 5, 8, generator=g)),
        "embedding_layernorm_called_twice": (TwoCalls(), torch.randint(0, 7, (8, 6), generator=g)),
        "instancenorm_affine_opacus": (nn.Sequential(nn.Conv2d(1, 2, 3), nn.InstanceNorm2d(2, affine=True),
                                                     nn.Flatten(), nn.Linear(8, 3)),
                                       torch.randn(8, 1, 4, 4, generator=g)),
        # module="cnn" (issue 28): weight-standardised convolutions (their own rule) and GroupNorm.
        "ws_conv2d_groupnorm_cnn": (GroupNormCNN(3, (8, 8), channels=(4, 8), groups=2),
                                    torch.randn(8, 1, 8, 8, generator=g)),
    }


def _batch_first(name):
    # The time-major model takes (T, B, d): the lot is along dim 1 there.
    return name != "lstm_2layers_bidirectional_time_major"


class TimeMajorInput(nn.Module):
    """Takes (B, T, d), runs the time-major model on (T, B, d): the hooked layers still see examples first."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x.transpose(0, 1))


def _case(name):
    model, X = layer_models()[name]
    with torch.no_grad():
        model(X)  # materialise lazy layers
    if not _batch_first(name):
        model, X = TimeMajorInput(model), X.transpose(0, 1).contiguous()
    return model, X, torch.arange(len(X)) % 3


@pytest.mark.parametrize("name", list(layer_models()))
def test_rule_matches_the_one_example_at_a_time_reference(name):
    model, X, y = _case(name)
    ref, ref_norms = naive_clipped_sum(model, X, y, C=0.5)
    clipper = make_clipper(model, "ghost")  # hooks only: a missing rule fails here instead of taking vmap
    assert isinstance(clipper, HookClipper)
    try:
        losses, pairs, norms = clipper.clipped_sum(ce_loss, (X, y), 0.5)
        assert clipper._verified  # the probe compared the rules' sums with autograd's
    finally:
        clipper.remove()
    got = {id(p): g for p, g in pairs}
    for (pname, p), r in zip(model.named_parameters(), ref):
        torch.testing.assert_close(got[id(p)], r, atol=1e-5, rtol=1e-4, msg=lambda m: f"{pname}: {m}")
    torch.testing.assert_close(norms, ref_norms, atol=1e-4, rtol=1e-4)
    # Some examples clipped, some not: both branches of the scale are exercised.
    assert (ref_norms > 0.5).any()


@pytest.mark.parametrize("name", ["conv1d", "conv3d", "embedding_layernorm", "lstm", "transformer_encoder"])
def test_huge_record_takes_the_float64_path_and_is_clipped(name):
    model, X, y = _case(name)
    X = X.clone()
    if X.is_floating_point():
        X[2] = X[2].sign() * 1e20
    else:  # token inputs cannot overflow: blow up the embedding row of example 2's tokens instead
        with torch.no_grad():
            model.emb.weight[X[2]] = 1e20
    engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=1.0,
                         generator=_g(), clipping="ghost")
    engine.private_gradients(ce_loss, (X, y))
    total = torch.cat([p.grad.flatten() for p in engine.params])
    assert torch.isfinite(total).all()
    parts = []
    for i in range(len(X)):
        engine.private_gradients(ce_loss, (X[i:i + 1], y[i:i + 1]))
        parts.append(torch.cat([p.grad.flatten() for p in engine.params]))
    engine.close()
    assert max(p.norm().item() for p in parts) <= 1.0 + 1e-4
    torch.testing.assert_close(total, sum(parts), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["conv1d", "conv1d_same_groups", "conv3d", "conv2d_dilated_strided",
                                  "conv2d_channels_last"])
def test_conv_grouped_convolution_path(monkeypatch, name):
    # Long patches take one grouped convolution instead of the unfolded matmul: the same sums.
    import skdp.engine.layers as layers
    monkeypatch.setattr(layers, "UNFOLD_LIMIT", 0)
    monkeypatch.setattr(layers, "UNFOLD_CHANNELS", 0)
    test_rule_matches_the_one_example_at_a_time_reference(name)


@pytest.mark.parametrize("name", ["conv1d", "conv3d", "conv2d_dilated_strided", "conv2d_channels_last"])
def test_conv_unfold_in_chunks_of_examples(monkeypatch, name):
    # A large unfolded input is built a few examples at a time (bounded memory): the same sums.
    import skdp.engine.layers as layers
    monkeypatch.setattr(layers, "UNFOLD_CHUNK", 1)  # one example per chunk
    test_rule_matches_the_one_example_at_a_time_reference(name)


def test_conv_rule_chooses_by_channels_per_group():
    # The shape rule of dpsgd_layer_rules.md: channels off oneDNN's blocks of 8 unfold at any size, others only
    # when small.
    from skdp.engine.layers import _unfold_is_cheaper
    assert _unfold_is_cheaper(256, 1, 1, 25, 576)  # LeNet's first layer (1 x 5 x 5 patches, 24 x 24 outputs)
    assert _unfold_is_cheaper(256, 1, 3, 27, 1024)  # an RGB 3 x 3 layer on 32 x 32 images
    assert _unfold_is_cheaper(256, 1, 6, 150, 64)  # LeNet's second layer
    assert not _unfold_is_cheaper(256, 1, 16, 144, 196)  # 16 channels fill oneDNN's blocks: grouped convolution
    assert _unfold_is_cheaper(4, 1, 16, 144, 196)  # ... unless the whole input is small
    assert not _unfold_is_cheaper(256, 1, 25, 225, 196)  # beyond the measured channels: grouped convolution
    assert not _unfold_is_cheaper(256, 1, 1, 25, 576, "cuda")  # measured on CPU only: elsewhere, the size rule


@pytest.mark.parametrize("name", ["conv1d", "conv3d", "conv2d_dilated_strided", "transformer_encoder", "lstm",
                                  "embedding_layernorm_called_twice"])
@pytest.mark.parametrize("ghost", [True, False])
def test_rules_match_the_reference_on_either_side_of_the_cost_model(monkeypatch, name, ghost):
    # Ghost norms (float64 Gram matrices) or instantiated per-example gradients, whatever the shapes: the same sums.
    import skdp.engine.layers as layers
    monkeypatch.setattr(layers, "_ghost_is_cheaper", lambda *_: ghost)
    test_rule_matches_the_one_example_at_a_time_reference(name)


@pytest.mark.parametrize("name", ["transformer_encoder", "lstm"])
def test_linear_rule_without_the_kept_per_example_gradients(monkeypatch, name):
    # The Linear rule keeps small per-example gradients from the norm for the clipped sum; the
    # recomputed path (large layers) must give the same reference sums.
    import skdp.engine.layers as layers
    monkeypatch.setattr(layers, "_KEEP_PER_EXAMPLE", 0)
    test_rule_matches_the_one_example_at_a_time_reference(name)


def test_conv1d_ghost_branch():
    # Short output, many channels: the ghost norm is cheaper and is the one computed.
    from skdp.engine.layers import _ghost_is_cheaper
    assert _ghost_is_cheaper(2, 16 * 3, 16)
    model = nn.Sequential(nn.Conv1d(16, 16, 3), nn.Flatten(), nn.Linear(32, 3))
    X, y = torch.randn(8, 16, 4, generator=_g()), torch.arange(8) % 3
    ref, ref_norms = naive_clipped_sum(model, X, y, C=0.5)
    _, pairs, norms = HookClipper(model).clipped_sum(ce_loss, (X, y), 0.5)
    for (p, g), r in zip(pairs, ref):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(norms, ref_norms, atol=1e-4, rtol=1e-4)


# ---- the checker ------------------------------------------------------------------------------------
class Gain(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return x * self.gain


def test_check_module_reports_each_path():
    tied = nn.Linear(4, 4)
    model = nn.ModuleDict({"lin": nn.Linear(3, 4), "inorm": nn.InstanceNorm1d(4, affine=True), "gain": Gain(),
                           "lstm": nn.LSTM(4, 4), "a": tied, "b": nn.Linear(4, 4), "bn": nn.BatchNorm1d(4)})
    model["b"].weight = tied.weight
    report = check_module(model)
    paths = report.paths()
    assert paths["lin"] == "rule" and paths["inorm"] == "opacus"
    assert paths["gain"] == paths["lstm"] == paths["a"] == paths["b"] == "vmap"
    assert paths["bn"] == "refused" and not report.ok
    reasons = {row.name: row.reason for row in report}
    assert "fix_module" in reasons["lstm"] and "tied" in reasons["a"] and "GroupNorm" in reasons["bn"]
    assert "BatchNorm1d" in report.message() and "lstm" in str(report)
    ghost = check_module(model, "ghost")
    assert ghost.paths()["gain"] == "refused" and "clipping='auto'" in {r.name: r.reason for r in ghost}["gain"]
    running = nn.Sequential(nn.InstanceNorm1d(4, track_running_stats=True))
    assert "track_running_stats=False" in check_module(running).message()
    fixed = check_module(fix_module(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.LSTM(4, 4))))
    assert fixed.ok and set(fixed.paths().values()) == {"rule"}


def test_ghost_engine_refuses_with_the_checkers_message():
    model = nn.Sequential(nn.Linear(3, 3), Gain())
    with pytest.raises(UnsupportedModelError, match=r"'1' \(Gain\).*clipping='auto'"):
        DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=4, generator=_g(),
                    clipping="ghost")


# ---- fix_module -------------------------------------------------------------------------------------
@pytest.mark.parametrize("torch_rnn, kwargs", [
    (nn.LSTM, dict(num_layers=2, batch_first=True)),
    (nn.LSTM, dict(bidirectional=True)),
    (nn.GRU, dict(num_layers=2, bidirectional=True, batch_first=True)),
    (nn.RNN, dict(nonlinearity="relu", bias=False)),
])
def test_fix_module_swaps_recurrent_layers_with_the_same_outputs(torch_rnn, kwargs):
    torch.manual_seed(0)
    rnn = torch_rnn(3, 5, **kwargs).eval()
    fixed = fix_module(rnn)
    assert type(fixed).__name__ == "DP" + torch_rnn.__name__ and not fixed.training
    x = torch.randn(4, 6, 3)
    D = 2 if kwargs.get("bidirectional") else 1
    h0 = torch.randn(kwargs.get("num_layers", 1) * D, x.shape[0 if kwargs.get("batch_first") else 1], 5)
    hx = (h0, torch.randn_like(h0)) if torch_rnn is nn.LSTM else h0
    (out, hidden), (out2, hidden2) = rnn(x, hx), fixed(x, hx)
    torch.testing.assert_close(out2, out, atol=1e-5, rtol=1e-5)
    for a, b in zip(hidden if isinstance(hidden, tuple) else (hidden,),
                    hidden2 if isinstance(hidden2, tuple) else (hidden2,)):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fixed(x[0])[0], rnn(x[0])[0], atol=1e-5, rtol=1e-5)  # unbatched input


@pytest.mark.parametrize("batch_first", [True, False])
def test_fix_module_swaps_attention_with_the_same_outputs(batch_first):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=batch_first)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    fixed = fix_module(model)
    assert all(isinstance(m.self_attn, DPMultiheadAttention) for m in fixed.layers)
    x = torch.randn(3, 5, 8) if batch_first else torch.randn(5, 3, 8)  # 3 sequences of 5
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[0, -2:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():  # eval + no grad: torch's fused path for the original, ours for the copy
        for kw in ({}, {"src_key_padding_mask": mask}, {"mask": causal}):
            torch.testing.assert_close(fixed(x, **kw), model(x, **kw), atol=1e-5, rtol=1e-4)
    mha = nn.MultiheadAttention(8, 2, kdim=6, vdim=4, add_zero_attn=True, batch_first=True).eval()
    q, k, v = torch.randn(3, 5, 8), torch.randn(3, 7, 6), torch.randn(3, 7, 4)
    ours = fix_module(mha)
    for need_weights in (True, False):
        (o1, w1), (o2, w2) = mha(q, k, v, need_weights=need_weights), ours(q, k, v, need_weights=need_weights)
        torch.testing.assert_close(o2, o1, atol=1e-5, rtol=1e-4)
        if need_weights:
            torch.testing.assert_close(w2, w1, atol=1e-5, rtol=1e-4)


def test_fix_module_swaps_batchnorm_and_leaves_the_original_alone():
    model = nn.Sequential(nn.Conv2d(1, 6, 3), nn.BatchNorm2d(6), nn.Sequential(nn.BatchNorm1d(64)))
    fixed = fix_module(model)
    assert isinstance(fixed[1], nn.GroupNorm) and fixed[1].num_groups == 6
    # BatchNorm1d: one group, so that (N, C) rows are normalised over their channels (C groups would
    # normalise single values: always 0, and an error for one example alone).
    assert isinstance(fixed[2][0], nn.GroupNorm) and fixed[2][0].num_groups == 1
    assert fixed[2][0](torch.randn(1, 64)).abs().sum() > 0
    assert isinstance(model[1], nn.BatchNorm2d)  # a copy, the input untouched
    torch.testing.assert_close(fixed[0].weight, model[0].weight)


# ---- estimators --------------------------------------------------------------------------------------
def _blobs():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4, 3)).astype(np.float32)
    y = (X[:, :, 0].sum(1) > 0).astype(int)
    return X, y


class SeqClassifier(nn.Module):
    def __init__(self, norm=None):
        super().__init__()
        self.rnn = nn.LSTM(3, 6, batch_first=True)
        self.norm = norm or nn.Identity()
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        x = x.reshape(len(x), 4, 3)
        return self.head(self.norm(self.rnn(x)[0][:, -1]))


@pytest.mark.parametrize("eval_mode", [False, True])
def test_classifier_refuses_batchnorm_with_the_checkers_message_before_any_spend(eval_mode):
    from skdp import BudgetLedger, DPMomentumClassifier
    X, y = _blobs()
    module = SeqClassifier(nn.BatchNorm1d(6))
    if eval_mode:  # trainable BatchNorm in eval mode: every train step puts it back in train mode
        module.eval()
    ledger = BudgetLedger(epsilon=10)
    expected = check_module(module.train()).message()
    module.train(not eval_mode)
    with pytest.raises(UnsupportedModuleError) as info:
        DPMomentumClassifier(module, classes=[0, 1], max_epochs=1, ledger=ledger).fit(X.reshape(40, -1), y)
    assert str(info.value) == expected and "'norm' (BatchNorm1d)" in expected and "GroupNorm" in expected
    assert ledger.total() == (0.0, 0.0)


def test_classifier_fits_a_user_lstm_after_fix_module_on_the_hooks():
    from skdp import DPMomentumClassifier
    X, y = _blobs()
    clf = DPMomentumClassifier(fix_module(SeqClassifier()), classes=[0, 1], max_epochs=2, batch_size=20,
                               clipping="ghost", random_state=0).fit(X.reshape(40, -1), y)
    assert isinstance(clf.net_.module_.rnn, DPLSTM) and np.isfinite(clf.epsilon_)
    assert clf.predict(X.reshape(40, -1)).shape == (40,)
    # ... and an unfixed nn.LSTM still fits under "auto" (vmap path).
    DPMomentumClassifier(SeqClassifier(), classes=[0, 1], max_epochs=1, batch_size=20).fit(X.reshape(40, -1), y)
