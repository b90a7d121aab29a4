"""DPMomentumClassifier: DP-SGD with momentum (Abadi et al. 2016; the thesis's Algorithm 2)."""
import math
import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils import check_array
from sklearn.utils.validation import _check_feature_names, check_is_fitted, validate_data

from .nn import DPNet, module_spec, plan_dpsgd
from .privacy import set_privacy_attributes
from .utils.validation import (DPSGD_CONSTRAINTS, encode_labels, resolve_batch_size,
                               warn_if_delta_too_large)

# skorch's routed parameter prefixes that the classifier passes through to its net.
NET_PREFIXES = ("module__", "optimizer__", "criterion__", "callbacks__", "iterator_valid__")


class DPNetEstimatorMixin:
    """get/set_params for skorch-style ``prefix__name`` parameters kept beside the signature."""

    def _net_kwargs(self):
        return {k: getattr(self, k) for k in getattr(self, "_extra_params", ())
                if k.startswith(NET_PREFIXES)}

    def _extra_kwargs(self):
        # All extra parameters, misspelt ones too: get_params must return them so that clone() (and
        # so every search) keeps a typo, and fit refuses it there as it does in a direct fit.
        return {k: getattr(self, k) for k in getattr(self, "_extra_params", ())}

    def _store_net_kwargs(self, kwargs):
        # Stored as given (scikit-learn validates in fit, never in __init__).
        for key, value in kwargs.items():
            setattr(self, key, value)
        self._extra_params = tuple(getattr(self, "_extra_params", ())) + tuple(
            k for k in kwargs if k not in getattr(self, "_extra_params", ()))

    def _check_net_kwargs(self):
        for key in getattr(self, "_extra_params", ()):
            if not key.startswith(NET_PREFIXES):
                raise TypeError(
                    f"{type(self).__name__} got an unexpected parameter {key!r}; extra parameters "
                    f"must start with one of {NET_PREFIXES}."
                )

    def get_params(self, deep=True):
        params = super().get_params(deep=deep)
        params.update(self._extra_kwargs())
        return params

    def set_params(self, **params):
        self._store_net_kwargs({k: params.pop(k) for k in list(params)
                                if k.startswith(NET_PREFIXES) or k in getattr(self, "_extra_params", ())})
        if not params:
            return self
        return super().set_params(**params)


