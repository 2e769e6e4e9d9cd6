"""The vacuum service: keeps the claim path short by vacuuming the jobs table while workers run.

Every claim turns a pending row into a running one and every ack deletes it, so the pull index
keeps an entry for each job claimed since the table was last vacuumed, all of them at the head
of the range the next claim walks. PostgreSQL marks such entries dead as it passes them but
still reads their pages on every claim until VACUUM removes them. At thousands of jobs a second
they pile up fast: with 300,000 jobs pending, claims of 16 jobs slowed from 1,360 to 500 per
second over 16 seconds without a VACUUM, and ran at 3,400 per second right after one (pgbench,
two clients, benchmarks' machine). Autovacuum looks at each table at most once a minute by
default, however hot it is.

So each worker runs this service, next to retention on a connection of their own: every
``interval`` seconds it reads the table's dead row count from the statistics and, past
``threshold``, runs ``VACUUM (SKIP_LOCKED) postkit_queue.jobs``. One worker vacuums at a time
(an advisory lock), and the wait between two vacuums grows to 20 times the last one's duration,
so a large table is vacuumed no more than 5% of the time. A role that may not vacuum the table
(not its owner; from PostgreSQL 17, no MAINTAIN privilege) leaves it to autovacuum: the service
logs that once and runs no more. VACUUM never blocks claims, pushes or acks (it takes SHARE
UPDATE EXCLUSIVE, which row changes do not conflict with, and the table's vacuum_truncate =
false keeps it from cutting off empty pages under ACCESS EXCLUSIVE), and while a long
transaction holds the horizon back it can remove nothing, which is why the wait also grows
with its cost.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import psycopg

from postkit.queue import QueueClient, executor, protocol
from postkit.worker.maintenance.report import RoundReport
from postkit.worker.maintenance.service import Service

logger = logging.getLogger("postkit.worker")

_MAX_SHARE_OF_TIME = 0.05


class JobsVacuum(Service):
    """Vacuums ``postkit_queue.jobs`` when dead rows pile up. See the module docstring."""

    def __init__(self, *, interval: float = 5.0, threshold: int = 10_000) -> None:
        """
        Args:
            interval: seconds between two looks at the table's dead row count (at least).
            threshold: dead rows that make a VACUUM worth it.

        Raises:
            ValueError: ``interval`` is not positive or ``threshold`` is negative.
        """
        if interval <= 0 or threshold < 0:
            raise ValueError("interval must be positive and threshold zero or positive")
        super().__init__(interval=interval)
        self.threshold = threshold
        self.enabled = True
        """False once the role turned out not to be allowed to vacuum the table."""
        self.vacuums = 0
        """How many VACUUMs this service ran."""
        self._wait = interval

    def run(
        self,
        connection: psycopg.Connection[Any],
        client: QueueClient,
        report: RoundReport,
        *,
        eager: bool = False,
    ) -> float:
        """Look at the table, vacuum it if due; the next look comes after ``interval``
        seconds, or longer (see above), or never once the role may not vacuum."""
        self.vacuum_if_due(connection)
        return self._wait if self.enabled else math.inf

    def vacuum_if_due(self, connection: psycopg.Connection[Any]) -> bool:
        """Vacuum the jobs table now if it has ``threshold`` dead rows or more, this role may,
        and no other session is vacuuming it. ``connection`` must be in autocommit mode.

        Returns:
            True when it ran a VACUUM.
        """
        state = executor.run(connection, protocol.operations.vacuum_state(), given_to=None)
        if not state.may_vacuum:
            self.enabled = False
            logger.info(
                "vacuum service off: this role may not vacuum postkit_queue.jobs (autovacuum "
                "still does)",
                extra={"event": "vacuum_off"},
            )
            return False
        if state.dead_rows < self.threshold or not executor.run(
            connection, protocol.operations.vacuum_lock(), given_to=None
        ):
            self._wait = self.interval
            return False
        try:
            started = time.monotonic()
            executor.run(connection, protocol.operations.vacuum_jobs(), given_to=None)
            took = time.monotonic() - started
        finally:
            executor.run(connection, protocol.operations.vacuum_unlock(), given_to=None)
        self.vacuums += 1
        self._wait = max(self.interval, took / _MAX_SHARE_OF_TIME)
        logger.debug(
            "vacuumed postkit_queue.jobs (%d dead rows) in %.0f ms",
            state.dead_rows,
            took * 1000,
            extra={"event": "vacuum", "duration_ms": round(took * 1000, 3)},
        )
        return True
