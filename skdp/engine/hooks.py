"""Book-keeping clipping: one forward, one backward, no per-example gradient tensors.

Forward hooks keep each layer's input and output. A single
``torch.autograd.grad`` of the summed per-example losses with respect to the
layer outputs (not the weights, so autograd skips the weight-gradient work)
gives everything the per-layer rules need: per-example norms first, then the
clipped gradient sums.

The rules are exact only when (i) each trainable parameter belongs to one
hooked layer, is covered by that layer's rule and is used only inside that
layer's forward (several calls of one layer in a forward, the cell of an RNN
once per time step, are stacked into one when the layer's rule declares how:
``layers.register(..., stack=...)``; otherwise refused); (ii) dim 0 of every hooked input and output is the
example. The hooks check (i) at construction (shared parameters, uncovered
parameters, forward replaced on the instance) and at the forward (a layer
called twice); (ii) on every lot and piece (first dim == its number of rows).
Before the rules clip anything, a probe *proves* (i) and (ii) on the first
lot's rows instead of trusting the module: on a deep copy of the module with
its parameters randomised (a zero-initialised head hides a mixing layer from a
comparison of losses), in the module's own train/eval modes (torch's exact
Dropout classes in eval mode: per-call masks are not mixing; a subclass is not
trusted), and at two lot sizes (no other dim of the activations can equal
both: a time-major ``(T, B, d)`` layer shows), each example's loss and
gradient computed *alone* (a batch of one, plain autograd) must equal what the
rules attribute to it in the lot: its norm, and ``sum_i s_i g_i`` for random
weights ``s`` (which pins every ``g_i``). Every probed row's loss is compared,
those undefined alone (NaN, inf) included: a row undefined alone and finite in
the lot (a missing value imputed with the lot's mean) takes its value from the
other rows, and fails. A module that mixes examples in its
forward (``x - x.mean(0)``) or in its backward (a custom ``autograd.Function``),
or a parameter used outside its layer, fails it. Each failure raises
``UnsupportedModelError``; under ``clipping="auto"`` the engine then switches
to the exact ``FunctionalClipper``, which computes every example alone.

Trust model (doc/privacy.md): the curator's module code is trusted not to be
adversarial; careless code must be caught. A module built to pass the probe
(mixing only above 32 rows, only with an outlier, only after the first lot)
is outside what any probe can rule out.

Overflow: one float32 record of 1e20 squares to 1e40 = inf, and inf x 0 = NaN
poisoned the whole sum. The float32 path is kept when every per-example
squared norm and loss is finite (one check per lot); otherwise the rules run
again in float64 (a float32 value <= 3.4e38 squares to <= 1.2e77, sums of
such terms stay far below 1.8e308), and an example whose norm or loss is still
not finite (NaN/inf in its loss, activations or gradient) gets scale 0 with
its rows of ``a`` and ``g`` zeroed before the contraction, so it contributes
exactly zero rather than 0 x inf = NaN.
"""
import copy
import math

import torch
from torch import nn

from ..exceptions import UnsupportedModelError
from .checker import check_module, check_precision
from .layers import full_float32, lookup
from .validators import check_dp_compatible


_FIX = "use clipping='vmap' (or 'auto', which falls back to it)"
#: Rows of a lot the first-lot probe looks at (at least two are needed to see examples mix).
_PROBE_ROWS = 32


def _per_call_random_layers():
    # Layers that draw new randomness at every call and never mix examples: put in eval mode while the
    # probe compares an example alone with the same example in the lot. Exact classes only: a subclass
    # (a "Dropout" that centres the lot in train mode) is probed as it trains.
    from ..nn.dp_modules import DPGRU, DPLSTM, DPMultiheadAttention, DPRNN
    return frozenset({nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                      nn.FeatureAlphaDropout, DPMultiheadAttention, DPLSTM, DPGRU, DPRNN})


class _TooFewToProve(UnsupportedModelError):
    """The first lots hold fewer than 3 examples: the probe needs two lot sizes of 2 or more."""


