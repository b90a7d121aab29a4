"""One-run auditing (Steinke, Nasr & Jagielski, NeurIPS 2023), with input or gradient canaries.

Insert m canaries, each independently with probability 1/2, train once,
score every canary, then guess "in" or "out" for k of them (abstaining on the
others), any way the output suggests. Under (epsilon, delta)-DP the number of
correct guesses v out of k is stochastically dominated by Binomial(k, q) with
``q = e^eps / (1 + e^eps)``, up to a delta term (their Theorem 3.1):
``P[>= v correct] <= P[Bin(k, q) >= v] + 2 m delta max_i P[v > Bin(k, q) >= v - i] / i``.
The lower bound is the largest epsilon whose p-value stays below
``1 - confidence``. The f-DP analysis of the same guesses (Mahloujifar, Melis
& Chaudhuri 2024; :mod:`skdp.audit.fdp`) bounds the mu of Gaussian DP, which
is tighter for Gaussian mechanisms; both are reported.

Canaries:

- ``"input"``: records (``X_canary, y_canary``) added to the training data and
  scored from the fitted model (black box, or any score given): every
  estimator, the Fisher-type ones with "Dirac" records (canary i alone
  non-zero in its own feature).
- ``"gradient"``: white-box Dirac canaries of DP-SGD (Steinke et al. §5;
  Nasr et al. 2023): canary i's clipped per-example gradient is ``C e_i``, the
  clipping bound in its own parameter coordinate, added inside the engine
  (:func:`skdp.utils.taps.gradient_canaries`) to every release of each lot it
  is Poisson-sampled into, like a record. Its score is read from the
  releases: the sum over steps of the noisy sum at its coordinate less the
  records' clipped sum there, ``C x (lots it joined) + noise`` (neither the
  data's own gradients nor the optimizer blur it; :mod:`skdp.audit.gradient`
  states why conditioning on the records keeps the bound), as a
  log-likelihood ratio. The fit is never certified (it trained on records
  that are not the user's).
  What it audits is everything after the clipped sum: the noise and its
  scale, the sampling, the number of steps and the accountant. The
  canaries do not pass through the per-example gradients and the clipper
  (a clipper that let a record move the sum by 4 C goes unseen): those are
  audited by the replay of the sensitivity harness
  (:func:`skdp.utils.taps.replaying`, ``tests/test_sensitivity_harness.py``)
  and by input canaries. DP-SGD fits on post-processed data (the classifier
  of :class:`~skdp.generative.TrainOnSynthetic`) get no canaries.

Guess counts: each candidate count k (by default ``m / 10`` and ``m``) is
tried at level ``(1 - confidence) / (number of counts)`` (Bonferroni), so
the best bound over them still holds with ``confidence``.
"""
import math
import numbers
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom
from sklearn.base import clone

from ..mechanisms import gaussian_dp_epsilon
from ..privacy.report import privacy_spent
from ..utils.random import make_rng
from .fdp import one_run_gaussian_lower_bound

#: Canaries of :func:`one_run_audit`.
CANARIES = ("input", "gradient")
#: Gradient canaries when ``n_canaries`` is not given.
DEFAULT_GRADIENT_CANARIES = 1000


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
        The delta of the claim, in [0, 1); 0 gives the plain binomial tail.

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
    _check_delta(delta)
    _check_counts(n_canaries, n_guesses, n_correct)
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
        The delta of the claim being audited, in [0, 1).
    confidence : float, default=0.95
        Confidence of the bound, in (0, 1).

    Returns
    -------
    epsilon : float
        The lower bound on epsilon (0.0 if nothing is refuted, ``inf`` if
        every epsilon up to 100 is).

    Raises
    ------
    ValueError
        If ``delta`` is not in [0, 1) (NaN included), or the counts are not
        ``0 <= n_correct <= n_guesses <= n_canaries``.

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
    _check_delta(delta)
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


