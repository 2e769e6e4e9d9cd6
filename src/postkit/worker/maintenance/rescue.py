"""Rescue: reclaim expired claims (``tick_timeouts``), the jobs of workers that died or hung.

A reclaimed job is pending again, or dead-lettered when it has no attempts left. Any number of
workers and tickers may rescue at once: each expired claim is reclaimed exactly once.
"""

from __future__ import annotations

from typing import Any

import psycopg

from postkit.queue import QueueClient
from postkit.worker.maintenance.report import RoundReport
from postkit.worker.maintenance.service import Service


class Rescue(Service):
    """Reclaims up to ``limit`` expired claims per run; a full batch runs again at once."""

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
        reclaimed = client.tick_timeouts(limit=self.limit)
        report.reclaimed += reclaimed
        return 0.0 if reclaimed >= self.limit else self.next_wait()


__all__ = ["Rescue"]
