"""``DPNet``: a skorch ``NeuralNet`` whose training steps are DP-SGD steps.

This is the one DP-SGD loop of skdp. skorch's ``fit_loop`` runs the epochs and
callbacks; ``DPNet`` overrides only the hooks skorch provides for that:

- ``get_iterator`` draws Poisson lots (what the accountant assumes);
- ``train_step`` is a template: ``update_on_lot`` (the one hook nets with other
  updates override, e.g. a GAN's two networks) releases gradients through
  ``private_step`` (engine: clip + noise, ``on_grad_computed``, optimizer step),
  and the base records the lot with the accountant;
- ``per_example_loss`` / ``get_train_inputs`` are what estimators with other
  losses (score matching, GAN losses) override.

Privacy is planned before the first step: the noise multiplier is calibrated
from ``(epsilon, delta)`` for the exact number of lots, the ledger is charged,
and only then is data touched. Mechanism randomness (lots, noise) comes from
``mechanism_rng`` (fresh OS entropy), never from ``random_state``, and is
dropped when the fit ends.

Callbacks: skorch would hand the raw lot to ``on_batch_*``, ``(X, y)`` to
``on_train_begin`` and the unnoised training loss to the history. Here only
released quantities reach user callbacks: data arguments are replaced by
None, the history holds ``epoch``, ``dur`` and ``epsilon`` only, and a
callback that monitors or scores anything else is refused in ``initialize``.
The unnoised training loss is shown to the data curator by ``verbose`` and
never stored on the net.
"""
import copy
import math
import numbers

import numpy as np
import torch
from skorch import NeuralNet
from skorch.callbacks import BatchScoring, Callback, EpochScoring, PassthroughScoring, PrintLog
from skorch.dataset import Dataset, get_len, unpack_data
from skorch.utils import to_tensor
from torch.utils.data import default_collate

from ..engine import DPSGDEngine, PoissonBatchSampler
from ..exceptions import warn_privacy
from ..privacy import PrivacyAccountant, calibrate_noise_multiplier, compute_epsilon
from ..utils.log import progress
from ..utils.random import make_rng, mechanism_rng, torch_generator
from .init import init_parameters

# What a fitted net releases in its history: everything else computed during training
# (losses, lot sizes) is a function of the private data without noise.
RELEASED_HISTORY_KEYS = frozenset({"epoch", "dur", "epsilon", "batches"})
# Callback arguments that carry private data (raw lots, (X, y), unnoised losses).
PRIVATE_CALLBACK_ARGS = frozenset({"X", "y", "batch", "dataset_train", "dataset_valid", "loss", "y_pred"})


def check_device(device) -> None:
    """Refuse a device that cannot train (unknown, unavailable or ``meta``), naming it."""
    try:
        dev = torch.device(device)
        torch.empty(0, device=dev)
    except (RuntimeError, TypeError, AssertionError) as exc:
        raise ValueError(f"device={device!r} can not be used: {exc}. Use 'cpu' or an available 'cuda'.") from exc
    if dev.type == "meta":
        raise ValueError(f"device={device!r}: meta tensors hold no data, so nothing can be trained; "
                         "use 'cpu' or 'cuda'.")


def plan_dpsgd(n_samples: int, batch_size: int, epochs: int, epsilon: float, delta: float,
               noise_multiplier: float | None = None, accounting: str = "rdp") -> tuple[float, int, float, float]:
    """The privacy plan of a DP-SGD fit, from public quantities only (no data is touched).

    Returns ``(sample_rate, lots_per_epoch, noise_multiplier, epsilon)``: the
    sample rate ``batch_size / n_samples``, ``round(n / batch_size)`` lots per
    epoch, sigma calibrated so that the epsilon at ``delta`` is at most
    ``epsilon`` (or ``noise_multiplier`` as given), and the certified epsilon
    of the whole plan. ``batch_size=-1`` means the whole data set.
    """
    batch_size = n_samples if batch_size == -1 else batch_size
    sample_rate = min(1.0, batch_size / n_samples)
    n_batches = max(1, int(round(n_samples / batch_size)))
    n_steps = n_batches * epochs
    if noise_multiplier is not None:
        sigma = float(noise_multiplier)
    else:
        sigma = calibrate_noise_multiplier(epsilon, delta, sample_rate, n_steps, accounting)
    projected = math.inf if sigma == 0 else compute_epsilon(sigma, sample_rate, n_steps, delta, accounting)
    return sample_rate, n_batches, sigma, projected


