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
