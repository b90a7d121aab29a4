"""MI-Face: the model-inversion attack of Fredrikson, Jha and Ristenpart (CCS 2015).

Gradient descent on the model's input to minimise ``c(x) = 1 - p_label(x) +
aux(x)``, from the all-zero input, with the paper's stopping rules:

- at most ``alpha`` iterations;
- stop when the cost has not improved on the worst of the last ``beta``
  iterations;
- stop when the target's confidence reaches ``gamma``. (Algorithm 1 writes
  ``c(x) <= gamma`` with gamma = 0.99, which for 40 classes would stop at once;
  like ``shared/notes/srgan_dp_thesis.md`` we read gamma as the confidence.)

The best input per target is returned. White-box: gradients flow through
every step of a ``Pipeline`` that can run in torch (``skdp.attacks.torch_model``),
so with a super-resolution step first the attack optimises the low-resolution
input *through the generator*. Black-box: gradients are estimated from
``predict_proba`` by finite differences.
"""
import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch

from ..utils.random import make_rng
from .torch_model import TorchUnavailableError, input_dim, torch_model


@dataclass
class InversionResult:
    """Reconstructions (one row per target, in the model's input space) and how they were reached.

    Returned by :meth:`MIFace.run`: for each target class, the input of lowest
    cost the attack found, the model's confidence in the target there, and
    the iterations spent. The reconstructions are in the model's input space
    (e.g. flat low-resolution rows); :func:`score_reconstructions` maps them
    to the reference space and measures how recognisable they are.

    Parameters
    ----------
    targets : ndarray of shape (n_targets,)
        The labels attacked.
    reconstructions : ndarray of shape (n_targets, n_features)
        The best input found for each target.
    confidences : ndarray of shape (n_targets,)
        The model's probability of the target at that input.
    costs : ndarray of shape (n_targets,)
        ``1 - confidence + aux`` at that input.
    n_iter : ndarray of shape (n_targets,)
        Gradient steps taken for each target before it stopped.

    See Also
    --------
    MIFace : The attack that produces it.
    score_reconstructions : How recognisable the reconstructions are.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> from skdp.attacks import MIFace
    >>> rng = np.random.default_rng(0)
    >>> clf = LogisticRegression().fit(rng.random((100, 5)), rng.integers(0, 2, 100))
    >>> result = MIFace(clf, alpha=20, lambda_=1.0).run([0, 1])
    >>> type(result).__name__, result.reconstructions.shape, result.n_iter.shape
    ('InversionResult', (2, 5), (2,))
    """

    targets: np.ndarray
    reconstructions: np.ndarray
    confidences: np.ndarray
    costs: np.ndarray
    n_iter: np.ndarray


