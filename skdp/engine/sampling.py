"""Poisson sampling of lots, as the accountant assumes."""
import numpy as np

from ..utils import taps


class PoissonBatchSampler:
    """Yields ``n_batches`` lots; each example joins each lot independently with ``sample_rate``.

    This is the Poisson subsampling that the accountant's privacy
    amplification assumes: example i is in a lot with probability q =
    ``sample_rate``, independently of every other example and lot, so the
    lot size is Binomial(n, q). Lot sizes vary and may be zero: an empty lot
    is still a step of the mechanism (noise only) and is yielded, so that the
    number of steps the accountant counts is exactly the number of lots drawn.
    Fixed-size shuffled batches would not match that analysis.

    Parameters
    ----------
    n_samples : int
        Number of examples n; lots are lists of indices in ``range(n)``.
    sample_rate : float
        Poisson rate q in [0, 1].
    n_batches : int
        Lots per pass (``len(sampler)``).
    rng : numpy.random.Generator
        Source of the memberships. It must be fresh and secret
        (``mechanism_rng``): which records were in which lot is part of what
        the noise hides.

    See Also
    --------
    DPSGDEngine : The step run on each lot.
    skdp.nn.plan_dpsgd : The plan (q, lots per epoch, sigma) the sampler follows.

    Examples
    --------
    >>> from skdp.engine import PoissonBatchSampler
    >>> from skdp.utils.random import mechanism_rng
    >>> sampler = PoissonBatchSampler(100, sample_rate=0.1, n_batches=3, rng=mechanism_rng())
    >>> lots = list(sampler)
    >>> len(sampler), len(lots), all(0 <= i < 100 for lot in lots for i in lot)
    (3, 3, True)
    """

    def __init__(self, n_samples, sample_rate, n_batches, rng):
        self.n_samples = n_samples
        self.sample_rate = sample_rate
        self.n_batches = n_batches
        self.rng = rng

    def __len__(self):
        return self.n_batches

    def __iter__(self):
        # One child stream per lot: record i's coin in lot t is the i-th draw of lot t's stream, whatever
        # the number of records, so neighbouring data sets (a record appended) share every other coin
        # under insecure_noise_seed (tests/test_sensitivity_harness.py). Fresh entropy stays fresh.
        for lot_rng in self.rng.spawn(self.n_batches):
            mask = lot_rng.random(self.n_samples) < self.sample_rate
            taps.lot_drawn(self.sample_rate)  # an audit's gradient canaries join the lot at the same rate
            yield np.flatnonzero(mask).tolist()
