"""White-box gradient canaries of DP-SGD: the fit inside the audit tap, and each canary's score.

The canaries live in the engine (:func:`skdp.utils.taps.gradient_canaries`):
canary i adds ``C e_c`` (the clipping bound in its coordinate c) to the
clipped sum of every release on a lot it is sampled into, before the noise.
Release t of an engine is

    ``G_t = R_t + sum_{i in lot t} C e_{c_i} + Z_t``,  ``Z_t ~ N(0, sigma^2 C^2 I)``,

with ``R_t`` the records' clipped sum at the iterate ``theta_t``. The tap
reads ``R_t`` before it adds the canaries and ``G_t`` after the engine added
the noise, and the score of canary i is the sum over the engine's releases
of ``G_t - R_t`` at its coordinate:

    ``s_i = C N_i + sum_t Z_t[c_i]``,

``N_i`` the releases on lots canary i joined (0 when it is excluded, about
``Binomial(T, q)`` when included) and the noise ``N(0, T sigma^2 C^2)``, alike
for every canary. Neither the records' own gradients at ``c_i`` nor the
optimizer (momentum, Adam's normalisation, weight decay, an EMA of the
weights) reach it: with the noise removed an excluded canary scores 0 and an
included one C per release it joined.

Validity. The one-run bound (Steinke, Nasr & Jagielski 2023, Theorem 3.1)
needs guesses that are a function of the output of an algorithm that is
(epsilon, delta)-DP in each canary's inclusion, everything else held fixed.
Condition on the records, on their lots (Poisson draws independent of the
canaries' coin flips) and on the canaries' coordinates (chosen from the
records' clipped sum on the first lot). Given these, ``R_t`` is a fixed
function of the iterate ``theta_t``, that is of the earlier releases; DP-SGD's
guarantee for one canary holds for any such adaptively chosen sequence of
the other contributions (the accountant composes adaptive Gaussian steps,
each canary keeps its own Poisson rate q), so ``(G_1, ..., G_T)`` is
(epsilon, delta)-DP in each canary given the conditioning, and ``s`` is a
function of it and of the conditioned values: the bound holds given them,
hence also unconditionally. Only the releases of models that are themselves
released may be scored: engines whose parameters the fitted object holds
(:func:`_held_parameters`). In a ``PrivateSearchCV`` that is the winner's
(``best_estimator_``; the losing trials' transcripts are not covered by the
search's claim, and with ``refit=False`` nothing is scored); a fit on
post-processed data (``TrainOnSynthetic``'s classifier) gets no canaries.

The guesses use the likelihood ratio of each canary's residual (increasing
in it: :func:`_engine_scores`), "in" where it is positive: with the noise
removed, every canary that joined a lot is then guessed in, whatever the
spread of the number of lots it joined (a 2-means split of the residuals cut
through the included ones). A network trained by several engines (a GAN's
generator and discriminator) gives one ratio per engine; they are added.
"""
import numpy as np
from sklearn.base import clone

from ..utils import taps
from ..utils.random import mechanism_rng

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


#: Least noise standard deviation (units of C) the score assumes: with the noise removed the residuals are
#: integers up to float rounding, and the likelihood ratio needs a width.
_LEAST_NOISE_SD = 0.05


def _join_counts(lots):
    """The distribution of ``N``, the releases an included canary joins: ``sum_l r_l Bernoulli(q_l)`` over lots.

    ``lots`` maps each lot to ``[q_l, r_l]``: its Poisson rate and the engine's releases on it (a canary in the
    lot is in all of them). Returns the probabilities of ``N = 0, 1, ...``, the negligible tail cut.
    """
    pmf = np.ones(1)
    for rate, releases in lots.values():
        grown = np.zeros(len(pmf) + releases)
        grown[:len(pmf)] += (1 - rate) * pmf
        grown[releases:] += rate * pmf
        pmf = grown
    keep = np.flatnonzero(pmf > 1e-15 * pmf.max())
    return pmf[:keep[-1] + 1]


def _engine_scores(entry):
    """Each canary's log-likelihood ratio "included" vs "excluded" given its residual release in one engine.

    The residual ``u_i = s_i / C`` is ``N_i + noise``, the noise ``N(0, v)`` with ``v`` the sum over releases
    of the noise variance in units of C (public: the mechanism's scale), ``N_i = 0`` for an excluded canary
    and distributed as :func:`_join_counts` for an included one, so

        ``LLR(u) = log sum_k P(N = k) exp((u k - k^2 / 2) / v)``,

    increasing in ``u`` (the ranking is the residual's; Neyman-Pearson: the most powerful statistic), and
    positive where "included" is the likelier. Engines are added as if independent. A function of the
    release, the conditioned records' sums and public constants only (no inclusion).
    """
    from scipy.special import logsumexp

    pmf = _join_counts(entry["lots"])
    k = np.flatnonzero(pmf > 0)
    variance = max(entry["noise_var"], _LEAST_NOISE_SD ** 2)
    u = entry["residual"][:, None]
    return logsumexp(np.log(pmf[k]) + (u * k - k ** 2 / 2) / variance, axis=1)


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
        The log-likelihood ratio "included" vs "excluded" (positive: more likely included).
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
