"""The general fallback: per-example gradients by ``torch.func.vmap``.

It covers any layer and any loss that torch.func can differentiate, including
losses that differentiate the network itself (sliced score matching needs a
Jacobian-vector product inside the loss). It builds a (batch x parameters)
tensor, in chunks of ``chunk_size`` examples, so it is the slow path. Where
vmap itself fails on a module (an op without a batching rule), the same
per-example gradients are taken one example at a time: slower still, exact.

Exact for shared (tied) parameters: ``named_parameters`` lists a shared tensor
once, so its per-example gradient is the sum over its uses. Overflow: norms
are taken in float32 and, when one is not finite, again in float64; an example
whose gradient or loss is still not finite contributes exactly zero (its rows
zeroed, not only its scale: 0 x inf = NaN).
"""
import contextlib
import math
import warnings

import torch
from torch.func import functional_call, grad, vmap

from .checker import check_precision
from .layers import full_float32
from .validators import check_dp_compatible


@contextlib.contextmanager
def _registries_kept(module):
    """Put every submodule's parameters and buffers back as they were after ``functional_call``.

    torch.func.functional_call restores a module called twice in one forward (tied weights) with the
    tensors it was given instead of the module's own Parameters: the module would train a detached alias
    of its weights from then on. Restoring the registries keeps the module exactly as it was.
    """
    saved = [(sub, registry, dict(getattr(sub, registry))) for sub in module.modules()
             for registry in ("_parameters", "_buffers")]
    try:
        yield
    finally:
        for sub, registry, entries in saved:
            table = getattr(sub, registry)
            for name, value in entries.items():
                if table.get(name) is not value:
                    table[name] = value


class FunctionalClipper:
    """Per-example clipping by vmap over per-example gradients."""

    def __init__(self, module, chunk_size=64, warn=True):
        check_dp_compatible(module)
        self.module = module
        self.chunk_size = chunk_size
        self.warn = warn  # warn when vmap fails and the loop takes over
        # Set for good when vmap fails on this module: per-example gradients then come from a loop.
        self._loop, self.vmap_error = False, None

    def remove(self):
        pass

    def clipped_sum(self, per_example_loss, inputs, max_grad_norm, probe_inputs=None):
        # probe_inputs: the lot a piece comes from; each example's gradient is computed alone here,
        # so there is nothing to probe.
        module = self.module
        check_dp_compatible(module)  # train/eval modes may have changed since construction
        check_precision(module)  # ... and the dtypes (float32 or float64 only: checker._TRAINABLE_DTYPES)
        named = dict(module.named_parameters())
        params = {k: p.detach() for k, p in named.items() if p.requires_grad}
        frozen = {k: p.detach() for k, p in named.items() if not p.requires_grad}
        buffers = dict(module.named_buffers())

        def one_loss(params, *example):
            batch = tuple(t.unsqueeze(0) for t in example)

            def forward(*args, **kwargs):
                return functional_call(module, ({**params, **frozen}, buffers), args, kwargs)

            loss = per_example_loss(forward, *batch)[0]
            return loss, loss.detach()

        example_grad = grad(one_loss, has_aux=True)
        grads = None
        if not self._loop:
            try:
                with _registries_kept(module):
                    # randomness="different": dropout draws one mask per example, as in a loop over examples.
                    per_example_grad = vmap(example_grad, in_dims=(None,) + (0,) * len(inputs),
                                            chunk_size=self.chunk_size, randomness="different")
                    grads, losses = per_example_grad(params, *inputs)
            except RuntimeError as exc:
                if "out of memory" in str(exc).lower():
                    raise  # not vmap's limitation: smaller lots or max_physical_batch_size
                # Some ops have no batching rule or refuse vmap's batched layouts (group_norm on a
                # strided LSTM output); nothing was released. The same gradients, one example at a time.
                self._loop, self.vmap_error = True, f"{type(exc).__name__}: {exc}"
                if self.warn:
                    warnings.warn(f"torch.func.vmap failed on this model ({self.vmap_error[:200]}); per-example "
                                  "gradients are taken one example at a time from now on: exact, slower.",
                                  RuntimeWarning, stacklevel=2)
        if grads is None:
            # One example at a time with plain autograd on the module itself (no torch.func transform:
            # a custom autograd.Function without a vmap rule works here too).
            pieces = []
            for i in range(inputs[0].shape[0]):
                loss = per_example_loss(module, *(t[i:i + 1] for t in inputs)).reshape(-1)[0]
                g = torch.autograd.grad(loss, [named[k] for k in params], allow_unused=True)
                pieces.append(({k: torch.zeros_like(named[k]) if gi is None else gi for k, gi in zip(params, g)},
                               loss.detach()))
            if pieces:
                grads = {k: torch.stack([g[k] for g, _ in pieces]) for k in params}
                losses = torch.stack([loss for _, loss in pieces])
            else:
                grads = {k: p.new_zeros((0, *p.shape)) for k, p in params.items()}
                losses = inputs[0].new_zeros(0, dtype=torch.float32)
        with full_float32():  # the norms and the contraction rounded alike (TF32 off)
            return self._clip(named, grads, losses, max_grad_norm)

    @staticmethod
    def _clip(named, grads, losses, max_grad_norm):
        flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads.values()], dim=1)
        norms = flat.norm(dim=1)
        if bool(torch.isfinite(norms + losses.to(norms.dtype)).all()):
            scale = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
            out = [(named[k], torch.tensordot(scale, g, dims=1)) for k, g in grads.items()]
            return losses, out, norms
        # Wide path: float64 norms and contraction (a scale ~1e-39 would be subnormal in float32).
        wide_norms = flat.double().norm(dim=1)
        bad = ~torch.isfinite(wide_norms) | ~torch.isfinite(losses)
        keep = ~bad
        scale = torch.where(bad, 0.0, (max_grad_norm / (wide_norms + 1e-6)).clamp(max=1.0))
        out = []
        for k, g in grads.items():
            g = torch.where(keep.view(-1, *([1] * (g.dim() - 1))), g.double(), 0.0)
            out.append((named[k], torch.tensordot(scale, g, dims=1).to(named[k].dtype)))
        return losses, out, torch.where(bad, math.nan, wide_norms).to(norms.dtype)
