"""Prune: apply retention (``prune``): delete archived jobs, dead letters and job results whose
retention ran out, and outcome counters older than two hours, in bounded batches; and forget the
workers lost for a day (``prune_workers``)."""

from __future__ import annotations

from typing import Any

import psycopg

from postkit.queue import QueueClient
from postkit.worker.maintenance.report import RoundReport
from postkit.worker.maintenance.service import Service


class Prune(Service):
    """Deletes up to ``limit`` archived jobs, ``limit`` dead letters and ``limit`` job results
    per run; a full batch runs again at once."""

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
        pruned = client.prune(limit=self.limit)
        report.pruned = pruned
        client.prune_workers()  # a day after a lost worker's last heartbeat
        full = max(pruned.batches) >= self.limit
        return 0.0 if full else self.next_wait()


__all__ = ["Prune"]
