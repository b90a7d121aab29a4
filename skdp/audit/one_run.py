"""One-run auditing (Steinke, Nasr & Jagielski, NeurIPS 2023).

Insert m canaries, each independently with probability 1/2, train once,
score every canary, guess "in" for the ``k_plus`` highest scores and "out" for
the ``k_minus`` lowest. Under (epsilon, delta)-DP the number of correct
guesses v out of r is stochastically dominated by Binomial(r, q) with
``q = e^eps / (1 + e^eps)``, up to a delta term (their Theorem 3.1):
``P[>= v correct] <= P[Bin(r, q) >= v] + 2 m delta max_i P[v > Bin(r, q) >= v - i] / i``.
The lower bound is the largest epsilon whose p-value stays below
``1 - confidence``. The guess counts are fixed before the labels are seen,
so a single bound is reported without a multiple-testing correction.
"""
import math
import numbers
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom
from sklearn.base import clone

from ..privacy.report import privacy_spent
from ..utils.random import make_rng


def one_run_p_value(epsilon, n_canaries, n_guesses, n_correct, delta):
    """Probability of at least ``n_correct`` right guesses under (epsilon, delta)-DP."""
    q = math.exp(epsilon) / (1 + math.exp(epsilon)) if epsilon < 700 else 1.0
    tail = binom.sf(n_correct - 1, n_guesses, q)
    if delta == 0 or n_correct == 0:
        return float(tail)
    below = np.cumsum(binom.pmf(n_correct - np.arange(1, n_correct + 1), n_guesses, q))
    ratio = np.max(below / np.arange(1, n_correct + 1))
    return float(min(1.0, tail + 2 * n_canaries * delta * ratio))


def one_run_epsilon_lower_bound(n_canaries, n_guesses, n_correct, delta, confidence=0.95):
    """Largest epsilon refuted at ``confidence`` by ``n_correct`` of ``n_guesses``; 0 if none."""
    _check_confidence(confidence)
    alpha = 1 - confidence
    if n_guesses == 0 or one_run_p_value(0.0, n_canaries, n_guesses, n_correct, delta) > alpha:
        return 0.0
    hi = 1.0
    while one_run_p_value(hi, n_canaries, n_guesses, n_correct, delta) <= alpha:
        hi *= 2
        if hi > 100:
            return math.inf
    return brentq(lambda e: one_run_p_value(e, n_canaries, n_guesses, n_correct, delta) - alpha,
                  0.0, hi, xtol=1e-6)


def _check_confidence(confidence):
    # confidence 0 or 1 makes every (or no) p-value significant: a "refutation" that means nothing.
    if not (isinstance(confidence, numbers.Real) and 0 < confidence < 1):
        raise ValueError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence!r}.")


def _check_guesses(n_guesses, n_canaries):
    if not (isinstance(n_guesses, numbers.Integral) and not isinstance(n_guesses, bool)
            and 1 <= n_guesses <= n_canaries):
        raise ValueError(f"n_guesses must be an int in [1, n_canaries={n_canaries}] (more guesses than canaries "
                         f"would count guesses never made); got {n_guesses!r}.")


def log_likelihood_score(estimator, X, y):
    """Black-box membership score: log-probability the model gives each record's own label."""
    proba = estimator.predict_proba(X)
    columns = np.searchsorted(estimator.classes_, y)
    return np.log(np.clip(proba[np.arange(len(y)), columns], 1e-300, None))


@dataclass
class AuditResult:
    """What a one-run audit found, beside what the estimator claims."""

    epsilon_lower_bound: float
    claimed_epsilon: float
    n_canaries: int
    n_guesses: int
    n_correct: int
    confidence: float
    delta: float
    scores: np.ndarray = field(repr=False)
    included: np.ndarray = field(repr=False)

    @property
    def consistent(self):
        """True when the audit does not refute the claim."""
        return self.epsilon_lower_bound <= self.claimed_epsilon

    def __str__(self):
        return (f"one-run audit: epsilon >= {self.epsilon_lower_bound:.3f} at {self.confidence:.0%} "
                f"confidence ({self.n_correct}/{self.n_guesses} guesses right, {self.n_canaries} canaries); "
                f"claimed epsilon = {self.claimed_epsilon:g}")


def one_run_audit(estimator, X, y, X_canary, y_canary, *, score=log_likelihood_score, n_guesses=None,
                  confidence=0.95, delta=None, random_state=None):
    """Audit ``estimator`` (any skdp estimator or Pipeline) with one training run.

    Parameters
    ----------
    estimator : estimator or Pipeline
        Cloned, then fitted on ``X, y`` plus the included canaries.
    X, y : array-like
        The ordinary training data.
    X_canary, y_canary : array-like
        The canaries (for example from ``mislabelled_canaries``).
    score : callable ``(fitted, X_canary, y_canary) -> scores``
        Higher means "more likely a member". Default: log-likelihood of the
        canary's label (black box).
    n_guesses : int or None
        Guesses in total, split evenly between the highest ("in") and lowest
        ("out") scores; None -> a fifth of the canaries.
    confidence : float, default=0.95
    delta : float or None
        The delta of the claim; None reads the fitted ``delta_`` (last step of
        a Pipeline), or 0 when there is none.
    random_state : int, Generator or None

    Returns
    -------
    AuditResult
    """
    _check_confidence(confidence)
    rng = make_rng(random_state)
    X, y = np.asarray(X), np.asarray(y)
    X_canary, y_canary = np.asarray(X_canary), np.asarray(y_canary)
    m = len(X_canary)
    if m == 0:
        raise ValueError("one_run_audit needs at least one canary (X_canary is empty); see mislabelled_canaries.")
    if len(y_canary) != m:
        raise ValueError(f"X_canary has {m} rows but y_canary has {len(y_canary)}; give one label per canary.")
    if n_guesses is not None:
        _check_guesses(n_guesses, m)
    included = rng.random(m) < 0.5
    fitted = clone(estimator).fit(np.concatenate([X, X_canary[included]]),
                                  np.concatenate([y, y_canary[included]]))
    scores = np.asarray(score(fitted, X_canary, y_canary), dtype=float)
    r = max(2, m // 5) if n_guesses is None else int(n_guesses)
    # Ties are broken at random so that equal scores carry no information.
    order = np.lexsort((rng.random(m), scores))
    guess_out, guess_in = order[: r // 2], order[m - (r - r // 2):]
    correct = int(included[guess_in].sum() + (~included[guess_out]).sum())
    claimed, claimed_delta = _claimed_privacy(fitted)
    delta = claimed_delta if delta is None else delta
    bound = one_run_epsilon_lower_bound(m, r, correct, delta, confidence)
    return AuditResult(bound, claimed, m, r, correct, confidence, delta, scores, included)


def _claimed_privacy(fitted):
    """Sum of the epsilons and deltas the fitted steps report (basic composition)."""
    eps, delta, _ = privacy_spent(fitted)
    return eps, delta


def mislabelled_canaries(X_pool, y_pool, classes, random_state=None):
    """Canaries made of real records with a wrong label drawn uniformly from ``classes``."""
    rng = make_rng(random_state)
    classes = np.asarray(classes)
    y_pool = np.asarray(y_pool)
    shift = rng.integers(1, len(classes), size=len(y_pool))
    wrong = classes[(np.searchsorted(classes, y_pool) + shift) % len(classes)]
    return np.asarray(X_pool).copy(), wrong
