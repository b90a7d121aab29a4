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
import contextlib
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
from ..engine.validators import check_state_unchanged, module_state
from ..exceptions import warn_privacy
from ..privacy import PrivacyAccountant, calibrate_noise_multiplier, compute_epsilon
from ..privacy.accounting import dpsgd_cost
from ..privacy.report import INTERRUPTED, begin_training, next_stamp, privacy_notes, set_privacy_attributes
from ..utils import taps
from ..utils.log import progress
from ..utils.random import make_rng, mechanism_rng, torch_generator
from ..utils.validation import NET_CHECKED, check_dpsgd_params
from ._data import RowSource, _Chunks
from .init import init_parameters

# What a fitted net releases in its history: everything else computed during training
# (losses, lot sizes) is a function of the private data without noise.
RELEASED_HISTORY_KEYS = frozenset({"epoch", "dur", "epsilon", "batches"})
# Callback arguments that carry private data (raw lots, (X, y), unnoised losses).
PRIVATE_CALLBACK_ARGS = frozenset({"X", "y", "batch", "dataset_train", "dataset_valid", "loss", "y_pred"})


def _cuda_devices(device):
    """The CUDA device indices ``torch.random.fork_rng`` must fork for a net on ``device``."""
    dev = torch.device(device)
    return [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []


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
    """Plan the privacy of a DP-SGD fit from public quantities only (no data is touched).

    Lots are Poisson-sampled with rate ``q = batch_size / n_samples``, there
    are ``round(n / batch_size)`` lots per epoch, and sigma is the smallest
    noise multiplier whose certified epsilon at ``delta`` after all
    ``epochs * lots`` steps is at most ``epsilon`` (bisection on the
    accountant). Every estimator trained through :class:`DPNet` plans this
    way before it reads a record.

    Parameters
    ----------
    n_samples : int
        Number of training records (treated as public).
    batch_size : int
        Expected lot size; ``-1`` means the whole data set (``q = 1``).
    epochs : int
        Number of passes.
    epsilon : float
        Target epsilon of the whole fit.
    delta : float
        Target delta.
    noise_multiplier : float or None, default=None
        If given, used as is and ``epsilon`` is ignored; the returned epsilon
        is then what the accountant certifies for it.
    accounting : {"rdp", "prv"}, default="rdp"
        The accountant.

    Returns
    -------
    sample_rate : float
        The Poisson sampling rate ``q``.
    lots_per_epoch : int
        Lots drawn per epoch.
    noise_multiplier : float
        Sigma: the noise's standard deviation in units of the clipping bound.
    epsilon : float
        Certified epsilon of the whole plan at ``delta`` (``inf`` when sigma is 0).

    See Also
    --------
    skdp.calibrate_noise_multiplier : The bisection behind the calibration.
    skdp.compute_epsilon : The epsilon of a given plan.

    Examples
    --------
    >>> from skdp.nn import plan_dpsgd
    >>> q, lots, sigma, eps = plan_dpsgd(1000, 250, epochs=10, epsilon=1.0, delta=1e-5)
    >>> q, lots, eps <= 1.0
    (0.25, 4, True)
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
    """Record the epsilon spent so far in the history, so that ``PrintLog`` shows it each epoch.

    One of :class:`DPNet`'s default callbacks. The value is the accountant's
    certified epsilon at the net's ``delta`` after the lots taken so far: a
    function of public quantities only, so it may be printed and kept.

    See Also
    --------
    DPNet : The net that installs it.

    Examples
    --------
    >>> from skdp.nn import EpsilonLogger
    >>> EpsilonLogger()
    <skdp.nn.net.EpsilonLogger object at ...>
    """

    def on_epoch_end(self, net, **kwargs):
        """Record ``net.epsilon_spent()`` under ``"epsilon"`` in the epoch's history row.

        Parameters
        ----------
        net : DPNet
            The net being trained.
        **kwargs : dict
            The callback arguments of skorch (unused).
        """
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
    """Iterates Poisson lots of a dataset; arrays are sliced directly, empty lots allowed.

    A ``RowSource`` (memmap, Dataset: :mod:`skdp.nn._data`) reads only the
    lot's rows, so data larger than memory is never loaded whole.
    """

    def __init__(self, dataset, batch_sampler):
        self.dataset = dataset
        self.batch_sampler = batch_sampler

    def __len__(self):
        return len(self.batch_sampler)

    def _fetch(self, idx):
        ds = self.dataset
        if isinstance(ds, RowSource):
            return ds.take(idx)
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


#: The training data's parameters, shared by the docstrings of ``fit``, ``partial_fit`` and ``fit_loop``.
_TRAINING_DATA_DOC = """X : array-like, memmap or torch Dataset
            Training inputs.
        y : array-like or None, default=None
            Training targets (None for a Dataset of ``(x, y)`` items)."""


class DPNet(NeuralNet):
    """A skorch ``NeuralNet`` trained with DP-SGD (Poisson lots, per-example clipping, noise).

    The one DP-SGD loop of skdp: every DP-SGD estimator trains through it.
    skorch runs the epochs and callbacks; ``DPNet`` overrides only its hooks.
    ``get_iterator`` draws Poisson lots, ``train_step`` releases one noisy
    clipped gradient per lot (``update_on_lot`` -> ``private_step``) and
    records it with the accountant. Subclasses with other losses override
    ``per_example_loss`` and ``get_train_inputs``; nets that update several
    networks per lot (a GAN) override ``initialize_engines`` and
    ``update_on_lot``. All of skorch's other parameters apply (``module__*``,
    ``lr``, ``max_epochs``, ``batch_size`` = expected lot size,
    ``callbacks``, ``device``, ...).

    Parameters
    ----------
    module : torch.nn.Module class or instance
        The network. A class is built with ``module__*`` and initialised from
        ``random_state``; an instance is taken as starting weights.
    criterion : torch loss class, default=torch.nn.CrossEntropyLoss
        Built with ``reduction="none"``: DP-SGD needs one loss per example.
    *args : tuple
        Passed to ``skorch.NeuralNet``.
    epsilon : float, default=1.0
        Target epsilon of one ``fit``. ``inf`` trains with clipping and no
        noise (not private; warns).
    delta : float, default=1e-5
        Target delta of one ``fit``.
    max_grad_norm : float, default=1.0
        Per-example clipping bound C.
    noise_multiplier : float or None, default=None
        If None, calibrated so that the fit spends at most ``epsilon``; if
        given, ``epsilon`` is ignored and the spend is only reported.
    accounting : {"rdp", "prv"}, default="rdp"
        The accountant.
    clipping : {"auto", "ghost", "vmap"}, default="auto"
        How per-example gradients are clipped (see :mod:`skdp.engine`).
    ledger : BudgetLedger or None, default=None
        Charged before training; a fit that would overdraw it never starts.
    random_state : int, Generator or None, default=None
        Seeds initialisation (and other non-mechanism draws). Lots and noise
        always come from fresh OS entropy (``mechanism_rng``).
    train_split : None, default=None
        The internal validation split of skorch. None by default: a split of the
        private data would be used for validation without privacy accounting
        (any other value warns).
    optimizer : torch optimizer class, default=torch.optim.SGD
        Steps on the noisy gradient (post-processing: any optimizer is private).
    owner : str or None, default=None
        Name of the estimator this net trains for, used in ledger entries.
    max_physical_batch_size : int or None, default=None
        Largest number of examples the engine puts through the module at
        once; larger lots are processed in pieces with the same release (see
        :class:`skdp.engine.DPSGDEngine`). Bounds memory, not privacy.
    ema : float, "auto" or None, default=None
        Exponential moving average of the weights: the released module is
        the average ``w_bar_t = beta_t * w_bar_{t-1} + (1 - beta_t) * w_t``
        of the iterates ``w_t`` after each lot, with ``beta_t = min(ema,
        (1 + t) / (10 + t))`` (t = 0, 1, ... the lots of this fit; the
        warm-up keeps the start from weighing on a short fit). The iterates
        are functions of the released noisy gradients, so their average is
        post-processing: the privacy spent is the same. A float in (0, 1) is
        the decay; "auto": ``skdp.nn._defaults.auto_ema_decay`` of the number
        of lots (public); None or 0: the last iterate is released.
    augment : callable or None, default=None
        Augmentation multiplicity (:mod:`skdp.nn.augment`): ``augment(X,
        generator)`` returns K copies of each row of a lot, shape ``(n, K,
        ...)``, from public, data-independent transforms of that row alone;
        each record's loss is the mean of its K copies' losses, so its
        gradient is the average of theirs *before* clipping: one record still
        moves the clipped sum by at most C, and each lot is charged once. The
        copies are drawn from the fit's fresh mechanism generator. Needs
        ``clipping="vmap"`` or ``"auto"`` (which then takes vmap: the layers
        see K rows per record). None: the records as they are.
    **kwargs : dict
        The parameters of skorch (``lr``, ``max_epochs``, ``batch_size``,
        ``module__*``, ``optimizer__*``, ``callbacks``, ``device``, ...).

    Attributes
    ----------
    module_ : torch.nn.Module
        The trained network.
    accountant_ : PrivacyAccountant
        The steps taken, for :meth:`epsilon_spent`.
    sample_rate_ : float
        Poisson sampling rate of the last fit.
    n_batches_ : int
        Lots per epoch of the last fit.
    noise_multiplier_ : float
        Sigma of the last fit.
    epsilon_ : float
        Epsilon spent by all fits so far (:meth:`epsilon_spent`).
    delta_ : float
        Delta of the guarantee (0 without noise).
    privacy_certified_ : bool
        Whether (``epsilon_``, ``delta_``) is a proven guarantee; not with a
        ``train_split`` (the history holds exact validation losses).
    privacy_notes_ : tuple of str
        Why the fit is not certified (empty when it is).
    privacy_cost_ : Spend
        The spend with its RDP curve, for compositions.
    ema_decay_ : float
        The decay of the weights' moving average in the last fit (0: the
        last iterate is released).

    See Also
    --------
    DPMomentumClassifier : The scikit-learn estimator built on it.
    skdp.engine.DPSGDEngine : The clip-and-noise step it calls on each lot.

    Examples
    --------
    >>> import numpy as np
    >>> import torch
    >>> from skdp.nn import DPNet
    >>> X = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    >>> y = (X[:, 0] > 0).astype(np.int64)
    >>> net = DPNet(torch.nn.Linear, module__in_features=3, module__out_features=2,
    ...             epsilon=1.0, delta=1e-3, lr=0.5, batch_size=16, max_epochs=2, verbose=0)
    >>> net.fit(X, y).epsilon_spent() <= 1.0
    True
    """

    _spends_privacy = True  # declared DP: fit spends through a mechanism and reports it (public_steps.declares_dp)

    def __init__(self, module, criterion=torch.nn.CrossEntropyLoss, *args, epsilon=1.0, delta=1e-5,
                 max_grad_norm=1.0, noise_multiplier=None, accounting="rdp", clipping="auto",
                 ledger=None, random_state=None, train_split=None, optimizer=torch.optim.SGD,
                 owner=None, max_physical_batch_size=None, ema=None, augment=None, **kwargs):
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
        self.max_physical_batch_size = max_physical_batch_size
        self.ema = ema
        self.augment = augment

    # ---- set-up -------------------------------------------------------------------------
    def get_default_callbacks(self):
        """Return skorch's epoch timer, :class:`EpsilonLogger` and the curator's print log.

        Returns
        -------
        callbacks : list of (str, Callback)
            The defaults of skorch, minus the unnoised loss scoring.
        """
        # skorch's defaults minus the unnoised loss scoring: epoch timer, epsilon, the curator's log.
        timer = [(name, cb) for name, cb in super().get_default_callbacks() if name == "epoch_timer"]
        return timer + [("epsilon", EpsilonLogger()), ("print_log", CuratorPrintLog())]

    def fit(self, X, y=None, **fit_params):
        """Initialise (unless ``warm_start`` and initialised) and train: skorch's ``fit``, stamped on entry.

        Parameters
        ----------
        {training_data}
        **fit_params : dict
            Passed to :meth:`train_step`.

        Returns
        -------
        self : DPNet
            The trained net.
        """
        with self._entered():
            return super().fit(X, y, **fit_params)

    def partial_fit(self, X, y=None, classes=None, **fit_params):
        """Train further (initialising first if needed): skorch's ``partial_fit``, stamped on entry.

        Parameters
        ----------
        {training_data}
        classes : None
            Unused (skorch's signature).
        **fit_params : dict
            Passed to :meth:`train_step`.

        Returns
        -------
        self : DPNet
            The trained net.
        """
        with self._entered():
            return super().partial_fit(X, y, classes=classes, **fit_params)

    @contextlib.contextmanager
    def _entered(self):
        """Stamp when the outermost fit call was entered: a fresh fit's training counts from there, before skorch
        initialises the callbacks and notifies ``on_train_begin`` (user code that may refit an upstream step:
        review_s37 k27)."""
        # A trailing "_": skorch takes it for fitted state, not a parameter (clone and get_params leave it out: k29).
        outermost = getattr(self, "_entered_at_", None) is None
        if outermost:
            self._entered_at_ = next_stamp()
        try:
            yield
        finally:
            if outermost:
                self.__dict__.pop("_entered_at_", None)

    def initialize(self):
        """Check the device and callbacks, then initialise as skorch does.

        Returns
        -------
        self : DPNet
            The initialised net.
        """
        check_device(self.device)
        check_callbacks(self.callbacks)
        # random_state seeds initialisation and other non-mechanism draws only.
        self.rng_ = make_rng(self.random_state)
        self.accountant_ = PrivacyAccountant(self.accounting)
        self._private_log = {}
        return super().initialize()

    def initialize_callbacks(self):
        """Initialise the callbacks and note which are skdp's own (trusted with private values).

        Returns
        -------
        self : DPNet
            The net.
        """
        # skorch's initialize_callbacks passes callbacks__<name>__<param> to existing callbacks only and drops the
        # rest without a word (its set_params raises): a parameter for no callback is refused here.
        names = [name for name, _ in self._uniquely_named_callbacks()]
        for key in vars(self):
            target = key[len("callbacks__"):].split("__")[0] if key.startswith("callbacks__") else None
            if target is not None and target not in names:
                raise ValueError(f"Trying to set a parameter for callback {target!r} which does not exist "
                                 f"({key}); the callbacks are {names}.")
        super().initialize_callbacks()
        defaults = dict(self.get_default_callbacks())
        # Trusted: our own defaults, by name and class; everything else sees released quantities only.
        self._trusted_callbacks = {name for name, cb in self.callbacks_
                                   if name in defaults and type(cb) is type(defaults[name])}
        return self

    def notify(self, method_name, **cb_kwargs):
        """Call ``method_name`` on the net and every callback; user callbacks see released values only.

        Parameters
        ----------
        method_name : str
            The callback method (``"on_epoch_end"``, ...).
        **cb_kwargs : dict
            Its arguments; those carrying private data (raw lots, ``(X, y)``,
            unnoised losses) are replaced by None for callbacks not of skdp.
        """
        getattr(self, method_name)(self, **cb_kwargs)
        public = {k: (None if k in PRIVATE_CALLBACK_ARGS else v) for k, v in cb_kwargs.items()}
        trusted = getattr(self, "_trusted_callbacks", ())
        for name, cb in self.callbacks_:
            getattr(cb, method_name)(self, **(cb_kwargs if name in trusted else public))

    # ---- the curator's log (never stored) ---------------------------------------------------
    def log_private(self, key, value, weight=1.0):
        """Add a private per-lot value (e.g. an unnoised loss) to this epoch's curator log.

        Parameters
        ----------
        key : str
            Column of the printed log.
        value : float
            The lot's value.
        weight : float, default=1.0
            Its weight in the epoch's mean (e.g. the lot's size).
        """
        total, count = self._private_log.get(key, (0.0, 0.0))
        self._private_log[key] = (total + float(value) * weight, count + weight)

    def pop_private_log(self):
        """Return the epoch's weighted means of private values and empty the log.

        Only the curator's print log calls this; the values are never stored.

        Returns
        -------
        log : dict
            Weighted mean per key.
        """
        log, self._private_log = getattr(self, "_private_log", {}), {}
        return {k: (t / c if c else math.nan) for k, (t, c) in log.items()}

    def run_single_epoch(self, iterator, training, prefix, step_fn, **fit_params):
        """Run one epoch of lots; unlike skorch, no lot's loss or size enters the history.

        Parameters
        ----------
        iterator : iterable
            The lots (from :meth:`get_iterator`).
        training : bool
            Whether this is a training epoch.
        prefix : str
            The history prefix of skorch (``"train"`` or ``"valid"``).
        step_fn : callable
            :meth:`train_step` or skorch's validation step.
        **fit_params : dict
            Passed to ``step_fn``.

        Returns
        -------
        None
            Validation epochs return what skorch returns.
        """
        if not training:
            return super().run_single_epoch(iterator, training, prefix, step_fn, **fit_params)
        # skorch records each lot's unnoised loss and size in the history; we keep them out of it.
        for batch in iterator:
            self.notify("on_batch_begin", batch=batch, training=True)
            step = step_fn(batch, **fit_params)
            self.notify("on_batch_end", batch=batch, training=True, **step)

    def __getstate__(self):
        state = super().__getstate__()
        # The fit's secret randomness never leaves in a pickle, even one taken during the fit (a checkpoint):
        # the lots', the augmentations', PGE's randomized response and loss projections (review_s35 c02); the
        # engines drop their noise generators themselves (DPSGDEngine.__getstate__).
        # Nor does the fit's entry stamp (a copy would stamp its later fits at this time: review_s37 k29).
        for key in ("_private_log", "_lot_rng", "_ema", "_augment_gen", "_rr_generator", "_loss_rng", "_entered_at_"):
            state.pop(key, None)
        return state

    def initialize_module(self):
        """Build the module without touching torch's global generator, then initialise it.

        A module class is built under ``fork_rng`` (the global state is restored, so
        the user's stream is left as found) and re-initialised from the fit's own
        generator. A module instance is taken as starting weights (e.g. publicly
        pre-trained) and deep-copied, so that every fit starts from the same weights.

        Returns
        -------
        self : DPNet
            The net, with ``module_`` set.
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
        """Plan sample rate, lots per epoch and noise multiplier for ``epochs`` epochs on ``n_samples``.

        Parameters
        ----------
        n_samples : int
            Number of training records (public).
        epochs : int
            Number of epochs.

        Returns
        -------
        plan : tuple of (float, int, float, float)
            ``(sample_rate, lots_per_epoch, noise_multiplier, epsilon)``, as
            :func:`plan_dpsgd` returns them.
        """
        # The estimators' constraints, checked here too: max_grad_norm=inf used to train to NaN weights
        # under a certified epsilon.
        check_dpsgd_params({name: getattr(self, name) for name in NET_CHECKED}, type(self).__name__)
        sample_rate, n_batches, sigma, projected = plan_dpsgd(
            n_samples, self.batch_size, epochs, self.epsilon, self.delta, self.noise_multiplier,
            self.accounting)
        return sample_rate, n_batches, sigma, projected

    def check_runnable(self, sigma, expected_batch_size):
        """Refuse, before any budget is spent, a fit that cannot compute (it would spend for nothing).

        Parameters
        ----------
        sigma : float
            The planned noise multiplier.
        expected_batch_size : float
            The expected lot size ``q * n``.

        Raises
        ------
        ValueError
            If the device is unusable, or a learning rate or the noise's
            standard deviation overflows float32.
        """
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
        """Return the epsilon spent by all steps so far, at ``delta``.

        Returns
        -------
        epsilon : float
            The accountant's certified epsilon.
        """
        return self.accountant_.get_epsilon(self.delta)

    def fit_loop(self, X, y=None, epochs=None, **fit_params):
        """Plan the privacy, charge the ledger, then run skorch's loop over Poisson lots.

        Parameters
        ----------
        {training_data}
        epochs : int or None, default=None
            Number of epochs; ``max_epochs`` if None.
        **fit_params : dict
            Passed to :meth:`train_step`.

        Returns
        -------
        self : DPNet
            The trained net.
        """
        epochs = self.max_epochs if epochs is None else epochs
        n_samples = get_len(X) if not isinstance(X, torch.utils.data.Dataset) else len(X)
        # The number of records is public by assumption (it sets the sample rate and the lot size the noisy
        # sum is divided by): the audit tap may pin it to its neighbour's (skdp.utils.taps).
        n_samples = taps.public_count("n_samples", n_samples)
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
        # The augmentation's shifts and flips: from the fit's fresh entropy too, dropped with it.
        self._augment_gen = torch_generator(self._lot_rng) if self.augment is not None else None
        self._private_log = {}
        engines = []
        try:
            # The engines check the module (skdp.nn.check_module: examples mixed, unsupported layers) before
            # any charge, in the train/eval modes train_step will use: a BatchNorm left in eval mode with
            # trainable parameters is switched to train mode by every step, so it is checked in train mode.
            self._set_training(True)
            engines = self.initialize_engines(sigma, sample_rate * n_samples)
            for name in engines:  # an audit that cannot run is refused before the charge (skdp.utils.taps)
                taps.engine_planned(getattr(self, name).params)
            self.check_training_forward(X, y)
            self._ema_decay(n_batches * epochs)  # a bad ema is refused before the charge (review_s35 d08)
            if self.ledger is not None:
                spend_delta = 0.0 if math.isinf(projected) else self.delta
                self.ledger.spend(projected, spend_delta,
                                  label=f"{self.owner or type(self).__name__}: {n_batches * epochs} steps "
                                        f"(sigma={sigma:.4g}, q={sample_rate:.4g})",
                                  estimator=self.owner or type(self).__name__, params=self._public_params(),
                                  cost=dpsgd_cost([(sigma, sample_rate, n_batches * epochs)], projected,
                                                  spend_delta))
            # Randomness the module draws from torch's global generator while training (dropout masks) comes
            # from the fit's own fresh entropy, not from a seed the user may have set: the global state is
            # forked and left as it was found.
            # From the charge until this fit completes, no certificate speaks for the module (skorch's
            # partial_fit returns after a KeyboardInterrupt, with the module of an interrupted fit: review_s33
            # f08; a first fit too: review_s35 b02); a refusal before the charge keeps the last one (d03). The
            # estimators read this note (DPSGDEstimator._set_fit_results).
            # A continuation (partial_fit, a warm fit: the accountant already holds steps) keeps the notes of the
            # fits it continues and when its training began (review_s37 k18).
            continued = bool(self.accountant_.history)
            earlier = tuple(n for n in getattr(self, "privacy_notes_", ()) if not n.startswith(INTERRUPTED)) \
                if continued else ()
            # A fresh fit's training begins now, even if it is cut before its report (k24, k26).
            began = None if continued else begin_training(self, getattr(self, "_entered_at_", None))
            self.privacy_certified_ = False
            # This fit's own conditions (an audit tap, a seed, train_split) and the earlier notes stay beside the
            # interruption's, for the fit that continues after a cut (k23, k25).
            self.privacy_notes_ = (INTERRUPTED,) + tuple(privacy_notes(
                self, projected, certified=self._certified_reason(), continued=continued))
            self._ema_begin(n_batches * epochs)
            with torch.random.fork_rng(devices=_cuda_devices(self.device)):
                # The whole CPU state from the fit's entropy (manual_seed keeps 32 bits: review_s35 c07).
                torch.default_generator.set_state(torch_generator(self._lot_rng).get_state())
                if _cuda_devices(self.device):
                    torch.cuda.manual_seed_all(int(self._lot_rng.integers(2 ** 63 - 1)))  # Philox: 64 bits
                super().fit_loop(X, y, epochs=epochs, **fit_params)
            self._ema_release()
            self._set_privacy_attributes(continued, earlier, began)
            return self
        finally:
            for name in engines:
                getattr(self, name).close()
                delattr(self, name)
            self.__dict__.pop("_lot_rng", None)
            self.__dict__.pop("_ema", None)
            self.__dict__.pop("_augment_gen", None)

    # ---- the moving average of the weights (post-processing of the noisy iterates) ----------------
    def _ema_decay(self, n_steps):
        """The decay of this fit's moving average from ``ema`` and the number of lots (public); 0: none."""
        from ._defaults import auto_ema_decay

        ema = self.ema
        if ema is None:
            return 0.0
        if isinstance(ema, str):
            if ema != "auto":
                raise ValueError(f"ema={ema!r}: give 'auto', a decay in [0, 1) or None.")
            return auto_ema_decay(n_steps)
        if not (isinstance(ema, numbers.Real) and not isinstance(ema, bool) and 0 <= ema < 1):
            raise ValueError(f"ema={ema!r}: give 'auto', a decay in [0, 1) (0 or None: the last iterate) or None.")
        return float(ema)

    def _ema_params(self):
        return [p for p in self.module_.parameters() if p.requires_grad]

    def _ema_begin(self, n_steps):
        """Start this fit's average at the current weights (a continued fit starts from the released ones)."""
        self.ema_decay_ = self._ema_decay(n_steps)
        self._ema = ([p.detach().clone() for p in self._ema_params()], [0]) if self.ema_decay_ > 0 else None

    def _ema_update(self):
        """``w_bar <- beta_t w_bar + (1 - beta_t) w`` after lot t, ``beta_t = min(decay, (1 + t) / (10 + t))``."""
        state = getattr(self, "_ema", None)
        if state is None:
            return
        averages, count = state
        t = count[0]
        beta = min(self.ema_decay_, (1.0 + t) / (10.0 + t))
        with torch.no_grad():
            for avg, p in zip(averages, self._ema_params()):
                avg.mul_(beta).add_(p.detach(), alpha=1.0 - beta)
        count[0] = t + 1

    def _ema_release(self):
        """Write the average into the module: it is the released model."""
        state = getattr(self, "_ema", None)
        if state is None or state[1][0] == 0:
            return
        with torch.no_grad():
            for avg, p in zip(state[0], self._ema_params()):
                p.copy_(avg)

    def _certified_reason(self):
        """True, or why a fit with the current settings is not certified (its history releases validation losses)."""
        if self.train_split is not None:
            return ("train_split: the history holds exact (unnoised) validation losses of private records, "
                    "released unaccounted")
        return True

    def _set_privacy_attributes(self, continued=False, earlier=(), began=None):
        """``epsilon_``, ``delta_``, ``privacy_certified_``, ``privacy_notes_``, ``privacy_cost_`` of all fits so far;
        ``continued``: this fit continues earlier ones, whose notes were ``earlier``; ``began``: when a fresh fit's
        training began (``begin_training``)."""
        epsilon = self.epsilon_spent()
        self.privacy_notes_ = tuple(earlier)  # what set_privacy_attributes keeps of them on a continuation
        set_privacy_attributes(self, epsilon, self.delta, certified=self._certified_reason(),
                               cost=dpsgd_cost(self.accountant_.history, epsilon, self.delta), continued=continued,
                               trained_since=began)

    def check_training_forward(self, X, y=None):
        """Refuse, before any budget is charged, a module or criterion whose training forward keeps state.

        A dry training forward and backward of :meth:`per_example_loss` on a
        public stand-in lot (a few rows of the input's shape and dtype:
        standard normal from a fixed seed where floating point, zeros
        elsewhere) runs, in train mode, on copies of the module the loss
        runs (the engine's; the net's before any engine is set, for a check
        before a search's charge) and of the criterion. Any state it leaves
        in them (an attribute added, a list
        appended to, a tensor or array written in place: compared in depth,
        :func:`skdp.engine.validators.module_state`) is refused here, before
        the ledger is charged, rather than by the engine on the first real
        lot. The engine still checks the real lots (a write whose stand-in
        value equals the old one shows only there).

        Parameters
        ----------
        X : array-like, memmap or torch Dataset
            The training inputs (only the shape and dtype of a few rows are used).
        y : array-like or None, default=None
            The training targets, likewise.

        Raises
        ------
        UnsupportedModuleError
            If the dry forward changed the state of the module or the criterion.
        """
        engine = getattr(self, "engine_", None)
        if engine is not None and engine.clipper is None:  # the non-private baseline trains any module
            return
        self._set_training(True)
        try:
            inputs = self._stand_in_lot(X, y)
        except Exception:  # no stand-in of this data: the engine's check on the first lot stands alone
            return
        # The module the training loss runs: the engine's (a GAN's generator), or the net's before any engine.
        module = copy.deepcopy(self.module_ if engine is None else engine.module)
        criterion = copy.deepcopy(self.criterion_)
        watched = [(m, owner) for m, owner in ((module, "module"), (criterion, "criterion"))
                   if isinstance(m, torch.nn.Module)]
        before = [module_state(m, deep=True) for m, _ in watched]
        real, self.criterion_ = self.criterion_, criterion
        try:
            with torch.random.fork_rng(devices=_cuda_devices(self.device)):
                losses = self.per_example_loss(module, *inputs)
                if losses.requires_grad:
                    losses.sum().backward()
        except Exception:  # a stand-in the module cannot take (the real lots are checked by the engine)
            pass
        finally:
            self.criterion_ = real
        for (m, owner), state in zip(watched, before):
            check_state_unchanged(m, state, deep=True, owner=owner)

    def _stand_in_lot(self, X, y):
        """``get_train_inputs`` of public stand-in rows: the shape and dtype of up to 3 rows, not their values."""
        if isinstance(X, RowSource):  # a memmap or Dataset streamed by lots: its row shape alone, nothing read
            rows = min(X.n_samples, 3)
            Xi = np.zeros((rows, *X.out_shape), np.float32)
            targets = X.targets if y is None else y
            yi = None if targets is None else targets[:rows]
        elif all(v is None or (hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, torch.Tensor))
                 for v in (X, y)):  # arrays: their shape and dtype alone
            rows = min(len(X), 3)
            Xi, yi = (None if v is None else np.zeros((rows, *v.shape[1:]), dtype=v.dtype) for v in (X, y))
        else:  # a Dataset: a few rows fetched for their shapes only (the values are replaced below)
            dataset = self.get_dataset(X, y)
            Xi, yi = unpack_data(_LotLoader(dataset, None)._fetch(np.arange(min(len(dataset), 3))))
        gen = torch.Generator().manual_seed(0)

        def stand_in(v):
            if isinstance(v, np.ndarray):
                return stand_in(torch.as_tensor(v)).numpy()
            if isinstance(v, torch.Tensor):
                if v.is_floating_point():
                    return torch.randn(v.shape, generator=gen).to(v.dtype).to(v.device)
                return torch.zeros_like(v)
            if isinstance(v, dict):
                return {k: stand_in(u) for k, u in v.items()}
            if isinstance(v, (list, tuple)):
                return type(v)(stand_in(u) for u in v)
            return v

        return self.get_train_inputs(stand_in(Xi), stand_in(yi))

    def _public_params(self):
        """The net's plain parameters (numbers, strings), for the ledger's parameter digest."""
        return {k: v for k, v in self.get_params(deep=False).items()
                if isinstance(v, (numbers.Number, str, bool, type(None)))}

    def make_engine(self, module, noise_multiplier, expected_batch_size, clipping=None):
        """Build a ``DPSGDEngine`` for ``module`` drawing noise from the fit's generator.

        Parameters
        ----------
        module : torch.nn.Module
            The network whose gradients the engine releases.
        noise_multiplier : float
            Sigma of each release.
        expected_batch_size : float
            Expected lot size ``q * n``: the noisy sum is divided by it.
        clipping : {"auto", "ghost", "vmap"} or None, default=None
            The clipping method; the net's ``clipping`` if None.

        Returns
        -------
        engine : skdp.engine.DPSGDEngine
            The engine.
        """
        # The criterion runs in every training forward: its state is checked as the module's.
        return DPSGDEngine(
            module, max_grad_norm=self.max_grad_norm, noise_multiplier=noise_multiplier,
            expected_batch_size=expected_batch_size,
            generator=torch_generator(self._lot_rng, device=self.device),
            clipping=self._clipping_for_augment(self.clipping if clipping is None else clipping),
            max_physical_batch_size=self.max_physical_batch_size,
            watch=[getattr(self, "criterion_", None)])

    def _clipping_for_augment(self, clipping):
        """The clipping of a fit: with ``augment``, the layers see K rows per record, so vmap (each record alone)."""
        if self.augment is None:
            return clipping
        if clipping == "ghost":
            raise ValueError("augment: the per-layer hooks (clipping='ghost') see K rows per record and cannot clip "
                             "the record's averaged gradient; use clipping='vmap' or 'auto'.")
        return "vmap"

    def initialize_engines(self, sigma, expected_batch_size):
        """Set the engines ``train_step`` uses for this fit.

        Nets that update several networks per lot (a GAN) override this and
        ``train_step``; each accounted step must stay one Gaussian mechanism of
        multiplier ``sigma`` (k releases on one lot: ``sigma * sqrt(k)`` each).

        Parameters
        ----------
        sigma : float
            The planned noise multiplier.
        expected_batch_size : float
            Expected lot size ``q * n``.

        Returns
        -------
        names : list of str
            The attribute names of the engines set (closed when the fit ends).
        """
        self.engine_ = self.make_engine(self.module_, sigma, expected_batch_size)
        return ["engine_"]

    # ---- the DP step --------------------------------------------------------------------
    def get_iterator(self, dataset, training=False):
        """Return Poisson lots for training, sequential chunks otherwise.

        Parameters
        ----------
        dataset : skorch Dataset, torch Dataset or row source
            The data.
        training : bool, default=False
            True: lots of the fit's sample rate, drawn from its fresh
            generator (what the accountant assumes). False: chunks in order.

        Returns
        -------
        iterator : iterable of batches
            The lots or chunks.
        """
        if not training:
            # Sequential chunks; torch's DataLoader would draw a seed from the global generator.
            batch_size = self.get_params_for("iterator_valid").get("batch_size", self.batch_size)
            n = len(dataset)
            batch_size = n if batch_size in (-1, None) else batch_size
            return _LotLoader(dataset, _Chunks(n, batch_size))
        sampler = PoissonBatchSampler(len(dataset), self.sample_rate_, self.n_batches_, self._lot_rng)
        return _LotLoader(dataset, sampler)

    def get_train_inputs(self, Xi, yi):
        """Return the tensors, batch first, that ``per_example_loss`` receives after ``forward``.

        Parameters
        ----------
        Xi : array-like or tensor
            The lot's inputs.
        yi : array-like or tensor
            The lot's targets.

        Returns
        -------
        inputs : tuple of torch.Tensor
            ``(X, y)`` on the net's device.
        """
        X, y = to_tensor(Xi, device=self.device), to_tensor(yi, device=self.device)
        if self.augment is not None:  # (n, K, ...): K public augmented copies of each record
            gen = getattr(self, "_augment_gen", None)
            # None: no fit running (a check before a search's charge); within a fit the stand-in lot takes one
            # lot's draws of the fit's own stream (a fixed number: every lot after it is unchanged).
            X = self.augment(X, torch.Generator().manual_seed(0) if gen is None else gen)
        return X, y

    def per_example_loss(self, forward, X, y):
        """Compute one loss per example; ``forward`` is the module (or a functional stand-in).

        Parameters
        ----------
        forward : callable
            The module, or the engine's functional version of it.
        X : torch.Tensor
            The lot's inputs.
        y : torch.Tensor
            The lot's targets.

        Returns
        -------
        losses : torch.Tensor of shape (lot_size,)
            The criterion per example.
        """
        if self.augment is None:
            return self.criterion_(forward(X), y)
        # Augmentation multiplicity: X is (n, K, ...); record i's loss is the mean over its K copies, so its
        # gradient is the mean of theirs, clipped as one: sensitivity C, one charge.
        n, K = X.shape[:2]
        losses = self.criterion_(forward(X.flatten(0, 1)), y.repeat_interleave(K, dim=0))
        return losses.reshape(n, K).mean(1)

    def get_loss(self, y_pred, y_true, X=None, training=False):
        """Return the mean criterion (skorch's validation and scoring hook; training uses the engine).

        Parameters
        ----------
        y_pred : torch.Tensor
            Predictions.
        y_true : array-like or torch.Tensor
            Targets.
        X : object, default=None
            Unused.
        training : bool, default=False
            Unused.

        Returns
        -------
        loss : torch.Tensor
            The mean loss.
        """
        return self.criterion_(y_pred, to_tensor(y_true, device=self.device)).mean()

    def private_step(self, engine, loss_fn, inputs, optimizer=None):
        """Release one noisy clipped gradient of ``loss_fn`` on the lot and step ``optimizer``.

        Parameters
        ----------
        engine : skdp.engine.DPSGDEngine
            The engine that clips and adds noise.
        loss_fn : callable
            ``loss_fn(forward, *inputs)`` returns one loss per example.
        inputs : tuple of torch.Tensor
            The lot, batch first.
        optimizer : torch.optim.Optimizer or None, default=None
            Steps on the noisy gradient; the net's optimizer if None.

        Returns
        -------
        losses : torch.Tensor
            The per-example losses (unnoised: for the curator's log only).
        """
        optimizer = self.optimizer_ if optimizer is None else optimizer
        optimizer.zero_grad(set_to_none=True)
        losses, _ = engine.private_gradients(loss_fn, inputs)
        self.notify("on_grad_computed", named_parameters=list(self.get_all_learnable_params()),
                    batch=None, training=True)
        optimizer.step()
        return losses

    def update_on_lot(self, inputs):
        """Apply the lot's update: one private step of ``per_example_loss``.

        Nets that update several networks on one lot (a GAN) override this; each
        accounted lot must stay one Gaussian mechanism of multiplier
        ``noise_multiplier_`` (k releases on one lot: ``sigma * sqrt(k)`` each).

        Parameters
        ----------
        inputs : tuple of torch.Tensor
            The lot, from :meth:`get_train_inputs`.

        Returns
        -------
        losses : torch.Tensor
            The per-example losses (for the curator's log).
        """
        return self.private_step(self.engine_, self.per_example_loss, inputs)

    def train_step(self, batch, **fit_params):
        """Train on one lot: inputs -> ``update_on_lot`` -> one accountant step.

        Parameters
        ----------
        batch : tuple
            The lot ``(X, y)``.
        **fit_params : dict
            Unused.

        Returns
        -------
        step : dict
            ``{"loss": mean unnoised loss, "y_pred": None}`` (skorch's format;
            the loss reaches only skdp's own callbacks).
        """
        self._set_training(True)
        Xi, yi = unpack_data(batch)
        inputs = self.get_train_inputs(Xi, yi)
        try:
            losses = self.update_on_lot(inputs)
        finally:
            # Counted even when the update is cut short after its noisy gradient was released (a Ctrl-C in
            # optimizer.step, a callback raising): an interruption can only over-count (review_s35 b09).
            self.accountant_.step(self.noise_multiplier_, self.sample_rate_)
        self._ema_update()
        loss = losses.mean() if len(losses) else torch.zeros(())
        if len(losses):
            self.log_private("train_loss", loss.item(), len(losses))
        return {"loss": loss, "y_pred": None}


for _name in ("fit", "partial_fit", "fit_loop"):  # the shared text, substituted once (skorch's way)
    _method = getattr(DPNet, _name)
    _method.__doc__ = _method.__doc__.replace("{training_data}", _TRAINING_DATA_DOC)
del _name, _method
