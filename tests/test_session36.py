"""Fixes of 2026-11-26 (session 36), each with the test that failed before it."""
import warnings

import numpy as np
import pytest
import torch

from skdp import DPMomentumClassifier, DPMomentumRegressor


@pytest.fixture
def images():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (120, 16, 16)).astype(np.float32)
    return X, (X.mean((1, 2)) > 0.5).astype(int)


@pytest.mark.parametrize("image_shape", [None, (16, 16)])
def test_partial_fit_continues_on_image_rows(images, image_shape):
    # review_s35 d06: partial_fit after a fit on (n, H, W) rows refused its own training rows (sklearn's
    # n_features check compared X.shape[1] = H with n_features_in_ = H * W pixels).
    X, y = images
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1),
                                   image_shape=image_shape, random_state=0).fit(X, y)
        steps = clf.n_steps_
        clf.partial_fit(X, y)
    assert clf.n_steps_ > steps and clf.privacy_certified_ and clf.n_features_in_ == 256
    # rows of another shape are still refused by name, before any charge
    spent = clf.epsilon_
    with pytest.raises(ValueError, match=r"rows of shape \(16, 15\)"):
        clf.partial_fit(X[:, :, :15], y)
    assert clf.epsilon_ == spent


def test_partial_fit_on_tables_keeps_sklearns_wording():
    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (80, 4)).astype(np.float32), np.arange(80) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(-1, 1)).fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features, but DPMomentumClassifier is expecting 4 features"):
        clf.partial_fit(X[:, :3], y)


def test_regressor_auto_augment_takes_no_copies(images):
    # review_s35 c06: augment="auto" was chosen on classification (mnist-dev); a shift is not label-preserving
    # for a position-like regression target, and no regression development data chose copies: none.
    X, _ = images
    y = X.mean((1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, bounds=(0, 1), image_shape=(16, 16),
                                  random_state=0).fit(X.reshape(len(X), -1), y)
    assert reg.module_ == "cnn" and reg.augment_ is None
    # asked for, the copies are still there
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, bounds=(0, 1), image_shape=(16, 16), augment=2,
                                  random_state=0).fit(X.reshape(len(X), -1), y)
    assert reg.augment_ == 2


def test_one_image_shape_rule():
    # review_s35 b03c: image_shape was read in four places (module_spec, make_augmentation, PGEGenerator and
    # auto_module), with rules that differed (the augmentation took a row of 3 H W features for 3 channels,
    # the CNN for an error). One rule now: skdp.imaging.layout.row_image_shape.
    from skdp.generative import PGEGenerator
    from skdp.imaging.layout import row_image_shape
    from skdp.nn import module_spec
    from skdp.nn.augment import make_augmentation

    assert row_image_shape((64,)) == (1, 8, 8)
    assert row_image_shape((8, 8)) == (1, 8, 8)
    assert row_image_shape((768,), (3, 16, 16)) == row_image_shape((768,), (16, 16), 3) == (3, 16, 16)
    assert row_image_shape((3, 16, 16), (16, 16)) == (3, 16, 16)
    for args, match in [(((768,), (16, 16)), r"image_shape=\(16, 16\) does not match 768"),
                        (((768,), (3, 16, 16), 1), "declares 3 channels, module__in_channels=1"),
                        (((60,),), r"needs image_shape=\(H, W\) for flat rows of 60"),
                        (((16, 16, 3),), None), (((3, 16, 16), (1, 16, 16)), "does not describe rows"),
                        (((2, 3, 4, 5),), "needs images")]:
        if match is None:  # channels-last rows are 16 channels of 16 x 3: a shape, not an error here
            assert row_image_shape(*args) == (16, 16, 3)
            continue
        with pytest.raises(ValueError, match=match):
            row_image_shape(*args)
    # the CNN, the augmentation and PGE's CNN agree, error for error
    for image_shape in [(16, 16), (3, 16, 16), (8, 32)]:
        outcomes = []
        for build in (lambda: module_spec("cnn", input_shape=(768,), n_classes=2, image_shape=image_shape),
                      lambda: make_augmentation(2, (768,), image_shape),
                      lambda: PGEGenerator(image_shape=image_shape)._image_shape(768)):
            try:
                build()
                outcomes.append("ok")
            except ValueError as e:
                outcomes.append(str(e).split(" does not match")[0])
        assert len(set(outcomes)) == 1, (image_shape, outcomes)


