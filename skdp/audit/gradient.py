"""White-box gradient canaries of DP-SGD: the fit inside the audit tap, and each canary's score.

The canaries live in the engine (:func:`skdp.utils.taps.gradient_canaries`):
canary i adds ``C e_c`` (the clipping bound in its coordinate c) to the
clipped sum of every release on a lot it is sampled into, before the noise.
The optimizer steps against the noisy gradient, so an included canary pushes
its coordinate down by about ``lr C / B`` per lot (``1 / (1 - momentum)``
times that with momentum), an excluded one not at all, and the noise moves
every coordinate alike. The score is the movement ``theta_0 - theta_T``
along the coordinate: for SGD with momentum, Adam or an EMA of the weights,
each step moves the weight against the gradient, so included canaries score
higher. Weight decay (and any shrinkage towards 0) also moves a coordinate
in proportion to its starting value: a least-squares fit of the movements on
``(1, theta_0)`` over the canaries, a function of the output and the public
initialisation only, is taken out. An optimizer with ``maximize=True`` would
flip the sign (and show a bound of 0: a missed audit, never a false alarm).
A network trained by several engines (a GAN's generator and discriminator)
gives one score per engine; they are added in units of their spread.
"""
import numpy as np
from sklearn.base import clone

from ..utils import taps
from ..utils.random import mechanism_rng
from ..utils.taps import _flat

_WALKED = ("skdp", "sklearn", "skorch")


def _held_parameters(fitted):
    """``id`` of every torch parameter the fitted object holds (Pipelines, searches, nets, modules)."""
    import torch

    held, seen, stack = set(), set(), [fitted]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            held.update(id(p) for p in obj.parameters())
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and type(obj).__module__.split(".")[0] in _WALKED:
            stack.extend(vars(obj).values())
    return held


def _engine_scores(entry):
    """Each canary's movement against its gradient, in units of its parameter tensor's spread.

    Per tensor: ``theta_0 - theta_T`` on all its coordinates, less a least-squares fit on ``(1, theta_0)``
    (shrinkage such as weight decay, and the tensor's mean drift); at the canaries' coordinates the
    residuals are centred and divided by their standard deviation. Units per tensor, not one scale for the
    engine: Adam moves a coordinate by about ``lr`` a step whatever its gradient, so a tensor the data push
    steadily (a log-variance) shows no canary at all, and must not drown the tensors that do.
    """
    out = np.zeros(len(entry["which"]))
    for j, (param, start) in enumerate(zip(entry["params"], entry["initial"])):
        rows = np.flatnonzero(entry["which"] == j)
        if not len(rows):
            continue
        start = start.reshape(-1)
        moved = start - _flat(param)
        design = np.column_stack([np.ones_like(start), start])
        coef, *_ = np.linalg.lstsq(design, moved, rcond=None)
        residual = (moved - design @ coef)[entry["offsets"][rows]]
        residual -= residual.mean()
        spread = residual.std()
        out[rows] = residual / spread if spread > 0 else residual
    return out


def fit_with_gradient_canaries(estimator, X, y, included):
    """Fit a clone of ``estimator`` on ``(X, y)`` with gradient canaries; return it and the canaries' scores.

    Parameters
    ----------
    estimator : estimator or Pipeline
        Ends in (or searches over) a DP-SGD estimator.
    X, y : array-like
        The training data (the canaries are not records of it).
    included : ndarray of bool
        Which canaries are in the training set.

    Returns
    -------
    fitted : estimator
        The fitted clone (not certified).
    scores : ndarray of shape (len(included),)
        Higher: more likely included.
    """
    with taps.gradient_canaries(included, mechanism_rng()) as mode:
        fitted = clone(estimator).fit(X, y)
    held = _held_parameters(fitted)
    engines = [e for e in mode.engines if e["releases"] and all(id(p) in held for p in e["params"])]
    if not engines:
        raise ValueError(
            f"canaries='gradient' found no DP-SGD release in the network {type(estimator).__name__} returned "
            f"({mode.lots} lots drawn, {len(mode.engines)} engines seen): gradient canaries need DP-SGD with a "
            "finite max_grad_norm in this process (n_jobs=1). Audit other estimators with canaries='input'.")
    return fitted, np.sum([_engine_scores(e) for e in engines], axis=0)