class DPMomentumClassifier(DPNetEstimatorMixin, ClassifierMixin, BaseEstimator):
    """Classifier trained with differentially private SGD with momentum.

    Lots are Poisson-sampled with expected size ``batch_size``; each example's
    gradient is clipped to ``max_grad_norm``; Gaussian noise of standard
    deviation ``noise_multiplier * max_grad_norm`` is added to the lot's sum;
    the SGD-with-momentum update is post-processing. The noise is calibrated so
    that the whole fit is (``epsilon``, ``delta``)-DP (add/remove-one-record
    adjacency, RDP or PRV accounting).

    Parameters
    ----------
    module : {"linear", "mlp", "cnn"}, torch.nn.Module class or instance, default="linear"
        "linear" is the thesis's single-layer network (softmax regression).
        Constructor arguments go in ``module__*`` (e.g. ``module__hidden_sizes=(128,)``).
    epsilon : float, default=1.0
        Privacy budget of one fit. ``float("inf")`` trains with clipping and
        no noise (not private; warns).
    delta : float, default=1e-5
    max_grad_norm : float, default=1.0
        Per-example clipping bound C.
    noise_multiplier : float or None, default=None
        None: calibrated from ``epsilon``. Given: ``epsilon`` is ignored and the
        spend is reported in ``epsilon_``.
    momentum : float, default=0.9
    lr : float, default=0.1
    max_epochs : int, default=20
    batch_size : int or "auto", default="auto"
        Expected lot size. "auto" is about 4 * sqrt(n_samples).
    accounting : {"rdp", "prv"}, default="rdp"
    clipping : {"auto", "ghost", "vmap"}, default="auto"
        Per-example clipping strategy of the engine.
    classes : array-like or None, default=None
        The public set of labels. None reads it from ``y`` (warns: the label set
        of the private data is released).
    image_shape : tuple (H, W) or None, default=None
        Image size of flat input for ``module="cnn"``.
    ledger : BudgetLedger or None, default=None
        Charged before training; raises ``BudgetExceededError`` if overdrawn.
    device : str, default="cpu"
    callbacks : list or None, default=None
        skorch callbacks. They see only released quantities: the net, its noisy
        weights and gradients, and a history of ``epoch``, ``dur`` and
        ``epsilon``; data arguments (lots, ``X``, ``y``, unnoised losses) are
        None. Callbacks that monitor or score private quantities (e.g.
        ``EarlyStopping(monitor="train_loss")``) are refused.
    verbose : int, default=0
        1 prints skorch's log each epoch, with the epsilon spent so far.
    random_state : int, Generator or None, default=None
        Seeds the weight initialisation only. The mechanism's randomness
        (Poisson lots, noise) is always fresh OS entropy, so that nobody holding
        the fitted estimator can replay it; for reproducible noise in
        experiments see :func:`skdp.insecure_noise_seed` (not private).
    **kwargs
        ``module__*``, ``optimizer__*``, ``criterion__*``, ``callbacks__*``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    epsilon_ : float
        Epsilon spent by the fit (certified by the accountant; <= ``epsilon``).
    delta_ : float
        Delta of the guarantee (0 without noise).
    privacy_certified_ : bool
        Whether (``epsilon_``, ``delta_``) is certified; False with
        ``classes=None``, ``epsilon=inf`` or seeded noise (see ``privacy_notes_``).
    privacy_notes_ : tuple of str
        Why the fit is not certified (empty when it is).
    noise_seeded_ : bool
        True when fitted inside :func:`skdp.insecure_noise_seed`.
    noise_multiplier_ : float
    sample_rate_ : float
    n_steps_ : int
    net_ : skdp.nn.DPNet
        The fitted skorch net (``net_.history`` holds the training log).
    n_features_in_ : int
        Features per row (pixels per image for image input).
    input_shape_ : tuple
        Shape of one training row (``(n_features,)``, ``(H, W)`` or ``(C, H, W)``).

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = DPMomentumClassifier(epsilon=1.0, classes=range(10), random_state=0)
    >>> clf.fit(X / 16, y).epsilon_ <= 1.0
    True
    """

    _parameter_constraints = {
        **DPSGD_CONSTRAINTS,
        "module": [StrOptions({"linear", "mlp", "cnn"}), type, torch.nn.Module],
        "momentum": [Interval(numbers.Real, 0, 1, closed="left")],
        "classes": [None, "array-like"],
        "image_shape": [None, tuple],
        "ledger": [None, HasMethods(["spend"])],
        "device": [str, torch.device],
        "callbacks": [None, list],
        "verbose": ["verbose"],
    }

    def __init__(self, module="linear", *, epsilon=1.0, delta=1e-5, max_grad_norm=1.0,
                 noise_multiplier=None, momentum=0.9, lr=0.1, max_epochs=20, batch_size="auto",
                 accounting="rdp", clipping="auto", classes=None, image_shape=None, ledger=None,
                 device="cpu", callbacks=None, verbose=0, random_state=None, **kwargs):
        self.module = module
        self.epsilon = epsilon
        self.delta = delta
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        self.momentum = momentum
        self.lr = lr
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.accounting = accounting
        self.clipping = clipping
        self.classes = classes
        self.image_shape = image_shape
        self.ledger = ledger
        self.device = device
        self.callbacks = callbacks
        self.verbose = verbose
        self.random_state = random_state
        self._store_net_kwargs(kwargs)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = True
        return tags

    # -- validation --------------------------------------------------------------------------
    def _validate_X(self, X, reset):
        if reset:
            return validate_data(self, X, reset=True, dtype=np.float32, allow_nd=True, ensure_min_samples=1)
        # n_features_in_ counts pixels for images, so sklearn's check of X.shape[1] would not fit:
        # the feature names are checked as sklearn does, and the row shape against input_shape_.
        _check_feature_names(self, X, reset=False)
        X = check_array(X, dtype=np.float32, allow_nd=True, ensure_min_samples=1)
        if X.shape[1:] != self.input_shape_:
            raise ValueError(
                f"X has rows of shape {X.shape[1:]}, but {type(self).__name__} was fitted on rows of shape "
                f"{self.input_shape_}; pass data shaped like the training data.")
        return X

    # -- fit ---------------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Train on private ``(X, y)``; spends (``epsilon``, ``delta``)."""
        self._check_net_kwargs()
        X, y = validate_data(self, X, y, dtype=np.float32, allow_nd=True, multi_output=False,
                             y_numeric=False, ensure_min_samples=1)
        self.classes_, y_enc = encode_labels(self.classes, y, type(self).__name__)
        self.input_shape_ = X.shape[1:]
        self.n_features_in_ = int(np.prod(self.input_shape_))  # pixels, for images (n, H, W[, ...])
        n_samples = X.shape[0]
        batch_size = resolve_batch_size(self.batch_size, n_samples)
        warn_if_delta_too_large(self.delta, n_samples, type(self).__name__)
        if X.ndim == 3:  # (n, H, W): one channel
            X = X[:, None]
        self.net_ = self._make_net(X.shape[1:], batch_size)
        self.net_.fit(X, y_enc)
        self.noise_multiplier_ = self.net_.noise_multiplier_
        self.sample_rate_ = self.net_.sample_rate_
        self.n_steps_ = self.net_.accountant_.n_steps
        self.noise_seeded_ = self.net_.noise_seeded_
        set_privacy_attributes(self, self.net_.epsilon_spent(), self.delta,
                               read_from_data=["classes"] if self.classes is None else [])
        return self

    def _planned_privacy(self, n_samples):
        """(epsilon, delta) a fit on ``n_samples`` records will certify (public quantities only)."""
        batch_size = resolve_batch_size(self.batch_size, n_samples)
        *_, epsilon = plan_dpsgd(n_samples, batch_size, self.max_epochs, self.epsilon, self.delta,
                                 self.noise_multiplier, self.accounting)
        return epsilon, 0.0 if math.isinf(epsilon) else float(self.delta)

    def _make_net(self, input_shape, batch_size):
        kwargs = self._net_kwargs()
        module_kwargs = {k[len("module__"):]: kwargs.pop(k) for k in list(kwargs)
                         if k.startswith("module__")}
        module, module_kwargs = module_spec(self.module, input_shape=input_shape,
                                            n_classes=len(self.classes_),
                                            image_shape=self.image_shape, **module_kwargs)
        kwargs.update({f"module__{k}": v for k, v in module_kwargs.items()})
        kwargs.setdefault("optimizer__momentum", self.momentum)
        kwargs.setdefault("iterator_valid__batch_size", 1024)
        return DPNet(
            module, epsilon=self.epsilon, delta=self.delta, max_grad_norm=self.max_grad_norm,
            noise_multiplier=self.noise_multiplier, accounting=self.accounting,
            clipping=self.clipping, ledger=self.ledger, random_state=self.random_state,
            lr=self.lr, max_epochs=self.max_epochs, batch_size=batch_size, device=self.device,
            callbacks=self.callbacks, verbose=self.verbose, owner=type(self).__name__, **kwargs,
        )

    # -- predict -----------------------------------------------------------------------------
    @property
    def history_(self):
        check_is_fitted(self)
        return self.net_.history

    def _logits(self, X):
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        if X.ndim == 3:
            X = X[:, None]
        return self.net_.forward(X, training=False).double()

    def decision_function(self, X):
        """Class logits (post-processing of the private model)."""
        logits = self._logits(X).cpu().numpy()
        return logits[:, 1] - logits[:, 0] if len(self.classes_) == 2 else logits

    def predict_proba(self, X):
        return torch.softmax(self._logits(X), dim=1).cpu().numpy()

    def torch_predict_proba(self, x):
        """Differentiable ``predict_proba`` of a float tensor (for white-box attacks such as MI-Face)."""
        check_is_fitted(self)
        module = self.net_.module_.eval()
        x = x.to(self.net_.device, torch.float32)
        return torch.softmax(module(x[:, None] if x.dim() == 3 else x), dim=1)

    def predict(self, X):
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
