"""Attacker's read of module="auto" (/work/review_s35 of session 35): each finding's test, written first."""
import warnings

import numpy as np
import pytest
import torch

from skdp import BudgetLedger, DPMomentumClassifier

FAST = dict(classes=range(3), epsilon=1.0, max_epochs=1)


@pytest.mark.parametrize("rows, image_shape", [((28, 28, 1), (28, 28)),  # channels-last rows
                                                ((28, 28), (16, 16))])  # rows of another size
def test_a03_an_image_shape_unlike_the_rows_is_refused_before_the_charge(rows, image_shape):
    # The CNN was built from image_shape, the ledger charged, and the first lot crashed inside torch:
    # budget spent, nothing released (and the error named neither image_shape nor the fix).
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (60, *rows)).astype(np.float32), rng.integers(0, 3, 60)
    ledger = BudgetLedger(epsilon=10.0, delta=1e-3)
    clf = DPMomentumClassifier(image_shape=image_shape, ledger=ledger, **FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="image_shape"):
            clf.fit(X, y)
    assert ledger.entries == []


@pytest.mark.parametrize("flat", [True, False])
def test_a01_a_channels_first_image_shape_fits_the_cnn(flat):
    # auto_module takes (C, H, W); module_spec refused it with a false "too small" message.
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (60, 3, 16, 16)).astype(np.float32), rng.integers(0, 3, 60)
    X = X.reshape(60, -1) if flat else X
    clf = DPMomentumClassifier(image_shape=(3, 16, 16), **FAST).fit(X, y)
    assert clf.module_ == "cnn" and clf.predict(X).shape == (60,)
    first = next(m for m in clf.net_.module_.modules() if isinstance(m, torch.nn.Conv2d))
    assert first.in_channels == 3


