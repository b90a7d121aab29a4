"""``DPNet``: a skorch ``NeuralNet`` whose training steps are DP-SGD steps.

This is the one DP-SGD loop of skdp. skorch's ``fit_loop`` runs the epochs and
callbacks; ``DPNet`` overrides only the hooks skorch provides for that:

- ``get_iterator`` draws Poisson lots (what the accountant assumes);
- ``train_step`` hands the lot to ``DPSGDEngine`` (clip, noise) and steps the
  optimizer, then records the step with the accountant;
- ``per_example_loss`` / ``get_train_inputs`` are what estimators with other
  losses (score matching, GAN losses) override.

Privacy is planned before the first step: the noise multiplier is calibrated
from ``(epsilon, delta)`` for the exact number of lots, the ledger is charged,
and only then is data touched.
"""
import copy
import math
import warnings

import numpy as np
import torch
from skorch import NeuralNet
from skorch.callbacks import Callback
from skorch.dataset import Dataset, get_len, unpack_data
from skorch.utils import to_tensor
from torch.utils.data import default_collate

from ..engine import DPSGDEngine, PoissonBatchSampler
from ..exceptions import PrivacyLeakWarning
from ..privacy import PrivacyAccountant, calibrate_noise_multiplier, compute_epsilon
from ..utils.random import make_rng, torch_generator
from .init import init_parameters


class EpsilonLogger(Callback):
    """Adds the epsilon spent so far to the history, so ``PrintLog`` shows it each epoch."""

    def on_epoch_end(self, net, **kwargs):
        net.history.record("epsilon", net.epsilon_spent())


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
        Seeds initialisation, lot sampling and noise. None: OS entropy.
    """

    def __init__(self, module, criterion=torch.nn.CrossEntropyLoss, *args, epsilon=1.0, delta=1e-5,
                 max_grad_norm=1.0, noise_multiplier=None, accounting="rdp", clipping="auto",
                 ledger=None, random_state=None, train_split=None, optimizer=torch.optim.SGD,
                 **kwargs):
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

    # ---- set-up -------------------------------------------------------------------------
    def get_default_callbacks(self):
        callbacks = list(super().get_default_callbacks())
        callbacks.insert(len(callbacks) - 1, ("epsilon", EpsilonLogger()))  # before print_log
        return callbacks

    def initialize(self):
        self.rng_ = make_rng(self.random_state)
        self.accountant_ = PrivacyAccountant(self.accounting)
        return super().initialize()

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
        return self

    # ---- privacy plan -------------------------------------------------------------------
    def plan_privacy(self, n_samples, epochs):
        """Sample rate, lots per epoch and noise multiplier for ``epochs`` epochs on ``n_samples``."""
        batch_size = n_samples if self.batch_size == -1 else self.batch_size
        sample_rate = min(1.0, batch_size / n_samples)
        n_batches = max(1, int(round(n_samples / batch_size)))
        n_steps = n_batches * epochs
        if self.noise_multiplier is not None:
            sigma = float(self.noise_multiplier)
        else:
            sigma = calibrate_noise_multiplier(self.epsilon, self.delta, sample_rate, n_steps,
                                               self.accounting)
        projected = (math.inf if sigma == 0 else
                     compute_epsilon(sigma, sample_rate, n_steps, self.delta, self.accounting))
        return sample_rate, n_batches, sigma, projected

    def epsilon_spent(self):
        """Epsilon spent by all steps so far, at ``delta``."""
        return self.accountant_.get_epsilon(self.delta)

    def fit_loop(self, X, y=None, epochs=None, **fit_params):
        epochs = self.max_epochs if epochs is None else epochs
        n_samples = get_len(X) if not isinstance(X, torch.utils.data.Dataset) else len(X)
        if self.train_split is not None:
            warnings.warn("DPNet with train_split uses a split of the private data for validation "
                          "without privacy accounting.", PrivacyLeakWarning)
        sample_rate, n_batches, sigma, projected = self.plan_privacy(n_samples, epochs)
        if sigma == 0:
            warnings.warn("Training with clipping and no noise (epsilon=inf): the model is NOT "
                          "differentially private.", PrivacyLeakWarning)
        if self.ledger is not None:
            self.ledger.spend(projected, 0.0 if math.isinf(projected) else self.delta,
                              label=f"{type(self).__name__}: {n_batches * epochs} steps")
        self.sample_rate_, self.n_batches_, self.noise_multiplier_ = sample_rate, n_batches, sigma
        engines = self.initialize_engines(sigma, sample_rate * n_samples)
        try:
            return super().fit_loop(X, y, epochs=epochs, **fit_params)
        finally:
            for name in engines:
                getattr(self, name).close()
                delattr(self, name)

    def make_engine(self, module, noise_multiplier, expected_batch_size, clipping=None):
        """A ``DPSGDEngine`` for ``module`` drawing noise from the fit's generator."""
        return DPSGDEngine(
            module, max_grad_norm=self.max_grad_norm, noise_multiplier=noise_multiplier,
            expected_batch_size=expected_batch_size,
            generator=torch_generator(self.rng_, device=self.device),
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
        sampler = PoissonBatchSampler(len(dataset), self.sample_rate_, self.n_batches_, self.rng_)
        return _LotLoader(dataset, sampler)

    def get_train_inputs(self, Xi, yi):
        """Tensors, batch first, that ``per_example_loss`` receives after ``forward``."""
        return (to_tensor(Xi, device=self.device), to_tensor(yi, device=self.device))

    def per_example_loss(self, forward, X, y):
        """One loss per example; ``forward`` is the module (or a functional stand-in)."""
        return self.criterion_(forward(X), y)

    def get_loss(self, y_pred, y_true, X=None, training=False):
        return self.criterion_(y_pred, to_tensor(y_true, device=self.device)).mean()

    def train_step(self, batch, **fit_params):
        self._set_training(True)
        Xi, yi = unpack_data(batch)
        inputs = self.get_train_inputs(Xi, yi)
        self._zero_grad_optimizer()
        losses, _ = self.engine_.private_gradients(self.per_example_loss, inputs)
        self.notify("on_grad_computed", named_parameters=list(self.get_all_learnable_params()),
                    batch=batch, training=True)
        self.optimizer_.step()
        self.accountant_.step(self.noise_multiplier_, self.sample_rate_)
        loss = losses.mean() if len(losses) else torch.zeros(())
        return {"loss": loss, "y_pred": None}