class EpsilonLogger(Callback):
    """Adds the epsilon spent so far to the history, so ``PrintLog`` shows it each epoch."""

    def on_epoch_end(self, net, **kwargs):
        net.history.record("epsilon", net.epsilon_spent())


class CuratorPrintLog(PrintLog):
    """skorch's ``PrintLog``, plus the epoch's unnoised training losses for the data curator.

    The losses are put in the history row only while the row is printed, and
    taken out again: no callback, pickle or fitted attribute keeps them.
    """

    def _sink(self, text, verbose):
        # skorch prints only with verbose; a sink other than print would get every row.
        if verbose:
            progress(text)

    def on_epoch_end(self, net, **kwargs):
        row = net.history[-1]
        private = net.pop_private_log()
        row.update(private)
        try:
            super().on_epoch_end(net, **kwargs)
        finally:
            for key in private:
                row.pop(key, None)


def check_callbacks(callbacks):
    """Refuse user callbacks that would steer training on (or score) private quantities.

    A callback that monitors ``train_loss`` (``EarlyStopping``, ``Checkpoint``,
    ``ReduceLROnPlateau``) decides *when* training stops or changes from
    unnoised losses: that decision is released (the number of steps, the
    weights) and no accountant covers it.
    """
    for item in callbacks or []:
        name, cb = item if isinstance(item, (tuple, list)) else (type(item).__name__, item)
        if isinstance(cb, type):
            raise TypeError(f"callback {name!r}: pass an instance, not the class {cb.__name__}.")
        if isinstance(cb, (EpochScoring, BatchScoring, PassthroughScoring)):
            raise ValueError(
                f"callback {name!r} ({type(cb).__name__}) scores the model on the private training data "
                "without noise, which would be released unaccounted. Score on public or held-out data "
                "after fit instead.")
        for attr in ("monitor", "policy_kwargs"):
            monitor = getattr(cb, attr, None)
            if isinstance(monitor, dict):
                monitor = monitor.get("monitor")
            if isinstance(monitor, str) and monitor.removesuffix("_best") not in RELEASED_HISTORY_KEYS:
                raise ValueError(
                    f"callback {name!r} ({type(cb).__name__}) monitors {monitor!r}, which DP training "
                    f"does not release (released history keys: {sorted(RELEASED_HISTORY_KEYS)}); "
                    "steering on private losses would leak unaccounted. Use a fixed number of epochs, "
                    "or monitor=None.")


class _LotLoader:
    """Iterates Poisson lots of a dataset; arrays are sliced directly, empty lots allowed."""

    def __init__(self, dataset, batch_sampler):
        self.dataset = dataset
        self.batch_sampler = batch_sampler

    def __len__(self):
        return len(self.batch_sampler)

    def _fetch(self, idx):
        ds = self.dataset
        if isinstance(ds, Dataset) and isinstance(ds.X, (np.ndarray, torch.Tensor)):
            X = ds.X[idx]
            y = torch.zeros(len(idx)) if ds.y is None else ds.y[idx]
            return X, y
        if len(idx) == 0:  # default_collate can not collate nothing: take a lot of one, keep none
            return tuple(t[:0] for t in default_collate([ds[0]]))
        return default_collate([ds[i] for i in idx])

    def __iter__(self):
        for idx in self.batch_sampler:
            yield self._fetch(np.asarray(idx, dtype=np.int64))