class _RaisesOnLargeValues(torch.nn.Module):
    """Fine on the stand-in lot (standard normal), fails on the real rows (all 10): after the charge."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        if float(x.abs().max()) > 8:
            raise RuntimeError("no")
        return self.linear(x)


def test_a06_a_fresh_fit_that_fails_after_the_charge_keeps_no_certificate():
    # A refit failing after the charge kept the previous fit's epsilon_/privacy_certified_ next to the new,
    # untrained network: privacy_spent reported a fit that was not the model's.
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 4)).astype(np.float32), rng.integers(0, 3, 60)
    clf = DPMomentumClassifier(module=_RaisesOnLargeValues, **FAST).fit(X, y)
    assert clf.privacy_certified_
    with pytest.raises(RuntimeError, match="no"):
        clf.fit(np.full_like(X, 10.0), y)
    assert not hasattr(clf, "epsilon_") and not hasattr(clf, "net_") and not hasattr(clf, "privacy_certified_")


def test_g1_a_torch_generator_carries_the_numpy_generators_entropy_not_32_bits():
    # torch's CPU generator (MT19937) keeps only the low 32 bits of manual_seed: DP-SGD's noise, the
    # randomized response and the augmentations came from one of 2**32 streams, which can be enumerated.
    # Its state must not be the MT19937 expansion of a 32-bit seed.
    from skdp.utils.random import torch_generator

    for seed in range(3):
        state = torch_generator(np.random.default_rng(seed)).get_state().numpy().tobytes()
        words = np.frombuffer(state[24:24 + 624 * 8], dtype="<u8").astype(np.uint64)
        assert words.max() < 2 ** 32  # the layout read here is MT19937's 624 words
        expanded = [int(words[0])]
        for i in range(1, 624):
            prev = expanded[-1]
            expanded.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
        assert [int(w) for w in words] != expanded, "the state is the expansion of a 32-bit seed"
    # Still a function of the numpy generator (a seeded random_state stays reproducible), and streams differ.
    a, b = (torch_generator(np.random.default_rng(7)) for _ in range(2))
    assert torch.equal(torch.randn(5, generator=a), torch.randn(5, generator=b))
    c = torch_generator(np.random.default_rng(8))
    assert not torch.equal(torch.randn(5, generator=torch_generator(np.random.default_rng(7))),
                           torch.randn(5, generator=c))


@pytest.mark.parametrize("flip", [False, True])
def test_g2_an_appended_record_changes_no_other_records_augmented_copies(flip):
    # The shifts were drawn as dy for all rows then dx for all rows, from one stream across lots: a record
    # appended moved every other record's copies in its lot and in every later lot, so the released sum moved
    # by more than C for a fixed draw (the harness saw 1.53 C) and could not be replayed.
    from skdp.nn import ImageAugmentation

    aug = ImageAugmentation(3, (1, 8, 8), shift=2, flip=flip)
    X = torch.randn(5, 64)
    X2 = torch.cat([X, torch.randn(1, 64)])
    for make in (lambda: np.random.default_rng(0), lambda: torch.Generator().manual_seed(0)):
        g, g2 = make(), make()
        for _ in range(3):  # three lots: the later ones too
            assert torch.equal(aug(X, g), aug(X2, g2)[:5])


# ---- second read (/work/review_s35 b01-b10) ---------------------------------------------------------------
class _CtrlCAfterUpdate:
    """A skorch callback whose optimizer post-hook raises KeyboardInterrupt after the ``at``-th noisy update."""

    def __new__(cls, at):
        from skorch.callbacks import Callback

        class CtrlC(Callback):
            def __init__(self, at=None):
                self.at = at

            def on_train_begin(self, net, **kwargs):
                self.applied = 0

                def post(optimizer, args, kwargs):
                    self.applied += 1
                    if self.at is not None and self.applied == self.at:
                        raise KeyboardInterrupt
                self._handle = net.optimizer_.register_step_post_hook(post)

            def on_train_end(self, net, **kwargs):
                self._handle.remove()
        return CtrlC(at)


def _table(n=600):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 8)).astype(np.float32), rng.integers(0, 3, n)


def test_b09_b02_an_interrupted_fit_counts_every_noisy_update_and_is_not_certified():
    # A Ctrl-C inside optimizer.step (after the noisy update) left that lot uncounted (n_steps_ 2 for 3 updates),
    # and the estimator said privacy_certified_=True with no note while its net said "did not complete".
    X, y = _table()
    callback = _CtrlCAfterUpdate(3)
    clf = DPMomentumClassifier(classes=range(3), max_epochs=2, batch_size=100, noise_multiplier=1.2,
                               callbacks=[("ctrlc", callback)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)  # skorch swallows the interrupt and returns
    assert callback.applied == 3 and clf.n_steps_ >= 3
    assert clf.privacy_certified_ is False and any("interrupt" in note for note in clf.privacy_notes_)


def test_b10_an_interrupt_outside_the_training_loop_keeps_no_stale_certificate():
    from skorch.callbacks import Callback

    class InterruptAtEnd(Callback):
        def __init__(self, armed=False):
            self.armed = armed

        def on_train_end(self, net, **kwargs):
            if self.armed:
                raise KeyboardInterrupt

    X, y = _table()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh = DPMomentumClassifier(classes=range(3), max_epochs=2, batch_size=100, noise_multiplier=1.2,
                                     callbacks=[("end", InterruptAtEnd())]).fit(X, y)
        fresh.set_params(callbacks=[("end", InterruptAtEnd(armed=True))], noise_multiplier=0.6)
        with pytest.raises(KeyboardInterrupt):
            fresh.fit(X, y)
        assert not hasattr(fresh, "epsilon_") and not hasattr(fresh, "net_")
        warm = DPMomentumClassifier(classes=range(3), max_epochs=2, batch_size=100, noise_multiplier=1.2,
                                    warm_start=True, callbacks=[("end", InterruptAtEnd())]).fit(X, y)
        first = warm.n_steps_
        warm.net_.set_params(callbacks__end__armed=True)
        with pytest.raises(KeyboardInterrupt):
            warm.fit(X, y)
    assert warm.n_steps_ == warm.net_.accountant_.n_steps > first  # the continuation's lots are counted


def test_b08_a_search_refuses_augment_with_ghost_clipping_before_its_charge():
    from skdp.model_selection import PrivateSearchCV

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (200, 16, 16)).astype(np.float32), rng.integers(0, 3, 200)
    ledger = BudgetLedger(epsilon=100.0, delta=1e-3)
    search = PrivateSearchCV(DPMomentumClassifier(classes=range(3), max_epochs=1, image_shape=(16, 16),
                                                  module__channels=(4, 4)),
                             {"clipping": ["ghost"], "augment": [4]}, epsilon=2.0, n_trials_mean=2.0, ledger=ledger)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="augment"):
            search.fit(X, y)
    assert ledger.entries == []


def test_b03a_in_channels_unlike_the_rows_is_refused_before_the_charge_or_read_consistently():
    # Rows (3, 20, 20) with module__in_channels=1, and flat 1024-feature rows with 4 channels (read as 32 x 32 of
    # 1 channel by the square rule): charged, then torch crashed on the first lot.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 60)
    ledger = BudgetLedger(epsilon=10.0, delta=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="in_channels=1"):
            DPMomentumClassifier(ledger=ledger, module="cnn", module__in_channels=1, **FAST).fit(
                rng.uniform(0, 1, (60, 3, 20, 20)).astype(np.float32), y)
        assert ledger.entries == []
        flat = DPMomentumClassifier(module="cnn", module__in_channels=4, module__channels=(4,), **FAST).fit(
            rng.uniform(0, 1, (60, 1024)).astype(np.float32), y)  # 4 channels of 16 x 16
    first = next(m for m in flat.net_.module_.modules() if isinstance(m, torch.nn.Conv2d))
    assert first.in_channels == 4


def test_b03b_errors_quote_the_image_shape_as_given():
    from skdp.nn import module_spec

    with pytest.raises(ValueError, match=r"image_shape=\(3, 28, 28\)"):
        module_spec("cnn", input_shape=(784,), n_classes=3, image_shape=(3, 28, 28))


# ---- third read (/work/review_s35 c01-c07) ----------------------------------------------------------------
def _pickle_callback():
    import pickle

    from skorch.callbacks import Callback

    class PickleAtEpochEnd(Callback):
        """A checkpoint: pickles the net at every epoch's end, during the fit."""

        def on_epoch_end(self, net, **kwargs):
            self.blob = pickle.dumps(net)
    return PickleAtEpochEnd


