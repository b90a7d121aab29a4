"""The one DP-SGD step every skdp estimator trains through.

``DPSGDEngine.private_gradients`` turns a lot into noisy clipped gradients in
``param.grad``::

    grad = (sum_i clip(g_i, C) + N(0, sigma^2 C^2 I)) / expected_lot_size

Dividing by the *expected* lot size (not the realised one) keeps the
sensitivity of the released sum at C under Poisson sampling. Any torch
optimizer then steps on these gradients; momentum and the like are
post-processing.

Before the first clipped step the engine refuses modules that break the
sensitivity bound whatever the clipping (``checker.check_module``, which runs
the validators of ``validators.check_dp_compatible``:
BatchNorm in train mode mixes the examples of a lot, running statistics are
released without noise). With ``clipping="auto"`` a hook clipper that finds at
run time that it cannot clip the model exactly (a layer called twice, a first
dim that is not the example dim, a parameter used outside its layer) raises
``UnsupportedModelError`` before anything is released; the engine then
switches for good to the exact ``FunctionalClipper`` and redoes the lot.
"""
import math

import torch

from .functional import FunctionalClipper
from .hooks import HookClipper, UnsupportedModelError
from .checker import check_module

CLIPPINGS = ("auto", "ghost", "vmap")


def make_clipper(module, clipping="auto"):
    """``"ghost"``: hooks and per-layer rules; ``"vmap"``: torch.func; ``"auto"``: ghost if it can."""
    if clipping == "vmap":
        return FunctionalClipper(module)
    if clipping == "ghost":
        return HookClipper(module)
    if clipping == "auto":
        try:
            return HookClipper(module)
        except UnsupportedModelError:
            return FunctionalClipper(module)
    raise ValueError(f"clipping must be one of {CLIPPINGS}, got {clipping!r}.")


class DPSGDEngine:
    """Clip per example, add Gaussian noise, write ``param.grad``.

    Parameters
    ----------
    module : torch.nn.Module
    max_grad_norm : float
        Clipping bound C on each example's gradient (all parameters together).
    noise_multiplier : float
        sigma; the noise standard deviation is ``sigma * C``. 0 disables noise.
    expected_batch_size : float
        Expected lot size ``sample_rate * n_samples``.
    generator : torch.Generator
        Source of the noise, on the module's device.
    clipping : {"auto", "ghost", "vmap"}
    """

    def __init__(self, module, *, max_grad_norm, noise_multiplier, expected_batch_size,
                 generator, clipping="auto"):
        self.module = module
        self.max_grad_norm = float(max_grad_norm)
        self.noise_multiplier = float(noise_multiplier)
        self.expected_batch_size = float(expected_batch_size)
        self.generator = generator
        self.clipping = clipping
        self.params = [p for p in module.parameters() if p.requires_grad]
        # A non-private baseline (no clipping, no noise) may train any module (BatchNorm included).
        self.clipper = None if self._baseline() else self._make_clipper()

    def _baseline(self):
        return self.noise_multiplier == 0 and math.isinf(self.max_grad_norm)

    def _make_clipper(self):
        # The one home of the module checks (skdp.nn.check_module): refused before any clipped step.
        check_module(self.module, self.clipping).raise_if_refused()
        return make_clipper(self.module, self.clipping)

    def _clipped_sum(self, per_example_loss, inputs):
        if self.clipper is None:
            self.clipper = self._make_clipper()
        try:
            return self.clipper.clipped_sum(per_example_loss, inputs, self.max_grad_norm)
        except UnsupportedModelError:
            # Raised by the hooks before any gradient is released: under "auto" switch to the exact path.
            if self.clipping != "auto" or not isinstance(self.clipper, HookClipper):
                raise
            self.clipper.remove()
            self.clipper = FunctionalClipper(self.module)
            return self.clipper.clipped_sum(per_example_loss, inputs, self.max_grad_norm)

    def close(self):
        if self.clipper is not None:
            self.clipper.remove()

    def private_gradients(self, per_example_loss, inputs):
        """Set ``param.grad`` to the noisy clipped mean gradient of the lot ``inputs``.

        ``per_example_loss(forward, *inputs)`` must return one loss per example.
        Returns the (detached) per-example losses and gradient norms.
        """
        n = inputs[0].shape[0]
        grads = {}
        losses = norms = inputs[0].new_zeros(0)
        if n > 0 and self._baseline():
            # Nothing to clip and no noise (a non-private baseline): one ordinary backward pass.
            losses = per_example_loss(self.module, *inputs)
            batch_grads = torch.autograd.grad(losses.sum(), self.params, allow_unused=True)
            grads = {p: g for p, g in zip(self.params, batch_grads) if g is not None}
            losses = losses.detach()
        elif n > 0:
            losses, pairs, norms = self._clipped_sum(per_example_loss, inputs)
            for p, g in pairs:
                grads[p] = grads[p] + g if p in grads else g
        # Noise is drawn already scaled and the clipped sum added into it in place:
        # one pass of the generator and one of the addition per parameter.
        inv_lot = 1.0 / self.expected_batch_size
        std = self.noise_multiplier * self.max_grad_norm * inv_lot
        for p in self.params:
            g = grads.get(p)
            if std > 0:
                out = torch.empty_like(p).normal_(0.0, std, generator=self.generator)
                if g is not None:
                    out.add_(g.detach(), alpha=inv_lot)
            else:
                out = torch.zeros_like(p) if g is None else g.detach() * inv_lot
            p.grad = out
        return losses, norms
