"""The worker's threads: daemons, named after their job, so a dump of the process reads well."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


def start_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """Run ``target`` on a new daemon thread called ``postkit-NAME``."""
    thread = threading.Thread(target=target, name=f"postkit-{name}", daemon=True)
    thread.start()
    return thread


@dataclass
class ServiceThreads:
    """A worker's service threads, each ended by its shutdown."""

    heartbeat: threading.Thread
    listener: threading.Thread | None
    claim_path: threading.Thread | None
    """The claim path's maintenance, in pooler mode only: else the listener runs it."""
    housekeeping: threading.Thread | None
    reporter: threading.Thread | None


__all__ = ["ServiceThreads", "start_thread"]