def test_augment_on_flat_multichannel_rows_is_refused_before_the_charge():
    from skdp import BudgetLedger

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (60, 3 * 16 * 16)).astype(np.float32), np.arange(60) % 2
    ledger = BudgetLedger(epsilon=10.0, delta=1e-3)
    clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1), image_shape=(16, 16),
                               module="linear", augment=2, ledger=ledger)
    with pytest.raises(ValueError, match=r"image_shape=\(16, 16\) does not match 768 features"):
        clf.fit(X, y)
    assert not hasattr(clf, "epsilon_") and ledger.entries == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ok = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1),
                                  image_shape=(3, 16, 16), module="cnn", augment=2).fit(X, y)
    assert ok.net_.augment.image_shape == (3, 16, 16) and ok.privacy_certified_


# -- review_s36 (attacker's read of the above): e02, e05, e07, each failed before its fix -----------------------

class _UserLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x)


class _Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 2)

    def forward(self, x):
        return self.emb(x).mean(1)


def test_continuation_on_rows_of_another_dtype_is_refused_before_the_charge():
    # e02: a user module keeps integer inputs; a continuation on rows of another dtype was charged, then crashed
    # inside torch (the row shape was checked, the dtype not).
    from skdp import BudgetLedger

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (60, 4)).astype(np.float32), np.arange(60) % 2
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(module=_UserLinear, epsilon=1.0, max_epochs=1, classes=[0, 1], ledger=ledger,
                                   lr=0.1, random_state=0).partial_fit(X, y)
        emb = DPMomentumClassifier(module=_Embed, epsilon=1.0, max_epochs=1, classes=[0, 1], ledger=ledger,
                                   lr=0.1, random_state=0).partial_fit(rng.integers(0, 10, (60, 4)), y)
    spent, entries = emb.epsilon_, len(ledger.entries)
    with pytest.raises(ValueError, match="dtype float32.*int64"):  # an embedding's ids given as floats
        emb.partial_fit(X, y)
    assert emb.epsilon_ == spent and len(ledger.entries) == entries and emb.privacy_certified_
    # integer rows for the float network are cast to float32, as a built-in module's are (second read, f02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.partial_fit(rng.integers(0, 10, (60, 4)), y)
    assert clf.privacy_certified_ and len(ledger.entries) == entries + 1


@pytest.mark.parametrize("channels", [0, -1, 3.0, True])
def test_bad_in_channels_are_refused_by_name_before_the_charge(channels):
    # e05: module__in_channels=0 read as "not given" (in_channels or 1): charged, then a crash in torch; -1, 3.0
    # and True failed with errors that named no parameter.
    from skdp import BudgetLedger

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (40, 256)).astype(np.float32), np.arange(40) % 2
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1), ledger=ledger,
                               module="cnn", module__channels=(4, 4), module__in_channels=channels)
    with pytest.raises(ValueError, match="module__in_channels"):
        clf.fit(X, y)
    assert ledger.entries == []


def test_in_channels_none_means_not_given():
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (40, 256)).astype(np.float32), np.arange(40) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1), module="cnn",
                                   module__channels=(4, 4), module__in_channels=None).fit(X, y)
    assert clf.privacy_certified_


