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
    """Bound the probability of at least ``n_correct`` right guesses under (epsilon, delta)-DP.

    This is the p-value of the one-run audit (Steinke, Nasr & Jagielski 2023,
    Theorem 3.1): with ``q = e^epsilon / (1 + e^epsilon)``, the number of
    correct guesses of an (epsilon, delta)-DP training run satisfies
    ``P[>= v correct] <= P[Bin(r, q) >= v] + 2 m delta max_i P[v > Bin(r, q) >= v - i] / i``.
    A small value refutes the claim (epsilon, delta).

    Parameters
    ----------
    epsilon : float
        The epsilon of the claim being tested.
    n_canaries : int
        Canaries ``m`` inserted, each with probability 1/2; the delta term
        grows with it.
    n_guesses : int
        Guesses ``r`` made (abstentions are not counted).
    n_correct : int
        Guesses ``v`` that were right.
    delta : float
        The delta of the claim; 0 gives the plain binomial tail.

    Returns
    -------
    p_value : float
        An upper bound, in [0, 1], on the probability of ``n_correct`` or more
        right guesses if the mechanism is (epsilon, delta)-DP.

    See Also
    --------
    one_run_epsilon_lower_bound : The largest epsilon this p-value refutes.
    one_run_audit : Run the whole audit on an estimator.

    Examples
    --------
    >>> from skdp.audit import one_run_p_value
    >>> round(one_run_p_value(1.0, n_canaries=100, n_guesses=50, n_correct=40, delta=0.0), 4)
    0.1743
    """
    q = math.exp(epsilon) / (1 + math.exp(epsilon)) if epsilon < 700 else 1.0
    tail = binom.sf(n_correct - 1, n_guesses, q)
    if delta == 0 or n_correct == 0:
        return float(tail)
    below = np.cumsum(binom.pmf(n_correct - np.arange(1, n_correct + 1), n_guesses, q))
    ratio = np.max(below / np.arange(1, n_correct + 1))
    return float(min(1.0, tail + 2 * n_canaries * delta * ratio))


def one_run_epsilon_lower_bound(n_canaries, n_guesses, n_correct, delta, confidence=0.95):
    """Compute the largest epsilon refuted at ``confidence`` by ``n_correct`` of ``n_guesses``.

    The bound is the largest epsilon whose :func:`one_run_p_value` stays at or
    below ``1 - confidence``, found by bisection: every claim (epsilon', delta)
    with epsilon' below it is refuted at that confidence. It is 0 when even
    epsilon = 0 is not refuted (chance-level guessing) and ``inf`` when the
    guesses refute every epsilon up to 100 (a mechanism that adds no noise).

    Parameters
    ----------
    n_canaries : int
        Canaries ``m`` inserted, each with probability 1/2.
    n_guesses : int
        Guesses ``r`` made.
    n_correct : int
        Guesses ``v`` that were right.
    delta : float
        The delta of the claim being audited.
    confidence : float, default=0.95
        Confidence of the bound, in (0, 1).

    Returns
    -------
    epsilon : float
        The lower bound on epsilon (0.0 if nothing is refuted, ``inf`` if
        every epsilon up to 100 is).

    See Also
    --------
    one_run_p_value : The p-value this bound inverts.
    one_run_audit : Run the whole audit on an estimator.
    epsilon_lower_bound : The bound from many runs on two neighbouring datasets.

    Examples
    --------
    >>> from skdp.audit import one_run_epsilon_lower_bound
    >>> round(one_run_epsilon_lower_bound(1000, 100, 90, delta=1e-5), 2)
    1.63
    >>> one_run_epsilon_lower_bound(100, 50, 25, delta=1e-5)
    0.0
    """
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
    """Score membership in a black box: the log-probability the model gives each record's own label.

    Members of the training set tend to get a higher probability for their
    own label than non-members, so a higher score means "more likely a
    member". Only ``predict_proba`` and ``classes_`` are used. Probabilities
    are clipped at 1e-300 before the logarithm, so the scores are finite.

    Parameters
    ----------
    estimator : fitted classifier
        Any fitted classifier with ``predict_proba`` and ``classes_``.
    X : array-like of shape (n_samples, n_features)
        The records to score.
    y : array-like of shape (n_samples,)
        Their labels, all in ``estimator.classes_``.

    Returns
    -------
    scores : ndarray of shape (n_samples,)
        ``log P(y_i | x_i)`` under the model.

    See Also
    --------
    one_run_audit : Uses this score by default.
    skdp.attacks.loss_threshold_attack : The same signal as a membership-inference attack.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> from skdp.audit import log_likelihood_score
    >>> X = np.array([[0.0], [1.0], [0.1], [0.9]])
    >>> y = np.array([0, 1, 0, 1])
    >>> scores = log_likelihood_score(LogisticRegression().fit(X, y), X, y)
    >>> scores.shape, bool(np.all(scores < 0))
    ((4,), True)
    """
    proba = estimator.predict_proba(X)
    columns = np.searchsorted(estimator.classes_, y)
    return np.log(np.clip(proba[np.arange(len(y)), columns], 1e-300, None))


