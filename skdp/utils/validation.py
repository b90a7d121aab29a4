"""Validation helpers shared by skdp estimators."""
import math
import numbers

import numpy as np
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from ..exceptions import warn_privacy

# Constraints that every DP estimator spells the same way (scikit-learn's validation grammar).
PRIVACY_CONSTRAINTS = {
    "epsilon": [Interval(numbers.Real, 0, None, closed="neither"), Options(numbers.Real, {math.inf})],
    "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
    "random_state": ["random_state", np.random.Generator],
}
DPSGD_CONSTRAINTS = {
    **PRIVACY_CONSTRAINTS,
    "max_grad_norm": [Interval(numbers.Real, 0, None, closed="neither")],
    "noise_multiplier": [None, Interval(numbers.Real, 0, None, closed="left")],
    "accounting": [StrOptions({"rdp", "prv"})],
    "clipping": [StrOptions({"auto", "ghost", "vmap"})],
    "max_epochs": [Interval(numbers.Integral, 1, None, closed="left")],
    "lr": [Interval(numbers.Real, 0, None, closed="neither")],
    "batch_size": [StrOptions({"auto"}), Interval(numbers.Integral, 1, None, closed="left")],
}


def set_init_params(estimator, params):
    """Store ``__init__``'s arguments unchanged (``params`` is its ``locals()``): scikit-learn's rule in one line."""
    for name, value in params.items():
        if name not in ("self", "__class__", "kwargs"):
            setattr(estimator, name, value)


def warn_if_delta_too_large(delta, n_samples, owner):
    """delta >= 1/n permits releasing a whole record; allowed, but said aloud."""
    if delta >= 1.0 / n_samples:
        warn_privacy(f"{owner}: delta={delta:g} >= 1/n_samples={1.0 / n_samples:.3g}; a mechanism with this "
            "delta may publish a record outright. Use delta well below 1/n_samples.")


def resolve_batch_size(batch_size, n_samples):
    """Expected lot size: ``"auto"`` -> about sqrt(n) * 4, capped by n; an int must not exceed n."""
    if batch_size == "auto":
        return int(min(n_samples, max(16, round(4 * np.sqrt(n_samples)))))
    if batch_size > n_samples:
        raise ValueError(
            f"batch_size={batch_size} is larger than the number of samples ({n_samples}); "
            "batch_size is the expected Poisson lot size and must be <= n_samples."
        )
    return int(batch_size)


def check_label_types(y, owner):
    """Refuse labels that mix numbers and strings (they cannot be sorted into one label set)."""
    y = np.asarray(y)
    if y.dtype != object:
        return
    kinds = {"string" if isinstance(v, str) else type(v).__name__ for v in y.ravel()}
    if "string" in kinds and len(kinds) > 1:
        raise ValueError(f"y mixes types ({', '.join(sorted(kinds))}); {owner} needs labels of one kind: all "
                         "numbers or all strings.")


def encode_labels(classes, y, owner):
    """``(classes_, codes)`` for ``y``: the public label set if given, else ``y``'s (warns).

    The label set of private data is itself private (a rare label names its
    holder), so reading it from ``y`` warns with ``PrivacyLeakWarning``.
    """
    y = column_or_1d(y, warn=True)
    check_label_types(y, owner)
    check_classification_targets(y)
    if classes is None:
        found = np.unique(y)
        if len(found) < 2:
            raise ValueError(f"y contains only one class ({found[0]!r}); {owner} needs at least 2 classes.")
        warn_privacy("classes=None: the set of labels is read from the private y and released in "
            "classes_; pass classes=[...] from public knowledge.")
        return found, np.searchsorted(found, y).astype(np.int64)
    given = np.asarray(classes, dtype=object).ravel()
    bad = [c for c in given if c is None or (isinstance(c, float) and c != c)]
    if bad:
        raise ValueError(f"classes must not contain {bad[0]!r} (nan or None is not a label); got {list(given)!r}.")
    found = np.unique(np.asarray(classes))
    if len(found) < 2:
        raise ValueError(f"classes must hold at least 2 labels, got {found!r}.")
    unknown = np.setdiff1d(np.unique(y), found)
    if len(unknown):
        raise ValueError(f"y contains labels not in classes: {unknown[:5]!r}.")
    return found, np.searchsorted(found, y).astype(np.int64)
