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
import concurrent.futures
import math
import numbers
import os
import threading

import torch

from ..utils import taps
from .functional import FunctionalClipper
from .hooks import HookClipper, UnsupportedModelError, _TooFewToProve
from .checker import check_module
from .validators import (buffer_versions, check_buffers_unchanged, check_parameters_unchanged, check_state_unchanged,
                         module_state, parameter_versions)

CLIPPINGS = ("auto", "ghost", "vmap")
_POOL_LOCK = threading.Lock()
_POOL = {}


def _noise_pool():
    """The one helper thread that draws the engines' next noise (a new one in a forked child: no thread there)."""
    with _POOL_LOCK:
        pool = _POOL.get(os.getpid())
        if pool is None:
            _POOL.clear()
            pool = _POOL[os.getpid()] = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="skdp-noise")
        return pool




def make_clipper(module, clipping="auto"):
    """Build the per-example clipper of ``module`` for a clipping method.

    A clipper computes, for a lot of n examples with per-example gradients
    ``g_i``, the clipped sum ``sum_i g_i * min(1, C / ||g_i||)`` (the norm
    over all trainable parameters together), never the plain sum: that bound
    C on each example's contribution is the sensitivity the Gaussian noise is
    calibrated to. The methods differ only in how they get ``||g_i||``:

    - ``"ghost"``: forward hooks and the per-layer rules of :func:`register`
      (one forward, one backward, no per-example gradient tensors unless
      cheaper). It raises ``UnsupportedModelError`` at construction for a
      layer it cannot clip exactly (no rule, tied weights, uncovered
      parameters).
    - ``"vmap"``: per-example gradients by ``torch.func.vmap``; exact for any
      layer and loss torch.func can differentiate, and slower.
    - ``"auto"``: the hook clipper where it can be built, else the vmap one.
      :class:`DPSGDEngine` also switches to vmap for good when the hooks find
      at run time, before anything is released, that they cannot clip the
      model exactly.

    Parameters
    ----------
    module : torch.nn.Module
        The network whose per-example gradients are clipped.
    clipping : {"auto", "ghost", "vmap"}, default="auto"
        The clipping method.

    Returns
    -------
    clipper : object
        A ``HookClipper`` or a ``FunctionalClipper``. Its
        ``clipped_sum(per_example_loss, inputs, max_grad_norm)`` returns the
        per-example losses, ``[(param, clipped gradient sum), ...]`` and the
        per-example norms; ``remove()`` takes its hooks off the module.

    Raises
    ------
    ValueError
        If ``clipping`` is not one of ``CLIPPINGS``.
    UnsupportedModelError
        Under ``"ghost"``, if a layer has no exact per-layer rule.

    See Also
    --------
    DPSGDEngine : The step that adds the noise to the clipped sum.
    register : Add a per-layer rule, so that ``"ghost"`` covers a new layer type.
    check_module : Which path each layer of a module takes, before a fit.

    Examples
    --------
    >>> from torch import nn
    >>> from skdp.engine import make_clipper
    >>> clipper = make_clipper(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)))
    >>> type(clipper).__name__
    'HookClipper'
    >>> clipper.remove()
    >>> type(make_clipper(nn.Linear(4, 2), clipping="vmap")).__name__
    'FunctionalClipper'
    """
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

    One DP-SGD step on a lot of n examples (n may be 0) sets every trainable
    parameter's ``grad`` to

    ``(sum_i clip(g_i, C) + N(0, sigma^2 C^2 I)) / B``

    with ``clip(g, C) = g * min(1, C / ||g||)`` (the norm over all trainable
    parameters together), ``C = max_grad_norm``, ``sigma =
    noise_multiplier`` and ``B = expected_batch_size``. Adding or removing one
    record moves the clipped sum by at most C, so each step is a Gaussian
    mechanism of multiplier sigma; dividing by the *expected* lot size, not
    the realised one, keeps it so under Poisson sampling (the realised size
    depends on the data). The optimizer's step on these gradients is
    post-processing. The accountant is not the engine's: the caller records
    each step (``skdp.nn.DPNet`` does).

    The module is checked before the first clipped step
    (:func:`check_module`): a module DP-SGD cannot train privately (BatchNorm
    in train mode, running statistics) raises ``UnsupportedModuleError``
    before anything is released. With ``noise_multiplier=0`` and
    ``max_grad_norm=inf`` (a non-private baseline) nothing is clipped or
    checked and any module trains.

    Parameters
    ----------
    module : torch.nn.Module
        The network; its trainable parameters (``requires_grad``) get the
        noisy gradients.
    max_grad_norm : float
        Clipping bound C on each example's gradient (all parameters together).
    noise_multiplier : float
        Sigma; the noise standard deviation on the clipped sum is ``sigma *
        C``. 0 disables the noise (not private).
    expected_batch_size : float
        Expected lot size ``sample_rate * n_samples``; the noisy sum is divided
        by it.
    generator : torch.Generator
        Source of the noise, on the module's device. It must be secret and
        fresh (``mechanism_rng``): whoever can replay it can subtract the noise.
    clipping : {"auto", "ghost", "vmap"}, default="auto"
        The per-example clipping method (see :func:`make_clipper`).
    max_physical_batch_size : int or None, default=None
        Largest number of examples put through the module at once. A lot
        larger than this is cut into pieces whose clipped sums are added
        before the noise is drawn once: the release is the same function of
        the lot (each example's loss depends on that example alone), so the
        privacy is unchanged; only memory (activations, per-layer buffers)
        is bounded. None: the whole lot at once.
    watch : sequence of torch.nn.Module, default=()
        Other modules the loss runs (a net's criterion): a training forward
        must leave their state unchanged too, as the module's.

    Attributes
    ----------
    params : list of torch.nn.Parameter
        The trainable parameters, whose ``grad`` each step sets.
    clipper : object or None
        The clipper in use (None for the non-private baseline).
    draw_noise_ahead : bool
        Class attribute, True: on a CPU generator, the next lot's noise is
        drawn on a helper thread while the caller steps and computes the next
        lot, from a private copy of the secret generator's state, so the values
        are those of drawing at the step (the first lot's noise is drawn at its
        step). It is used only if the generator still holds that state at the
        next step (nothing re-seeded or drew from it) and the noise scale is
        unchanged; the generator is then advanced as by the draw. Otherwise,
        and at ``close``, it is discarded unseen. False: every lot's noise is
        drawn at its step.

    See Also
    --------
    make_clipper : The clipping methods.
    register : Per-layer rules of the ``"ghost"`` method.
    skdp.nn.DPNet : The skorch net that runs one engine step per Poisson lot.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from skdp.engine import DPSGDEngine
    >>> from skdp.utils.random import mechanism_rng, torch_generator
    >>> model = nn.Linear(3, 2)
    >>> engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.1, expected_batch_size=4,
    ...                      generator=torch_generator(mechanism_rng()))
    >>> def per_example_loss(forward, x, y):
    ...     return nn.functional.cross_entropy(forward(x), y, reduction="none")
    >>> x, y = torch.randn(5, 3), torch.tensor([0, 1, 0, 1, 1])
    >>> losses, norms = engine.private_gradients(per_example_loss, (x, y))
    >>> losses.shape, norms.shape, model.weight.grad.shape
    (torch.Size([5]), torch.Size([5]), torch.Size([2, 3]))
    >>> engine.close()
    """

    draw_noise_ahead = True

    def __init__(self, module, *, max_grad_norm, noise_multiplier, expected_batch_size,
                 generator, clipping="auto", max_physical_batch_size=None, watch=()):
        self.module = module
        self.watch = [m for m in watch if isinstance(m, torch.nn.Module) and m is not module]
        if max_physical_batch_size is not None and not (
                isinstance(max_physical_batch_size, numbers.Integral) and max_physical_batch_size >= 1):
            raise ValueError(f"max_physical_batch_size must be None or an int >= 1, got "
                             f"{max_physical_batch_size!r}.")
        self.max_physical_batch_size = max_physical_batch_size
        self.max_grad_norm = float(max_grad_norm)
        self.noise_multiplier = float(noise_multiplier)
        self.expected_batch_size = float(expected_batch_size)
        self.generator = generator
        self.clipping = clipping
        self.params = [p for p in module.parameters() if p.requires_grad]
        self._ahead = None  # (future of (next lot's noise, generator copy after it), its std, state before it)
        self._snapshots = (None, None)  # the guard's copies of the parameters and buffers, reused across lots
        # A non-private baseline (no clipping, no noise) may train any module (BatchNorm included).
        self.clipper = None if self._baseline() else self._make_clipper()

    def _baseline(self):
        return self.noise_multiplier == 0 and math.isinf(self.max_grad_norm)

    def _make_clipper(self):
        # The one home of the module checks (skdp.nn.check_module): refused before any clipped step.
        check_module(self.module, self.clipping).raise_if_refused()
        return make_clipper(self.module, self.clipping)

    def _clipped_sum(self, per_example_loss, inputs, lot=None):
        if self.clipper is None:
            self.clipper = self._make_clipper()
        # A forward that writes a parameter (Embedding(max_norm=...), a custom layer) or a buffer (a running
        # statistic) changes what is released from the data without noise: refused, whichever clipper
        # ran it, the hooks' first-lot probe included.
        # ... and so is any other state a training forward leaves in the module's tree (an attribute holding
        # the lot, a buffer rebound to a running statistic): refused before anything is released.
        # The snapshots of the previous lot are done with: their copies are overwritten, not reallocated.
        reuse = getattr(self, "_snapshots", (None, None))  # (an engine pickled before they existed has none)
        params, buffers = self._snapshots = (parameter_versions(self.module, reuse=reuse[0]),
                                             buffer_versions(self.module, reuse=reuse[1]))
        # Every lot in depth (containers, helper objects, class-level containers, tensors and arrays by content):
        # a forward that writes a record into a helper array in place on a later lot, uses it, and erases it
        # before the fit ends shows only on the lot it writes (review_s33 r06, f07).
        deep = True
        state = [(m, module_state(m, deep=deep)) for m in (self.module, *self.watch)], deep
        try:
            # The whole lot for the hooks' first-lot probe, whatever the piece: it needs several examples.
            out = self.clipper.clipped_sum(per_example_loss, inputs, self.max_grad_norm, probe_inputs=lot)
        except _TooFewToProve:
            # The hooks cannot be proven on a lot of 1-2 examples yet: this lot takes the exact path, and the
            # hooks are probed again on the next lot.
            out = FunctionalClipper(self.module, warn=False).clipped_sum(per_example_loss, inputs, self.max_grad_norm)
        except UnsupportedModelError:
            # Raised by the hooks before any gradient is released: under "auto" switch to the exact path.
            if self.clipping != "auto" or not isinstance(self.clipper, HookClipper):
                raise
            self._check_unchanged(params, buffers, state)
            self.clipper.remove()
            self.clipper = FunctionalClipper(self.module)
            out = self.clipper.clipped_sum(per_example_loss, inputs, self.max_grad_norm)
        self._check_unchanged(params, buffers, state)
        return out

    def _check_unchanged(self, params, buffers, state):
        check_parameters_unchanged(self.module, params)
        check_buffers_unchanged(self.module, buffers)
        states, deep = state
        for m, before in states:
            check_state_unchanged(m, before, deep=deep, owner="module" if m is self.module else "criterion")

    def close(self):
        """Remove the clipper's hooks from the module and drop any noise drawn ahead (call it when the fit ends)."""
        self._discard_ahead()
        self._snapshots = (None, None)
        if self.clipper is not None:
            self.clipper.remove()

    def __getstate__(self):
        # Noise drawn ahead is never handed on (nor its pending draw, which cannot be copied), nor the noise
        # generator: a copy pickled during a fit (a checkpoint) would make every later lot's noise reproducible
        # (review_s35 c02). An unpickled engine draws no noise until it is given a fresh generator.
        self._discard_ahead()
        return {**self.__dict__, "_snapshots": (None, None), "generator": None}  # the guard's copies: scratch

    @staticmethod
    def _draw(params, std, generator):
        """Per trainable parameter, ``N(0, std^2 I)`` from ``generator``, in the order of ``params``."""
        return [torch.empty_like(p).normal_(0.0, std, generator=generator) for p in params]

    def _discard_ahead(self):
        """Drop the draw made ahead, once finished (the engine's generator was never advanced by it)."""
        if self._ahead is not None:
            concurrent.futures.wait([self._ahead[0]])
            self._ahead = None

    def _noise(self, std):
        """This lot's noise: the draw made ahead if it is what the generator would give now, else drawn now.

        The draw ahead runs on a private copy of the generator taken at the state this draw starts from; it
        is used only when the scale is this lot's and the engine's generator still holds that state (nothing
        re-seeded or drew from it since), and the generator is then moved to the copy's state after the draw:
        the values and the generator's state are exactly those of drawing now.
        """
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            future, ahead_std, start = ahead
            noise, copy = future.result()
            if ahead_std == std and torch.equal(self.generator.get_state(), start):
                self.generator.set_state(copy.get_state())
                return noise
        return self._draw(self.params, std, self.generator)

    def _start_ahead(self, std):
        """Draw the next lot's noise on the helper thread (CPU generators only: a CUDA draw is asynchronous)."""
        if not (self.draw_noise_ahead and std > 0 and self.generator.device.type == "cpu"):
            return
        start = self.generator.get_state()
        copy = torch.Generator()
        copy.set_state(start)
        params = list(self.params)
        future = _noise_pool().submit(lambda: (self._draw(params, std, copy), copy))
        self._ahead = (future, std, start)

    def private_gradients(self, per_example_loss, inputs):
        """Set ``param.grad`` to the noisy clipped mean gradient of the lot ``inputs``.

        Parameters
        ----------
        per_example_loss : callable
            ``per_example_loss(forward, *inputs)`` returns a tensor of shape
            ``(n,)``, one loss per example, where ``forward`` computes the
            module's output (the module itself, or its functional form on the
            vmap path). Example i's loss must depend on example i alone.
        inputs : tuple of torch.Tensor
            The lot, with the examples along dim 0 (n may be 0: an empty lot
            still gets the noise, as the accountant assumes).

        Returns
        -------
        losses : torch.Tensor of shape (n,)
            The per-example losses, detached.
        norms : torch.Tensor of shape (n,) or (0,)
            The per-example gradient norms before clipping (empty for the
            non-private baseline; NaN for an example whose gradient or loss is
            not finite, which contributes zero). Like ``losses``, they are
            computed from the data without noise: for the data curator only,
            never to be released.
        """
        if self.noise_multiplier > 0 and getattr(self, "generator", None) is None:
            # A pickled or copied engine keeps no generator; torch would draw from its global one, which the user
            # seeds (review_s35 d02). Refused before anything is computed.
            raise ValueError("This DPSGDEngine has no noise generator (it was pickled or copied): give it a fresh "
                             "one, engine.generator = skdp.utils.random.torch_generator(mechanism_rng()).")
        n = inputs[0].shape[0]
        grads = {}
        losses = norms = inputs[0].new_zeros(0)
        # Pieces of at most max_physical_batch_size examples: sum_i clip(g_i) is a sum over examples,
        # so adding the pieces' clipped sums gives the lot's exactly (up to float summation order).
        step = self.max_physical_batch_size or max(n, 1)
        piece_losses, piece_norms = [], []
        for start in range(0, n, step):
            piece = tuple(t[start:start + step] for t in inputs)
            if self._baseline():
                # Nothing to clip and no noise (a non-private baseline): one ordinary backward pass.
                piece_loss = per_example_loss(self.module, *piece)
                batch_grads = torch.autograd.grad(piece_loss.sum(), self.params, allow_unused=True)
                pairs = [(p, g) for p, g in zip(self.params, batch_grads) if g is not None]
                piece_losses.append(piece_loss.detach())
            else:
                piece_loss, pairs, piece_norm = self._clipped_sum(per_example_loss, piece, lot=inputs)
                piece_losses.append(piece_loss)
                piece_norms.append(piece_norm)
            for p, g in pairs:
                grads[p] = grads[p] + g if p in grads else g
        if piece_losses:
            losses = piece_losses[0] if len(piece_losses) == 1 else torch.cat(piece_losses)
        if piece_norms:
            norms = piece_norms[0] if len(piece_norms) == 1 else torch.cat(piece_norms)
        if not self._baseline():
            # The mechanism's exact input, the clipped sum (sensitivity C in L2), through the audit tap
            # (skdp.utils.taps: the identity outside tests and audits).
            clipped = taps.release("dpsgd", [grads[p] if p in grads else torch.zeros_like(p) for p in self.params],
                                   self.max_grad_norm, "l2")
            # Audit-only gradient canaries of skdp.audit (norm C each, in the lots like records): identity else.
            clipped = taps.add_gradient_canaries(self.params, clipped, self.max_grad_norm)
            grads = dict(zip(self.params, clipped))
        # Noise is drawn already scaled and the clipped sum added into it in place:
        # one pass of the generator and one of the addition per parameter.
        inv_lot = 1.0 / self.expected_batch_size
        std = self.noise_multiplier * self.max_grad_norm * inv_lot * taps.noise_factor()
        noise = self._noise(std) if std > 0 else None
        for i, p in enumerate(self.params):
            g = grads.get(p)
            if noise is not None:
                out = noise[i]
                if g is not None:
                    out.add_(g.detach(), alpha=inv_lot)
            else:
                out = torch.zeros_like(p) if g is None else g.detach() * inv_lot
            p.grad = out
        if not self._baseline():
            # Audit-only: the canaries' scores read the release at their coordinates (nothing outside an audit).
            taps.gradients_released(self.params, self.expected_batch_size, std)
        # The next lot's noise, drawn while the caller steps and computes that lot (the same values as drawn then).
        self._start_ahead(std)
        return losses, norms