def test_warm_start_fit_checks_the_columns_as_partial_fit_does():
    # e07: a warm_start fit validated with reset=True: reordered DataFrame columns were trained on (bounds given by
    # name stayed in the old order), and a refused warm fit had already rewritten n_features_in_.
    pd = pytest.importorskip("pandas")
    from skdp import BudgetLedger

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.uniform(0, 1, 120), "b": rng.uniform(0, 100, 120), "c": rng.uniform(0, 1, 120)})
    y = (X["a"] > 0.5).astype(int).to_numpy()
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], ledger=ledger, warm_start=True,
                                   bounds={"a": (0, 1), "b": (0, 100), "c": (0, 1)}, random_state=0).fit(X, y)
    entries = len(ledger.entries)
    with pytest.raises(ValueError, match="feature names"):
        clf.fit(X[["b", "a", "c"]], y)
    with pytest.raises(ValueError, match="missing"):
        clf.fit(X[["a", "b"]], y)
    with pytest.raises(ValueError, match="X has 2 features, but DPMomentumClassifier is expecting 3"):
        clf.fit(X[["a", "b"]].to_numpy(), y)
    assert len(ledger.entries) == entries and clf.n_features_in_ == 3 and list(clf.feature_names_in_) == ["a", "b", "c"]
    assert clf.predict(X).shape == (120,)
    reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, warm_start=True, bounds={"a": (0, 1), "b": (0, 100), "c": (0, 1)},
                              random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.fit(X, y.astype(float))
    with pytest.raises(ValueError, match="feature names"):
        reg.fit(X[["c", "b", "a"]], y.astype(float))


def test_auto_cnn_has_three_blocks_unless_told(images):
    # module="auto" on images of 16 x 16 or more: the GroupNorm CNN with AUTO_CNN_CHANNELS (chosen on mnist-dev);
    # module="cnn" keeps its two blocks, and module__channels overrides either.
    from skdp.nn import _defaults

    X, y = images
    flat = X.reshape(len(X), -1)

    def blocks(**kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1), image_shape=(16, 16),
                                       augment=None, random_state=0, **kw).fit(flat, y)
        return [m.out_channels for m in clf.net_.module_.modules() if isinstance(m, torch.nn.Conv2d)]

    assert tuple(blocks()) == _defaults.AUTO_CNN_CHANNELS == (16, 32, 64)
    assert blocks(module="cnn") == [16, 32]
    assert blocks(module__channels=(8,)) == [8]


# -- review_s36, second read: f04, f02 ----------------------------------------------------------------------------

def test_warm_regressor_on_another_number_of_outputs_is_refused_before_the_charge():
    # f04: y of shape (n,) then (n, 2): charged, then a crash in torch, with n_outputs_ rewritten.
    from skdp import BudgetLedger

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (80, 4)).astype(np.float32)
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, bounds=(-1, 1), warm_start=True, ledger=ledger,
                                  random_state=0).fit(X, X[:, 0])
    spent = reg.epsilon_
    with pytest.raises(ValueError, match="2 outputs.*1"):
        reg.fit(X, X[:, :2])
    assert reg.epsilon_ == spent and len(ledger.entries) == 1 and reg.n_outputs_ == 1
    assert reg.predict(X).shape == (80,)


class _Casting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x.float())


