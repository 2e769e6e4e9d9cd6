"""What a worker counts while it runs: the ``report`` callback and the shutdown line read it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class WorkerStats:
    """Counters of one worker since it started."""

    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    stale: int = 0
    released: int = 0
    rescued: int = 0
    """Expired claims this worker's maintenance rescued (tick_timeouts), any worker's."""
    started: float = field(default_factory=time.monotonic)

    @property
    def processed(self) -> int:
        return self.completed + self.retried + self.dead_lettered + self.stale


__all__ = ["WorkerStats"]
