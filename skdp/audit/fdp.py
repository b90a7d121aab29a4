"""The f-DP analysis of a one-run audit (Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-DP in one run").

Setting (as in :mod:`skdp.audit.one_run`): m canaries, each in the training
set independently with probability 1/2 (``S_i = +1`` in, ``-1`` out); from the
output the auditor makes exactly k guesses ``T_i = +-1`` (abstaining on the
others) and ``W`` of them are right.

The hypothesis is that, for every canary i and every value of the other
canaries, the output with canary i in and with it out are f-DP: every event
``E`` has ``P_in(E) <= B(P_out(E))`` and ``P_out(E) <= B(P_in(E))``, with the
*blow-up* ``B(x) = 1 - f(x)`` (concave and increasing, since a trade-off
function ``f`` is convex and decreasing). For mu-Gaussian DP,
``B(x) = Phi(Phi^-1(x) + mu)`` and ``B^-1(y) = Phi(Phi^-1(y) - mu)``; for
(epsilon, delta)-DP, ``B^-1(y) = max(0, (y - delta) e^-eps, 1 - delta - e^eps (1 - y))``.

**Lemma.** With ``r_j = E[W 1{W >= j}] / m`` (right guesses, counted on the
outcomes with at least j right) and ``h_j = E[(k - W) 1{W >= j}] / m`` (wrong
ones), every level ``j >= 1`` has ``r_j <= B(h_{j-1})``.

*Proof.* Fix canary i and the others' ``S_{-i}``; let ``W_{-i}`` count the
right guesses on the other canaries (a function of the output and ``S_{-i}``).
The event ``E = {T_i = +1, W_{-i} >= j - 1}`` is, when i is in, "i guessed
right and ``W >= j``", and when i is out, "i guessed wrong and ``W >= j - 1``"
(a wrong guess leaves ``W = W_{-i}``). So ``P_in(right_i, W >= j) <=
B(P_out(wrong_i, W >= j - 1))``, and the same with the signs swapped
(``T_i = -1``). Average the two signs (probability 1/2 each), the other
canaries and the m canaries: B is concave, so by Jensen's inequality the
averages keep the inequality, and ``sum_i P(right_i, W >= j) = E[W 1{W >= j}]``,
``sum_i P(wrong_i, W >= j - 1) = E[(k - W) 1{W >= j - 1}]``. QED.

**Test.** If ``P(W >= c) >= alpha``, the levels below c must carry enough wrong
guesses for the lemma to hold. Level j adds ``p_j = P(W = j)``:
``r_j - r_{j+1} = j p_j / m`` and ``h_j - h_{j+1} = (k - j) p_j / m``. Starting
from ``P(W = c) = alpha`` (``r_c = alpha c / m``, ``h_c = alpha (k - c) / m``)
and taking at each lower level the least mass the lemma allows,
``h_j = max(h_{j+1}, B^-1(r_{j+1}))``, gives the least total mass any
distribution of W needs; their Theorem shows that this greedy choice is the
least (Algorithm 3 of the paper). Every outcome makes k guesses, so
``r_0 + h_0 = k sum_j p_j / m`` must be at most ``k / m``: a least total above
it refutes the hypothesis at level alpha.

With the (epsilon, delta) curve this test gives Steinke, Nasr & Jagielski's
bound again (within 0.03 at m = 1000; tests/test_audit.py); with the Gaussian
curve it bounds mu, which is tighter for mechanisms whose curve is Gaussian
(DP-SGD, Gaussian sums). A bound on mu refutes "mu-GDP", not an (epsilon,
delta) claim by itself: it reads as an epsilon only for a Gaussian-shaped
curve (``skdp.mechanisms.gaussian_dp_epsilon``), and a Laplace or exponential
mechanism may exceed it while keeping its claim.
"""
import math

from scipy.special import ndtr, ndtri


def fdp_refutes(inverse_blow_up, n_canaries, n_guesses, n_correct, alpha):
    """Whether ``n_correct`` right of ``n_guesses`` refutes, at level ``alpha``, the f-DP curve given by ``B^-1``.

    Parameters
    ----------
    inverse_blow_up : callable
        ``y -> B^-1(y)``: the least probability an event can have on one side when it has ``y`` on the
        other (``B = 1 - f``).
    n_canaries, n_guesses, n_correct : int
        m, k and c of the module docstring.
    alpha : float
        Level of the test, ``1 - confidence``.

    Returns
    -------
    refuted : bool
        True when no distribution of the right guesses satisfies the f-DP lemma with
        ``P(W >= n_correct) >= alpha``.
    """
    m, k, c = n_canaries, n_guesses, n_correct
    budget = k / m
    r, h = alpha * c / m, alpha * (k - c) / m
    for j in range(c - 1, -1, -1):
        # The least wrong-guess mass the lemma allows at level j; the level's right guesses come with it
        # in the ratio j : (k - j).
        needed = inverse_blow_up(min(r, 1.0))
        if needed <= h:
            break  # the lemma holds from here down: nothing more is needed
        r, h = r + j / (k - j) * (needed - h), needed
        if r + h > budget:
            return True  # r and h only grow as j decreases
    return r + h > budget


