"""Public feature bounds: the sensitivity of every non-SGD mechanism in skdp comes from them."""

import numpy as np

from ..exceptions import warn_privacy


def bounds_by_name(bounds, feature_names, owner, param="bounds"):
    """``(lower, upper)`` arrays, in the order of ``feature_names``, from a dict ``{name: (lower, upper)}``.

    The one home of bounds given by column name. Every column of ``X`` must
    have an entry; names that ``X`` does not have are ignored, so that one
    dict written for a whole table serves the columns a selector keeps (a
    ``DPFisherSelector`` before a ``DPFisherClassifier``: the classifier sees
    the kept columns' names). Raises ``ValueError`` naming ``param`` when
    ``X`` has no column names or a column has no entry.
    """
    if feature_names is None:
        raise ValueError(
            f"{owner}: {param} is a dict by column name, but X has no column names. Pass X as a DataFrame (in a "
            "Pipeline after a selector or scaler: pipeline.set_output(transform='pandas') keeps the names), or "
            f"{param} as a pair (lower, upper) of scalars or per-feature arrays.")
    names = [str(name) for name in feature_names]
    missing = [name for name in names if name not in bounds]
    if missing:
        raise ValueError(f"{owner}: {param} has no public (lower, upper) for columns {missing[:5]} of X; add them "
                         f"(e.g. {param}={{..., {missing[0]!r}: (0, 1)}}).")
    try:
        pairs = [tuple(float(v) for v in bounds[name]) for name in names]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{owner}: every value of {param} must be a pair (lower, upper) of numbers; got "
                         f"{bounds!r}.") from exc
    return tuple(np.array([pair[k] for pair in pairs], dtype=float) for k in (0, 1))


def resolve_bounds(bounds, X, owner, warn=True, feature_names=None, param="bounds"):
    """Per-feature ``(lower, upper)`` arrays for ``bounds``.

    ``bounds`` is ``None``, a pair of scalars, a pair of arrays of length
    n_features, or a dict ``{column name: (lower, upper)}`` read in the order
    of ``feature_names`` (:func:`bounds_by_name`). ``None`` reads the range
    from ``X``: that range is private, so it warns with ``PrivacyLeakWarning``
    (unless ``warn=False``, for callers that add no noise anyway). ``X`` is
    read only when ``bounds`` is None; any object with a ``shape`` will do
    otherwise.
    """
    n_features = int(np.prod(X.shape[1:]))
    if isinstance(bounds, dict):
        bounds = bounds_by_name(bounds, feature_names, owner, param)
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
            f"{param} must be None, a dict by column name, or a pair (lower, upper) of scalars or arrays of "
            f"length n_features={n_features}; got {bounds!r}."
        ) from exc
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError(f"{param} must be finite.")
    if np.any(lower > upper):
        raise ValueError(f"{param}: lower must be <= upper for every feature; got {bounds!r}.")
    return _check_computable(lower, upper, f"{param}={bounds!r}")


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