class MIFace:
    """Model inversion of a classifier's classes.

    For each target label, gradient descent on the model's input from the
    all-zero input minimises ``1 - p_label(x) + aux(x)`` (Fredrikson, Jha &
    Ristenpart, CCS 2015), and the best input is returned: what the model
    "thinks" the class looks like. Against a face classifier with one class
    per person it reconstructs recognisable faces; a DP model bounds what
    any such attack can learn about one training record, though a class
    with many records can still be recognisable. The attack reads only the
    fitted model; nothing is spent from a privacy budget. White-box runs
    through every step of a ``Pipeline`` that can run in torch; black-box
    estimates the gradient from ``predict_proba`` by finite differences.

    Parameters
    ----------
    estimator : fitted classifier or Pipeline
        White-box needs a torch path (skdp's torch-backed estimators and
        transformers, ``FrozenEstimator``, "passthrough"); black-box needs
        ``predict_proba`` only.
    alpha : int, default=5000
        Maximum iterations.
    beta : int, default=100
        Patience: stop when the cost is no better than the worst of the last beta.
    gamma : float, default=0.99
        Stop when the target's confidence reaches gamma.
    lambda_ : float, default=0.1
        Gradient step.
    process : callable or None, default=None
        ``Process`` of Algorithm 1, applied to the input tensor ``(n, d)`` after
        each step (identity for softmax and MLP models; e.g.
        ``lambda x: x.clamp(0, 1)`` to stay in the pixel range).
    aux_term : callable or None, default=None
        ``AuxTerm(x)`` -> one cost per row (side information), added to the
        cost; it must be differentiable in torch for the white-box attack.
    mode : {"auto", "white_box", "black_box"}, default="auto"
        "auto": white-box when the estimator has a torch path.
    fd_step : float, default=1e-3
        Finite-difference step (black-box).
    n_directions : int or None, default=None
        Black-box: None takes central differences along every coordinate
        (2 d queries per iteration); an int estimates the gradient from that
        many random Gaussian directions instead.
    n_features : int or None, default=None
        Input dimension; None reads it from the estimator. When the
        estimator tells its own, a different value is refused.
    random_state : int, Generator or None, default=None
        Directions of the black-box estimate.

    See Also
    --------
    score_reconstructions : Measures how recognisable the reconstructions are.
    InversionResult : What :meth:`run` returns.
    skdp.attacks.torch_model : The torch path of the white-box attack.

    Examples
    --------
    >>> import warnings
    >>> from sklearn.datasets import load_digits
    >>> from skdp import DPMomentumClassifier
    >>> from skdp.attacks import MIFace
    >>> X, y = load_digits(return_X_y=True)
    >>> with warnings.catch_warnings():  # epsilon=inf: not private, and it says so
    ...     warnings.simplefilter("ignore")
    ...     clf = DPMomentumClassifier(epsilon=float("inf"), classes=range(10), max_epochs=2,
    ...                                random_state=0).fit(X / 16, y)
    >>> result = MIFace(clf, alpha=200, lambda_=1.0, process=lambda x: x.clamp(0, 1)).run([3])
    >>> result.reconstructions.shape, bool(result.confidences[0] > 0.9)
    ((1, 64), True)
    """

    def __init__(self, estimator, *, alpha=5000, beta=100, gamma=0.99, lambda_=0.1, process=None, aux_term=None,
                 mode="auto", fd_step=1e-3, n_directions=None, n_features=None, random_state=None):
        if mode not in ("auto", "white_box", "black_box"):
            raise ValueError(f"mode must be 'auto', 'white_box' or 'black_box', got {mode!r}.")
        for name, value in (("alpha", alpha), ("beta", beta)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}.")
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma!r}.")
        if not lambda_ > 0:
            raise ValueError(f"lambda_ must be > 0, got {lambda_!r}.")
        if not (isinstance(fd_step, numbers.Real) and math.isfinite(fd_step) and fd_step > 0):
            raise ValueError(f"fd_step must be a finite number > 0 (the finite-difference step, e.g. 1e-3); "
                             f"got {fd_step!r}.")
        if n_directions is not None and not (isinstance(n_directions, numbers.Integral)
                                             and not isinstance(n_directions, bool) and n_directions >= 1):
            raise ValueError(f"n_directions must be None (every coordinate) or an int >= 1; got {n_directions!r}.")
        if n_features is not None and not (isinstance(n_features, numbers.Integral)
                                           and not isinstance(n_features, bool) and n_features >= 1):
            raise ValueError(f"n_features must be None (read from the estimator) or an int >= 1; got {n_features!r}.")
        self.estimator = estimator
        self.alpha, self.beta, self.gamma, self.lambda_ = alpha, beta, gamma, lambda_
        self.process, self.aux_term = process, aux_term
        self.mode, self.fd_step, self.n_directions = mode, fd_step, n_directions
        self.n_features, self.random_state = n_features, random_state

    def _classes(self):
        classes = getattr(self.estimator, "classes_", None)
        if classes is None:
            raise ValueError("MIFace needs a fitted classifier (no classes_ found).")
        return np.asarray(classes)

    def _input_dim(self):
        """``n_features``, checked against the estimator's own input size when it has one."""
        try:
            known = input_dim(self.estimator)
        except ValueError:
            if self.n_features is None:
                raise
            return int(self.n_features)
        if self.n_features is not None and int(self.n_features) != known:
            raise ValueError(f"n_features={self.n_features} does not fit the estimator, which takes {known} "
                             "features per input row; leave n_features=None to read it from the estimator.")
        return known

    def _cost_function(self):
        """``(cost(x, idx) -> (costs, confidences), white_box)``; costs are differentiable when white-box."""
        mode = self.mode
        if mode in ("auto", "white_box"):
            try:
                proba = torch_model(self.estimator)
            except TorchUnavailableError:
                if mode == "white_box":
                    raise
                proba = None
            if proba is not None:
                return self._wrap(proba), True
        predict_proba = self.estimator.predict_proba

        def proba_np(x):
            with torch.no_grad():
                return torch.as_tensor(predict_proba(x.detach().cpu().numpy().astype(np.float32)),
                                       dtype=torch.float64)
        return self._wrap(proba_np), False

    def _wrap(self, proba):
        aux = self.aux_term

        def cost(x, idx):
            p = proba(x).cpu()  # the model may sit on a GPU; the attack's book-keeping is on the CPU
            conf = p[torch.arange(len(idx)), idx]
            c = 1 - conf
            if aux is not None:
                c = c + aux(x)
            return c, conf
        return cost

    def run(self, targets):
        """Invert each label in ``targets``.

        All targets are attacked together, one row each; a target stops when
        its confidence reaches ``gamma`` or its cost stalls for ``beta``
        iterations, and the rest continue, up to ``alpha`` iterations.

        Parameters
        ----------
        targets : array-like of shape (n_targets,)
            Labels to invert, all in the estimator's ``classes_``.

        Returns
        -------
        result : InversionResult
            The best input for each target, its confidence and cost, and
            the iterations spent.
        """
        classes = self._classes()
        targets = np.asarray(targets)
        unknown = np.setdiff1d(targets, classes)
        if len(unknown):
            raise ValueError(f"targets {unknown[:5]!r} are not classes of the estimator ({classes[:5]!r}...).")
        idx = torch.as_tensor(np.searchsorted(classes, targets))
        d = self._input_dim()
        cost, white_box = self._cost_function()
        grad = self._white_box_grad if white_box else self._black_box_grad(make_rng(self.random_state))
        x = torch.zeros(len(targets), d, dtype=torch.float32)
        c, conf = cost(x, idx)
        c = c.detach().double()
        best_x, best_c, best_conf = x.clone(), c.clone(), conf.detach().double().clone()
        history = [c]
        active = torch.ones(len(targets), dtype=torch.bool)
        n_iter = np.zeros(len(targets), dtype=np.int64)
        for i in range(1, self.alpha + 1):
            g = grad(cost, x, idx)
            step = x - self.lambda_ * g.to(x.dtype)
            if self.process is not None:
                step = self.process(step)
            x = torch.where(active[:, None], step.detach(), x)
            c, conf = cost(x, idx)
            c, conf = c.detach().double(), conf.detach().double()
            better = active & (c < best_c)
            best_x[better], best_c[better], best_conf[better] = x[better], c[better], conf[better]
            n_iter[active.numpy()] = i
            window = torch.stack(history[-self.beta:])
            stalled = (c >= window.max(0).values) if i > self.beta else torch.zeros_like(active)
            active = active & ~stalled & ~(conf >= self.gamma)
            history.append(c)
            if not active.any():
                break
        return InversionResult(targets, best_x.numpy(), best_conf.numpy(), best_c.numpy(), n_iter)

    @staticmethod
    def _white_box_grad(cost, x, idx):
        x = x.detach().requires_grad_(True)
        c, _ = cost(x, idx)
        return torch.autograd.grad(c.sum(), x)[0]

    def _black_box_grad(self, rng):
        h = self.fd_step

        def grad(cost, x, idx):
            n, d = x.shape
            if self.n_directions is None:
                dirs = torch.eye(d, dtype=x.dtype)
            else:
                dirs = torch.as_tensor(rng.standard_normal((self.n_directions, d)), dtype=x.dtype)
            k = dirs.shape[0]
            probes = torch.cat([x[:, None] + h * dirs[None], x[:, None] - h * dirs[None]], 1)  # (n, 2k, d)
            c, _ = cost(probes.reshape(-1, d), idx.repeat_interleave(2 * k))
            c = c.reshape(n, 2 * k)
            slopes = (c[:, :k] - c[:, k:]) / (2 * h)  # directional derivatives (n, k)
            g = slopes.to(x.dtype) @ dirs
            return g if self.n_directions is None else g / k
        return grad
