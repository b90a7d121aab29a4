"""Public feature bounds: the sensitivity of every non-SGD mechanism in skdp comes from them."""

import numpy as np

from ..exceptions import warn_privacy


def resolve_bounds(bounds, X, owner, warn=True):
    """Per-feature ``(lower, upper)`` arrays for ``bounds``.

    ``bounds`` is ``None``, a pair of scalars, or a pair of arrays of length
    n_features. ``None`` reads the range from ``X``: that range is private, so
    it warns with ``PrivacyLeakWarning`` (unless ``warn=False``, for callers
    that add no noise anyway).
    """
    n_features = X.shape[1]
    if bounds is None:
        if warn:
            warn_privacy(f"{owner}: bounds=None, so the feature ranges are read from the private data and "
                "the sensitivity depends on it; the guarantee is NOT certified. Pass public bounds.")
        return _check_computable(X.min(axis=0), X.max(axis=0), "the data's range (bounds=None)")
    try:
        lower, upper = bounds
        lower = np.broadcast_to(np.asarray(lower, dtype=float), (n_features,)).copy()
        upper = np.broadcast_to(np.asarray(upper, dtype=float), (n_features,)).copy()
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"bounds must be None or a pair (lower, upper) of scalars or arrays of length "
            f"n_features={n_features}; got {bounds!r}."
        ) from exc
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError("bounds must be finite.")
    if np.any(lower > upper):
        raise ValueError(f"bounds: lower must be <= upper for every feature; got {bounds!r}.")
    return _check_computable(lower, upper, f"bounds={bounds!r}")


def _check_computable(lower, upper, what):
    """Refuse bounds whose statistics overflow float64 (they would turn every output into NaN).

    Sensitivities use the half-width h and, for second moments, ||h^2||: both must be finite.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        half = (upper - lower) / 2
        ok = np.all(np.isfinite(half)) and np.isfinite(np.linalg.norm(half ** 2))
    if not ok:
        raise ValueError(f"{what} is too wide to compute with: the squared width overflows float64 "
                         f"(largest width {float(np.max(upper - lower)):.3g}). Rescale the features or pass "
                         "public bounds of a sane size (e.g. below 1e100).")
    return lower, upper


def apply_bounds(X, lower, upper, clip, owner):
    """Clip ``X`` to the bounds (a new array), or refuse data outside them when ``clip=False``."""
    if clip:
        return np.clip(X, lower, upper)
    outside = (X < lower) | (X > upper)
    if outside.any():
        rows, cols = np.nonzero(outside)
        raise ValueError(
            f"{owner}: X has {outside.sum()} values outside bounds (first at row {rows[0]}, feature "
            f"{cols[0]}) and clip=False. Widen the public bounds or set clip=True."
        )
    return X
