"""Rescue: return expired claims to their queues (``tick_timeouts``): the jobs of workers that
died or hung.

A rescued job is pending again, or dead-lettered when it has no attempts left. Any number of
workers and tickers may rescue at once: each expired claim is rescued exactly once.
"""

from __future__ import annotations

from typing import Any

import psycopg

from postkit.queue import QueueClient
from postkit.worker.maintenance.report import RoundReport
from postkit.worker.maintenance.service import Service


class Rescue(Service):
    """Rescues up to ``limit`` expired claims per run; a full batch runs again at once."""

    def __init__(self, *, interval: float, jitter: float = 0.0, limit: int = 1000) -> None:
        super().__init__(interval=interval, jitter=jitter)
        self.limit = limit

    def run(
        self,
        connection: psycopg.Connection[Any],
        client: QueueClient,
        report: RoundReport,
        *,
        eager: bool = False,
    ) -> float:
        rescued = client.tick_timeouts(limit=self.limit)
        report.rescued += rescued
        return 0.0 if rescued >= self.limit else self.next_wait()


__all__ = ["Rescue"]