def _check_delta(delta):
    # delta is a probability below 1: NaN or 2 made the bound 0 (hiding a leak), -1 made it 12 (inflating it).
    if not (isinstance(delta, numbers.Real) and not isinstance(delta, bool) and 0 <= delta < 1):
        raise ValueError(f"delta must be a number in [0, 1), e.g. the estimator's delta_ = 1e-5; got {delta!r}.")


def _check_counts(n_canaries, n_guesses, n_correct):
    ints = all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (n_canaries, n_guesses, n_correct))
    if not (ints and 0 <= n_correct <= n_guesses <= n_canaries and n_canaries >= 1):
        raise ValueError(f"the counts must be ints with 0 <= n_correct <= n_guesses <= n_canaries and "
                         f"n_canaries >= 1; got n_canaries={n_canaries!r}, n_guesses={n_guesses!r}, "
                         f"n_correct={n_correct!r}.")


def _guess_counts(n_guesses, m):
    """The guess counts tried: "auto" -> m / 10 and m; an int or a list of ints in [1, m]."""
    if n_guesses is None or (isinstance(n_guesses, str) and n_guesses == "auto"):
        return sorted({max(1, round(m / 10)), m})
    counts = [n_guesses] if isinstance(n_guesses, numbers.Integral) else list(n_guesses) \
        if isinstance(n_guesses, (list, tuple, range, np.ndarray)) else None
    if not counts or not all(isinstance(k, numbers.Integral) and not isinstance(k, bool) and 1 <= k <= m
                             for k in counts):
        raise ValueError(f"n_guesses must be 'auto', an int or a list of ints in [1, n_canaries={m}] (more "
                         f"guesses than canaries would count guesses never made); got {n_guesses!r}.")
    return sorted({int(k) for k in counts})