_PickleAtEpochEnd = _pickle_callback()
_PickleAtEpochEnd.__qualname__ = _PickleAtEpochEnd.__name__ = "_PickleAtEpochEnd"

def test_c02_a_pickle_taken_during_the_fit_holds_no_noise_generator_and_does_not_break_the_fit():
    # A checkpoint pickled at an epoch's end held engine_.generator whole: every later lot's noise was
    # reproducible from the file. With the hook clipper the pickle failed (a local closure) after the charge.
    import pickle

    X, y = _table(300)
    callback = _PickleAtEpochEnd()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(classes=range(3), max_epochs=2, batch_size=60, epsilon=1.0,
                                   callbacks=[("pickle", callback)]).fit(X, y)
    assert clf.privacy_certified_
    restored = pickle.loads(callback.blob)
    engines = [v for k, v in vars(restored).items() if k.startswith("engine")]
    assert engines and all(getattr(e, "generator", None) is None for e in engines)


@pytest.mark.parametrize("clipping", ["auto", "vmap"])
def test_c02_pge_and_vmap_checkpoints_hold_no_fit_randomness(clipping):
    import pickle

    X, y = _table(300)
    callback = _PickleAtEpochEnd()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DPMomentumClassifier(classes=range(3), max_epochs=1, batch_size=60, epsilon=1.0, clipping=clipping,
                             callbacks=[("pickle", callback)]).fit(X, y)
    restored = pickle.loads(callback.blob)
    assert restored.engine_.generator is None
    assert not any(k in vars(restored) for k in ("_lot_rng", "_augment_gen", "_rr_generator", "_loss_rng"))


