"""Accounting for the Poisson-subsampled Gaussian mechanism.

The formulas are Opacus's (``opacus.accountants``): RDP (Mironov et al.) by
default, PRV (Gopi et al.) on request. We never re-derive them here; this
module only keeps the history of a fit and answers "how much so far?".
See ``doc/accounting.md`` for why Opacus's accountants were chosen.

Every argument is validated before it reaches Opacus: its numerical searches
(over RDP orders, over PRV grids) assume sane inputs and, fed NaN or
infinity, run for minutes instead of failing, while out-of-range deltas
(``delta >= 1``) give negative epsilons that would pass any budget check.
"""
import functools
import math
import numbers
import warnings

import numpy as np

ACCOUNTINGS = ("rdp", "prv")

# Opacus's default RDP orders stop at 63, which cannot certify epsilon below ~0.2 at
# delta=1e-5. Adding larger orders can only lower the bound (it is a minimum over orders).
RDP_ORDERS = ([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64))
              + [64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 2048, 4096])


def _interval(low, high, low_closed, high_closed):
    return f"{'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}"


def check_real(name, value, low, high, *, low_closed, high_closed, hint=""):
    """``float(value)`` if it is a real number in the interval, else a clear error.

    Parameters
    ----------
    name : str
        Name of the argument, quoted in the error.
    value : object
        The value to check. ``bool`` is refused although Python counts it as a
        number: ``spend(True, 0)`` is a bug, not a spend of 1.
    low, high : float
        Ends of the valid interval; ``math.inf`` is allowed for ``high``.
    low_closed, high_closed : bool
        Whether the interval contains ``low`` / ``high``.
    hint : str, default=""
        How to fix a bad value, appended to the error.

    Returns
    -------
    value : float

    Raises
    ------
    TypeError
        If ``value`` is not a real number.
    ValueError
        If it is NaN or outside the interval (comparisons with NaN are all
        false, so NaN is named and refused explicitly).
    """
    valid = _interval(low, high, low_closed, high_closed)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number in {valid}, got {value!r} "
                        f"of type {type(value).__name__}.{' ' + hint if hint else ''}")
    value = float(value)
    inside = ((low <= value if low_closed else low < value)
              and (value <= high if high_closed else value < high))
    if not inside:  # also catches NaN: every comparison with NaN is False
        raise ValueError(f"{name} must be in {valid}, got {value!r}.{' ' + hint if hint else ''}")
    return value


