"""Registry: keep this process in the worker registry (``register_worker``, workers.sql).

It registers at its first run, heartbeats at every run after, registers again when its row is
gone (pruned while the process was cut off), and deregisters when its runner stops, so that
operators see which workers and tickers run and which were lost.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

import psycopg

import postkit
from postkit.queue import QueueClient, limits
from postkit.worker.maintenance.report import RoundReport
from postkit.worker.maintenance.service import Service

_LONGEST_INTERVAL = limits.DURATIONS["heartbeat_interval"].maximum.total_seconds()
_SHORTEST_INTERVAL = 1e-6
"""The registry stores heartbeat intervals from a microsecond to a day (its SQL's range)."""


class Registry(Service):
    """Registers ``worker_id`` as a ``kind`` ('worker' or 'ticker') serving ``queues``, and
    heartbeats every ``interval`` seconds, kept within a microsecond and a day: a process whose
    rounds are days apart (``postkit tick --interval 2d``) still heartbeats daily, so it never
    reads as lost while it runs."""

    def __init__(
        self,
        worker_id: str,
        *,
        kind: str,
        queues: Sequence[str],
        concurrency: int,
        interval: float,
    ) -> None:
        super().__init__(interval=interval)
        self.interval = min(max(interval, _SHORTEST_INTERVAL), _LONGEST_INTERVAL)
        self.worker_id = worker_id
        self.kind = kind
        self.queues = list(queues)
        self.concurrency = concurrency
        self._registered = False

    def run(
        self,
        connection: psycopg.Connection[Any],
        client: QueueClient,
        report: RoundReport,
        *,
        eager: bool = False,
    ) -> float:
        if not self._registered or not client.worker_heartbeat(self.worker_id):
            client.register_worker(
                self.worker_id,
                kind=self.kind,
                host=socket.gethostname()[:128] or "unknown",
                pid=os.getpid(),
                queues=self.queues,
                concurrency=self.concurrency,
                version=postkit.__version__,
                heartbeat_interval=self.interval,
            )
            self._registered = True
        return self.next_wait()

    def stop(self, client: QueueClient) -> None:
        if self._registered:
            client.deregister_worker(self.worker_id)
            self._registered = False


__all__ = ["Registry"]
