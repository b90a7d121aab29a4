"""Poisson sampling of lots, as the accountant assumes."""
import numpy as np


class PoissonBatchSampler:
    """Yields ``n_batches`` lots; each example joins each lot independently with ``sample_rate``.

    Lot sizes vary and may be zero: an empty lot is still a step of the
    mechanism (noise only) and is yielded, so that the number of steps the
    accountant counts is exactly the number of lots drawn.
    """

    def __init__(self, n_samples, sample_rate, n_batches, rng):
        self.n_samples = n_samples
        self.sample_rate = sample_rate
        self.n_batches = n_batches
        self.rng = rng

    def __len__(self):
        return self.n_batches

    def __iter__(self):
        for _ in range(self.n_batches):
            mask = self.rng.random(self.n_samples) < self.sample_rate
            yield np.flatnonzero(mask).tolist()
