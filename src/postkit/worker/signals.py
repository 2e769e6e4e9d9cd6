"""A worker's answer to SIGTERM and SIGINT: the first stops it gracefully, a second exits now."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

logger = logging.getLogger("postkit.worker")


def stop_on_signals(stop: Callable[[], None], grace_period: float) -> None:
    """From the main thread (elsewhere, do nothing: Python runs signal handlers there only),
    make SIGTERM and SIGINT call ``stop``, and a second of them exit the process at once (the
    running jobs' claims expire, and other workers rescue them)."""
    if threading.current_thread() is not threading.main_thread():
        return
    received = 0

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal received
        received += 1
        if received > 1:
            logger.warning(
                "second signal: exiting now; running jobs are rescued when their claims expire"
            )
            os._exit(128 + signum)
        logger.warning(
            "signal %s: letting jobs finish (up to %.0fs), then releasing those not started",
            signal.Signals(signum).name,
            grace_period,
        )
        stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


__all__ = ["stop_on_signals"]
