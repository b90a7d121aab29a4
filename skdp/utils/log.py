"""Progress output through ``logging`` (logger ``"skdp"``), visible by default.

Long work reports through the ``"skdp"`` logger at INFO, so applications can
route or timestamp it as they do for any library. When logging would drop it
(no handler, as in a plain script or a notebook, or a level above INFO), the
message is printed to the current ``sys.stdout``, as ``verbose=1`` promises.
"""
import logging
import sys

logger = logging.getLogger("skdp")


def progress(message):
    """Report ``message`` (a log line or a table row of the training log)."""
    if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
        logger.info(message)
    else:
        print(message, file=sys.stdout, flush=True)