def log_likelihood_score(estimator, X, y):
    """Score membership in a black box: the log-probability the model gives each record's own label.

    Members of the training set tend to get a higher probability for their
    own label than non-members, so a higher score means "more likely a
    member". Only ``predict_proba`` and ``classes_`` are used. Probabilities
    are clipped at 1e-300 before the logarithm, so the scores are finite; a
    probability near 1 saturates (:func:`logit_score` does not).

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
    one_run_audit : Takes it as ``score=`` (its default is :func:`logit_score`).
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


def logit_score(estimator, X, y):
    """Score membership in a black box: the log-odds ``log p / (1 - p)`` of each record's own label.

    The same order as :func:`log_likelihood_score` (the log-odds grow with
    ``p``), computed from the classifier's log-scores (``decision_function``,
    else ``predict_log_proba``, else ``predict_proba``) so that neither end
    saturates: a model sure of a label gives ``log p = 0`` to every canary
    alike, and the log-odds ``s_y - logsumexp(s_k, k != y)`` still tell them
    apart (the logit scaling of LiRA, Carlini et al. 2022). A binary
    ``decision_function`` of one column is read as the log-odds of
    ``classes_[1]``. The default score of :func:`one_run_audit`.

    Parameters
    ----------
    estimator : fitted classifier
        Any fitted classifier with ``classes_`` and ``decision_function``,
        ``predict_log_proba`` or ``predict_proba``.
    X : array-like of shape (n_samples, n_features)
        The records to score.
    y : array-like of shape (n_samples,)
        Their labels, all in ``estimator.classes_``.

    Returns
    -------
    scores : ndarray of shape (n_samples,)
        The log-odds of ``y_i`` at ``x_i`` under the model.

    See Also
    --------
    log_likelihood_score : ``log p`` itself.
    one_run_audit : Uses this score by default for input canaries.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> from skdp.audit import logit_score
    >>> X = np.array([[0.0], [1.0], [0.1], [0.9]])
    >>> y = np.array([0, 1, 0, 1])
    >>> model = LogisticRegression().fit(X, y)
    >>> bool(np.allclose(logit_score(model, X, y), [-1, 1, -1, 1] * model.decision_function(X)))
    True
    """
    from scipy.special import logsumexp

    rows, columns = np.arange(len(y)), np.searchsorted(estimator.classes_, y)
    if hasattr(estimator, "decision_function"):
        scores = np.asarray(estimator.decision_function(X), dtype=float)
        if scores.ndim == 1:  # binary: the log-odds of classes_[1]
            scores = np.column_stack([np.zeros_like(scores), scores])
    elif hasattr(estimator, "predict_log_proba"):
        scores = np.asarray(estimator.predict_log_proba(X), dtype=float)
    else:
        scores = np.log(np.clip(estimator.predict_proba(X), 1e-300, None))
    own = scores[rows, columns].copy()
    scores[rows, columns] = -np.inf
    return own - logsumexp(scores, axis=1)


@dataclass
class AuditResult:
    """What a one-run audit found, beside what the estimator claims.

    Returned by :func:`one_run_audit`. ``epsilon_lower_bound`` holds with
    probability at least ``confidence`` over the audit's randomness (the
    canaries' coin flips and the mechanism's noise); a bound above
    ``claimed_epsilon`` refutes the claim at that confidence. A bound below it
    does not prove the claim: it means only that this attack found no
    violation. ``mu_lower_bound`` is the f-DP analysis of the same guesses: it
    refutes "mu-Gaussian DP", and ``gaussian_epsilon_lower_bound`` reads it
    as an epsilon at ``delta`` for a Gaussian-shaped curve (DP-SGD, Gaussian
    sums; not a Laplace or exponential mechanism, which it may exceed while
    keeping its claim). ``str(result)`` is a one-line summary.

    Parameters
    ----------
    epsilon_lower_bound : float
        The empirical lower bound on epsilon at ``delta`` (Steinke, Nasr &
        Jagielski 2023).
    claimed_epsilon : float
        The epsilon the fitted estimator reports (composed over a Pipeline's
        steps).
    n_canaries : int
        Canaries, each included in training with probability 1/2.
    n_guesses : int
        Guesses made for the reported bound (the best of the counts tried).
    n_correct : int
        Of them, the guesses that were right.
    confidence : float
        Confidence of both bounds.
    delta : float
        The delta of the claim the bounds were computed at.
    scores : ndarray of shape (n_canaries,)
        Each canary's membership score (higher: more likely in).
    included : ndarray of bool, shape (n_canaries,)
        Which canaries were in the training set (secret to the attack).
    mu_lower_bound : float, default=0.0
        The empirical lower bound on mu of Gaussian DP (f-DP analysis,
        Mahloujifar, Melis & Chaudhuri 2024).
    gaussian_epsilon_lower_bound : float, default=0.0
        ``mu_lower_bound`` as an epsilon at ``delta``
        (:func:`skdp.mechanisms.gaussian_dp_epsilon`).
    canaries : {"input", "gradient"}, default="input"
        The kind of canaries.

    See Also
    --------
    one_run_audit : Produces this result.
    one_run_epsilon_lower_bound : How ``epsilon_lower_bound`` is computed.
    one_run_gaussian_lower_bound : How ``mu_lower_bound`` is computed.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp.audit import AuditResult
    >>> result = AuditResult(0.5, 1.0, 100, 20, 14, 0.95, 1e-5, np.zeros(100), np.zeros(100, bool))
    >>> result.consistent
    True
    >>> print(result)  # doctest: +NORMALIZE_WHITESPACE
    one-run audit: epsilon >= 0.500 at 95% confidence (14/20 guesses right, 100 input canaries);
    Gaussian f-DP: mu >= 0.000, epsilon >= 0.000; claimed epsilon = 1
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
    mu_lower_bound: float = 0.0
    gaussian_epsilon_lower_bound: float = 0.0
    canaries: str = "input"

    @property
    def consistent(self):
        """True when the (epsilon, delta) bound does not refute the claim."""
        return self.epsilon_lower_bound <= self.claimed_epsilon

    def __str__(self):
        return (f"one-run audit: epsilon >= {self.epsilon_lower_bound:.3f} at {self.confidence:.0%} "
                f"confidence ({self.n_correct}/{self.n_guesses} guesses right, {self.n_canaries} {self.canaries} "
                f"canaries); Gaussian f-DP: mu >= {self.mu_lower_bound:.3f}, epsilon >= "
                f"{self.gaussian_epsilon_lower_bound:.3f}; claimed epsilon = {self.claimed_epsilon:g}")


