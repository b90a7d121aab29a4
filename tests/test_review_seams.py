"""Regression tests for the attacker's review of the issue 23 fixes (/work/review23), the seams it found open.

Each failed before its fix:
2. ``DPNet`` had no ``epsilon_``: ``privacy_spent(net)`` said (0, 0, True) after spending 0.999; a
   ``train_split`` (exact validation losses in ``history_``) still certified; a criterion that counts
   labels shipped them in the pickle (r03);
3. state a training forward wrote into a deque, a helper object, a dict's tensor or a numpy array in
   place escaped the identity-only state check (r02);
4. the hooks' probe dropped rows undefined alone (NaN) that were defined in the lot: a module imputing
   with the lot's mean passed the probe and moved the clipped sum by 2.64 C (r08);
8. a module that keeps state in its forward was refused only after the ledger was charged (r07).
"""
import collections
import types
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from skorch.dataset import ValidSplit
from torch import nn

from skdp import BudgetLedger, DPMomentumClassifier, PrivacyLeakWarning, privacy_spent
from skdp.engine import DPSGDEngine
from skdp.exceptions import UnsupportedModelError, UnsupportedModuleError
from skdp.nn import DPNet
from conftest import quiet

D = 4


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.random((64, D)).astype(np.float32)
    return X, (X[:, 0] > .5).astype(np.int64)


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, 3)

    def forward(self, x):
        return self.lin(x)


def _net(**kwargs):
    params = dict(epsilon=1.0, max_epochs=2, batch_size=16, lr=0.1, verbose=0)
    params.update(kwargs)
    return DPNet(_Tiny, **params)


# ---- 2: DPNet's privacy report --------------------------------------------------------------------------------
def test_dpnet_reports_what_it_spent(data):
    net = _net().fit(*data)
    eps, delta, certified = privacy_spent(net)
    assert eps == pytest.approx(net.epsilon_spent()) and 0.9 < eps <= 1.0 and delta == 1e-5 and certified
    assert net.privacy_cost_ is not None and net.privacy_cost_.rdp is not None


def test_dpnet_with_a_train_split_is_not_certified(data):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = _net(train_split=ValidSplit(4)).fit(*data)
    assert any(issubclass(w.category, PrivacyLeakWarning) for w in caught)
    assert not net.privacy_certified_ and not privacy_spent(net)[2]
    assert any("train_split" in note for note in net.privacy_notes_)


class _CountingCE(nn.CrossEntropyLoss):
    """A 'class-balanced' loss that keeps a running label count: the labels would ship in the pickle."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.counts = torch.zeros(3)

    def forward(self, input, target):
        if torch.is_grad_enabled():
            self.counts = self.counts + torch.bincount(target, minlength=3).float()
        return super().forward(input, target)


def test_a_criterion_that_keeps_state_is_refused_before_the_charge(data):
    ledger = BudgetLedger()
    with pytest.raises(UnsupportedModuleError, match="counts"):
        _net(criterion=_CountingCE, ledger=ledger).fit(*data)
    assert ledger.entries == [], f"charged {ledger.entries} for a refused fit"


def test_the_engine_checks_a_watched_criterion(data):
    # The same guard on the real lots (the dry run on a stand-in is a courtesy before the charge).
    X, y = map(torch.as_tensor, data)
    criterion = _CountingCE(reduction="none")
    engine = DPSGDEngine(_Tiny(), max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=16.0,
                         generator=torch.Generator(), watch=[criterion])
    with pytest.raises(UnsupportedModuleError, match="counts"):
        engine.private_gradients(lambda f, x, t: criterion(f(x), t), (X[:16], y[:16]))
    engine.close()


# ---- 3: state written in place, in containers and helper objects ---------------------------------------------------
class _Careless(nn.Module):
    def __init__(self, kind="deque"):
        super().__init__()
        self.lin = nn.Linear(D, 2)
        self.kind = kind
        self.recent = collections.deque(maxlen=2)               # "keep the last lots for debugging"
        self.stats = types.SimpleNamespace(mean=torch.zeros(D))  # "a little helper for monitoring"
        self.track = {"max": torch.zeros(D)}                     # a tensor in a dict, updated in place
        self.np_mean = np.zeros(D)                               # numpy, updated in place

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                if self.kind == "deque":
                    self.recent.append(x.detach().clone())
                elif self.kind == "object":
                    self.stats.mean = 0.9 * self.stats.mean + 0.1 * x.mean(0)
                elif self.kind == "dict-inplace":
                    torch.maximum(self.track["max"], x.max(0).values, out=self.track["max"])
                elif self.kind == "numpy-inplace":
                    self.np_mean[:] = x.mean(0).numpy()
        return self.lin(x)


@pytest.mark.parametrize("kind, path", [("deque", "recent"), ("object", "stats.mean"),
                                        ("dict-inplace", "track['max']"), ("numpy-inplace", "np_mean")])
def test_state_written_anywhere_in_the_module_is_refused(data, kind, path):
    X, y = data
    clf = DPMomentumClassifier(module=_Careless, module__kind=kind, classes=[0, 1], max_epochs=1, batch_size=16,
                               lr=0.1, normalize_rows="none")
    with pytest.raises(UnsupportedModuleError, match=r"'<root>'\." + path.replace("[", r"\[").replace("]", r"\]")):
        quiet(clf.fit, X, y)
    assert not hasattr(clf, "net_")


@pytest.mark.parametrize("kind", ["deque", "object", "dict-inplace", "numpy-inplace"])
def test_the_engine_refuses_state_written_on_a_real_lot(data, kind):
    # The engine's own guard on the first lots (the estimators' dry run on a stand-in may miss an in-place
    # write whose value on the stand-in equals the old one).
    X, y = map(torch.as_tensor, data)
    engine = DPSGDEngine(_Careless(kind), max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=16.0,
                         generator=torch.Generator())
    with pytest.raises(UnsupportedModuleError, match="changed the module's state"):
        engine.private_gradients(lambda f, x, t: F.cross_entropy(f(x), t, reduction="none"), (X[:16], y[:16] % 2))
    engine.close()


class _InnocentState(nn.Module):
    """State a training forward only reads (a public constant, a logger, a generator) is fine."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, 2)
        self.scale = np.ones(D, dtype=np.float32)
        self.table = {"offset": torch.zeros(D), "names": ["a", "b"]}
        self.rng = np.random.default_rng(0)

    def forward(self, x):
        noise = torch.as_tensor(self.rng.normal(size=x.shape[1:]).astype(np.float32)) * 0.0
        return self.lin(x * torch.as_tensor(self.scale) + self.table["offset"] + noise)


