"""The large-scale DP-SGD recipe (issue 28): EMA of the weights, the GroupNorm CNN, augmentation multiplicity."""
import numpy as np
import pytest
import torch
from skorch.callbacks import Callback

from skdp import DPMomentumClassifier, privacy_spent
from skdp.nn import _defaults


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return (X[:400] / 8 - 1).astype(np.float32), y[:400]


class RecordIterates(Callback):
    """Keeps the weights after every lot (the iterates: released quantities, a callback may read them)."""

    def initialize(self):
        self.iterates = []
        return self

    def on_train_begin(self, net, **kwargs):
        self.start = [p.detach().clone() for p in net.module_.parameters()]

    def on_batch_end(self, net, **kwargs):
        self.iterates.append([p.detach().clone() for p in net.module_.parameters()])


# -- EMA of the weights ----------------------------------------------------------------------------
def test_released_weights_are_the_moving_average_of_the_iterates(digits):
    X, y = digits
    rec = RecordIterates()
    clf = DPMomentumClassifier(noise_multiplier=1.0, max_epochs=3, batch_size=50, ema=0.8, classes=range(10),
                               callbacks=[rec], random_state=0).fit(X, y)
    assert clf.net_.ema_decay_ == 0.8 and len(rec.iterates) == clf.n_steps_ == 24
    # w_bar_0 = the initial weights; w_bar_t = beta_t w_bar_{t-1} + (1 - beta_t) w_t, beta_t = min(0.8, (1+t)/(10+t))
    avg = [s.double() for s in rec.start]
    for t, iterate in enumerate(rec.iterates):
        beta = min(0.8, (1 + t) / (10 + t))
        avg = [beta * a + (1 - beta) * w.double() for a, w in zip(avg, iterate)]
    released = list(clf.net_.module_.parameters())
    for a, r, last in zip(avg, released, rec.iterates[-1]):
        torch.testing.assert_close(r.detach().double(), a, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(r.detach(), last)  # not the last iterate


def test_ema_spends_nothing(digits):
    X, y = digits
    kwargs = dict(epsilon=1.0, max_epochs=4, classes=range(10), random_state=0)
    with_ema = DPMomentumClassifier(ema="auto", **kwargs).fit(X, y)
    without = DPMomentumClassifier(ema=None, **kwargs).fit(X, y)
    assert privacy_spent(with_ema) == privacy_spent(without)
    assert with_ema.noise_multiplier_ == without.noise_multiplier_ and with_ema.n_steps_ == without.n_steps_
    assert with_ema.net_.ema_decay_ == _defaults.auto_ema_decay(with_ema.n_steps_) > 0
    assert without.net_.ema_decay_ == 0.0


def test_ema_rule_reads_only_the_number_of_steps():
    assert _defaults.auto_ema_decay(300) == pytest.approx(1 - _defaults.EMA_WINDOWS / 300)
    assert _defaults.auto_ema_decay(5) == 0.0 and 0 < _defaults.auto_ema_decay(1000) < 1


@pytest.mark.parametrize("bad", [1.0, -0.1, "always"])
def test_bad_ema_is_refused_by_name(digits, bad):
    X, y = digits
    with pytest.raises(ValueError, match="ema"):
        DPMomentumClassifier(ema=bad, max_epochs=1, classes=range(10)).fit(X, y)
