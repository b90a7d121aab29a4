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
called twice); (ii) on every lot (first dim == lot size) and, on the first lot
of two examples or more, by a probe on the first half of the lot: every
hooked first dim must follow the lot size (a time-major ``(T, B, d)`` layer
with T == B passes the first check, not this one), and the rules' unclipped
sums must equal autograd's gradient of the summed loss (a parameter used
outside its layer's forward breaks this). Each failure raises
``UnsupportedModelError``; under ``clipping="auto"`` the engine then switches
to the exact ``FunctionalClipper``.

Overflow: one float32 record of 1e20 squares to 1e40 = inf, and inf x 0 = NaN
poisoned the whole sum. The float32 path is kept when every per-example
squared norm and loss is finite (one check per lot); otherwise the rules run
again in float64 (a float32 value <= 3.4e38 squares to <= 1.2e77, sums of
such terms stay far below 1.8e308), and an example whose norm or loss is still
not finite (NaN/inf in its loss, activations or gradient) gets scale 0 with
its rows of ``a`` and ``g`` zeroed before the contraction, so it contributes
exactly zero rather than 0 x inf = NaN.
"""
import math

import torch

from ..exceptions import UnsupportedModelError
from .checker import check_module
from .layers import lookup
from .validators import check_dp_compatible


_FIX = "use clipping='vmap' (or 'auto', which falls back to it)"
#: Rows of a lot the first-lot probe looks at (at least two are needed to see examples mix).
_PROBE_ROWS = 32


def _per_call_random_layers():
    # Layers that draw new randomness at every call and never mix examples: put in eval mode while
    # the probe compares an example alone with the same example in the lot.
    from ..nn.dp_modules import DPMultiheadAttention, _DPRNNBase
    return (torch.nn.modules.dropout._DropoutNd, DPMultiheadAttention, _DPRNNBase)


def _layers_with_params(module):
    for name, sub in module.named_modules():
        if any(p.requires_grad for p in sub.parameters(recurse=False)):
            yield name, sub


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
        used = [(name, sub, rule, a, out) for name, sub, rule in self.layers for a, out in records.get(sub, ())]
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

    def _check_examples_independent(self, per_example_loss, inputs, k):
        """Refuse the hooks when an example's loss depends on the other examples of the lot.

        The per-layer rules clip what each example's loss sends back through each layer; a module that
        mixes the examples (``x - x.mean(0)``, a lot-wide softmax) has no parameter of its own to refuse
        and passes every other check, yet one record then moves the clipped sum by far more than C.
        Up to three examples are run alone and compared with their loss among the ``k >= 2`` examples
        of the probe, in the modules' own train/eval modes (a module may mix only in train mode), except
        the layers known to draw fresh randomness per call without mixing (dropout, skdp's DP layers):
        those are put in eval mode for the comparison. Any other randomness reads as a mismatch and
        sends the model to the exact vmap path, which is safe.
        """
        modes = [(m, m.training) for m in self.module.modules()]
        per_call_random = _per_call_random_layers()
        for sub in self.module.modules():
            if isinstance(sub, per_call_random):
                sub.eval()
        try:
            with torch.no_grad(), _fork_rng(self.module):
                in_lot = per_example_loss(self.module, *(t[:k] for t in inputs))
                for i in range(min(3, k)):
                    alone = per_example_loss(self.module, *(t[i:i + 1] for t in inputs))
                    if not torch.allclose(alone.reshape(-1), in_lot[i:i + 1], rtol=1e-4, atol=1e-5,
                                          equal_nan=True):
                        raise UnsupportedModelError(
                            f"Example {i}'s loss is {alone.reshape(-1)[0].item():.6g} alone and "
                            f"{in_lot[i].item():.6g} in the lot: the module mixes the examples of a lot (a "
                            f"statistic over the batch dimension), which the per-layer rules cannot clip per "
                            f"example; {_FIX}, which computes each example's gradient alone.")
        finally:
            for m, training in modes:
                m.training = training

    def _verify(self, per_example_loss, inputs, n):
        """Probe the lot's first rows: examples independent, first dims right, rule sums exact."""
        self._check_examples_independent(per_example_loss, inputs, n)
        k = n // 2
        with _fork_rng(self.module):  # leave the training's random stream (dropout) as it was
            losses, used = self._forward(per_example_loss, tuple(t[:k] for t in inputs))
        self._check_example_dim(losses, used, k)
        params = [p for p in self.module.parameters() if p.requires_grad]
        grads = torch.autograd.grad(losses.sum(), [rec[4] for rec in used] + params, allow_unused=True)
        layers = self._merge_calls(used, grads[:len(used)])
        if not layers or not torch.isfinite(losses.detach()).all():
            return  # nothing to compare on this lot; probe the next one
        _, pending = _apply_rules(layers, k, layers[0][4].dtype)
        ones = losses.new_ones(k)
        mine = {}
        for clipped in pending:
            for p, g in clipped(ones):
                mine[p] = mine[p] + g if p in mine else g
        for (name, p), ref in zip(((n_, p) for n_, p in self.module.named_parameters() if p.requires_grad),
                                  grads[len(used):]):
            got = mine.get(p)
            if ref is None and got is None:
                continue
            ref = torch.zeros_like(p) if ref is None else ref
            got = torch.zeros_like(p) if got is None else got
            if not (torch.isfinite(ref).all() and torch.isfinite(got).all()):
                return
            if (got - ref).norm() > 1e-3 * ref.norm() + 1e-6:
                raise UnsupportedModelError(
                    f"Parameter {name!r}: the per-layer rules account for a gradient of norm {got.norm():.4g}, "
                    f"autograd finds {ref.norm():.4g}; it is used outside the forward of its layer (or its "
                    f"layer's forward is not the one its rule assumes), so the hooks would not clip all of "
                    f"its gradient; {_FIX}.")
        self._verified = True

    def clipped_sum(self, per_example_loss, inputs, max_grad_norm, probe_inputs=None):
        """Per-example losses, ``[(param, clipped gradient sum)]`` and per-example norms.

        ``probe_inputs``: the whole lot when ``inputs`` is a piece of it, so that the first-lot probe
        sees at least two examples whatever the piece size.
        """
        check_dp_compatible(self.module)  # train/eval modes may have changed since construction
        n = inputs[0].shape[0]
        probe = inputs if probe_inputs is None else probe_inputs
        m = min(probe[0].shape[0], _PROBE_ROWS)
        if not self._verified and m >= 2:
            self._verify(per_example_loss, tuple(t[:m] for t in probe), m)
        losses, used = self._forward(per_example_loss, inputs)
        self._check_example_dim(losses, used, n)
        grads = torch.autograd.grad(losses.sum(), [rec[4] for rec in used], allow_unused=True)
        layers = self._merge_calls(used, grads)
        losses = losses.detach()
        dtype = layers[0][4].dtype if layers else losses.dtype
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
