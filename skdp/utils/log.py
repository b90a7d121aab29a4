"""Progress output through ``logging`` (logger ``"skdp"``), visible by default.

Long work reports through the ``"skdp"`` logger at INFO, so applications can
route or timestamp it as they do for any library. When logging would drop it
(no handler, as in a plain script or a notebook, or a level above INFO), the
message is printed to the current ``sys.stdout``, as ``verbose=1`` promises.
"""
import logging
import sys

from skorch.callbacks import Callback

logger = logging.getLogger("skdp")


def progress(message):
    """Report ``message`` (a log line or a table row of the training log)."""
    if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
        logger.info(message)
    else:
        print(message, file=sys.stdout, flush=True)


# A fit or a sampling run says nothing for its first PROGRESS_DELAY seconds, then reports at most every
# PROGRESS_EVERY seconds: short work stays silent, long work is never silent for long.
PROGRESS_DELAY = 10.0
PROGRESS_EVERY = 10.0


class ProgressTimer:
    """Decides when long work reports: after ``PROGRESS_DELAY`` seconds, then every ``PROGRESS_EVERY`` seconds."""

    def __init__(self):
        import time

        self._clock = time.perf_counter
        self.start = self._clock()
        self._last = None

    def report(self, done, total, what, extra=""):
        """Print ``what: done/total, extra, elapsed, time left`` if it is time to (wall time only)."""
        now = self._clock()
        elapsed = now - self.start
        if elapsed < PROGRESS_DELAY or (self._last is not None and now - self._last < PROGRESS_EVERY):
            return
        self._last = now
        left = elapsed / max(done, 1) * max(total - done, 0)
        progress(f"{what}: {done}/{total}{extra}, {elapsed:.0f}s so far, about {left:.0f}s left")


class EpochProgress(Callback):
    """A skorch callback reporting a long fit's epochs through ``ProgressTimer``.

    It prints only released quantities (the epoch, the accountant's epsilon, wall time), never a loss.
    A module-level class, so that a fitted net holding it pickles.

    Parameters
    ----------
    owner : str
        The estimator named in the lines.
    """

    def __init__(self, owner):
        self.owner = owner

    def on_train_begin(self, net, **kwargs):
        self.timer_ = ProgressTimer()

    def on_epoch_end(self, net, **kwargs):
        epsilon = net.history[-1].get("epsilon", None) if len(net.history) else None
        extra = "" if epsilon is None else f", training epsilon {epsilon:.3g} so far"
        self.timer_.report(len(net.history), net.max_epochs, f"{self.owner} fit, epoch", extra)

    def on_train_end(self, net, **kwargs):
        # Wall-clock state is not part of the fitted model: a neighbour's fit must hold the same.
        self.__dict__.pop("timer_", None)


def progress_callback(owner):
    """A skorch callback that reports a long fit's epochs (``ProgressTimer``): epoch, epsilon so far, time."""
    return EpochProgress(owner)
