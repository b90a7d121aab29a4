"""Attacker's read of session 33 (/work/review_s33): each finding's failing test, kept."""
import functools
import warnings

import numpy as np
import pytest
import torch

from skdp.exceptions import UnsupportedModuleError
from skdp.nn import DPNet


class _KeepsOutliers(torch.nn.Module):
    """A naive debugging aid: writes the last outlier it saw into a helper array, in place (r06)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.last_outlier = np.zeros(2)

    def forward(self, x):
        big = x[x.abs().max(1).values > 4]
        if len(big):
            self.last_outlier[:] = big[0].detach().numpy()
        return self.lin(x)


def _outlier_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2)).astype(np.float32).clip(-2, 2)
    X[17] = [5.25, -4.5]  # the record to protect
    return X, rng.integers(0, 2, 200).astype(np.int64)


def test_state_written_after_the_deep_lots_is_refused():
    # r06: the guard compared helper arrays by content on the first 2 lots only; a record first sampled into a
    # later lot was written into module_.last_outlier and released, certified, in 8 of 10 fits at q = 0.1.
    X, y = _outlier_data()
    # With lots of 20 of 200 the record misses lots 1-2 in about 81 % of fits; over 100 lots it misses every
    # lot with probability 0.9 ** 100 (3e-5).
    for _ in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(UnsupportedModuleError, match="last_outlier"):
                DPNet(_KeepsOutliers, epsilon=1.0, batch_size=20, max_epochs=10, lr=0.1, verbose=0,
                      train_split=None).fit(X, y)


def test_a_module_that_keeps_no_state_still_fits_with_validation_in_between():
    # The final comparison must not refuse what changes legitimately between lots (eval mode for validation).
    X, y = _outlier_data()
    X[17] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = DPNet(_KeepsOutliers, epsilon=1.0, batch_size=20, max_epochs=2, lr=0.1, verbose=0).fit(X, y)
    assert np.all(net.module_.last_outlier == 0)


def test_the_refined_bin_count_does_not_follow_one_record():
    # r01: "auto" took floor(n / (16 sigma)) refined bins from the number of records itself; at a boundary one
    # record more changed the bin count and the released median of identical records moved to another value
    # (P = 0.92 at n vs 0.00 at n + 1 over 600 fits). The count is now read from the first release's noisy
    # counts (post-processing), so both neighbours' medians follow the same law.
    import math

    from skdp.mechanisms.gaussian import gaussian_dp_mu
    from skdp.mechanisms.quantiles import REFINE_BIN_Z
    from skdp.preprocessing import DPMedianImputer

    sigma = math.sqrt(2) / gaussian_dp_mu(1.0, 1e-5)
    n = math.ceil(20 * REFINE_BIN_Z * sigma) - 1  # 19 bins from n itself, 20 from n + 1 under the old rule

    def medians(rows):
        X = np.full((rows, 1), 3.3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.array([DPMedianImputer(epsilon=1.0).fit(X).statistics_[0] for _ in range(150)])

    a, b = medians(n), medians(n + 1)
    values, counts = np.unique(a, return_counts=True)
    mode = values[np.argmax(counts)]
    assert abs(np.mean(a == mode) - np.mean(b == mode)) < 0.25


class _SignBit(torch.nn.Module):
    """Stores one bit of the lot in a scalar's sign of zero, or in its type (r05)."""

    def __init__(self, kind):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.kind = kind
        self.flag = 0.0 if kind == "zero" else 1
        self.box = [self.flag]

    def forward(self, x):
        hit = bool((x[:, 0] > 3).any())
        if self.kind == "zero":
            self.flag = -0.0 if hit else 0.0
        elif self.kind == "type":
            self.flag = True if hit else 1
        else:  # in a container the deep walk keeps as one entry
            self.box[0] = 1.0 if hit else 1
        return self.lin(x)