def test_continuation_casts_within_a_dtype_kind():
    # f02: the exact-dtype rule refused continuations that trained before: integer rows after float ones are cast to
    # the float dtype (as a built-in module's are), int32 after int64 to int64; float rows after integer ones
    # (an embedding's ids) are still refused, and streamed rows (read as float32) say so.
    rng = np.random.default_rng(0)
    y = np.arange(60) % 2
    Xi = rng.integers(0, 10, (60, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(module=_Casting, epsilon=1.0, max_epochs=1, classes=[0, 1], lr=0.1,
                                   random_state=0).partial_fit(Xi.astype(np.float32), y)
        clf.partial_fit(Xi, y)
        emb = DPMomentumClassifier(module=_Embed, epsilon=1.0, max_epochs=1, classes=[0, 1], lr=0.1,
                                   random_state=0).partial_fit(Xi, y)
        emb.partial_fit(Xi.astype(np.int32), y)
    assert clf.n_steps_ > 0 and emb.privacy_certified_
    with pytest.raises(ValueError, match="dtype float32.*int64"):
        emb.partial_fit(Xi.astype(np.float32), y)


# -- review_s36, third read: g02a, g02b, g06a, g03a ---------------------------------------------------------------

class _Hashing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 2)

    def forward(self, x):
        return self.emb(x % 10).mean(1)


def test_continuation_never_casts_ids_unsafely():
    # g02a: int64 ids for a network trained on int32 were cast with astype, which wraps: ids >= 2**32 were trained
    # on as other ids (charged), ids in [2**31, 2**32) went negative (charged, then a crash). Refused by dtype now.
    from skdp import BudgetLedger

    rng = np.random.default_rng(0)
    y = np.arange(60) % 2
    ledger = BudgetLedger(epsilon=100.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(module=_Hashing, epsilon=1.0, max_epochs=1, classes=[0, 1], lr=0.1, ledger=ledger,
                                   random_state=0).partial_fit(rng.integers(0, 10, (60, 4)).astype(np.int32), y)
    with pytest.raises(ValueError, match="dtype int64.*int32"):
        clf.partial_fit(rng.integers(0, 10, (60, 4)) + 2 ** 32, y)
    assert len(ledger.entries) == 1 and clf.privacy_certified_


def test_prediction_sees_rows_as_training_does():
    # g02b: a float network continued on int64 rows (cast) crashed in predict on the same rows.
    rng = np.random.default_rng(0)
    y = np.arange(60) % 2
    Xi = rng.integers(0, 10, (60, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(module=_UserLinear, epsilon=1.0, max_epochs=1, classes=[0, 1], lr=0.1,
                                   random_state=0).fit(Xi.astype(np.float32), y)
        clf.partial_fit(Xi, y)
    np.testing.assert_array_equal(clf.predict(Xi), clf.predict(Xi.astype(np.float32)))


def test_refused_warm_regressor_keeps_its_prediction_shape(tmp_path):
    # g06a: _y_ndim was written before _fit's checks: a warm fit refused on its rows (a memmap of other columns)
    # turned predict's (n,) into (n, 1).
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (60, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, bounds=(-1, 1), warm_start=True,
                                  random_state=0).fit(X, X[:, 0])
    mm = np.memmap(tmp_path / "X.f32", dtype=np.float32, mode="w+", shape=(60, 3))
    mm[:] = X[:, :3]
    mm.flush()
    with pytest.raises(ValueError):
        reg.fit(np.memmap(tmp_path / "X.f32", dtype=np.float32, mode="r", shape=(60, 3)), X[:, :1])
    assert reg.predict(X).shape == (60,)


def test_module_channels_none_means_not_given(images):
    # g03a: module__channels=None was kept and failed with a TypeError naming no parameter.
    X, y = images
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1), image_shape=(16, 16),
                                    augment=None, module__channels=None, random_state=0).fit(X.reshape(len(X), -1), y)
        cnn = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(0, 1), module="cnn",
                                   augment=None, module__channels=None, random_state=0).fit(X, y)
    convs = lambda c: [m.out_channels for m in c.net_.module_.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs(auto) == [16, 32, 64] and convs(cnn) == [16, 32]


# -- review_s36, fourth read: h07, h03 ----------------------------------------------------------------------------

def test_refit_refused_for_sample_weight_changes_nothing():
    # h07: the refusal came after fit had written the refused call's classes_: the old network then answered
    # with the new labels.
    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (60, 4)).astype(np.float32), np.arange(60) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=None, bounds=(-1, 1), random_state=0).fit(X, y)
    before = clf.predict(X)
    with pytest.raises(ValueError, match="sample_weight"):
        clf.fit(X, np.array(["a", "b", "c"])[np.arange(60) % 3], sample_weight=np.ones(60))
    assert list(clf.classes_) == [0, 1]
    np.testing.assert_array_equal(clf.predict(X), before)


