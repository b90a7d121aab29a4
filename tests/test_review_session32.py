"""Findings of the attacker's read of 2026-11-25's changes (issues 26, 28, 29; /work/review_s32).

Each test failed before its fix.
"""
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from skdp import insecure_noise_seed
from skdp.engine import validators
from skdp.nn import DPMomentumClassifier
from skdp.utils import taps


def _warnings_of(fit):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    return sorted({(w.category.__name__, str(w.message)) for w in caught})


def test_the_scale_hint_is_no_warning_that_one_record_can_flip():
    # r01: with bounds=None the classifier read max|x| of the private rows and warned (UserWarning) when a
    # feature was far from unit scale: one record of 150 among unit-scale rows turned the warning on while the
    # fit stayed certified, and PrivateSearchCV re-emitted it. Warnings are output (PrivateSearchCV dedups them
    # so as not to tell its number of trials): they must be equal on neighbouring data.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(200, 5)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    X2, y2 = np.vstack([X, [[150.0, 0, 0, 0, 0]]]).astype(np.float32), np.r_[y, 1]

    def fit(data):
        return lambda: DPMomentumClassifier(epsilon=1.0, classes=[0, 1], max_epochs=1, random_state=0).fit(*data)

    assert _warnings_of(fit((X, y))) == _warnings_of(fit((X2, y2)))


def _ulp_move(buf):
    data = buf.data  # through .data: the version counter does not see it
    data[0] = torch.nextafter(data[0], torch.tensor(math.inf))
    data[2] = torch.nextafter(data[2], torch.tensor(-math.inf))


def test_the_guard_fingerprint_sees_writes_that_keep_the_sums():
    # r02: the checksums (bit sum, value sum) were both linear: one ulp moved between two elements, or one
    # count moved between two bins of an int64 buffer, kept them; the earlier sum of squares saw both.
    buf = torch.tensor([1.5, 0.25, 1.5, 0.75])
    before = validators._fingerprints([buf])
    _ulp_move(buf)
    assert validators._fingerprints([buf]) != before
    counts = torch.tensor([5, 5, 0, 0])
    before = validators._fingerprints([counts])
    counts.data[0] += 1
    counts.data[1] -= 1
    assert validators._fingerprints([counts]) != before
    swapped = torch.tensor([1.0, 2.0, 3.0, 4.0])
    before = validators._fingerprints([swapped])
    swapped.data[:2] = torch.tensor([2.0, 1.0])
    assert validators._fingerprints([swapped]) != before


class _Leaky(nn.Module):
    """Moves one ulp inside a buffer when its lot holds the outlier: the released buffer tells D from D'."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.register_buffer("memo", torch.tensor([1.5, 0.25, 1.5, 0.75]))

    def forward(self, x):
        if self.training and bool((x[:, 0] > 50).any()):
            _ulp_move(self.memo)
        return self.lin(x)


def test_a_module_that_hides_a_record_in_a_buffer_is_refused():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(100, 4)), [[100.0, 0, 0, 0]]]).astype(np.float32)
    y = np.r_[(X[:-1, 1] > 0).astype(int), 1]
    clf = DPMomentumClassifier(module=_Leaky(), epsilon=1.0, batch_size=101, max_epochs=2, normalize_rows="none",
                               classes=[0, 1], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="memo"):
            clf.fit(X, y)


def test_dp_quantiles_read_the_number_of_records_through_the_tap():
    # r03: the automatic choice of one or two stages read X.shape[0] directly; at the threshold a neighbour made
    # one release more, and the harness's replay (which pins public counts to the recorded ones) could not
    # compare them.
    from skdp.mechanisms.gaussian import gaussian_dp_mu
    from skdp.mechanisms.quantiles import REFINE_BINS, REFINE_MIN_Z
    from skdp.preprocessing import DPQuantileScaler

    d, epsilon, delta = 4, 1.0, 1e-5
    n_star = math.ceil(REFINE_BINS * REFINE_MIN_Z * math.sqrt(2 * d) / gaussian_dp_mu(epsilon, delta))
    X = np.random.default_rng(0).normal(0.0, 1.0, (n_star - 1, d))
    X2 = np.vstack([X, np.zeros((1, d))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_noise_seed(0), taps.recording() as recorder:
            DPQuantileScaler(epsilon=epsilon, delta=delta, domain=(-10, 10)).fit(X)
        with insecure_noise_seed(0), taps.replaying(recorder.releases) as replay:
            DPQuantileScaler(epsilon=epsilon, delta=delta, domain=(-10, 10)).fit(X2)
    assert replay.position == len(recorder.releases)


@pytest.mark.parametrize("case", ["float64 swap", "float32 odd swap", "uint8 128 counts", "float32 tiny signs",
                                  "float64 bit 62"])
def test_the_guard_fingerprint_sees_top_bit_moves(case):
    # Final read (/work/review_final32): with odd weights modulo 2^64, the weighted sum saw bit 63 of a word only
    # through parity, so any even number of sign-bit flips (an x <-> -x swap) kept every checksum; a bit-62 move
    # was missed half the time.
    tensors = {
        "float64 swap": (torch.tensor([3.0, 1.0, -3.0, 7.0], dtype=torch.float64), [-3.0, 1.0, 3.0, 7.0]),
        "float32 odd swap": (torch.tensor([0.0, 5.0, 2.0, -5.0]), [0.0, -5.0, 2.0, 5.0]),
        "uint8 128 counts": (torch.tensor([0] * 7 + [200] + [0] * 7 + [10], dtype=torch.uint8),
                             [0] * 7 + [72] + [0] * 7 + [138]),
        "float32 tiny signs": (torch.tensor([1.0, 1e-30, 1.0, 3e-31]), [1.0, -1e-30, 1.0, -3e-31]),
        "float64 bit 62": (torch.tensor([2.0 ** -1000, 1.0, 2.0 ** 24, 1.0], dtype=torch.float64),
                           [2.0 ** 24, 1.0, 2.0 ** -1000, 1.0]),
    }
    t, after = tensors[case]
    before = validators._fingerprints([t])
    t.data.copy_(torch.tensor(after, dtype=t.dtype))
    assert validators._fingerprints([t]) != before


def test_the_guard_takes_sparse_buffers():
    t = torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse()
    assert validators._fingerprints([t]) == validators._fingerprints([t])