@pytest.mark.parametrize("kind", ["zero", "type", "box"])
def test_a_scalar_written_equal_but_not_identical_is_refused(kind):
    # r05: scalars were compared with ==, so 0.0 -> -0.0 or 1 -> True (one bit per lot) passed the guard and the
    # released module held the last lot's bit, certified.
    X = np.full((40, 2), 5.0, dtype=np.float32)
    y = np.random.default_rng(0).integers(0, 2, 40).astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnsupportedModuleError):
            DPNet(_SignBit, module__kind=kind, epsilon=1.0, batch_size=40, max_epochs=2, lr=0.1, verbose=0,
                  train_split=None).fit(X, y)


# -- final read (/work/review_s33 "Final read") ----------------------------------------------------------------
class _Remembers(torch.nn.Module):
    """f07: keeps a record in a helper array written in place, uses it in later lots, erases it before the end."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.mem = np.zeros(3)  # [value, armed, forwards left]

    def forward(self, x):
        if self.training and torch.is_grad_enabled():
            big = x[x[:, 0] > 4]
            if len(big) and self.mem[1] == 0:
                self.mem[:] = [float(big[0, 0]), 1.0, 3]
            elif self.mem[1] == 1:
                self.mem[2] -= 1
                if self.mem[2] <= 0:
                    self.mem[:] = 0.0
        return self.lin(x) + float(self.mem[0])


def test_state_kept_across_lots_and_erased_before_the_end_is_refused():
    # f07: the end-of-fit comparison saw the erased state equal to the first; the in-place write in a lot after
    # the second was compared by identity only. Every lot is now compared in depth.
    X, y = _outlier_data()
    X[17] = [5.25, 0.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnsupportedModuleError, match="mem"):
            DPNet(_Remembers, epsilon=1.0, batch_size=20, max_epochs=10, lr=0.1, verbose=0,
                  train_split=None).fit(X, y)


def test_a_callback_that_anneals_a_module_attribute_between_epochs_is_accepted():
    # f10: a7727f1's end-of-fit comparison refused a data-independent schedule set by a callback between epochs.
    from skorch.callbacks import Callback

    class Anneal(Callback):
        def on_epoch_end(self, net, **kwargs):
            net.module_.temperature *= 0.5

    class Tempered(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.temperature = 1.0

        def forward(self, x):
            return self.lin(x) / self.temperature

    X, y = _outlier_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = DPNet(Tempered, epsilon=1.0, batch_size=20, max_epochs=3, lr=0.1, verbose=0, train_split=None,
                    callbacks=[Anneal()]).fit(X, y)
    assert net.privacy_certified_ and net.module_.temperature == 0.125


class _ClassLevelList(torch.nn.Module):
    seen = []  # f08b: a class-level mutable default, reached through the instance

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        big = x[x.abs().max(1).values > 4]
        if len(big):
            self.seen.append(big[0].detach().numpy().copy())
        return self.lin(x)


def test_a_class_level_container_written_by_forward_is_refused():
    # f08b: `seen = []` in the class body is not in vars(module); 4 of 4 fits were certified with the record in it.
    X, y = _outlier_data()
    _ClassLevelList.seen.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnsupportedModuleError, match="seen"):
            DPNet(_ClassLevelList, epsilon=1.0, batch_size=20, max_epochs=10, lr=0.1, verbose=0,
                  train_split=None).fit(X, y)
    _ClassLevelList.seen.clear()


class _SetSign(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.marks = {0.0}
        self.table = {0.0: "x"}

    def forward(self, x):
        hit = bool((x[:, 0] > 3).any())
        self.marks.clear()
        self.marks.add(-0.0 if hit else 0.0)
        self.table.clear()
        self.table[-0.0 if hit else 0.0] = "x"
        return self.lin(x)


def test_set_elements_and_dict_keys_are_compared_by_exact_bits():
    # f09: frozenset(...) and raw dict keys compared 0.0 == -0.0: a bit of the lot left in a certified module.
    X = np.full((40, 2), 5.0, dtype=np.float32)
    y = np.random.default_rng(0).integers(0, 2, 40).astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnsupportedModuleError):
            DPNet(_SetSign, epsilon=1.0, batch_size=40, max_epochs=2, lr=0.1, verbose=0, train_split=None).fit(X, y)


def test_an_interrupted_refit_keeps_no_earlier_certificate():
    # f08c: skorch's partial_fit swallows a KeyboardInterrupt; the interrupted refit kept the earlier fit's
    # privacy_certified_=True and epsilon_ while its module was another fit's.
    from skorch.callbacks import Callback

    class StopLate(Callback):
        def __init__(self, at):
            self.at = at

        def initialize(self):
            self.k = 0
            return self

        def on_batch_end(self, net, **kwargs):
            self.k += 1
            if self.k == self.at:
                raise KeyboardInterrupt

    X, y = _outlier_data()
    X[17] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = DPNet(_KeepsOutliers, epsilon=1.0, batch_size=20, max_epochs=2, lr=0.1, verbose=0, train_split=None,
                    callbacks=[("stop", StopLate(10 ** 9))]).fit(X, y)
        assert net.privacy_certified_
        net.set_params(callbacks__stop__at=5)
        net.fit(X, y)
    assert not getattr(net, "privacy_certified_", False)


# -- last read (/work/review_s33 "Last read") ------------------------------------------------------------------
class _MaxKeeper:
    """A callable helper keeping the running max of |x| (g01 a, h01)."""

    def __init__(self):
        self.hi = np.zeros(2)

    def update(self, x):
        np.maximum(self.hi, x.detach().abs().max(0).values.numpy(), out=self.hi)
        return x

    __call__ = update


class _CallableAtClassLevel(torch.nn.Module):
    track = _MaxKeeper()

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(self.track(x))


class _Recorder:
    seen = []

    def add(self, value):
        self.seen.append(value)


class _HelperWithClassList(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.rec = _Recorder()

    def forward(self, x):
        big = x[x.abs().max(1).values > 4]
        if len(big):
            self.rec.add(big[0].detach().numpy().copy())
        return self.lin(x)


@pytest.mark.parametrize("module", [_CallableAtClassLevel, _HelperWithClassList])
def test_class_level_state_of_callable_helpers_and_of_helpers_classes_is_refused(module):
    # g01: the class-level walk skipped every callable (a helper object with __call__), and helpers' own classes
    # were never walked (`seen = []` in a helper's class body): both certified with the record inside.
    X, y = _outlier_data()
    _Recorder.seen.clear()
    _CallableAtClassLevel.track.hi[:] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnsupportedModuleError):
            DPNet(module, epsilon=1.0, batch_size=20, max_epochs=10, lr=0.1, verbose=0, train_split=None).fit(X, y)
    _Recorder.seen.clear()


def _keep(store, x):
    big = x[x.abs().max(1).values > 4]
    if len(big):
        store.append(big[0].detach().numpy().copy())
    return x


class _WrappedBase(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)


class _BoundMethod(_WrappedBase):
    track = _MaxKeeper().update

    def forward(self, x):
        return self.lin(self.track(x))


class _Partial(_WrappedBase):
    keep = functools.partial(_keep, [])

    def forward(self, x):
        return self.lin(self.keep(x))


class _StaticCallable(_WrappedBase):
    track = staticmethod(_MaxKeeper())

    def forward(self, x):
        return self.lin(self.track(x))


class _NestedClass(_WrappedBase):
    class Memo:
        seen = []

    def forward(self, x):
        return self.lin(_keep(self.Memo.seen, x))


@pytest.mark.parametrize("module", [_BoundMethod, _Partial, _StaticCallable, _NestedClass])
def test_class_level_state_behind_wrappers_is_refused(module):
    # h01: a bound method of a helper, a functools.partial holding a list, a staticmethod-wrapped callable helper
    # and a nested class's list were skipped by the class-level walk: certified with the record inside.
    X, y = _outlier_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnsupportedModuleError):
            DPNet(module, epsilon=1.0, batch_size=20, max_epochs=10, lr=0.1, verbose=0, train_split=None).fit(X, y)
