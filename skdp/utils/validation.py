"""Validation helpers shared by skdp estimators."""
import math
import numbers

import numpy as np
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from ..exceptions import warn_privacy


class Number(Interval):
    """scikit-learn's ``Interval`` that refuses ``bool``.

    Python counts ``True`` as the int 1, so ``Interval`` takes ``epsilon=True``
    or ``batch_size=True`` as 1: a slip, not a setting. The error names the
    parameter, as for any value out of range.
    """

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


# Constraints that every DP estimator spells the same way (scikit-learn's validation grammar).
PRIVACY_CONSTRAINTS = {
    "epsilon": [Number(numbers.Real, 0, None, closed="neither"), Options(numbers.Real, {math.inf})],
    "delta": [Number(numbers.Real, 0, 1, closed="neither")],
    "random_state": ["random_state", np.random.Generator],
}
DPSGD_CONSTRAINTS = {
    **PRIVACY_CONSTRAINTS,
    "max_grad_norm": [Number(numbers.Real, 0, None, closed="neither")],
    "noise_multiplier": [None, Number(numbers.Real, 0, None, closed="left")],
    "accounting": [StrOptions({"rdp", "prv"})],
    "clipping": [StrOptions({"auto", "ghost", "vmap"})],
    "max_epochs": [Number(numbers.Integral, 1, None, closed="left")],
    "lr": [Number(numbers.Real, 0, None, closed="neither")],
    "batch_size": [StrOptions({"auto"}), Number(numbers.Integral, 1, None, closed="left")],
}
# What DPNet checks of its own parameters, with the estimators' constraints (check_dpsgd_params).
NET_CHECKED = ("epsilon", "delta", "max_grad_norm", "noise_multiplier", "accounting", "clipping")


def check_dpsgd_params(params, owner):
    """Check DP-SGD parameters against ``DPSGD_CONSTRAINTS``: the one validator of estimators and nets.

    The estimators check them through ``_parameter_constraints``; ``DPNet``
    (a skorch net, outside scikit-learn's validation) calls this on the
    same constraints, so both refuse the same values with the same error.
    One exception: ``max_grad_norm=inf`` with ``noise_multiplier=0`` is the
    engine's non-private identity (no clipping, no noise, epsilon inf) that
    skdp's own public pretraining steps use.
    """
    from sklearn.utils._param_validation import validate_parameter_constraints

    constraints = {name: DPSGD_CONSTRAINTS[name] for name in params}
    if params.get("max_grad_norm") == math.inf and params.get("noise_multiplier") == 0:
        constraints.pop("max_grad_norm")
    validate_parameter_constraints(constraints, params, caller_name=owner)


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


def check_label_types(y, owner, name="y"):
    """Refuse labels that mix numbers and strings (they cannot be sorted into one label set)."""
    y = np.asarray(y)
    if y.dtype != object:
        return
    kinds = {"string" if isinstance(v, str) else type(v).__name__ for v in y.ravel()}
    if "string" in kinds and len(kinds) > 1:
        raise ValueError(f"{name} mixes types ({', '.join(sorted(kinds))}); {owner} needs labels of one kind: "
                         "all numbers or all strings.")


def encode_labels(classes, y, owner):
    """``(classes_, codes)`` for ``y``: the public label set if given, else ``y``'s (warns).

    The label set of private data is itself private (a rare label names its
    holder), so reading it from ``y`` warns with ``PrivacyLeakWarning``.
    Errors about ``y`` give counts, never its label values (private).
    ``classes`` may be any collection (a set included); it is sorted.
    """
    y = column_or_1d(y, warn=True)
    check_label_types(y, owner)
    check_int64_labels(y, "y", owner)
    check_classification_targets(y)
    if classes is None:
        found = np.unique(y)
        if len(found) < 2:
            raise ValueError(f"y contains only one class (its {len(y)} labels are all equal); {owner} needs at "
                             "least 2 classes.")
        warn_privacy("classes=None: the set of labels is read from the private y and released in "
            "classes_; pass classes=[...] from public knowledge.")
        return found, np.searchsorted(found, y).astype(np.int64)
    given = label_set(classes)
    bad = [c for c in given if c is None or (isinstance(c, float) and c != c)]
    if bad:
        raise ValueError(f"classes must not contain {bad[0]!r} (nan or None is not a label); got {list(given)!r}.")
    check_label_types(given, owner, name="classes")
    check_int64_labels(given, "classes", owner)
    found = np.unique(np.asarray(list(given)))
    if len(found) < 2:
        raise ValueError(f"classes must hold at least 2 distinct labels, got {len(found)}.")
    outside = ~np.isin(y, found)
    if outside.any():
        raise ValueError(f"y contains {len(np.unique(y[outside]))} label value(s) not in classes, on "
                         f"{int(outside.sum())} of its {len(y)} rows; classes must hold every label y can take.")
    return found, np.searchsorted(found, y).astype(np.int64)


def label_set(classes):
    """The public ``classes`` parameter as a 1-D object array: any collection of labels, a set included.

    A string is refused (its characters are not meant as labels), and so is
    an iterator: it would be used up by the first fit, and a clone or a
    second fit would see no labels.
    """
    if isinstance(classes, (str, bytes)):
        raise ValueError(f"classes must be a collection of labels, not the string {classes!r}; e.g. "
                         f"classes=[{classes!r}, ...].")
    if not hasattr(classes, "__array__") and not hasattr(classes, "__len__"):
        raise ValueError(f"classes is an iterator ({type(classes).__name__}), which the first fit would use up; "
                         "pass a list, a tuple or a set.")
    return np.asarray(classes if hasattr(classes, "__array__") else list(classes), dtype=object).ravel()


def check_int64_labels(labels, name, owner):
    """Refuse numeric labels numpy can not hold as int64: Python ints beyond it, whole floats >= 2**63.

    scikit-learn calls the first "unknown" and the second "continuous"
    (``float(2**63)`` does not round-trip through int64); the error says
    how many there are, not which (``y``'s labels are private).
    """
    values = np.asarray(labels)
    if values.dtype == object:
        flat = values.ravel()
        beyond = sum(1 for v in flat if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
                     and not -2 ** 63 <= v < 2 ** 63)
    elif values.dtype.kind == "f":
        finite = values[np.isfinite(values)]
        beyond = int(np.count_nonzero((np.abs(finite) >= 2.0 ** 63) & (finite == np.floor(finite))))
    else:
        beyond = 0
    if beyond:
        raise ValueError(f"{name} holds {beyond} of {values.size} labels beyond the int64 range (whole numbers "
                         f"of size >= 2**63), which scikit-learn can not read as classes; map the labels to "
                         f"small ints or to strings before {owner} sees them.")