@dataclass
class AuditResult:
    """What a one-run audit found, beside what the estimator claims.

    Returned by :func:`one_run_audit`. ``epsilon_lower_bound`` holds with
    probability at least ``confidence`` over the audit's randomness (the
    canaries' coin flips and the mechanism's noise); a bound above
    ``claimed_epsilon`` refutes the claim at that confidence. A bound below it
    does not prove the claim: it means only that this attack found no
    violation. ``str(result)`` is a one-line summary.

    Parameters
    ----------
    epsilon_lower_bound : float
        The empirical lower bound on epsilon.
    claimed_epsilon : float
        The epsilon the fitted estimator reports (summed over a Pipeline's
        steps).
    n_canaries : int
        Canaries, each included in training with probability 1/2.
    n_guesses : int
        Guesses made, half "in" (highest scores), half "out" (lowest).
    n_correct : int
        Guesses that were right.
    confidence : float
        Confidence of ``epsilon_lower_bound``.
    delta : float
        The delta of the claim the bound was computed at.
    scores : ndarray of shape (n_canaries,)
        Each canary's membership score.
    included : ndarray of bool, shape (n_canaries,)
        Which canaries were in the training set (secret to the attack).

    See Also
    --------
    one_run_audit : Produces this result.
    one_run_epsilon_lower_bound : How ``epsilon_lower_bound`` is computed.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.audit import AuditResult
    >>> result = AuditResult(0.5, 1.0, 100, 20, 14, 0.95, 1e-5, np.zeros(100), np.zeros(100, bool))
    >>> result.consistent
    True
    >>> print(result)
    one-run audit: epsilon >= 0.500 at 95% confidence (14/20 guesses right, 100 canaries); claimed epsilon = 1
    """

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

    Each canary is added to the training data independently with probability
    1/2, the estimator is fitted once, every canary is scored, and the
    auditor guesses "in" for the highest and "out" for the lowest scores. The
    number of right guesses gives a lower bound on epsilon that holds with
    probability ``confidence`` (Steinke, Nasr & Jagielski, NeurIPS 2023). A
    bound above the estimator's ``epsilon_`` refutes its claim; one below it
    is what a correct implementation shows, and certifies nothing. The audit
    trains on the canaries, so the fit spends the estimator's budget (and
    writes to its ledger, if it has one) like any other fit.

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
        Confidence of the lower bound, in (0, 1).
    delta : float or None
        The delta of the claim; None reads the fitted ``delta_`` (last step of
        a Pipeline), or 0 when there is none.
    random_state : int, Generator or None
        Seeds the canaries' inclusion and the tie-breaking of equal scores
        (not the estimator's noise, which it draws itself).

    Returns
    -------
    result : AuditResult
        The bound, the claim, the guess counts, each canary's score and
        whether it was included.

    See Also
    --------
    mislabelled_canaries : Canaries that a non-private model memorises.
    log_likelihood_score : The default membership score.
    epsilon_lower_bound : An audit from many runs instead of one.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp import DPFisherClassifier
    >>> from skdp.audit import mislabelled_canaries, one_run_audit
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.random((200, 4)), rng.integers(0, 2, 200)
    >>> X_canary, y_canary = mislabelled_canaries(rng.random((50, 4)), rng.integers(0, 2, 50), classes=[0, 1],
    ...                                           random_state=0)
    >>> clf = DPFisherClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1])
    >>> result = one_run_audit(clf, X, y, X_canary, y_canary, random_state=0)
    >>> result.claimed_epsilon, result.n_canaries, result.n_guesses
    (1.0, 50, 10)
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
    """Make canaries from real records by giving each a wrong label drawn uniformly from ``classes``.

    A mislabelled record is one a model can fit only by memorising it, so its
    loss separates members from non-members more sharply than an ordinary
    record's: these are the canaries of a black-box audit. The records should
    come from data outside the training set (a held-out pool); the labels are
    drawn from the other ``len(classes) - 1`` classes with equal probability.

    Parameters
    ----------
    X_pool : array-like of shape (n_canaries, n_features)
        Records to use as canaries; copied, not modified.
    y_pool : array-like of shape (n_canaries,)
        Their true labels, all in ``classes``.
    classes : array-like of shape (n_classes,)
        The sorted label set, with at least two classes.
    random_state : int, Generator or None, default=None
        Seeds the wrong labels.

    Returns
    -------
    X_canary : ndarray of shape (n_canaries, n_features)
        A copy of ``X_pool``.
    y_canary : ndarray of shape (n_canaries,)
        Labels that differ from ``y_pool`` everywhere.

    See Also
    --------
    one_run_audit : Audits an estimator with these canaries.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.audit import mislabelled_canaries
    >>> y_pool = np.array([0, 1, 2, 0])
    >>> X_canary, y_canary = mislabelled_canaries(np.zeros((4, 2)), y_pool, classes=[0, 1, 2], random_state=0)
    >>> bool(np.all(y_canary != y_pool)), X_canary.shape
    (True, (4, 2))
    """
    rng = make_rng(random_state)
    classes = np.asarray(classes)
    y_pool = np.asarray(y_pool)
    shift = rng.integers(1, len(classes), size=len(y_pool))
    wrong = classes[(np.searchsorted(classes, y_pool) + shift) % len(classes)]
    return np.asarray(X_pool).copy(), wrong
