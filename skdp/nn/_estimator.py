"""The one base of skdp's DP-SGD estimators: shared privacy parameters, their docs, the net, the results.

``DPMomentumClassifier``, ``DPMomentumRegressor``, ``PGEGenerator`` and
``SRGANTransformer`` keep only what is theirs (their module, loss and
output). This base owns:

- the shared privacy and training parameters: their constraints
  (``DPSGD_CONSTRAINTS``) and their numpydoc entries, written once here and
  substituted into each estimator's docstring (``{dp:name}`` tokens, as skorch
  builds its classifier docstrings);
- skorch-style ``module__*`` / ``optimizer__*`` / ... passthrough parameters
  (kept by ``get_params`` so ``clone`` and searches carry them, typos too);
- the arguments every ``DPNet`` gets (:meth:`_dp_net_kwargs`);
- the fitted privacy results, read from the net in one place
  (:meth:`_set_fit_results`): ``epsilon_``, ``delta_``, ``privacy_certified_``,
  ``privacy_notes_``, ``noise_multiplier_``, ``sample_rate_``, ``n_steps_``,
  ``noise_seeded_``;
- the privacy plan from public quantities (:meth:`_planned_privacy`), which
  ``search_privacy_cost`` uses.

``partial_fit`` (one more epoch, charged to the accountant and the ledger) is
the momentum estimators' own (:mod:`skdp.nn._momentum`).
"""
import math
import numbers
import re

from sklearn.base import BaseEstimator

from ..privacy.accounting import dpsgd_cost
from ..privacy.composition import Spend
from ..privacy.report import set_privacy_attributes
from ..utils.validation import set_init_params
from .net import INTERRUPTED, plan_dpsgd

# skorch's routed parameter prefixes passed through to the net.
NET_PREFIXES = ("module__", "optimizer__", "criterion__", "callbacks__", "iterator_valid__")

