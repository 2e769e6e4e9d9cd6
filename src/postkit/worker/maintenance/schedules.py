"""Schedules: fire the namespace's due schedules (``tick_schedules``), and wake for the next.

After each run the service looks at when the next schedule falls due and runs again then, and
within ``interval`` at the latest, so that a schedule created or changed meanwhile fires on
time too. Only when the last look found one falling due by the next run does a run fire: any
other run is one statement. Any number of workers and tickers may fire at once: each run of a
schedule fires exactly once.
"""

from __future__ import annotations

from typing import Any

import psycopg

from postkit.queue import QueueClient
from postkit.queue.records import BrokenSchedule
from postkit.worker.maintenance.report import RoundReport
from postkit.worker.maintenance.service import Service

# Not less than a few milliseconds between runs: a schedule another session is firing stays
# due until that session commits.
_MIN_WAIT = 0.02


class Schedules(Service):
    """Fires due schedules; ``interval`` is the longest wait between two looks."""

    def __init__(self, *, interval: float, jitter: float = 0.0) -> None:
        super().__init__(interval=interval, jitter=jitter)
        # The first run fires what fell due while nothing ran.
        self._due = True

    def run(
        self,
        connection: psycopg.Connection[Any],
        client: QueueClient,
        report: RoundReport,
        *,
        eager: bool = False,
    ) -> float:
        if self._due or eager:
            # One transaction: the due schedules stay locked until each has fired.
            with connection.transaction():
                outcomes = client.tick_schedules()
            for outcome in outcomes:
                if isinstance(outcome, BrokenSchedule):
                    report.broken.append(outcome)
                else:
                    report.fired.append(outcome)
        due = client.next_schedule_at()
        wait = self.next_wait()
        if due.seconds is not None:
            wait = min(max(due.seconds, _MIN_WAIT), wait)
        self._due = due.seconds is not None and due.seconds <= wait
        return wait


__all__ = ["Schedules"]