def check_n_steps(n_steps, minimum=0):
    """``int(n_steps)`` if it is a whole number >= ``minimum``, else a clear error.

    Integral floats (``100.0``, e.g. from numpy arithmetic) are accepted;
    ``3.5`` is refused rather than truncated: an accountant that rounds steps
    down under-reports the privacy spent.

    Parameters
    ----------
    n_steps : int or integral float
        Number of releases.
    minimum : int, default=0
        Smallest valid count.

    Returns
    -------
    n_steps : int
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, numbers.Real):
        raise TypeError(f"n_steps must be a whole number >= {minimum}, got {n_steps!r} "
                        f"of type {type(n_steps).__name__}.")
    if not isinstance(n_steps, numbers.Integral):
        if not (math.isfinite(n_steps) and float(n_steps).is_integer()):
            raise ValueError(f"n_steps must be a whole number >= {minimum}, got {n_steps!r}: "
                             "a fraction of a step is not a release; pass an integer count.")
    n_steps = int(n_steps)
    if n_steps < minimum:
        raise ValueError(f"n_steps must be a whole number >= {minimum}, got {n_steps}.")
    return n_steps


def check_delta(delta):
    """``float(delta)`` if it is in the open interval (0, 1), else a clear error.

    ``delta`` is the probability that the epsilon guarantee fails. At
    ``delta >= 1`` nothing is guaranteed (Opacus returns negative epsilons
    there); at ``delta = 0`` the Gaussian mechanism has no finite epsilon.
    """
    return check_real("delta", delta, 0.0, 1.0, low_closed=False, high_closed=False,
                      hint="delta is the probability that the guarantee fails; use a value "
                           "well below 1 / n_samples, e.g. 1e-5.")


def check_sample_rate(sample_rate):
    """``float(sample_rate)`` if it is in (0, 1], else a clear error.

    The Poisson sampling rate of one step: batch size / number of samples.
    """
    return check_real("sample_rate", sample_rate, 0.0, 1.0, low_closed=False, high_closed=True,
                      hint="It is the Poisson sampling probability batch_size / n_samples.")


def check_noise_multiplier(noise_multiplier):
    """``float(noise_multiplier)`` if it is finite and >= 0, else a clear error.

    ``0`` means no noise (epsilon is inf, used by debugging fits). Infinite noise
    is refused: it releases nothing and Opacus's order search does not end on it.
    """
    return check_real("noise_multiplier", noise_multiplier, 0.0, math.inf, low_closed=True,
                      high_closed=False,
                      hint="It is the noise standard deviation divided by the clipping norm; "
                           "0 means no noise.")


def check_accounting(accounting):
    """``accounting`` if it is one of ``ACCOUNTINGS``, else a ``ValueError``."""
    if not isinstance(accounting, str) or accounting not in ACCOUNTINGS:
        raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {accounting!r}.")
    return accounting


@functools.lru_cache(maxsize=512)
def _rdp_of_one_step(noise_multiplier, sample_rate):
    """RDP at ``RDP_ORDERS`` of one Poisson-subsampled Gaussian step (Opacus's ``compute_rdp``).

    RDP composes additively, so a run's RDP is ``sum(n_steps * this)`` over its
    events, exactly what Opacus's ``RDPAccountant`` sums. Cached: the fractional
    orders cost about 0.3 s at large sample rates and noise, and a fit asks for
    its epsilon after every epoch, with the same (sigma, q) each time.
    """
    from opacus.accountants.analysis.rdp import compute_rdp

    return tuple(compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=RDP_ORDERS))


def dpsgd_cost(history, epsilon, delta):
    """The :class:`~skdp.privacy.composition.Spend` of a DP-SGD run: its certified (epsilon, delta) and RDP curve.

    ``history`` holds ``(noise_multiplier, sample_rate, n_steps)`` events; the
    curve is their summed RDP at the ledger's fixed orders (``LEDGER_ORDERS``),
    so that runs compose in a ledger; a run without noise has none.
    """
    from opacus.accountants.analysis.rdp import compute_rdp

    from .composition import LEDGER_ORDERS, Spend

    if math.isinf(epsilon) or any(sigma == 0 for sigma, _, _ in history):
        return Spend(math.inf, 0.0)
    curve = sum((np.asarray(compute_rdp(q=q, noise_multiplier=sigma, steps=n, orders=list(LEDGER_ORDERS)))
                 for sigma, q, n in history if n > 0), np.zeros(len(LEDGER_ORDERS)))
    return Spend.from_rdp(np.where(np.isnan(curve), np.inf, curve), epsilon, delta)


def _rdp_epsilon(history, delta):
    """Epsilon at ``delta`` of the RDP of ``history`` (Opacus's conversion, ``get_privacy_spent``)."""
    import numpy as np
    from opacus.accountants.analysis.rdp import get_privacy_spent

    rdp = sum(n * np.asarray(_rdp_of_one_step(sigma, q)) for sigma, q, n in history)
    return get_privacy_spent(orders=RDP_ORDERS, rdp=rdp, delta=delta)[0]


def _opacus_accountant(accounting):
    # Imported lazily: opacus pulls in a lot and most of skdp never needs it.
    from opacus.accountants import PRVAccountant, RDPAccountant

    if check_accounting(accounting) == "rdp":
        return RDPAccountant()
    return PRVAccountant()


class PrivacyAccountant:
    """History of the (noise multiplier, sample rate, steps) events of one training run.

    Each event is ``n_steps`` releases of the Poisson-subsampled Gaussian
    mechanism: every record enters a step's lot independently with
    probability ``sample_rate``, the lot's clipped gradients (L2 norm at most
    ``C``) are summed, and ``N(0, (noise_multiplier * C)^2)`` noise is added
    to each coordinate. :meth:`get_epsilon` composes the whole history and
    returns the epsilon of the run at a given delta, under add/remove-one
    adjacency. The history holds only public quantities (noise, rates,
    counts of steps); nothing about the data is stored.

    Parameters
    ----------
    accounting : {"rdp", "prv"}, default="rdp"
        RDP (Mironov et al.; Opacus's ``RDPAccountant``, at orders up to
        4096) gives a certified upper bound on epsilon at a small cost in
        tightness; PRV (Gopi et al.; Opacus's ``PRVAccountant``) is a
        numerical estimate, tighter (about 8-15% smaller epsilon) and slower.

    Attributes
    ----------
    accounting : str
        The accountant used, ``"rdp"`` or ``"prv"``.
    history : list of (float, float, int)
        ``(noise_multiplier, sample_rate, n_steps)`` events, oldest first;
        consecutive steps with the same parameters are merged.

    See Also
    --------
    compute_epsilon : Epsilon of a single event, without keeping a history.
    calibrate_noise_multiplier : The smallest noise multiplier for a target epsilon.
    BudgetLedger : Caps and records what fits spend on the same data.

    Examples
    --------
    >>> from skdp.privacy import PrivacyAccountant
    >>> acc = PrivacyAccountant("rdp")
    >>> acc.step(noise_multiplier=1.5, sample_rate=0.04, n_steps=2250)
    >>> acc.n_steps
    2250
    >>> round(acc.get_epsilon(delta=1e-5), 4)
    7.3291
    """

    def __init__(self, accounting="rdp"):
        self.accounting = check_accounting(accounting)
        self.history = []

    def step(self, noise_multiplier, sample_rate, n_steps=1):
        """Record ``n_steps`` releases of the subsampled Gaussian mechanism.

        Parameters
        ----------
        noise_multiplier : float
            Noise standard deviation over the clipping norm, finite and >= 0;
            0 means no noise (epsilon becomes inf).
        sample_rate : float
            Poisson sampling probability of each step, in (0, 1].
        n_steps : int, default=1
            Number of steps, a whole number >= 0 (0 records nothing).

        Raises
        ------
        TypeError, ValueError
            On a non-number or a value out of range; nothing is recorded.
        """
        # Validate all three before recording anything: a half-recorded event is worse than none.
        sigma = check_noise_multiplier(noise_multiplier)
        q = check_sample_rate(sample_rate)
        n_steps = check_n_steps(n_steps)
        if n_steps == 0:
            return
        last = self.history[-1] if self.history else None
        if last is not None and last[0] == sigma and last[1] == q:
            self.history[-1] = (sigma, q, last[2] + n_steps)
        else:
            self.history.append((sigma, q, n_steps))

    @property
    def n_steps(self):
        """Total number of steps recorded (int)."""
        return sum(h[2] for h in self.history)

    def get_epsilon(self, delta):
        """Epsilon spent so far at ``delta`` (0 before any step, inf without noise).

        Parameters
        ----------
        delta : float
            Failure probability, in the open interval (0, 1).

        Returns
        -------
        epsilon : float
            An upper bound (RDP) or a numerical estimate (PRV); ``inf`` if any
            step had no noise.
        """
        delta = check_delta(delta)
        if not self.history:
            return 0.0
        if any(sigma == 0 for sigma, _, _ in self.history):
            return math.inf
        with warnings.catch_warnings():
            # "Optimal order is the largest alpha": the bound is valid, only less tight.
            warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
            if self.accounting == "rdp":
                eps = max(0.0, float(_rdp_epsilon(self.history, delta)))  # Opacus can return -0.001 at huge sigma
            else:
                acc = _opacus_accountant(self.accounting)
                acc.history = list(self.history)
                eps = float(acc.get_epsilon(delta=delta))
        # A NaN from the numerical accountant certifies nothing; the only safe bound is
        # inf (a NaN would pass every "epsilon > budget" test downstream).
        return math.inf if math.isnan(eps) else eps


def compute_epsilon(noise_multiplier, sample_rate, n_steps, delta, accounting="rdp"):
    """Compute the epsilon of ``n_steps`` Poisson-subsampled Gaussian steps at ``delta``.

    The run is (epsilon, ``delta``)-DP under add/remove-one adjacency: each
    step samples every record independently with probability
    ``sample_rate`` and releases a sum of per-record contributions of L2
    norm at most ``C`` plus ``N(0, (noise_multiplier * C)^2)`` noise per
    coordinate. The epsilon does not depend on ``C``; the sample rate, the
    number of steps and the noise must be fixed without looking at the
    data. Equivalent to one :meth:`PrivacyAccountant.step` followed by
    :meth:`PrivacyAccountant.get_epsilon`.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping norm, finite and >= 0 (0: no noise, inf epsilon).
    sample_rate : float
        Poisson sampling probability of each step, in (0, 1].
    n_steps : int
        Number of steps, a whole number >= 0.
    delta : float
        Failure probability, in (0, 1); keep it well below 1 / n_samples.
    accounting : {"rdp", "prv"}, default="rdp"
        Which Opacus accountant computes the epsilon: ``"rdp"`` is a
        certified upper bound, ``"prv"`` a tighter numerical estimate.

    Returns
    -------
    epsilon : float
        Epsilon of the whole run at ``delta``: 0.0 for ``n_steps=0``, ``inf``
        for ``noise_multiplier=0``.

    Raises
    ------
    TypeError, ValueError
        On an argument that is not a number or out of range.

    See Also
    --------
    PrivacyAccountant : The same accounting over a history of events.
    calibrate_noise_multiplier : The inverse: the noise multiplier for a target epsilon.

    Examples
    --------
    >>> from skdp.privacy import compute_epsilon
    >>> round(compute_epsilon(1.1, sample_rate=0.01, n_steps=1000, delta=1e-5), 3)
    1.712
    >>> compute_epsilon(0.0, sample_rate=0.01, n_steps=1000, delta=1e-5)
    inf
    """
    acc = PrivacyAccountant(accounting)
    acc.step(noise_multiplier, sample_rate, n_steps)
    return acc.get_epsilon(delta)