# numpydoc entries of the shared parameters, substituted for ``{dp:name}`` in docstrings.
DP_PARAMETER_DOCS = {
    "epsilon": """epsilon : float, default={default}
    Privacy budget of one fit. ``float("inf")`` trains with clipping and no
    noise (not private; warns, ``privacy_certified_=False``).""",
    "delta": """delta : float, default={default}
    Delta of the (epsilon, delta) guarantee; keep it well below 1 / n_samples.""",
    "max_grad_norm": """max_grad_norm : float, default={default}
    Per-example clipping bound C on the gradient of all trainable parameters.""",
    "noise_multiplier": """noise_multiplier : float or None, default={default}
    None: calibrated so that the fit spends at most ``epsilon``. Given: the
    noise is ``noise_multiplier * max_grad_norm``, ``epsilon`` is ignored and
    the certified spend is reported in ``epsilon_``.""",
    "lr": """lr : float, default={default}
    Learning rate of the optimizer (post-processing of the noisy gradients).""",
    "max_epochs": """max_epochs : int, default={default}
    Epochs; an epoch is ``round(n_samples / batch_size)`` Poisson lots.""",
    "batch_size": """batch_size : int or "auto", default={default}
    Expected lot size (lots are Poisson samples of rate ``batch_size / n``).
    "auto": ``max(16, round(4 * sqrt(n_samples)))``, capped by n_samples.""",
    "auto_lr": """lr : float or "auto", default={default}
    Learning rate of SGD with momentum (post-processing of the noisy
    gradients). "auto" sets it so that the noise accumulated in the weights
    over the fit has a fixed norm: ``r * (1 - momentum) * B / (sigma *
    max_grad_norm * sqrt(steps * n_params))``, at most 1, with r = 7 (21 for
    ``module="cnn"``) (rule and the data
    that chose it: :mod:`skdp.nn._defaults`). The value used is ``lr_``.""",
    "auto_max_epochs": """max_epochs : int or "auto", default={default}
    Epochs; an epoch is ``round(n_samples / batch_size)`` Poisson lots.
    "auto": enough epochs for about 300 lots. The value used is ``max_epochs_``.""",
    "auto_batch_size": """batch_size : int or "auto", default={default}
    Expected lot size (lots are Poisson samples of rate ``batch_size / n``).
    "auto": ``n_samples / 4`` (at most 500 for ``module="cnn"``, for compute).
    The value used is ``batch_size_``.""",
    "ema": """ema : "auto", float or None, default={default}
    The released network is an exponential moving average of the weights
    over the fit's lots (post-processing of the noisy iterates: the privacy
    spent is the same). A float in [0, 1) is the decay; "auto": ``1 - 10 /
    steps``, from the number of lots (public; rule and the data that chose it:
    :mod:`skdp.nn._defaults`); None or 0: the last iterate. The decay used
    is ``net_.ema_decay_``.""",
    "augment": """augment : "auto", None, int or dict, default={default}
    Augmentation multiplicity for image rows (De et al. 2022): K copies of
    each record, each shifted at random by up to 1 pixel on each axis (edge
    pixels repeated; :class:`skdp.nn.ImageAugmentation` says which data chose
    it), and the record's gradient is the *average* of its copies'
    gradients, taken before clipping. One record still moves the clipped sum
    by at most ``max_grad_norm``, so the noise and the one charge per lot are
    those of plain DP-SGD. The transforms are public and data-independent,
    their randomness fresh. An int: K; a dict: ``copies``, ``shift``
    (pixels) and ``flip`` (left-right mirror, not for digits). Images are
    rows ``(C, H, W)``, ``(H, W)`` or flat with ``image_shape`` (or square).
    Training takes the vmap clipping (the layers see K rows per record) and
    K times the compute. None: the records as they are. "auto": 4 copies
    when a classifier's module is the CNN on images of at least 16 x 16
    (``module="auto"`` with such an ``image_shape``), else none, and none for
    a regressor (rule and data:
    ``skdp.nn._defaults.auto_augment``). The value used is ``augment_``.""",
    "accounting": """accounting : {{"rdp", "prv"}}, default={default}
    Opacus's RDP accountant (certified upper bound) or PRV (tighter, slower).""",
    "clipping": """clipping : {{"auto", "ghost", "vmap"}}, default={default}
    Per-example clipping of the engine: "ghost" (hooks and per-layer rules,
    fast), "vmap" (torch.func, any layer), "auto" (ghost where it can).""",
    "max_physical_batch_size": """max_physical_batch_size : int or None, default={default}
    Largest number of examples put through the network at once. A lot
    larger than this (the "auto" lots are n / 4) is processed in pieces whose
    clipped gradient sums are added before the noise is drawn once: the same
    release, so the privacy is unchanged, with memory bounded by the piece
    (as Opacus's ``BatchMemoryManager``). The rows of a whole lot are still
    read at once. None: whole lots.""",
    "ledger": """ledger : BudgetLedger or None, default={default}
    Charged with the fit's planned spend before training; a fit that would
    overdraw it raises ``BudgetExceededError`` and never starts.""",
    "device": """device : str or torch.device, default={default}
    Where the network trains ("cpu", "cuda"); the noise is drawn there.""",
    "verbose": """verbose : int, default={default}
    1 prints skorch's log each epoch: epsilon so far and, for the data
    curator only, the unnoised training loss (never stored).""",
    "random_state": """random_state : int, Generator or None, default={default}
    Seeds the initialisation and other non-mechanism draws only. Mechanism
    randomness (Poisson lots, noise) is always fresh OS entropy, so that nobody
    holding the fitted estimator can replay it; for reproducible noise in
    experiments see :func:`skdp.insecure_noise_seed` (not private).""",
    "callbacks": """callbacks : list or None, default={default}
    Callbacks of the skorch net. They see only released quantities: the
    net, its noisy weights and gradients, and a history of ``epoch``, ``dur``
    and ``epsilon``; data arguments (lots, ``X``, ``y``, unnoised losses) are
    None. Callbacks that monitor or score private quantities (e.g.
    ``EarlyStopping(monitor="train_loss")``) are refused.""",
    "kwargs": """**kwargs : dict
    Routed parameters in the style of skorch: ``module__*``, ``optimizer__*``,
    ``criterion__*``, ``callbacks__*`` and ``iterator_valid__*``, passed to
    the net (e.g. ``module__hidden_sizes=(128,)``). Any other name is refused
    by ``fit``.""",
}

DP_ATTRIBUTE_DOCS = """epsilon_ : float
    Epsilon the fit spent, certified by the accountant (<= ``epsilon``).
delta_ : float
    Delta of the guarantee (0 without noise).
privacy_certified_ : bool
    Whether (``epsilon_``, ``delta_``) is a proven guarantee of what the
    estimator releases; ``privacy_notes_`` says why not.
privacy_notes_ : tuple of str
    Why the fit is not certified (empty when it is).
noise_seeded_ : bool
    True when fitted inside :func:`skdp.insecure_noise_seed` (not private).
noise_multiplier_ : float
    Sigma of the fit (calibrated or given): the noise on each lot's clipped
    sum has standard deviation ``sigma * max_grad_norm``.
sample_rate_ : float
    Poisson sample rate of the lots.
n_steps_ : int
    DP-SGD steps (lots) taken, all fits of this estimator together."""

