"""Noise calibration: the smallest noise multiplier whose epsilon stays <= the target."""
import functools
import math

from .accounting import compute_epsilon


@functools.lru_cache(maxsize=512)
def _calibrate(epsilon, delta, sample_rate, n_steps, accounting, rel_tol):
    def eps_of(sigma):
        return compute_epsilon(sigma, sample_rate, n_steps, delta, accounting)

    lo, hi = 0.0, 1.0
    while eps_of(hi) > epsilon:
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            raise ValueError(
                f"Cannot reach epsilon={epsilon} at delta={delta} with sample_rate="
                f"{sample_rate} over {n_steps} steps; use fewer epochs or a smaller batch."
            )
    # Bisection keeps the invariant eps_of(hi) <= epsilon: we return hi, never lo,
    # so the reported epsilon can not overshoot the target.
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        if eps_of(mid) > epsilon:
            lo = mid
        else:
            hi = mid
    return hi


def calibrate_noise_multiplier(epsilon, delta, sample_rate, n_steps, accounting="rdp",
                               rel_tol=1e-3):
    """Noise multiplier sigma such that ``n_steps`` steps at ``sample_rate`` cost <= epsilon.

    The result is cached: PRV calibrations take seconds and grid searches ask
    for the same one many times.

    Returns ``0.0`` for ``epsilon=inf`` (no noise).
    """
    if math.isinf(epsilon):
        return 0.0
    return _calibrate(float(epsilon), float(delta), float(sample_rate), int(n_steps),
                      accounting, float(rel_tol))