class DPNet(NeuralNet):
    """skorch ``NeuralNet`` trained with DP-SGD (Poisson lots, per-example clipping, noise).

    All of skorch's parameters apply (``module``, ``module__*``, ``criterion``,
    ``optimizer``, ``lr``, ``max_epochs``, ``batch_size`` = expected lot size,
    ``callbacks``, ``device``, ...), except that ``train_split`` defaults to
    None: an internal validation split of the private data would be used
    without privacy accounting.

    Parameters
    ----------
    epsilon, delta : float
        Target privacy of one ``fit``. ``epsilon=inf`` trains with clipping
        and no noise (not private).
    max_grad_norm : float
        Per-example clipping bound C.
    noise_multiplier : float or None
        If None, calibrated so that the fit spends at most ``epsilon``; if
        given, ``epsilon`` is ignored and the spend is only reported.
    accounting : {"rdp", "prv"}
    clipping : {"auto", "ghost", "vmap"}
        How per-example gradients are clipped (see ``skdp.engine``).
    ledger : BudgetLedger or None
        Charged before training; a fit that would overdraw it never starts.
    random_state : int, Generator or None
        Seeds initialisation (and other non-mechanism draws). Lots and noise
        always come from fresh OS entropy (``mechanism_rng``).
    owner : str or None
        Name of the estimator this net trains for, used in ledger entries.
    """

    def __init__(self, module, criterion=torch.nn.CrossEntropyLoss, *args, epsilon=1.0, delta=1e-5,
                 max_grad_norm=1.0, noise_multiplier=None, accounting="rdp", clipping="auto",
                 ledger=None, random_state=None, train_split=None, optimizer=torch.optim.SGD,
                 owner=None, **kwargs):
        kwargs.setdefault("criterion__reduction", "none")
        super().__init__(module, criterion, *args, train_split=train_split, optimizer=optimizer, **kwargs)
        self.epsilon = epsilon
        self.delta = delta
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        self.accounting = accounting
        self.clipping = clipping
        self.ledger = ledger
        self.random_state = random_state
        self.owner = owner

    # ---- set-up -------------------------------------------------------------------------
    def get_default_callbacks(self):
        # skorch's defaults minus the unnoised loss scoring: epoch timer, epsilon, the curator's log.
        timer = [(name, cb) for name, cb in super().get_default_callbacks() if name == "epoch_timer"]
        return timer + [("epsilon", EpsilonLogger()), ("print_log", CuratorPrintLog())]

    def initialize(self):
        check_device(self.device)
        check_callbacks(self.callbacks)
        # random_state seeds initialisation and other non-mechanism draws only.
        self.rng_ = make_rng(self.random_state)
        self.accountant_ = PrivacyAccountant(self.accounting)
        self._private_log = {}
        return super().initialize()

    def initialize_callbacks(self):
        super().initialize_callbacks()
        defaults = dict(self.get_default_callbacks())
        # Trusted: our own defaults, by name and class; everything else sees released quantities only.
        self._trusted_callbacks = {name for name, cb in self.callbacks_
                                   if name in defaults and type(cb) is type(defaults[name])}
        return self

    def notify(self, method_name, **cb_kwargs):
        getattr(self, method_name)(self, **cb_kwargs)
        public = {k: (None if k in PRIVATE_CALLBACK_ARGS else v) for k, v in cb_kwargs.items()}
        trusted = getattr(self, "_trusted_callbacks", ())
        for name, cb in self.callbacks_:
            getattr(cb, method_name)(self, **(cb_kwargs if name in trusted else public))

    # ---- the curator's log (never stored) ---------------------------------------------------
    def log_private(self, key, value, weight=1.0):
        """Add a private per-lot value (e.g. an unnoised loss) to this epoch's curator log."""
        total, count = self._private_log.get(key, (0.0, 0.0))
        self._private_log[key] = (total + float(value) * weight, count + weight)

    def pop_private_log(self):
        """The epoch's weighted means of private values, emptied (only ``CuratorPrintLog`` calls this)."""
        log, self._private_log = getattr(self, "_private_log", {}), {}
        return {k: (t / c if c else math.nan) for k, (t, c) in log.items()}

    def run_single_epoch(self, iterator, training, prefix, step_fn, **fit_params):
        if not training:
            return super().run_single_epoch(iterator, training, prefix, step_fn, **fit_params)
        # skorch records each lot's unnoised loss and size in the history; we keep them out of it.
        for batch in iterator:
            self.notify("on_batch_begin", batch=batch, training=True)
            step = step_fn(batch, **fit_params)
            self.notify("on_batch_end", batch=batch, training=True, **step)

    def __getstate__(self):
        state = super().__getstate__()
        for key in ("_private_log", "_lot_rng"):
            state.pop(key, None)
        return state

    def initialize_module(self):
        """Build the module without touching torch's global generator, then initialise it.

        A module class is built under ``fork_rng`` (the global state is restored, so
        the user's stream is left as found) and re-initialised from the fit's own
        generator. A module instance is taken as starting weights (e.g. publicly
        pre-trained) and deep-copied, so that every fit starts from the same weights.
        """
        kwargs = self.get_params_for("module")
        if isinstance(self.module, torch.nn.Module):
            module = copy.deepcopy(self.module) if not kwargs else type(self.module)(**kwargs)
        else:
            with torch.random.fork_rng(devices=[]):
                module = self.module(**kwargs)
            init_parameters(module, torch_generator(self.rng_))
        self.module_ = module.to(self.device)
        # Sub-modules a user put in eval mode (a frozen BatchNorm with public statistics) stay there:
        # skorch's train() each step would switch them back to batch statistics, which mix examples.
        self._eval_modules = [m for m in module.modules() if not m.training and not any(
            p.requires_grad for p in m.parameters())] if isinstance(self.module, torch.nn.Module) else []
        return self

    def _set_training(self, training=True):
        super()._set_training(training)
        for sub in getattr(self, "_eval_modules", ()):
            sub.eval()

    # ---- privacy plan -------------------------------------------------------------------
    def plan_privacy(self, n_samples, epochs):
        """Sample rate, lots per epoch and noise multiplier for ``epochs`` epochs on ``n_samples``."""
        sample_rate, n_batches, sigma, projected = plan_dpsgd(
            n_samples, self.batch_size, epochs, self.epsilon, self.delta, self.noise_multiplier,
            self.accounting)
        return sample_rate, n_batches, sigma, projected

    def check_runnable(self, sigma, expected_batch_size):
        """Refuse, before any budget is spent, a fit that cannot compute (it would spend for nothing)."""
        check_device(self.device)
        f32_max = float(np.finfo(np.float32).max)
        lrs = {"lr": self.lr, "gan_lr": getattr(self, "gan_lr", None)}
        for name, value in lrs.items():
            if value is not None and not abs(float(value)) < f32_max:
                raise ValueError(f"{name}={value!r} overflows float32 (max {f32_max:.3g}); use a finite rate "
                                 "such as 0.1.")
        if math.isfinite(self.max_grad_norm):
            std = sigma * self.max_grad_norm / max(expected_batch_size, 1e-12)
            if not (self.max_grad_norm < f32_max and std < f32_max):
                raise ValueError(
                    f"max_grad_norm={self.max_grad_norm!r} with noise_multiplier={sigma:.3g} gives a noise "
                    f"standard deviation that overflows float32; use a clipping bound such as 1.0.")

    def epsilon_spent(self):
        """Epsilon spent by all steps so far, at ``delta``."""
        return self.accountant_.get_epsilon(self.delta)

    def fit_loop(self, X, y=None, epochs=None, **fit_params):
        epochs = self.max_epochs if epochs is None else epochs
        n_samples = get_len(X) if not isinstance(X, torch.utils.data.Dataset) else len(X)
        if self.train_split is not None:
            warn_privacy("DPNet with train_split uses a split of the private data for validation "
                          "without privacy accounting.")
        sample_rate, n_batches, sigma, projected = self.plan_privacy(n_samples, epochs)
        if sigma == 0:
            warn_privacy("Training with clipping and no noise (epsilon=inf): the model is NOT "
                          "differentially private.")
        self.check_runnable(sigma, sample_rate * n_samples)
        self.sample_rate_, self.n_batches_, self.noise_multiplier_ = sample_rate, n_batches, sigma
        # Lots and noise: fresh entropy for this fit, dropped when it ends (never pickled). Without
        # noise nothing is private (public data, or a debugging fit that warned): random_state may
        # then make the lots reproducible too.
        if sigma > 0:
            self._lot_rng = mechanism_rng(self)
        else:
            self._lot_rng, self.noise_seeded_ = self.rng_, False
        self._private_log = {}
        engines = []
        try:
            # The engines check the module (skdp.nn.check_module: examples mixed, unsupported layers) before
            # any charge, in the train/eval modes train_step will use: a BatchNorm left in eval mode with
            # trainable parameters is switched to train mode by every step, so it is checked in train mode.
            self._set_training(True)
            engines = self.initialize_engines(sigma, sample_rate * n_samples)
            if self.ledger is not None:
                self.ledger.spend(projected, 0.0 if math.isinf(projected) else self.delta,
                                  label=f"{self.owner or type(self).__name__}: {n_batches * epochs} steps "
                                        f"(sigma={sigma:.4g}, q={sample_rate:.4g})",
                                  estimator=self.owner or type(self).__name__, params=self._public_params())
            return super().fit_loop(X, y, epochs=epochs, **fit_params)
        finally:
            for name in engines:
                getattr(self, name).close()
                delattr(self, name)
            self.__dict__.pop("_lot_rng", None)

    def _public_params(self):
        """The net's plain parameters (numbers, strings), for the ledger's parameter digest."""
        return {k: v for k, v in self.get_params(deep=False).items()
                if isinstance(v, (numbers.Number, str, bool, type(None)))}

    def make_engine(self, module, noise_multiplier, expected_batch_size, clipping=None):
        """A ``DPSGDEngine`` for ``module`` drawing noise from the fit's generator."""
        return DPSGDEngine(
            module, max_grad_norm=self.max_grad_norm, noise_multiplier=noise_multiplier,
            expected_batch_size=expected_batch_size,
            generator=torch_generator(self._lot_rng, device=self.device),
            clipping=self.clipping if clipping is None else clipping)

    def initialize_engines(self, sigma, expected_batch_size):
        """Set the engines ``train_step`` uses for this fit; returns their attribute names.

        Nets that update several networks per lot (a GAN) override this and
        ``train_step``; each accounted step must stay one Gaussian mechanism of
        multiplier ``sigma`` (k releases on one lot: ``sigma * sqrt(k)`` each).
        """
        self.engine_ = self.make_engine(self.module_, sigma, expected_batch_size)
        return ["engine_"]

    # ---- the DP step --------------------------------------------------------------------
    def get_iterator(self, dataset, training=False):
        if not training:
            # Sequential chunks; torch's DataLoader would draw a seed from the global generator.
            batch_size = self.get_params_for("iterator_valid").get("batch_size", self.batch_size)
            n = len(dataset)
            batch_size = n if batch_size in (-1, None) else batch_size
            return _LotLoader(dataset, [np.arange(i, min(i + batch_size, n)) for i in range(0, n, batch_size)])
        sampler = PoissonBatchSampler(len(dataset), self.sample_rate_, self.n_batches_, self._lot_rng)
        return _LotLoader(dataset, sampler)

    def get_train_inputs(self, Xi, yi):
        """Tensors, batch first, that ``per_example_loss`` receives after ``forward``."""
        return (to_tensor(Xi, device=self.device), to_tensor(yi, device=self.device))

    def per_example_loss(self, forward, X, y):
        """One loss per example; ``forward`` is the module (or a functional stand-in)."""
        return self.criterion_(forward(X), y)

    def get_loss(self, y_pred, y_true, X=None, training=False):
        return self.criterion_(y_pred, to_tensor(y_true, device=self.device)).mean()

    def private_step(self, engine, loss_fn, inputs, optimizer=None):
        """Release one noisy clipped gradient of ``loss_fn`` on the lot and step ``optimizer``.

        Returns the per-example losses (unnoised: for the curator's log only).
        """
        optimizer = self.optimizer_ if optimizer is None else optimizer
        optimizer.zero_grad(set_to_none=True)
        losses, _ = engine.private_gradients(loss_fn, inputs)
        self.notify("on_grad_computed", named_parameters=list(self.get_all_learnable_params()),
                    batch=None, training=True)
        optimizer.step()
        return losses

    def update_on_lot(self, inputs):
        """The lot's update: one private step of ``per_example_loss``. Returns per-example losses.

        Nets that update several networks on one lot (a GAN) override this; each
        accounted lot must stay one Gaussian mechanism of multiplier
        ``noise_multiplier_`` (k releases on one lot: ``sigma * sqrt(k)`` each).
        """
        return self.private_step(self.engine_, self.per_example_loss, inputs)

    def train_step(self, batch, **fit_params):
        """Template: inputs -> ``update_on_lot`` -> one accountant step per lot."""
        self._set_training(True)
        Xi, yi = unpack_data(batch)
        losses = self.update_on_lot(self.get_train_inputs(Xi, yi))
        self.accountant_.step(self.noise_multiplier_, self.sample_rate_)
        loss = losses.mean() if len(losses) else torch.zeros(())
        if len(losses):
            self.log_private("train_loss", loss.item(), len(losses))
        return {"loss": loss, "y_pred": None}