DP_SCHEDULE_ATTRIBUTE_DOCS = """batch_size_ : int
    Expected lot size used ("auto" resolved).
max_epochs_ : int
    Epochs of the first fit ("auto" resolved).
lr_ : float
    Learning rate used ("auto" resolved from public quantities)."""

_TOKEN = re.compile(r"^(?P<indent>[ \t]*)\{dp:(?P<name>\w+)(?:=(?P<default>[^}]*))?\}[ \t]*$", re.M)


def fill_dp_docs(cls):
    """Class decorator: replace ``{dp:name}`` / ``{dp:name=default}`` lines of the docstring by the shared entry.

    The privacy and training parameters every DP-SGD estimator shares are
    documented once, in ``DP_PARAMETER_DOCS``, and substituted into each
    estimator's docstring, as skorch builds its classifier docstrings. A line
    holding only ``{dp:name}`` (any indentation) becomes the entry of
    ``name``, indented alike; ``{dp:attributes}`` inserts the shared fitted
    privacy attributes and ``{dp:schedule_attributes}`` the resolved
    schedule (``batch_size_``, ``max_epochs_``, ``lr_``). The default shown
    is read from the class's ``__init__`` unless written after ``=``. The
    decorated class's ``__doc__`` is rewritten in place.

    Returns
    -------
    cls : type
        The same class, its docstring filled in.

    See Also
    --------
    DPSGDEstimator : The base class whose parameters the entries document.
    DPMomentumClassifier : An estimator documented this way.

    Examples
    --------
    >>> import inspect
    >>> from skdp.nn import fill_dp_docs
    >>> @fill_dp_docs
    ... class MyEstimator:
    ...     '''Fit something privately.
    ...
    ...     Parameters
    ...     ----------
    ...     {dp:delta}
    ...     '''
    ...     def __init__(self, delta=1e-6):
    ...         self.delta = delta
    >>> print(inspect.getdoc(MyEstimator))
    Fit something privately.
    <BLANKLINE>
    Parameters
    ----------
    delta : float, default=1e-06
        Delta of the (epsilon, delta) guarantee; keep it well below 1 / n_samples.
    """
    import inspect

    signature = inspect.signature(cls.__init__).parameters

    def entry(match):
        name, indent = match["name"], match["indent"]
        if name == "attributes":
            text = DP_ATTRIBUTE_DOCS
        elif name == "schedule_attributes":
            text = DP_SCHEDULE_ATTRIBUTE_DOCS
        else:
            default = match["default"]
            if default is None:
                param = name[len("auto_"):] if name.startswith("auto_") else name  # auto_lr documents lr
                default = repr(signature[param].default) if param in signature else "None"
            text = DP_PARAMETER_DOCS[name].format(default=default)
        return "\n".join(indent + line if line else line for line in text.splitlines())

    if cls.__doc__:
        cls.__doc__ = _TOKEN.sub(entry, cls.__doc__)
    return cls


