"""The generic sensitivity harness: every public estimator, and the compositions users build from them.

For each estimator of ``skdp._public`` (found, never listed by hand) and for Pipelines, ``PrivateSearchCV``
and ``GridSearchCV`` with a ledger, and for each adversarial record (an outlier of 1e4, a rare label, a
record at the bounds), two fits are made with the noise off (:mod:`skdp.utils.taps`) and the mechanism
randomness shared (``insecure_noise_seed``):

1. on D, recording every mechanism's exact input (what it would add noise to);
2. on the neighbour D' (the record added; replaced for replace-one estimators), *replaying*: each
   mechanism's input must lie within the sensitivity the mechanism claims of the recorded one, and the
   recorded value is released in its place.

Each mechanism of the neighbour then releases what the first fit released, so every array the two fitted
estimators hold must be equal: a difference is something that reached the model without a mechanism.
An estimator passes if it is refused (an error before anything is fitted), or flagged (it says it is not
certified, for a reason of its own), or every release stays within its sensitivity and every array is
equal. A new public estimator is picked up here automatically; one this harness cannot build fails.
"""
import inspect
import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import BaseEstimator, clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from skdp import (BudgetLedger, DFSRelease, DPFisherClassifier, DPMomentumClassifier, PGEGenerator,
                  PrivacyLeakWarning, PrivateSearchCV, insecure_noise_seed)
from skdp._public import public_objects
from skdp.preprocessing import RowFunctionTransformer
from skdp.privacy import non_private_steps
from skdp.utils import taps

N, D, CLASSES = 36, 4, [0, 1, 2]
LOW, HIGH = -1.0, 2.0
#: Notes the harness itself causes (noise removed, noise seeded): not the estimator flagging itself.
HARNESS_NOTES = ("noise removed by an audit tap", "noise seeded by insecure_noise_seed")


# ---- data and neighbours ----------------------------------------------------------------------------
def _table():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, N)  # labels 0 and 1: label 2 is public but absent (the rare label)
    X = np.clip(rng.normal(0.5, 0.3, (N, D)) + 0.5 * y[:, None], LOW, HIGH).astype(np.float32)
    return X, y


def _images():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 24)
    X = rng.random((24, 16, 16)).astype(np.float32) * 0.5 + 0.25 * y[:, None, None]
    return X, y


RECORDS = {
    "outlier": lambda X: (np.full(X.shape[1:], 1e4, dtype=X.dtype), 1),
    "rare-label": lambda X: (X[0].copy(), 2),
    "at-bounds": lambda X: (np.full(X.shape[1:], HIGH, dtype=X.dtype), 0),
}


def _neighbour(X, y, record, replace):
    x, label = record
    if replace:  # replace-one adjacency: the last record becomes the adversarial one
        X2, y2 = X.copy(), y.copy()
        X2[-1], y2[-1] = x, label
        return X2, y2
    return np.concatenate([X, x[None]]), np.r_[y, label]


# ---- building every public estimator from its parameters' names --------------------------------------
class _TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(D, 3)

    def forward(self, x):
        return self.lin(x)


def _small(cls, **extra):
    """``cls`` with every parameter the harness knows set small and public (by parameter name)."""
    params = inspect.signature(cls.__init__).parameters
    known = {"epsilon": 2.0, "delta": 1e-3, "classes": CLASSES, "bounds": (LOW, HIGH), "max_epochs": 2,
             "batch_size": 12, "lr": 0.1, "random_state": 0, "n_features_to_select": 2, "verbose": 0,
             "module": _TinyNet if cls.__name__ == "DPNet" else None, "pretrain_epochs": 1, "gan_epochs": 1,
             "n_filters": 4, "discriminator_filters": 4, "n_residual_blocks": 1, "scale": 2,
             "hidden_size": 16, "n_levels": 2, "n_repeats": 1, "n_leapfrog": 2, "factor": 2,
             "estimator": DPMomentumClassifier(classes=[0, 1, 2], max_epochs=1, batch_size=8, lr=0.1,
                                               random_state=0),
             "param_grid": {"lr": [0.1, 0.3]}, "n_trials_mean": 2.0,
             "generator": PGEGenerator(epsilon=2.0, max_epochs=1, batch_size=12, lr=0.01, bounds=(LOW, HIGH),
                                       classes=CLASSES, n_levels=2, n_repeats=1, n_leapfrog=2, random_state=0),
             "classifier": LogisticRegression(max_iter=200)}
    kwargs = {name: value for name, value in known.items() if name in params and value is not None}
    if cls.__name__ == "DPNet":
        kwargs.update(criterion=torch.nn.CrossEntropyLoss, module=_TinyNet, batch_size=12)
    kwargs.update(extra)
    return cls(**kwargs)