def _randomised_copy(module):
    """A deep copy of ``module`` whose parameters are moved to random values of their own scale."""
    probe = copy.deepcopy(module)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in probe.parameters():
            if not p.is_floating_point() or p.numel() == 0:
                continue
            scale = float(p.detach().double().square().mean().sqrt())
            if not (scale > 0 and math.isfinite(scale)):
                scale = 1.0 / math.sqrt(p.shape[-1] if p.dim() > 1 else max(p.numel(), 1))
            p.add_(scale * torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.device, p.dtype))
    return probe


def _layers_with_params(module):
    for name, sub in module.named_modules():
        if any(p.requires_grad for p in sub.parameters(recurse=False)):
            yield name, sub


def _widen(x):
    """``x`` in float32 when it is a half-precision tensor (as autocast makes them), else ``x`` itself."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _zero_rows(x, keep):
    return torch.where(keep.view(-1, *([1] * (x.dim() - 1))), x, x.new_zeros(()))


def _apply_rules(layers, n, dtype):
    """Per-example squared norms (summed over layers) and the layers' ``clipped(scale)`` closures."""
    norm_sq = torch.zeros(n, dtype=dtype, device=layers[0][4].device) if layers else torch.zeros(n, dtype=dtype)
    pending = []
    for _, sub, rule, a, g in layers:
        layer_norm_sq, clipped = rule(sub, a, g)
        norm_sq = norm_sq + layer_norm_sq
        pending.append(clipped)
    return norm_sq, pending


def _fork_rng(module):
    devices = sorted({p.device.index or 0 for p in module.parameters() if p.device.type == "cuda"})
    return torch.random.fork_rng(devices=devices)


