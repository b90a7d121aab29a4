"""Data larger than memory: memmaps and torch Datasets in the DP-SGD momentum estimators (issue 16).

The promises tested: the privacy plan, the spend, the ledger charge and (with
the same lots and noise) the model are those of an array with the same rows;
no single read takes more than one lot or one chunk of rows; bad input is
refused with a clear error before any charge.
"""
import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from torch.utils.data import Dataset, TensorDataset

from skdp import BudgetLedger, DPMomentumClassifier, DPMomentumRegressor, PrivacyLeakWarning
from skdp.exceptions import StreamedDataError

N, D = 2000, 64
FAST = dict(batch_size=100, max_epochs=2)  # 40 lots


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(N, D, n_informative=10, random_state=0)
    return X.astype(np.float32), y


def to_memmap(path, X, dtype=np.float32):
    out = np.memmap(path, dtype=dtype, mode="w+", shape=X.shape)
    out[:] = X
    out.flush()
    return np.memmap(path, dtype=dtype, mode="r", shape=X.shape)


@pytest.fixture
def memmap(tmp_path, data):
    return to_memmap(tmp_path / "X.f32", data[0])


def dataset(X, y):
    return TensorDataset(torch.from_numpy(np.asarray(X)), torch.from_numpy(np.asarray(y)))


def weights(est):
    return [p.detach().clone() for p in est.net_.module_.parameters()]


def same_weights(a, b):
    return all(torch.equal(p, q) for p, q in zip(weights(a), weights(b)))


class CountingRows:
    """An array-like that reads rows on demand (as an h5py array would) and records rows per access."""

    def __init__(self, X):
        self.X, self.shape, self.dtype, self.reads = X, X.shape, X.dtype, []

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        rows = self.X[key]
        self.reads.append(len(rows) if rows.ndim == self.X.ndim else 1)
        return rows


# -- fit and predict ---------------------------------------------------------------------------
def test_memmap_fit_predict_score(memmap, data):
    X, y = data
    clf = DPMomentumClassifier(epsilon=5.0, classes=[0, 1], random_state=0, **FAST).fit(memmap, y)
    assert clf.epsilon_ <= 5.0 and clf.privacy_certified_ and clf.input_shape_ == (D,)
    assert clf.predict(memmap).shape == (N,) and clf.predict_proba(memmap).shape == (N, 2)
    np.testing.assert_array_equal(clf.predict(memmap), clf.predict(X))  # chunked = in memory
    np.testing.assert_allclose(clf.decision_function(memmap), clf.decision_function(X))
    assert clf.score(memmap, y) == clf.score(X, y) > 0.6
    assert not memmap.flags.writeable  # read as given ("r"), never written