def _threshold(scores):
    """Where the scores split in two: the exact 1-D 2-means split (least within-group sum of squares).

    Between the clusters when they separate, whatever their sizes and ties (an iteration from the median
    stalled on a median equal to 210 tied scores), near the middle when they overlap. A function of the
    output only, so the guesses made from it keep the audit's guarantee.
    """
    s = np.sort(np.asarray(scores, dtype=float))
    m = len(s)
    if m < 2 or s[0] == s[-1]:
        return float(s[0]) if m else 0.0
    total, squares = np.cumsum(s), np.cumsum(s ** 2)
    k = np.arange(1, m)  # the k lowest scores on one side
    left = squares[:-1] - total[:-1] ** 2 / k
    right = (squares[-1] - squares[:-1]) - (total[-1] - total[:-1]) ** 2 / (m - k)
    cost = np.where(s[1:] > s[:-1], left + right, np.inf)  # split only between distinct values
    best = int(np.argmin(cost))
    return float((s[best] + s[best + 1]) / 2)


def one_run_guesses(scores, n_guesses, rng, threshold=None):
    """Guesses from the scores: ``+1`` (in) for the highest, ``-1`` (out) for the lowest, 0 (abstain) elsewhere.

    The ``n_guesses`` are shared between the two ends in the proportion of
    the scores above the threshold (``None``: the 2-means split; gradient
    canaries give 0, their scores being log-likelihood ratios), so that with
    every canary guessed the guesses are the threshold's split (all right
    when the scores separate, whatever the number of included canaries);
    ties are broken at random, so that equal scores carry no information.
    """
    m = len(scores)
    above = float(np.mean(scores > (_threshold(scores) if threshold is None else threshold)))
    k_in = min(n_guesses, max(0, int(round(n_guesses * above))))
    order = np.lexsort((rng.random(m), scores))
    guesses = np.zeros(m, dtype=int)
    guesses[order[:n_guesses - k_in]] = -1
    guesses[order[m - k_in:]] = 1
    return guesses


def one_run_bounds(scores, included, n_guesses, delta, confidence, rng, threshold=None):
    """Both bounds over the guess counts tried (Bonferroni), with the counts of the best (epsilon, delta) one.

    ``threshold``: where the guesses split "in" from "out" (:func:`one_run_guesses`); None: 2-means.
    """
    m = len(scores)
    counts = _guess_counts(n_guesses, m)
    level = 1 - (1 - confidence) / len(counts)
    best = (-1.0, 0, 0)
    mu = 0.0
    for k in counts:
        guesses = one_run_guesses(scores, k, rng, threshold)
        correct = int(np.sum(guesses == np.where(included, 1, -1)))
        eps = one_run_epsilon_lower_bound(m, k, correct, delta, level)
        if eps > best[0]:
            best = (eps, k, correct)
        mu = max(mu, one_run_gaussian_lower_bound(m, k, correct, level))
    return best, mu