class HookClipper:
    """Per-example clipping by forward hooks and per-layer rules."""

    def __init__(self, module):
        # The static checks have one home, skdp.engine.check_module: the validators (examples mixed, data
        # in buffers), then per layer a rule, no tied weights, no parameter its rule leaves out, no forward
        # replaced. Under "ghost" a layer the rules cannot clip exactly is refused (UnsupportedModelError:
        # "auto" then takes the vmap path).
        check_module(module, "ghost").raise_if_refused()
        self.module = module
        self.layers = [(name, sub, lookup(sub)) for name, sub in _layers_with_params(module)]
        self._names = {sub: name for name, sub, _ in self.layers}
        self._rules = {sub: rule for _, sub, rule in self.layers}
        self._records = None
        self._verified = False
        self._handles = [sub.register_forward_hook(self._hook) for _, sub, _ in self.layers]

    def _hook(self, sub, inputs, output):
        if self._records is None:
            return
        if not inputs:
            # Forward hooks see positional inputs only: the rule would have no activations to work on.
            raise UnsupportedModelError(
                f"Layer {self._names[sub]!r} ({type(sub).__name__}) was called with its input as a keyword "
                f"argument, which the per-layer hooks cannot see; call it positionally, or {_FIX}.")
        calls = self._records.setdefault(sub, [])
        if calls and self._rules[sub].stack is None:
            raise UnsupportedModelError(
                f"Layer {self._names[sub]!r} ({type(sub).__name__}) was called twice in one forward pass "
                f"(shared weights) and its rule cannot stack calls; {_FIX}.")
        calls.append((inputs[0].detach(), output))

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def _forward(self, per_example_loss, inputs):
        self._records = {}
        try:
            losses = per_example_loss(self.module, *inputs)
            records = self._records
        finally:
            self._records = None
        # One record per call: (name, sub, rule, a, output); the calls of one layer are merged after the backward.
        # A call whose output does not require grad (run under no_grad: a stop-gradient encoder) sends no gradient
        # back and is dropped (autograd.grad over it raised: review s39f F1). A non-tensor output is kept, for
        # _check_example_dim to refuse by name (review s39g G1).
        used = [(name, sub, rule, a, out) for name, sub, rule in self.layers for a, out in records.get(sub, ())
                if not isinstance(out, torch.Tensor) or out.requires_grad]
        return losses, used

    @staticmethod
    def _merge_calls(used, grads):
        """``[(name, sub, rule.fn, a, g)]``, one per layer: calls of one layer stacked by its rule's ``stack``.

        A call whose output does not reach the loss (grad None) contributes nothing to the gradient.
        """
        by_layer = {}
        for rec, g in zip(used, grads):
            if g is not None:
                by_layer.setdefault(rec[1], (rec[0], rec[2], []))[2].append((rec[3], g))
        layers = []
        for sub, (name, rule, calls) in by_layer.items():
            a, g = calls[0] if len(calls) == 1 else rule.stack(sub, calls)
            layers.append((name, sub, rule.fn, a, g))
        return layers

    @staticmethod
    def _check_example_dim(losses, used, n):
        if losses.shape[:1] != (n,) or losses.numel() != n:
            raise ValueError(f"per_example_loss returned shape {tuple(losses.shape)} for a lot of {n} "
                             f"examples; it must return one loss per example, shape ({n},).")
        for name, sub, _, a, out in used:
            if a.shape[:1] != (n,) or not isinstance(out, torch.Tensor) or out.shape[:1] != (n,):
                out_shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise UnsupportedModelError(
                    f"Layer {name!r} ({type(sub).__name__}) saw input {tuple(a.shape)} and output {out_shape} "
                    f"for a lot of {n} examples: the per-layer rules take the first dim as the example dim "
                    f"(a time-major (T, B, ...) layout clips per time step). Keep the examples first in every "
                    f"layer (batch_first=True), or {_FIX}.")

    def _verify(self, per_example_loss, inputs, m):
        """Prove on the lot's first ``m`` rows that the rules clip each example's own gradient (module docstring)."""
        for h in self._handles:  # a copy must not carry this clipper's hooks
            h.remove()
        try:
            probe = _randomised_copy(self.module)
        finally:
            self._handles = [sub.register_forward_hook(self._hook) for _, sub, _ in self.layers]
        per_call_random = _per_call_random_layers()
        for sub in probe.modules():
            if type(sub) in per_call_random:
                sub.eval()
        prover = HookClipper(probe)
        try:
            with _fork_rng(probe):
                alone = [prover._alone(per_example_loss, inputs, i) for i in range(m)]
                # Every row's loss in the lot of all m first, the rows undefined alone included: a row whose loss
                # is NaN alone and finite in the lot (a missing value imputed with the lot's mean) takes its
                # value from the other rows, so leaving it out of the proof would hide exactly the mixing.
                losses, used = prover._forward(per_example_loss, inputs)
                prover._check_example_dim(losses, used, m)
                prover._check_losses(losses, alone, m)
                # A hostile record (1e20) has no finite float32 gradient to compare: the proof uses the others.
                keep = [i for i, (loss, _, norm_sq) in enumerate(alone) if math.isfinite(loss) and norm_sq < 1e30]
                if len(keep) < 3:
                    raise _TooFewToProve(f"{len(keep)} examples of the first lot are finite enough to probe")
                rows = tuple(t[keep] for t in inputs)
                alone = [alone[i] for i in keep]
                sizes = (len(keep), max(2, (len(keep) + 1) // 2) if len(keep) > 3 else 2)
                for k in sizes:  # layouts first: a time-major layer shows at one of two lot sizes
                    prover._check_example_dim(*prover._forward(per_example_loss, tuple(t[:k] for t in rows)), k)
                for k in sizes:
                    prover._prove(per_example_loss, tuple(t[:k] for t in rows), alone[:k])
        finally:
            prover.remove()
        self._verified = True

    def _alone(self, per_example_loss, inputs, i):
        """Example ``i`` alone (a batch of one, plain autograd): its loss, float64 gradients and squared norm."""
        params = [p for p in self.module.parameters() if p.requires_grad]
        loss = per_example_loss(self.module, *(t[i:i + 1] for t in inputs)).reshape(-1)
        if loss.numel() != 1:
            raise ValueError(f"per_example_loss returned shape {tuple(loss.shape)} for one example; it must return "
                             "one loss per example.")
        grads = torch.autograd.grad(loss.sum(), params, allow_unused=True)
        grads = {p: g.double() for p, g in zip(params, grads) if g is not None}
        norm_sq = float(sum(g.square().sum() for g in grads.values())) if grads else 0.0
        return float(loss.detach()), grads, norm_sq if math.isfinite(norm_sq) else math.inf

    @staticmethod
    def _check_losses(losses, alone, k):
        """Each example's loss in a lot of ``k`` equal to its loss alone; undefined (NaN/inf) in both counts as equal."""
        in_lot = losses.detach().double().cpu()
        for i, (loss, _, _) in enumerate(alone):
            theirs = float(in_lot[i])
            if math.isfinite(loss) or math.isfinite(theirs):
                if not math.isclose(loss, theirs, rel_tol=1e-4, abs_tol=1e-5):
                    raise UnsupportedModelError(
                        f"Example {i}'s loss is {loss:.6g} alone and {theirs:.6g} in a lot of {k}: the module "
                        f"mixes the examples of a lot (a statistic over the batch dimension; a value undefined "
                        f"alone and defined in the lot is taken from the other rows), which the per-layer rules "
                        f"cannot clip per example; {_FIX}, which computes each example's gradient alone.")

    def _check_recorded(self, used):
        """Refuse a forward in which no hooked layer ran while the model trains parameters: they are applied outside
        their layers (``F.linear(X, self.l.weight)``), where no rule sees them (it crashed inside autograd before:
        review s39b's note)."""
        if not used and any(p.requires_grad for p in self.module.parameters()):
            raise UnsupportedModelError(
                "No layer with a per-layer rule ran its forward, yet the model trains parameters: they are used "
                f"outside their layers (e.g. F.linear(X, self.l.weight)), where the hooks cannot clip them; {_FIX}.")

    def _prove(self, per_example_loss, inputs, alone):
        """Each example's norm and ``sum_i s_i g_i`` by the rules, in a lot of ``k``, equal to the examples alone."""
        k = len(alone)
        params = [(name, p) for name, p in self.module.named_parameters() if p.requires_grad]
        losses, used = self._forward(per_example_loss, inputs)
        self._check_recorded(used)
        grads = torch.autograd.grad(losses.sum(), [rec[4] for rec in used], allow_unused=True)
        layers = self._merge_calls(used, grads)
        self._check_losses(losses, alone, k)
        if not layers:
            return
        # The rules in float64, as their wide path runs them: a 1e20 activation times a zero output gradient
        # (a saturated tanh) is 0 there, and NaN in float32.
        layers = [(name, sub, rule, a.double() if a.is_floating_point() else a, g.double())
                  for name, sub, rule, a, g in layers]
        norm_sq, pending = _apply_rules(layers, k, torch.float64)
        ours = norm_sq.detach().cpu()
        theirs = torch.tensor([norm for _, _, norm in alone], dtype=torch.float64)
        tol = 1e-3 * float(theirs.max()) + 1e-12
        if not torch.allclose(ours, theirs, rtol=2e-3, atol=tol):
            i = int((ours - theirs).abs().argmax())
            raise UnsupportedModelError(
                f"In a lot of {k}, the per-layer rules give example {i} a gradient norm of {ours[i].sqrt():.4g}; "
                f"alone its gradient has norm {theirs[i].sqrt():.4g}. The gradient an example sends back depends "
                f"on the other examples (a module that mixes them in its forward or backward, a time-major layer, "
                f"a parameter used outside its layer), so clipping it bounds nothing; {_FIX}.")
        weights = 0.5 + torch.rand(k, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
        mine = {}
        for clipped in pending:
            for p, g in clipped(weights.to(norm_sq.device)):
                mine[p] = mine[p] + g if p in mine else g
        scale = math.sqrt(float(theirs.sum())) + 1e-12
        for name, p in params:
            ref = sum(float(w) * g[p] for w, (_, g, _) in zip(weights, alone) if p in g)
            ref = torch.zeros_like(p, dtype=torch.float64) if isinstance(ref, int) else ref
            got = mine.get(p)
            got = torch.zeros_like(ref) if got is None else got.double()
            if float((got - ref).norm()) > 2e-3 * float(ref.norm()) + 1e-6 * scale:
                raise UnsupportedModelError(
                    f"Parameter {name!r}: in a lot of {k} the per-layer rules attribute a gradient of norm "
                    f"{got.norm():.4g} to the examples (weighted), their gradients alone give {ref.norm():.4g}; it "
                    f"is used outside the forward of its layer, or an example's gradient depends on the others, "
                    f"so the hooks would not clip each example's own gradient; {_FIX}.")

    def clipped_sum(self, per_example_loss, inputs, max_grad_norm, probe_inputs=None):
        """Per-example losses, ``[(param, clipped gradient sum)]`` and per-example norms.

        ``probe_inputs``: the whole lot when ``inputs`` is a piece of it, so that the first-lot probe
        sees at least two examples whatever the piece size.
        """
        check_dp_compatible(self.module)  # train/eval modes may have changed since construction
        check_precision(self.module)  # ... and the dtypes (a model converted to half precision since)
        n = inputs[0].shape[0]
        probe = inputs if probe_inputs is None else probe_inputs
        m = min(probe[0].shape[0], _PROBE_ROWS)
        if not self._verified and n > 0:
            if m < 3:
                raise _TooFewToProve(f"a first lot of {m} examples is too small to probe the per-layer rules")
            self._verify(per_example_loss, tuple(t[:m] for t in probe), m)
        losses, used = self._forward(per_example_loss, inputs)
        self._check_example_dim(losses, used, n)
        self._check_recorded(used)
        grads = torch.autograd.grad(losses.sum(), [rec[4] for rec in used], allow_unused=True)
        # Half-precision activations or gradients (layers run under autocast) are widened: the rules' norms and
        # shares come out in float32 (review s38d H1: in bfloat16 they passed C by 0.4 %).
        layers = [(name, sub, rule, _widen(a), _widen(g)) for name, sub, rule, a, g in self._merge_calls(used, grads)]
        losses = losses.detach()
        dtype = layers[0][4].dtype if layers else losses.dtype
        with full_float32():
            norm_sq, pending = _apply_rules(layers, n, dtype)
            if bool(torch.isfinite(norm_sq + losses.to(dtype)).all()):  # the fast path: one check per lot
                norms = norm_sq.sqrt()
                scale = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
                return losses, [pg for clipped in pending for pg in clipped(scale)], norms
            return (losses,) + self._wide_clipped_sum(layers, losses, max_grad_norm, dtype)

    @staticmethod
    def _wide_clipped_sum(layers, losses, max_grad_norm, dtype):
        """The rules in float64; examples with a non-finite norm or loss contribute exactly zero."""
        n = losses.shape[0]
        # Index inputs (an Embedding's tokens) stay integers.
        wide = [(name, sub, rule, a.double() if a.is_floating_point() else a, g.double())
                for name, sub, rule, a, g in layers]
        norm_sq, pending = _apply_rules(wide, n, torch.float64)
        bad = ~torch.isfinite(norm_sq) | ~torch.isfinite(losses)
        if bool(bad.any()):
            keep = ~bad  # zero the rows, not only the scale: 0 x inf = NaN in the contraction
            wide = [(name, sub, rule, _zero_rows(a, keep), _zero_rows(g, keep)) for name, sub, rule, a, g in wide]
            norm_sq, pending = _apply_rules(wide, n, torch.float64)
        norms = norm_sq.sqrt()
        scale = torch.where(bad, 0.0, (max_grad_norm / (norms + 1e-6)).clamp(max=1.0))
        out = [(p, g.to(p.dtype)) for clipped in pending for p, g in clipped(scale)]
        return out, torch.where(bad, math.nan, norms).to(dtype)