def test_dataset_fit_predict_score_with_y_none(data):
    X, y = data
    ds = dataset(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # public classes: nothing read from the data
        clf = DPMomentumClassifier(epsilon=5.0, classes=[0, 1], random_state=0, **FAST).fit(ds)
    assert clf.privacy_certified_ and list(clf.classes_) == [0, 1]
    assert clf.score(ds) == clf.score(X, y) > 0.6  # labels read from the Dataset's items
    np.testing.assert_array_equal(clf.predict(ds), clf.predict(X))
    np.testing.assert_array_equal(clf.predict(TensorDataset(torch.from_numpy(X))), clf.predict(X))  # bare x


def test_dataset_classes_none_warns_and_is_uncertified_as_for_arrays(data):
    X, y = data
    results = []
    for args in [(X, y), (dataset(X, y),)]:
        with pytest.warns(PrivacyLeakWarning, match="classes=None"):
            clf = DPMomentumClassifier(epsilon=5.0, random_state=0, **FAST).fit(*args)
        results.append((list(clf.classes_), clf.privacy_certified_, clf.privacy_notes_))
    assert results[0] == results[1] and results[0][1] is False


def test_dataset_labels_outside_classes_refused_before_the_charge(data):
    X, y = data
    ledger = BudgetLedger(epsilon=10.0)
    with pytest.raises(ValueError, match="not in classes"):
        DPMomentumClassifier(classes=[0, 2], ledger=ledger, **FAST).fit(dataset(X, y))
    assert ledger.entries == []


def test_string_labels_from_a_dataset(data):
    X, y = data

    class Named(Dataset):
        def __len__(self):
            return N

        def __getitem__(self, i):
            return X[i], ("cat", "dog")[y[i]]

    clf = DPMomentumClassifier(epsilon=5.0, classes=["cat", "dog"], random_state=0, **FAST).fit(Named())
    assert set(clf.predict(X)) <= {"cat", "dog"} and clf.score(Named()) > 0.6


def test_regressor_memmap_and_dataset(tmp_path, data):
    X, _ = data
    t = (X[:, :3] @ np.array([0.3, -0.2, 0.1], np.float32)).astype(np.float32)
    mm = to_memmap(tmp_path / "X.f32", X)
    fits = [DPMomentumRegressor(epsilon=math.inf, random_state=0, **FAST) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # eps=inf: not private, said aloud
        fits[0].fit(X, t), fits[1].fit(mm, t), fits[2].fit(dataset(X, t))
    assert same_weights(fits[0], fits[1]) and same_weights(fits[0], fits[2])
    np.testing.assert_array_equal(fits[1].predict(mm), fits[0].predict(X))
    assert fits[2].predict(mm).shape == (N,)
    assert fits[0].score(dataset(X, t)) == pytest.approx(fits[0].score(X, t))


def test_images_memmap_gets_one_channel(tmp_path, data):
    X, y = data
    images = X.reshape(N, 8, 8)
    mm = to_memmap(tmp_path / "img.f32", images)
    a = DPMomentumClassifier(epsilon=math.inf, classes=[0, 1], random_state=0, **FAST)
    b = DPMomentumClassifier(epsilon=math.inf, classes=[0, 1], random_state=0, **FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        a.fit(images, y), b.fit(mm, y)
    assert b.input_shape_ == (8, 8) and same_weights(a, b)
    np.testing.assert_array_equal(b.predict(mm), a.predict(images))


def test_partial_fit_on_a_dataset(data):
    X, y = data
    clf = DPMomentumClassifier(epsilon=5.0, batch_size=100, random_state=0)
    clf.partial_fit(dataset(X, y), classes=[0, 1])
    first = clf.epsilon_
    clf.partial_fit(dataset(X, y))
    assert clf.epsilon_ > first and clf.n_steps_ == 2 * 20


# -- the same privacy as an array ----------------------------------------------------------------
def test_array_memmap_and_dataset_have_the_same_plan_spend_and_charge(memmap, data):
    X, y = data
    inputs = {"array": (X, y), "memmap": (memmap, y), "dataset": (dataset(X, y),)}
    seen = {}
    for name, args in inputs.items():
        ledger = BudgetLedger(epsilon=10.0, delta=1e-3)
        # "auto" lot size and learning rate (from n and the shapes only); 2 epochs of 4 lots keep it fast.
        clf = DPMomentumClassifier(epsilon=1.0, classes=[0, 1], ledger=ledger, max_epochs=2, random_state=0)
        planned = clf._planned_privacy(N)
        clf.fit(*args)
        seen[name] = (planned, clf.epsilon_, clf.delta_, clf.noise_multiplier_, clf.sample_rate_, clf.n_steps_,
                      clf.batch_size_, clf.max_epochs_, clf.lr_, ledger.entries)
    assert seen["array"] == seen["memmap"] == seen["dataset"]
    assert seen["array"][-1][0][0] == pytest.approx(seen["array"][1])  # the charge is the certified spend


def test_array_and_memmap_train_the_same_model_without_noise(memmap, data):
    # epsilon=inf: no noise, so the lots may come from random_state (see DPNet.fit_loop): same lots, same steps.
    X, y = data
    fits = [DPMomentumClassifier(epsilon=math.inf, classes=[0, 1], random_state=3, **FAST) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        fits[0].fit(X, y), fits[1].fit(memmap, y), fits[2].fit(dataset(X, y))
    assert same_weights(fits[0], fits[1]) and same_weights(fits[0], fits[2])
    assert fits[0].epsilon_ == fits[1].epsilon_ == math.inf


def test_array_and_memmap_train_the_same_model_with_seeded_noise(memmap, data, seeded_noise):
    X, y = data
    fits = [DPMomentumClassifier(epsilon=1.0, classes=[0, 1], random_state=0, **FAST) for _ in range(2)]
    for clf, args in zip(fits, [(X, y), (memmap, y)]):
        with seeded_noise(7):  # the same lots and noise in both fits (NOT private: a test only)
            clf.fit(*args)
    assert same_weights(*fits) and fits[0].epsilon_ == fits[1].epsilon_ < 1.0


def test_a_float64_memmap_is_read_as_float32_rows(tmp_path, data):
    X, y = data
    mm = to_memmap(tmp_path / "X.f64", X.astype(np.float64), dtype=np.float64)
    fits = [DPMomentumClassifier(epsilon=math.inf, classes=[0, 1], random_state=0, **FAST) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        fits[0].fit(X.astype(np.float64), y), fits[1].fit(mm, y)
    assert same_weights(*fits)


# -- never read whole ----------------------------------------------------------------------------
def test_no_single_read_takes_more_than_a_lot_or_a_chunk(data):
    X, y = data
    rows = CountingRows(X)
    chunk = 128
    # A lot has Binomial(2000, 0.05) rows (mean 100): more than 200 has probability < 1e-15 per lot.
    # Validation and prediction read chunks of iterator_valid__batch_size rows.
    clf = DPMomentumClassifier(epsilon=5.0, classes=[0, 1], random_state=0, iterator_valid__batch_size=chunk,
                               **FAST).fit(rows, y)
    n_fit_reads = len(rows.reads)
    assert max(rows.reads) <= 200
    assert sum(rows.reads[:math.ceil(N / chunk)]) == N and max(rows.reads[:math.ceil(N / chunk)]) == chunk
    assert n_fit_reads == math.ceil(N / chunk) + clf.n_steps_  # one streamed pass, then one read per lot
    clf.predict(rows)
    assert max(rows.reads[n_fit_reads:]) == chunk and sum(rows.reads[n_fit_reads:]) == N


def test_memmap_lot_reads_take_only_the_lot(memmap, data, monkeypatch):
    # The memmap itself: every read by the lot loader is one chunk or one lot, never the whole file.
    from skdp.nn import _data
    sizes = []
    original = _data.ArrayRows._read

    def counting(self, idx):
        sizes.append(len(idx))
        return original(self, idx)

    monkeypatch.setattr(_data.ArrayRows, "_read", counting)
    DPMomentumClassifier(epsilon=5.0, classes=[0, 1], iterator_valid__batch_size=256, **FAST).fit(memmap, data[1])
    assert max(sizes) <= 256 and len(sizes) == math.ceil(N / 256) + 40


# -- bad input: clear errors, before any charge ---------------------------------------------------
def _refused(make_args, error, match, **params):
    ledger = BudgetLedger(epsilon=100.0)
    clf = DPMomentumClassifier(classes=[0, 1], ledger=ledger, **FAST, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        with pytest.raises(error, match=match):
            clf.fit(*make_args())
    assert ledger.entries == [] and not hasattr(clf, "net_")


def test_bad_memmaps_are_refused_before_the_charge(tmp_path, data):
    X, y = data
    bad = X.copy()
    bad[1234, 5] = np.nan
    _refused(lambda: (to_memmap(tmp_path / "nan.f32", bad), y), ValueError, r"contains NaN \(row 1234\)")
    bad[1234, 5] = np.inf
    _refused(lambda: (to_memmap(tmp_path / "inf.f32", bad), y), ValueError, "infinity")
    huge = X.astype(np.float64)
    huge[7, 0] = 1e300  # finite in float64, inf in float32: refused as check_array refuses it
    _refused(lambda: (to_memmap(tmp_path / "huge.f64", huge, np.float64), y), ValueError, r"infinity.*row 7")
    _refused(lambda: (to_memmap(tmp_path / "c.c64", X.astype(np.complex64), np.complex64), y), ValueError,
             "numeric")
    _refused(lambda: (to_memmap(tmp_path / "X.f32", X), y[:-1]), ValueError, "inconsistent numbers of samples")
    _refused(lambda: (to_memmap(tmp_path / "X.f32", X), None), ValueError, "requires y")
    _refused(lambda: (to_memmap(tmp_path / "1d.f32", X[:, 0]), y), ValueError, "2D array")
    _refused(lambda: (to_memmap(tmp_path / "0.f32", np.zeros((1, D), np.float32))[:0], y[:0]), ValueError,
             "0 sample")


def test_bad_datasets_are_refused_before_the_charge(data):
    X, y = data
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    _refused(lambda: (TensorDataset(Xt),), TypeError, r"items \(x, y\)")  # features only
    _refused(lambda: (TensorDataset(Xt, yt, yt),), TypeError, r"length 3.*items \(x, y\)")
    _refused(lambda: (TensorDataset(Xt[:0], yt[:0]),), ValueError, "empty Dataset")
    _refused(lambda: (dataset(X, y), y), ValueError, "y=None")
    nan = Xt.clone()
    nan[42, 0] = math.nan
    _refused(lambda: (TensorDataset(nan, yt),), ValueError, r"NaN \(row 42\)")

    class Ragged(Dataset):
        def __len__(self):
            return N

        def __getitem__(self, i):
            return (Xt[i] if i != 9 else Xt[i, :3]), yt[i]

    _refused(lambda: (Ragged(),), ValueError, "item 9 has x of shape")


def test_a_dataset_that_turns_non_finite_during_training_stops_it(data):
    # Finite in the validation pass, NaN afterwards (a random transform gone wrong): training stops with an
    # error; the ledger's charge, made before the first lot, stands; the estimator is left unfitted.
    X, y = data

    class Flaky(Dataset):
        reads = 0

        def __len__(self):
            return N

        def __getitem__(self, i):
            Flaky.reads += 1
            x = torch.from_numpy(X[i])
            return (x * math.nan if Flaky.reads > N + 1 else x), int(y[i])  # item 0, then a pass

    ledger = BudgetLedger(epsilon=100.0)
    clf = DPMomentumClassifier(epsilon=1.0, classes=[0, 1], ledger=ledger, **FAST)
    with pytest.raises(StreamedDataError, match="finite when it was validated.*charge of this fit stands"):
        clf.fit(Flaky())
    assert len(ledger.entries) == 1
    assert not hasattr(clf, "net_") and not hasattr(clf, "epsilon_") and not hasattr(clf, "input_shape_")


def test_prediction_refuses_bad_streamed_rows(tmp_path, memmap, data):
    X, y = data
    clf = DPMomentumClassifier(epsilon=5.0, classes=[0, 1], **FAST).fit(memmap, y)
    bad = X.copy()
    bad[1500, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN \(row 1500\)"):
        clf.predict(to_memmap(tmp_path / "bad.f32", bad))
    with pytest.raises(ValueError, match="X has 32 features, but DPMomentumClassifier is expecting 64"):
        clf.predict(to_memmap(tmp_path / "narrow.f32", X[:, :32]))
    with pytest.raises(TypeError, match=r"items \(x, y\)"):
        clf.score(TensorDataset(torch.from_numpy(X)))  # scoring needs the labels


@pytest.mark.parametrize("mode", ["r", "r+", "c"])
def test_memmap_rows_read_from_the_file_match_the_array(tmp_path, data, mode):
    # Shared mappings are read with preadv at the row's byte position (views and offsets included);
    # a copy-on-write memmap ("c", changes private to the caller) through its mapping.
    from skdp.nn._data import ArrayRows
    X = data[0]
    path = tmp_path / "X.f32"
    header = 12  # bytes before the rows, as in a file with a header
    with open(path, "wb") as f:
        f.write(b"\0" * header + X.tobytes())
    mm = np.memmap(path, np.float32, mode=mode, offset=header, shape=X.shape)
    if mode == "c":
        mm[5] = 7.0  # private change: must be seen
    expected = X.copy()
    expected[5] = 7.0 if mode == "c" else expected[5]
    for view, reference in [(mm, expected), (mm[100:900], expected[100:900])]:
        rows = ArrayRows(view, "test")
        assert (rows.file is None) == (mode == "c")
        idx = np.array([0, 1, 2, 5, 77, 78, 799])
        np.testing.assert_array_equal(rows.take(idx)[0], reference[idx])
