"""The worker's threads: daemons, named after their job, so a dump of the process reads well."""

from __future__ import annotations

import threading
from collections.abc import Callable


def start_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """Run ``target`` on a new daemon thread called ``postkit-NAME``."""
    thread = threading.Thread(target=target, name=f"postkit-{name}", daemon=True)
    thread.start()
    return thread


__all__ = ["start_thread"]