def test_c07_the_global_generator_a_fit_draws_from_is_not_a_32_bit_seed():
    # Dropout masks of a user's module come from torch's global generator, forked and seeded from the fit's
    # entropy: with manual_seed its state at the first lot was the expansion of a 32-bit seed.
    from skorch.callbacks import Callback

    states = []

    class Peek(Callback):
        def on_batch_begin(self, net, **kwargs):
            if not states:
                states.append(torch.default_generator.get_state().numpy().tobytes())

    X, y = _table(120)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DPMomentumClassifier(classes=range(3), max_epochs=1, batch_size=60, callbacks=[("peek", Peek())]).fit(X, y)
    words = np.frombuffer(states[0][24:24 + 624 * 8], dtype="<u8")
    expanded = [int(words[0])]
    for i in range(1, 624):
        prev = expanded[-1]
        expanded.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    assert [int(w) for w in words] != expanded


# ---- fourth read (/work/review_s35 d01-d08) ---------------------------------------------------------------
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_d02_an_engine_without_its_generator_refuses_to_release(how):
    # A pickled or copied engine has no generator; normal_(generator=None) drew from torch's global generator,
    # which the user seeds: the noise was reproducible from torch.manual_seed(0).
    import copy
    import pickle

    from torch import nn

    from skdp.engine import DPSGDEngine
    from skdp.utils.random import mechanism_rng, torch_generator

    def loss(forward, x, y):
        return nn.functional.cross_entropy(forward(x), y, reduction="none")

    x, y = torch.randn(5, 3), torch.tensor([0, 1, 0, 1, 1])
    engine = DPSGDEngine(nn.Linear(3, 2), max_grad_norm=1.0, noise_multiplier=1.1, expected_batch_size=4,
                         generator=torch_generator(mechanism_rng()))
    engine.private_gradients(loss, (x, y))
    copied = pickle.loads(pickle.dumps(engine)) if how == "pickle" else copy.deepcopy(engine)
    copied.module.weight.grad = None
    with pytest.raises(ValueError, match="generator"):
        copied.private_gradients(loss, (x, y))
    assert copied.module.weight.grad is None  # refused before anything was released
    engine.close()


def test_d03_a_continuation_refused_before_its_charge_keeps_the_certificate():
    from skdp.exceptions import BudgetExceededError

    X, y = _table(400)
    ledger = BudgetLedger(epsilon=1.5, delta=1e-3, composition="basic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPMomentumClassifier(epsilon=1.0, max_epochs=2, classes=range(3), ledger=ledger,
                                   warm_start=True).fit(X, y)
        steps, epsilon = clf.n_steps_, clf.epsilon_
        for call in (clf.fit, clf.partial_fit):
            with pytest.raises(BudgetExceededError):
                call(X, y)
            assert clf.privacy_certified_ and clf.privacy_notes_ == ()
            assert (clf.n_steps_, clf.epsilon_) == (steps, epsilon)


def test_d08_a_dpnet_with_a_bad_ema_is_refused_before_its_charge():
    from skdp.nn import DPNet

    X, y = _table(200)
    ledger = BudgetLedger(epsilon=10.0, delta=1e-3)
    net = DPNet(torch.nn.Linear, module__in_features=8, module__out_features=3, criterion=torch.nn.CrossEntropyLoss,
                epsilon=1.0, delta=1e-3, lr=0.5, batch_size=50, max_epochs=1, verbose=0, ledger=ledger, ema=1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="ema"):
            net.fit(X, y)
    assert ledger.entries == []