class DPSGDEstimator(BaseEstimator):
    """Base class of the DP-SGD estimators (not used directly).

    Subclasses take the shared parameters they need in ``__init__`` (stored
    as given, ``_set_init_params``) and build their net with
    ``**self._dp_net_kwargs()``. The base owns what they share: the
    documentation of the privacy and training parameters
    (:func:`fill_dp_docs`), the routed ``module__*``-style parameters of
    skorch, the arguments every ``DPNet`` gets, the privacy plan from public
    quantities, and the fitted privacy results (``epsilon_``, ``delta_``,
    ``privacy_certified_``, ...), read from the net in one place.

    See Also
    --------
    DPMomentumClassifier : A classifier built on it.
    DPMomentumRegressor : A regressor built on it.
    skdp.PGEGenerator : A generative model built on it.
    DPNet : The skorch net every subclass trains through.

    Examples
    --------
    >>> from skdp.nn import DPMomentumClassifier, DPSGDEstimator
    >>> clf = DPMomentumClassifier(module="mlp", module__hidden_sizes=(32,))
    >>> isinstance(clf, DPSGDEstimator), clf.get_params()["module__hidden_sizes"]
    (True, (32,))
    >>> clf.set_params(module__hidden_sizes=(64,)).module__hidden_sizes
    (64,)
    """

    _spends_privacy = True  # declared DP: fit spends through a mechanism and reports it (public_steps.declares_dp)

    def _set_init_params(self, params):
        """Store ``__init__``'s arguments unchanged (``params`` is its ``locals()``), extra ones included.

        One line instead of one assignment per parameter; scikit-learn's rule
        holds: every argument becomes the attribute of the same name, as given.
        """
        set_init_params(self, params)

    # -- skorch-style passthrough parameters ------------------------------------------------
    def _store_net_kwargs(self, kwargs):
        # Stored as given (scikit-learn validates in fit, never in __init__).
        for key, value in kwargs.items():
            setattr(self, key, value)
        known = tuple(getattr(self, "_extra_params", ()))
        self._extra_params = known + tuple(k for k in kwargs if k not in known)

    def _net_kwargs(self):
        """The passthrough parameters that go to the net (``module__*`` and the like)."""
        return {k: getattr(self, k) for k in getattr(self, "_extra_params", ()) if k.startswith(NET_PREFIXES)}

    def _check_net_kwargs(self):
        for key in getattr(self, "_extra_params", ()):
            if not key.startswith(NET_PREFIXES):
                raise TypeError(
                    f"{type(self).__name__} got an unexpected parameter {key!r}; extra parameters "
                    f"must start with one of {NET_PREFIXES}.")

    def get_params(self, deep=True):
        """Get the parameters of this estimator, routed ``module__*``-style ones included.

        Every extra parameter given to ``__init__`` or ``set_params`` is
        returned, misspelt ones too, so that ``clone`` (and so every search)
        keeps it and ``fit`` refuses a typo there as in a direct fit.

        Parameters
        ----------
        deep : bool, default=True
            Also return the parameters of contained estimators, as
            scikit-learn's ``get_params``.

        Returns
        -------
        params : dict
            Parameter names mapped to their values.
        """
        params = super().get_params(deep=deep)
        # All extra parameters, misspelt ones too: clone() (and so every search) keeps a typo,
        # and fit refuses it there as it does in a direct fit.
        params.update({k: getattr(self, k) for k in getattr(self, "_extra_params", ())})
        return params

    def set_params(self, **params):
        """Set the parameters of this estimator, routed ``module__*``-style ones included.

        Names starting with ``module__``, ``optimizer__``, ``criterion__``,
        ``callbacks__`` or ``iterator_valid__`` (and extra names already
        given) are stored as given, for the net; the others are set as
        scikit-learn sets them.

        Parameters
        ----------
        **params : dict
            Estimator parameters.

        Returns
        -------
        self : DPSGDEstimator
            The estimator.
        """
        extra = {k: params.pop(k) for k in list(params)
                 if k.startswith(NET_PREFIXES) or k in getattr(self, "_extra_params", ())}
        self._store_net_kwargs(extra)
        return super().set_params(**params) if params else self

    # -- the net ---------------------------------------------------------------------------
    _NET_ARGUMENTS = ("epsilon", "delta", "max_grad_norm", "noise_multiplier", "accounting", "clipping",
                      "max_physical_batch_size",
                      "ledger", "random_state", "lr", "max_epochs", "device", "verbose", "ema")

    #: What a continuation (``partial_fit``, a ``warm_start`` fit) takes from the fitted network, not from the
    #: estimator: its privacy plan and the ledger it charges. Changed by ``set_params`` since the fit, they are
    #: refused by name before any charge (review_s36 n1: a new ledger stayed empty while the old one was charged).
    _PLAN_ARGUMENTS = ("epsilon", "delta", "max_grad_norm", "noise_multiplier", "accounting", "ledger")

    def _check_continuation(self):
        """Raise, before any charge, if this fitted estimator may not be trained further: it is a private search's
        release (k02), or a privacy argument of its network differs from the estimator's own now (n1)."""
        search = getattr(self, "_released_by_search_", None)
        if search is not None:
            # The winner's release costs the whole search (charged once to the search's ledger); its own accountant
            # holds only its trial's DP-SGD, and its network charges no ledger (review_s37 k02).
            raise ValueError(
                f"This estimator is {search}'s best_estimator_: releasing it cost the whole search (epsilon "
                f"{self.epsilon_:.4g}), charged once to the search's ledger, and its own accountant holds only its "
                "trial. A continuation would charge no ledger and report less than the search's cost. Fit a fresh "
                "estimator with best_params_ (charged on its own), or run the search again.")

        def same(a, b):  # a ledger (or any object) by identity, numbers and strings by value
            return a is b or (isinstance(a, (numbers.Number, str)) and isinstance(b, (numbers.Number, str))
                              and a == b)
        unrecorded = [name for name in self._PLAN_ARGUMENTS if hasattr(self, name) and not hasattr(self.net_, name)]
        if unrecorded:
            raise ValueError(f"The fitted network does not record its {', '.join(unrecorded)} (a pickle from an older "
                             "skdp?): a continuation cannot show that it runs under the plan it was built with. Fit "
                             "afresh (warm_start=False).")
        changed = [name for name in self._PLAN_ARGUMENTS
                   if hasattr(self, name) and not same(getattr(self, name), getattr(self.net_, name))]
        if changed:
            was = ", ".join(f"{name}={getattr(self.net_, name)!r}" for name in changed)
            raise ValueError(
                f"{', '.join(changed)} changed since the fit (set_params): a continuation trains the fitted network "
                f"under the plan and ledger it was built with ({was}). Set them back to continue (a ledger is "
                "the same object, est.net_.ledger, not one equal to it), or fit afresh (warm_start=False) to train "
                "under the new ones.")

    def _dp_net_kwargs(self, **overrides):
        """Arguments every ``DPNet`` of this estimator gets (privacy, training, identity), then ``overrides``."""
        kwargs = {name: getattr(self, name) for name in self._NET_ARGUMENTS if hasattr(self, name)}
        kwargs["owner"] = type(self).__name__
        kwargs.update(overrides)
        return kwargs

    def _set_fit_results(self, net, *, extra_epsilon=0.0, read_from_data=(), certified=True, private=True,
                         continued=False):
        """Read the fit's privacy results from ``net`` (one place for every DP-SGD estimator); ``continued``: the fit
        continues the previous ones (their notes are kept: k10)."""
        self.noise_multiplier_ = net.noise_multiplier_
        self.sample_rate_ = net.sample_rate_
        self.n_steps_ = net.accountant_.n_steps
        self.noise_seeded_ = getattr(self, "noise_seeded_", False) or net.noise_seeded_
        epsilon = net.epsilon_spent() + extra_epsilon if private else math.inf
        # The fit's RDP curve (DP-SGD's, plus a pure epsilon-DP release's beside it): what compositions add.
        cost = dpsgd_cost(net.accountant_.history, epsilon, self.delta)
        if extra_epsilon and cost.rdp is not None:
            cost = Spend.from_rdp([a + b for a, b in zip(cost.rdp, Spend.pure(extra_epsilon).rdp)], epsilon,
                                  self.delta)
        if certified is True and any(note == INTERRUPTED for note in getattr(net, "privacy_notes_", ())):
            # skorch returns from an interrupted fit: the lots taken are counted, the module is not certified.
            certified = INTERRUPTED + " (the lots it took are counted in epsilon_)"
        # A fresh fit's training began when its network's did (an earlier step refit during it is seen: k26).
        set_privacy_attributes(self, epsilon, self.delta, certified=certified, read_from_data=read_from_data,
                               cost=cost, continued=continued,
                               trained_since=None if continued else getattr(net, "_trained_since_", None))

    # -- planning ----------------------------------------------------------------------------
    def _plan(self, n_samples):
        """``(batch_size, epochs, epsilon_for_dpsgd, extra_epsilon)`` of a fit on ``n_samples``."""
        from ..utils.validation import resolve_batch_size
        return resolve_batch_size(self.batch_size, n_samples), self.max_epochs, self.epsilon, 0.0

    def _planned_costs(self, n_samples, **plan):
        """The :class:`~skdp.privacy.composition.Spend` list of a fit on ``n_samples`` records, from public quantities.

        With ``n_samples`` the DP-SGD run's RDP curve (and a pure release's
        beside it, ``extra``); without, the ``epsilon`` it is calibrated to.
        ``plan``: keywords of :meth:`_plan` (what a fit knows beyond the parameters).
        """
        if n_samples is None:
            eps = float(self.epsilon)
            return [Spend.approx(eps, 0.0 if math.isinf(eps) else float(self.delta))]
        batch_size, epochs, epsilon, extra = self._plan(n_samples, **plan)
        sample_rate, n_lots, sigma, spent = plan_dpsgd(n_samples, batch_size, epochs, epsilon, self.delta,
                                                       self.noise_multiplier, self.accounting)
        costs = [dpsgd_cost([(sigma, sample_rate, n_lots * epochs)], spent,
                            0.0 if math.isinf(spent) else float(self.delta))]
        return costs + ([Spend.pure(extra)] if extra else [])

    def _planned_privacy(self, n_samples):
        """(epsilon, delta) a fit on ``n_samples`` records will certify, from public quantities only."""
        batch_size, epochs, epsilon, extra = self._plan(n_samples)
        *_, spent = plan_dpsgd(n_samples, batch_size, epochs, epsilon, self.delta, self.noise_multiplier,
                               self.accounting)
        spent += extra
        return spent, 0.0 if math.isinf(spent) else float(self.delta)