def one_run_audit(estimator, X, y, X_canary=None, y_canary=None, *, canaries="input", n_canaries=None,
                  score=None, n_guesses="auto", confidence=0.95, delta=None, random_state=None):
    """Audit ``estimator`` (any skdp estimator or Pipeline) with one training run.

    Each canary is added to the training data independently with probability
    1/2, the estimator is fitted once, every canary is scored, and the
    auditor guesses "in" for the highest and "out" for the lowest scores. The
    number of right guesses gives a lower bound on epsilon that holds with
    probability ``confidence`` (Steinke, Nasr & Jagielski, NeurIPS 2023), and
    the f-DP analysis of the same guesses a lower bound on the mu of Gaussian
    DP (Mahloujifar, Melis & Chaudhuri 2024). A bound above the estimator's
    ``epsilon_`` refutes its claim; one below it is what a correct
    implementation shows, and certifies nothing. The audit trains on the
    canaries, so the fit spends the estimator's budget (and writes to its
    ledger, if it has one) like any other fit.

    With ``canaries="input"`` the canaries are records (``X_canary,
    y_canary``). With ``canaries="gradient"`` (DP-SGD estimators: classifier,
    regressor, ``PGEGenerator``, private ``SRGANTransformer``, and Pipelines
    or searches ending in one) they are white-box Dirac canaries: canary i's
    clipped gradient is the clipping bound C in its own parameter coordinate,
    and it is Poisson-sampled into the lots and noised with the records,
    inside the engine; its score is read from the releases: the sum over
    steps of the noisy gradient sum at its coordinate less the records'
    clipped sum there, that is ``C x (lots it joined) + noise``, as the
    log-likelihood ratio "in" vs "out" (guessed in where positive), added over
    the engines (a GAN's two networks). Only the released model's engines are
    scored (a private search's winner). A fit with gradient canaries is never
    certified.

    Parameters
    ----------
    estimator : estimator or Pipeline
        Cloned, then fitted on ``X, y`` (plus the included input canaries).
    X, y : array-like
        The ordinary training data.
    X_canary, y_canary : array-like or None, default=None
        The input canaries (for example from ``mislabelled_canaries``); None
        with gradient canaries.
    canaries : {"input", "gradient"}, default="input"
        Records given in ``X_canary, y_canary``, or white-box gradient
        canaries of DP-SGD.
    n_canaries : int or None, default=None
        Gradient canaries, at most the trainable parameters of each network
        (None: 1000). With input canaries: None or ``len(X_canary)``. A
        gradient audit runs in this thread only: ``n_jobs`` other than 1
        anywhere in ``estimator`` (None under a joblib ``parallel_config``
        with several jobs included) is refused before the fit.
    score : callable or None, default=None
        ``(fitted, X_canary, y_canary) -> scores``, higher meaning "more
        likely a member", for input canaries; None: :func:`logit_score`, the
        log-odds of the canary's label (black box). Gradient canaries are
        scored white-box (``score`` must be None).
    n_guesses : "auto", int or list of int, default="auto"
        Guesses, at most the canaries: each count given is tried at level
        ``(1 - confidence) / len(counts)`` and the best bound kept. "auto":
        ``m / 10`` and ``m`` (few sure guesses for a correct mechanism, all of
        them when the scores separate).
    confidence : float, default=0.95
        Confidence of the lower bounds, in (0, 1).
    delta : float or None, default=None
        The delta of the claim, in [0, 1); None reads the fitted ``delta_``
        (composed over a Pipeline), or 0 when there is none.
    random_state : int, Generator or None, default=None
        Seeds the canaries' inclusion and the tie-breaking of equal scores
        (not the estimator's noise, nor the gradient canaries' lots, which
        are drawn with the mechanism's fresh entropy).

    Returns
    -------
    result : AuditResult
        Both bounds, the claim, the guess counts, each canary's score and
        whether it was included.

    Raises
    ------
    ValueError
        If the canaries do not fit their kind (input canaries missing or of
        different lengths, gradient canaries with ``X_canary`` or a
        ``score``, more gradient canaries than parameters, parallel jobs, no
        DP-SGD release in the fit), or ``delta``, ``confidence`` or
        ``n_guesses`` is out of range.

    See Also
    --------
    mislabelled_canaries : Input canaries that a non-private model memorises.
    logit_score : The default score of input canaries.
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
    >>> result.claimed_epsilon, result.n_canaries, result.epsilon_lower_bound <= 1.0
    (1.0, 50, True)

    White-box gradient canaries of a DP-SGD classifier:

    >>> from skdp import DPMomentumClassifier
    >>> clf = DPMomentumClassifier(epsilon=4.0, classes=[0, 1], max_epochs=2, random_state=0)
    >>> result = one_run_audit(clf, X, y, canaries="gradient", n_canaries=8, random_state=0)
    >>> result.canaries, result.n_canaries, result.epsilon_lower_bound <= result.claimed_epsilon
    ('gradient', 8, True)
    """
    from .gradient import fit_with_gradient_canaries

    _check_confidence(confidence)
    if delta is not None:
        _check_delta(delta)
    if canaries not in CANARIES:
        raise ValueError(f"canaries must be one of {CANARIES}, got {canaries!r}.")
    rng = make_rng(random_state)
    X, y = np.asarray(X), np.asarray(y)
    if canaries == "gradient":
        if X_canary is not None or y_canary is not None or score is not None:
            raise ValueError("canaries='gradient' makes its own canaries and scores them white-box: pass neither "
                             "X_canary, y_canary nor score (they are for canaries='input').")
        m = DEFAULT_GRADIENT_CANARIES if n_canaries is None else n_canaries
        if not (isinstance(m, numbers.Integral) and not isinstance(m, bool) and m >= 1):
            raise ValueError(f"n_canaries must be an int >= 1, got {n_canaries!r}.")
        counts = _guess_counts(n_guesses, m)  # refused before the fit
        _check_one_process(estimator)
        included = rng.random(m) < 0.5
        fitted, scores = fit_with_gradient_canaries(estimator, X, y, included)
        threshold = 0.0  # the scores are log-likelihood ratios: "in" where positive
    else:
        if X_canary is None or y_canary is None:
            raise ValueError("canaries='input' needs X_canary and y_canary (see mislabelled_canaries), or use "
                             "canaries='gradient' for a DP-SGD estimator.")
        X_canary, y_canary = np.asarray(X_canary), np.asarray(y_canary)
        m = len(X_canary)
        if m == 0:
            raise ValueError("one_run_audit needs at least one canary (X_canary is empty); see mislabelled_canaries.")
        if len(y_canary) != m:
            raise ValueError(f"X_canary has {m} rows but y_canary has {len(y_canary)}; give one label per canary.")
        if n_canaries is not None and n_canaries != m:
            raise ValueError(f"n_canaries={n_canaries!r} but X_canary has {m} rows: input canaries are the rows "
                             "given (leave n_canaries=None).")
        counts = _guess_counts(n_guesses, m)
        included = rng.random(m) < 0.5
        fitted = clone(estimator).fit(np.concatenate([X, X_canary[included]]),
                                      np.concatenate([y, y_canary[included]]))
        scores = np.asarray((score or logit_score)(fitted, X_canary, y_canary), dtype=float)
        threshold = None  # any score's scale: the 2-means split
    claimed, claimed_delta = _claimed_privacy(fitted)
    delta = claimed_delta if delta is None else delta
    (bound, k, correct), mu = one_run_bounds(scores, included, counts, delta, confidence, rng, threshold)
    return AuditResult(bound, claimed, m, k, correct, confidence, delta, scores, included, mu,
                       gaussian_dp_epsilon(mu, delta) if delta > 0 else (math.inf if mu > 0 else 0.0), canaries)


def _check_one_process(estimator):
    """Refuse parallel jobs before the fit: the canaries live in this thread's tap, workers never see them.

    ``n_jobs=None`` means joblib's active ``parallel_config(n_jobs=...)`` (1 outside one): refused too when
    that runs more than one job (processes or threads: neither inherits the tap).
    """
    from joblib import effective_n_jobs

    for key, value in estimator.get_params(deep=True).items():
        if key.split("__")[-1] != "n_jobs" or value == 1:
            continue
        if value is not None:
            raise ValueError(f"canaries='gradient' runs the fit in this process only, but {key}={value!r}: the "
                             f"canaries would not reach the fits of other workers. Set {key}=1 for the audit.")
        active = effective_n_jobs(None)
        if active != 1:
            raise ValueError(f"canaries='gradient' runs the fit in this process only, but {key}=None under "
                             f"joblib.parallel_config(n_jobs=...), which runs {active} jobs: the canaries would "
                             f"not reach the fits of other workers. Set {key}=1 for the audit, or run it outside "
                             "the parallel_config block.")


def _claimed_privacy(fitted):
    """The (epsilon, delta) the fitted steps report, composed as :func:`skdp.privacy.privacy_spent` does."""
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