def test_state_only_read_in_forward_trains(data):
    X, y = data
    clf = DPMomentumClassifier(module=_InnocentState, classes=[0, 1], max_epochs=1, batch_size=16, lr=0.1,
                               normalize_rows="none").fit(X, y)
    assert clf.privacy_certified_


# ---- 4: rows undefined alone ----------------------------------------------------------------------------------
class _ImputeLotMean(nn.Module):
    """'0 means not measured': filled with the lot's mean of the measured values (NaN for a row alone)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, 2)

    def forward(self, x):
        seen = (x != 0).float()
        mean = (x * seen).sum(0) / seen.sum(0)
        return self.lin(torch.where(seen.bool(), x, mean))


def _impute_data(n=24):
    rng = np.random.default_rng(1)
    X = torch.as_tensor(rng.random((n, D)) + 0.5, dtype=torch.float32)
    X[torch.as_tensor(rng.random((n, D)) < 0.25)] = 0.0
    return X, (X[:, 0] > 1.0).long()


def _engine(model, clipping):
    return DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=0.0, expected_batch_size=1.0,
                       generator=torch.Generator(), clipping=clipping)


def _loss(f, x, y):
    return F.cross_entropy(f(x), y, reduction="none")


def test_a_row_undefined_alone_but_defined_in_the_lot_is_mixing():
    X, y = _impute_data()
    torch.manual_seed(0)
    with pytest.raises(UnsupportedModelError, match="alone"):
        _engine(_ImputeLotMean(), "ghost").private_gradients(_loss, (X, y))
    # Under "auto" the exact path: one record added moves the clipped sum by at most C.
    torch.manual_seed(0)
    model = _ImputeLotMean()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    sums = []
    for lot in ((X, y), (torch.cat([X, torch.full((1, D), 50.0)]), torch.cat([y, torch.zeros(1, dtype=y.dtype)]))):
        model.load_state_dict(state)
        engine = _engine(model, "auto")
        engine.private_gradients(_loss, lot)
        assert type(engine.clipper).__name__ == "FunctionalClipper"
        engine.close()
        sums.append(torch.cat([p.grad.flatten().clone() for p in engine.params]))
    moved = (sums[0] - sums[1]).norm().item()
    assert moved <= 1.0 + 1e-4, f"one record moved the clipped sum by {moved:.2f} C"


# ---- 8: refused before the charge ---------------------------------------------------------------------------------
class _Debug(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, 2)
        self.log = []

    def forward(self, x):
        if self.training:
            self.log.append(float(x.abs().sum()))  # "log the input magnitude"
        return self.lin(x)


def test_a_module_keeping_state_is_refused_before_the_ledger_is_charged(data):
    X, y = data
    ledger = BudgetLedger()
    clf = DPMomentumClassifier(module=_Debug, classes=[0, 1], max_epochs=1, batch_size=8, lr=0.1, ledger=ledger,
                               normalize_rows="none")
    with pytest.raises(UnsupportedModuleError, match="log"):
        quiet(clf.fit, X, y)
    assert ledger.entries == [], f"charged {ledger.entries} for a refused fit"


def test_a_search_over_a_module_keeping_state_charges_nothing(data):
    # PrivateSearchCV charges once before its trials: its stand-in check of every candidate runs the same dry
    # training forward (DPNet.check_training_forward).
    from skdp import PrivateSearchCV

    X, y = data
    ledger = BudgetLedger()
    search = PrivateSearchCV(DPMomentumClassifier(module=_Debug, classes=[0, 1], max_epochs=1, batch_size=8),
                             {"lr": [0.1, 0.3]}, epsilon=1.0, n_trials_mean=2.0, ledger=ledger)
    with pytest.raises((UnsupportedModuleError, ValueError), match="log"):
        quiet(search.fit, X, y)
    assert ledger.entries == [], f"charged {ledger.entries} for a refused search"