def gaussian_inverse_blow_up(mu):
    """``B^-1(y) = Phi(Phi^-1(y) - mu)`` of mu-Gaussian DP (Dong, Roth & Su 2022)."""
    return lambda y: float(ndtr(ndtri(y) - mu)) if 0 < y < 1 else float(y >= 1)


def epsilon_delta_inverse_blow_up(epsilon, delta):
    """``B^-1`` of the (epsilon, delta)-DP curve ``f(x) = max(0, 1 - delta - e^eps x, e^-eps (1 - delta - x))``."""
    return lambda y: max(0.0, (y - delta) * math.exp(-epsilon), 1.0 - delta - math.exp(epsilon) * (1.0 - y))


def one_run_gaussian_lower_bound(n_canaries, n_guesses, n_correct, confidence=0.95):
    """Compute the largest mu whose mu-Gaussian DP ``n_correct`` right of ``n_guesses`` refutes (f-DP analysis).

    The one-run audit's guesses refute "every canary is mu-GDP" when the
    f-DP test of Mahloujifar, Melis & Chaudhuri (2024; module
    :mod:`skdp.audit.fdp`) rejects it at level ``1 - confidence``; the bound
    is the largest such mu (bisection, 1e-6). For a mechanism whose
    trade-off curve is Gaussian (DP-SGD, Gaussian sums) it is tighter than
    the (epsilon, delta) bound of :func:`one_run_epsilon_lower_bound`; read it
    as an epsilon with :func:`skdp.mechanisms.gaussian_dp_epsilon`. It does
    not refute an (epsilon, delta) claim of a Laplace or exponential
    mechanism, whose curve is not Gaussian.

    Parameters
    ----------
    n_canaries : int
        Canaries m, each included with probability 1/2.
    n_guesses : int
        Guesses k made, in [1, m].
    n_correct : int
        Right guesses, in [0, k].
    confidence : float, default=0.95
        Confidence of the bound, in (0, 1).

    Returns
    -------
    mu : float
        The lower bound on mu (0.0 if nothing is refuted; ``inf`` if mu = 50 is).

    See Also
    --------
    one_run_epsilon_lower_bound : The (epsilon, delta) bound of the same guesses.
    one_run_audit : Reports both.

    Examples
    --------
    >>> from skdp.audit import one_run_gaussian_lower_bound
    >>> from skdp.mechanisms import gaussian_dp_epsilon
    >>> mu = one_run_gaussian_lower_bound(1000, 1000, 1000)
    >>> round(mu, 2), round(gaussian_dp_epsilon(mu, 1e-5), 1)
    (2.37, 12.3)
    >>> one_run_gaussian_lower_bound(1000, 100, 50)
    0.0
    """
    from .one_run import _check_confidence, _check_counts

    _check_confidence(confidence)
    _check_counts(n_canaries, n_guesses, n_correct)
    alpha = 1 - confidence

    def refuted(mu):
        return fdp_refutes(gaussian_inverse_blow_up(mu), n_canaries, n_guesses, n_correct, alpha)

    if not refuted(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while refuted(hi):  # refutation is monotone: a larger mu allows more right guesses
        lo, hi = hi, 2 * hi
        if hi > 50:
            return math.inf
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if refuted(mid) else (lo, mid)
    return lo


def one_run_fdp_epsilon_lower_bound(n_canaries, n_guesses, n_correct, delta, confidence=0.95):
    """The (epsilon, delta) bound through the f-DP test with the (epsilon, delta) curve (a cross-check).

    It agrees with Steinke, Nasr & Jagielski's bound (:func:`one_run_epsilon_lower_bound`) to a few
    hundredths; the tests use it to check the f-DP test. Not public.
    """
    alpha = 1 - confidence

    def refuted(eps):
        return fdp_refutes(epsilon_delta_inverse_blow_up(eps, delta), n_canaries, n_guesses, n_correct, alpha)

    if not refuted(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while refuted(hi):
        lo, hi = hi, 2 * hi
        if hi > 100:
            return math.inf
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if refuted(mid) else (lo, mid)
    return lo


__all__ = ["one_run_gaussian_lower_bound"]