def _public_estimators():
    found = []
    for _, name, obj in public_objects():
        if inspect.isclass(obj) and hasattr(obj, "fit") and hasattr(obj, "get_params"):
            found.append(obj)
    return found


def _cases():
    cases = [pytest.param(cls, id=cls.__name__) for cls in _public_estimators()]
    compositions = {
        "pipeline-rowwise-momentum": lambda: make_pipeline(RowFunctionTransformer(np.tanh), _small(DPMomentumClassifier)),
        "pipeline-scaler-fisher": lambda: make_pipeline(StandardScaler(), _small(DPFisherClassifier)),
        "pipeline-dfs-fisher": lambda: make_pipeline(_small(DFSRelease), _small(DPFisherClassifier)),
        "gridsearch-ledger": lambda: GridSearchCV(_small(DPFisherClassifier, ledger=BudgetLedger()),
                                                  {"var_smoothing": [1e-2, 1e-1]}, cv=2),
        "privatesearch-pipeline": lambda: PrivateSearchCV(
            Pipeline([("pre", RowFunctionTransformer(np.tanh)),
                      ("clf", DPMomentumClassifier(classes=CLASSES, max_epochs=1, batch_size=8, lr=0.1,
                                                   random_state=0))]),
            {"clf__lr": [0.1, 0.3]}, epsilon=2.0, n_trials_mean=2.0, ledger=BudgetLedger()),
    }
    cases += [pytest.param(factory, id=name) for name, factory in compositions.items()]
    return cases


# ---- what a fitted estimator holds --------------------------------------------------------------------
_SKIP = {"dur", "epoch_start_time_", "images_per_second_", "ledger", "_lock"}  # timings, and the shared ledger (its own test is the charge)


def _leaves(obj, path="", seen=None, depth=0):
    """``{path: value}`` of every array, tensor and number a fitted object holds (fitted attributes down)."""
    seen = set() if seen is None else seen
    out = {}
    if id(obj) in seen or depth > 12 or isinstance(obj, (BudgetLedger, type)) or callable(obj) and not \
            isinstance(obj, (BaseEstimator, torch.nn.Module)):
        return out
    if isinstance(obj, (np.ndarray, np.generic)):
        return {path: np.asarray(obj)}
    if isinstance(obj, torch.Tensor):
        return {path: obj.detach().cpu().numpy()}
    if isinstance(obj, (bool, int, float, str, type(None))):
        return {path: obj}
    seen.add(id(obj))
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif isinstance(obj, torch.nn.Module):
        items = list(obj.state_dict().items()) + [(k, v) for k, v in vars(obj).items() if not k.startswith("_")]
    elif hasattr(obj, "state_dict") and hasattr(obj, "param_groups"):  # an optimizer: its state only
        items = [("state", obj.state_dict()["state"])]
    elif hasattr(obj, "__dict__"):
        items = [(k, v) for k, v in vars(obj).items() if k.endswith("_") or not isinstance(obj, BaseEstimator)
                 or k in ("steps", "transformers_", "transformer_list")]
    else:
        return out
    for key, value in items:
        if str(key) in _SKIP:
            continue
        out.update(_leaves(value, f"{path}.{key}", seen, depth + 1))
    return out