def test_fresh_regressor_predicts_from_a_callback_during_fit():
    # h03: _y_ndim was written after _fit, so a user's callback calling predict during a fresh fit failed.
    from skorch.callbacks import Callback

    seen = []

    class Peek(Callback):
        def on_epoch_end(self, net, **kwargs):
            seen.append(reg.predict(X[:3]).shape)

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (60, 4)).astype(np.float32)
    reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, bounds=(-1, 1), callbacks=[Peek()], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.fit(X, X[:, 0])
    assert seen and seen[0] == (3,)


# -- review_s36, fifth read: i02a, i02b, i06 ----------------------------------------------------------------------

def test_refused_fresh_refit_leaves_the_estimator_unfitted():
    # i02a/i02b: a fresh refit refused after fit had written its bookkeeping (a label outside classes, bounds by name
    # for numpy rows) kept the old network under the refused call's classes_ / prediction shape.
    from sklearn.exceptions import NotFittedError

    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (60, 4)).astype(np.float32), np.arange(60) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=(-1, 1), random_state=0).fit(X, y)
        with pytest.raises(ValueError):
            clf.fit(X, np.arange(60) % 3)  # a label outside classes
    with pytest.raises(NotFittedError):
        clf.predict(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPMomentumRegressor(epsilon=1.0, max_epochs=1, bounds=(-1, 1), random_state=0).fit(X, X[:, :2])
        reg.set_params(bounds={"a": (0, 1)})
        with pytest.raises(ValueError):
            reg.fit(X, X[:, 0])  # bounds by name for rows without names
    with pytest.raises(NotFittedError):
        reg.predict(X)


def test_refused_first_fit_does_not_look_fitted():
    # i06: a first fit refused after some writes kept n_features_in_ / classes_: check_is_fitted passed and predict
    # failed with an AttributeError.
    from sklearn.exceptions import NotFittedError

    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (60, 4)).astype(np.float32), np.arange(60) % 2
    clf = DPMomentumClassifier(epsilon=1.0, max_epochs=1, classes=[0, 1], bounds=([-1] * 3, [1] * 3))
    with pytest.raises(ValueError):
        clf.fit(X, y)
    with pytest.raises(NotFittedError):
        clf.predict(X)


class _Scaled(torch.nn.Module):
    def __init__(self, scale_=1.0):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.scale_ = scale_

    def forward(self, x):
        return self.lin(x) * self.scale_


def test_a_parameter_ending_in_underscore_survives_a_fresh_fit():
    # review_s36 j04: _drop_fitted deleted every attribute ending in "_", a module__scale_ parameter included.
    from sklearn.base import clone

    rng = np.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (60, 4)).astype(np.float32), np.arange(60) % 2
    clf = DPMomentumClassifier(module=_Scaled, module__scale_=3.0, epsilon=1.0, max_epochs=1, classes=[0, 1],
                               bounds=(-1, 1), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y).fit(X, y)
    assert clf.get_params()["module__scale_"] == 3.0 and clone(clf).get_params()["module__scale_"] == 3.0


def test_privacy_spent_refuses_an_unfitted_dp_step():
    # review_s36 j03: privacy_spent of an unfitted DP estimator, or of a Pipeline whose DP step was dropped by a
    # refused refit, reported (0, 0, certified): a certified figure for a model that does not exist.
    from sklearn.exceptions import NotFittedError
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline

    from skdp import DPFisherClassifier
    from skdp.privacy import privacy_spent

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (60, 3)), np.arange(60) % 2
    with pytest.raises(NotFittedError, match="DPFisherClassifier"):
        privacy_spent(DPFisherClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1]))
    pipe = make_pipeline(SimpleImputer(strategy="constant", fill_value=0.5),
                         DPMomentumClassifier(epsilon=1.0, max_epochs=1, bounds=(0, 1), classes=[0, 1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(X, y)
        assert privacy_spent(pipe)[2]
        with pytest.raises(ValueError):
            pipe.fit(X, np.arange(60) % 3)  # a label outside classes: the classifier's fresh fit is refused
    with pytest.raises(NotFittedError, match="DPMomentumClassifier"):
        privacy_spent(pipe)
