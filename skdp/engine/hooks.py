"""Book-keeping clipping: one forward, one backward, no per-example gradient tensors.

Forward hooks keep each layer's input and output. A single
``torch.autograd.grad`` of the summed per-example losses with respect to the
layer outputs (not the weights, so autograd skips the weight-gradient work)
gives everything the per-layer rules need: per-example norms first, then the
clipped gradient sums.
"""
import torch

from .layers import rule_for


class UnsupportedModelError(TypeError):
    """The model has a trainable layer without a per-layer rule."""


def _layers_with_params(module):
    for name, sub in module.named_modules():
        if any(p.requires_grad for p in sub.parameters(recurse=False)):
            yield name, sub


class HookClipper:
    """Per-example clipping by forward hooks and per-layer rules."""

    def __init__(self, module):
        self.module = module
        self.layers = []
        for name, sub in _layers_with_params(module):
            rule = rule_for(sub)
            if rule is None:
                raise UnsupportedModelError(
                    f"Layer {name!r} ({type(sub).__name__}) has no per-layer clipping rule; "
                    "use clipping='vmap' or register one with skdp.engine.layers.register."
                )
            self.layers.append((name, sub, rule))
        self._records = None
        self._handles = [sub.register_forward_hook(self._hook) for _, sub, _ in self.layers]

    def _hook(self, sub, inputs, output):
        if self._records is None:
            return
        if sub in self._records:
            raise UnsupportedModelError(
                f"{type(sub).__name__} was called twice in one forward pass (shared weights); "
                "use clipping='vmap'."
            )
        self._records[sub] = (inputs[0].detach(), output)

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def clipped_sum(self, per_example_loss, inputs, max_grad_norm):
        """Per-example losses and ``[(param, clipped gradient sum)]``."""
        self._records = {}
        try:
            losses = per_example_loss(self.module, *inputs)
            records = self._records
        finally:
            self._records = None
        used = [(sub, rule, records[sub]) for _, sub, rule in self.layers if sub in records]
        outputs = [rec[1] for _, _, rec in used]
        grads = torch.autograd.grad(losses.sum(), outputs, allow_unused=True)
        norm_sq = losses.new_zeros(losses.shape[0])
        pending = []
        for (sub, rule, (a, _)), g in zip(used, grads):
            if g is None:
                continue
            layer_norm_sq, clipped = rule(sub, a, g)
            norm_sq = norm_sq + layer_norm_sq
            pending.append(clipped)
        norms = norm_sq.sqrt()
        scale = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        out = [pg for clipped in pending for pg in clipped(scale)]
        return losses.detach(), out, norms
