"""skorch callbacks that are post-processing of the private training (they cost no privacy)."""
import torch
from skorch.callbacks import Callback


class ParameterAveraging(Callback):
    """Exponential moving average of the parameters, swapped in when training ends.

    DP-SGD iterates carry the noise of their last steps; averaging them
    (De et al. 2022) removes much of it. It reads only the noisy iterates, so it
    is post-processing. ``decay`` is per step; the average starts after
    ``start`` (a fraction of the planned steps) so early iterates do not weigh in.
    """

    def __init__(self, decay=0.99, start=0.5):
        self.decay = decay
        self.start = start

    def on_train_begin(self, net, **kwargs):
        self.avg_ = None
        self.steps_ = 0

    def on_batch_end(self, net, training=False, **kwargs):
        if not training:
            return
        self.steps_ += 1
        # The plan (lots per epoch) exists only once fit_loop has started.
        if self.steps_ < self.start * net.n_batches_ * net.max_epochs:
            return
        with torch.no_grad():
            params = [p.detach() for p in net.module_.parameters()]
            if self.avg_ is None:
                self.avg_ = [p.clone() for p in params]
                self.n_avg_ = 1
                return
            self.n_avg_ += 1
            # Uniform average at first, then exponential: early averages are not over-weighted.
            w = max(1.0 / self.n_avg_, 1.0 - self.decay)
            for a, p in zip(self.avg_, params):
                a.lerp_(p, w)

    def on_train_end(self, net, **kwargs):
        if self.avg_ is None:
            return
        with torch.no_grad():
            for p, a in zip(net.module_.parameters(), self.avg_):
                p.copy_(a)
        self.avg_ = None