def _differences(a, b):
    la, lb = _leaves(a), _leaves(b)
    diff = sorted(set(la) ^ set(lb))
    for key in set(la) & set(lb):
        x, y = la[key], lb[key]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            same = x.shape == y.shape and (np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
                                           if x.dtype.kind in "fc" else np.array_equal(x, y))
        else:
            same = x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        if not same:
            diff.append(key)
    return sorted(diff)


def _flags_itself(fitted):
    """Whether the fitted estimator or composition says it is not certified, for a reason of its own."""
    if non_private_steps(fitted):
        return True
    reports = [fitted] + [step for _, step in _walk(fitted)]
    return any(note for est in reports for note in getattr(est, "privacy_notes_", ())
               if not note.startswith(HARNESS_NOTES))


def _walk(est):
    from skdp.privacy.public_steps import _children

    for name, child in _children(est) or ():
        yield name, child
        yield from _walk(child)
    if hasattr(est, "best_estimator_"):
        yield "best_estimator_", est.best_estimator_
        yield from _walk(est.best_estimator_)


def _fit(est, X, y):
    if hasattr(est, "fit_transform") and not hasattr(est, "predict") and not hasattr(est, "sample"):
        est.fit_transform(X, y)
    else:
        est.fit(X, y)
    return est


def _data_for(est):
    params = est.get_params()
    images = any(name in params for name in ("factor", "J", "scale")) and "generator" not in params
    return _images() if images else _table()


@pytest.mark.parametrize("record", sorted(RECORDS))
@pytest.mark.parametrize("make", _cases())
def test_one_record_moves_every_release_by_at_most_its_sensitivity(make, record):
    template = _small(make) if inspect.isclass(make) else make()
    X, y = _data_for(template)
    if record == "rare-label" and not any(k.endswith("classes") for k in template.get_params()):
        pytest.skip("no label set: the rare label is the outlier case")
    first, second = clone(template), clone(template)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_noise_seed(0), taps.recording() as recorder:
            try:
                _fit(first, X, y)
            except (ValueError, TypeError) as refused:  # refused before anything is released
                pytest.skip(f"refused on D: {type(refused).__name__}: {str(refused)[:120]}")
        replace = getattr(first, "adjacency_", "add/remove") == "replace-one" or isinstance(template, DFSRelease) \
            or any(isinstance(s, DFSRelease) for _, s in _walk(template))
        X2, y2 = _neighbour(X, y, RECORDS[record](X), replace)
        flagged = _flags_itself(first)
        with insecure_noise_seed(0), taps.replaying(recorder.releases, replace_one=replace) as replay:
            try:
                _fit(second, X2, y2)
            except taps.SensitivityExceeded as exc:
                assert flagged, f"{exc} (and the estimator certifies its fit)"
                return
            except (ValueError, TypeError) as refused:  # refused on the neighbour: also nothing released
                assert not hasattr(second, "epsilon_"), f"refused after a release: {refused}"
                return
    assert replay.position == len(recorder.releases), "the neighbour made fewer releases"
    differences = _differences(first, second)
    assert flagged or not differences, (
        f"one {record} record changed {differences[:8]} of the fitted model without a mechanism, and the "
        "model certifies its fit")


def test_the_harness_catches_a_leak():
    # The twin: a released class mean with no noise at all (a Fisher classifier whose mechanism is bypassed)
    # must fail the harness's comparison, and a sensitivity twice the claim must fail the replay.
    X, y = _table()
    record = RECORDS["outlier"](X)
    with warnings.catch_warnings(), insecure_noise_seed(0):
        warnings.simplefilter("ignore")
        with taps.recording() as recorder:
            taps.release("gaussian:sums", np.zeros(3), 1.0, "l2")
        with pytest.raises(taps.SensitivityExceeded), taps.replaying(recorder.releases):
            taps.release("gaussian:sums", np.array([2.0, 0.0, 0.0]), 1.0, "l2")
        first = StandardScaler().fit(X)
        second = StandardScaler().fit(*_neighbour(X, y, record, False)[:1])
    assert _differences(first, second), "the harness did not see a mean that moved"
