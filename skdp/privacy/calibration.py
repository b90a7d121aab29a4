"""Noise calibration: the smallest noise multiplier whose epsilon stays <= the target."""
import functools
import math

from .accounting import (check_accounting, check_delta, check_n_steps, check_real, check_sample_rate,
                         compute_epsilon)

# Epsilon decreases monotonically in sigma. The bracket search doubles sigma from 1 up to
# SIGMA_MAX (21 doublings); past it the target is out of reach for any useful model.
SIGMA_MAX = 1e6
# The largest sigma the bracket search tries (its last doubling from 1 that stays <= SIGMA_MAX).
SIGMA_TOP = 2.0 ** math.floor(math.log2(SIGMA_MAX))
# Bisection halves the bracket each iteration; from [0, 1] it reaches a relative width of
# 1e-3 in ~10 iterations and float resolution (2**-52) in ~60 once lo > 0. This cap only
# fires if sigma has to go far below 1 (huge epsilon targets), and then says so.
MAX_BISECTIONS = 200


def _least_rdp_epsilon(sigma, sample_rate, n_steps, delta):
    """A lower bound, in well under a second, on the RDP accountant's epsilon at ``sigma``.

    The accountant's epsilon is ``min_a [n_steps * rdp_a(sigma) + conv_a(delta)]``
    over ``RDP_ORDERS`` (Opacus's conversion). Here ``rdp_a`` is the
    accountant's own value at the integer orders (closed form, fast) and 0,
    a lower bound of every Renyi divergence, at the fractional ones (their
    series take seconds at large sample rates). At large sigma the best order
    is an integer one and the bound equals the accountant's epsilon.
    """
    import numpy as np
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    from .accounting import RDP_ORDERS

    whole = [a for a in RDP_ORDERS if float(a).is_integer()]
    rdp = dict(zip(whole, compute_rdp(q=sample_rate, noise_multiplier=sigma, steps=1, orders=whole)))
    return float(get_privacy_spent(orders=RDP_ORDERS, delta=delta,
                                   rdp=np.array([n_steps * rdp.get(a, 0.0) for a in RDP_ORDERS]))[0])


@functools.lru_cache(maxsize=512)
def _calibrate(epsilon, delta, sample_rate, n_steps, accounting, rel_tol):
    def fits(sigma):
        # Fail closed: a NaN epsilon compares False and so counts as "over the target".
        return compute_epsilon(sigma, sample_rate, n_steps, delta, accounting) <= epsilon

    if accounting == "rdp":
        # Decided up front: epsilon decreases in sigma, so no sigma the search tries reaches a target below
        # the epsilon at SIGMA_TOP (a lower bound of it here); the search used to take 87 s to say so.
        least = _least_rdp_epsilon(SIGMA_TOP, sample_rate, n_steps, delta)
        if epsilon < least:
            raise ValueError(
                f"Cannot reach epsilon={epsilon:g} at delta={delta:g} with sample_rate={sample_rate:g} over "
                f"{n_steps} steps: the least epsilon reachable with noise_multiplier <= {SIGMA_TOP:g} is "
                f"{least:.4g}; use epsilon >= {least:.3g}, fewer epochs, a smaller batch or a larger delta.")
    lo, hi = 0.0, 1.0
    while not fits(hi):
        lo, hi = hi, 2 * hi
        if hi > SIGMA_MAX:
            raise ValueError(
                f"Cannot reach epsilon={epsilon} at delta={delta} with sample_rate="
                f"{sample_rate} over {n_steps} steps with any noise_multiplier <= {SIGMA_MAX:g}; "
                "use fewer epochs, a smaller batch or a larger epsilon."
            )
    # Bisection keeps the invariant fits(hi): we return hi, never lo, so the reported
    # epsilon can not overshoot the target.
    for _ in range(MAX_BISECTIONS):
        if hi - lo <= rel_tol * hi:
            return hi
        mid = (lo + hi) / 2
        if not lo < mid < hi:
            # Adjacent floats: no tighter sigma exists in double precision (rel_tol below
            # machine epsilon); hi is the answer.
            return hi
        if fits(mid):
            hi = mid
        else:
            lo = mid
    raise ValueError(
        f"Noise calibration did not converge in {MAX_BISECTIONS} bisections (epsilon={epsilon}, "
        f"delta={delta}, sample_rate={sample_rate}, n_steps={n_steps}, rel_tol={rel_tol}); the "
        f"noise multiplier is below {hi:.3g}. Use a smaller epsilon or a larger rel_tol."
    )


def calibrate_noise_multiplier(epsilon, delta, sample_rate, n_steps, accounting="rdp",
                               rel_tol=1e-3):
    """Find the noise multiplier with which ``n_steps`` steps at ``sample_rate`` cost at most ``epsilon``.

    Returns the smallest such sigma up to ``rel_tol``: the returned sigma
    always meets the target, ``compute_epsilon(sigma, sample_rate, n_steps,
    delta, accounting) <= epsilon`` (epsilon decreases in sigma and the
    bisection only ever returns its upper end), and ``sigma * (1 - rel_tol)``
    may not. Training with it is (``epsilon``, ``delta``)-DP under
    add/remove-one adjacency, as certified by the chosen accountant, provided
    ``sample_rate`` and ``n_steps`` are public (fixed without looking at the
    data beyond its size). The result is cached: PRV calibrations take
    seconds and grid searches ask for the same one many times.

    Parameters
    ----------
    epsilon : float
        Target epsilon, > 0; ``inf`` returns ``0.0`` (no noise).
    delta : float
        Failure probability, in the open interval (0, 1).
    sample_rate : float
        Poisson sampling probability of each step, in (0, 1].
    n_steps : int
        Number of steps, a whole number >= 1 (integral floats accepted).
    accounting : {"rdp", "prv"}, default="rdp"
        Which Opacus accountant defines epsilon.
    rel_tol : float, default=1e-3
        Relative precision of sigma, in (0, 1).

    Returns
    -------
    noise_multiplier : float
        Noise standard deviation over the clipping norm; 0.0 for
        ``epsilon=inf`` (no noise, not private).

    Raises
    ------
    TypeError, ValueError
        On an argument that is not a number or out of range (checked before
        any search: NaN or zero rates used to make the search run for
        minutes), or if no sigma <= 1e6 reaches the target.

    See Also
    --------
    compute_epsilon : The inverse: the epsilon of a given noise multiplier.
    PrivacyAccountant : Accounting over the history of a training run.

    Examples
    --------
    >>> from skdp.privacy import calibrate_noise_multiplier, compute_epsilon
    >>> sigma = calibrate_noise_multiplier(1.0, 1e-5, sample_rate=0.01, n_steps=1000, rel_tol=0.05)
    >>> sigma
    1.5625
    >>> compute_epsilon(sigma, 0.01, 1000, delta=1e-5) <= 1.0
    True
    """
    epsilon = check_real("epsilon", epsilon, 0.0, math.inf, low_closed=False, high_closed=True,
                         hint="Use inf for no noise (not private).")
    delta = check_delta(delta)
    sample_rate = check_sample_rate(sample_rate)
    n_steps = check_n_steps(n_steps, minimum=1)
    accounting = check_accounting(accounting)
    rel_tol = check_real("rel_tol", rel_tol, 0.0, 1.0, low_closed=False, high_closed=False,
                         hint="It is the relative precision of sigma, e.g. 1e-3.")
    if math.isinf(epsilon):
        return 0.0
    return _calibrate(epsilon, delta, sample_rate, n_steps, accounting, rel_tol)
