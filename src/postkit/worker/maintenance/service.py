"""A maintenance service: one duty of the queue's housekeeping, run again and again.

A service does its duty once per :meth:`Service.run` and says how long until it wants to run
again: its ``interval``, spread by ``jitter`` so that many workers do not run it in step, or
less when the duty asks for it (a full batch runs again at once; a schedule due sooner). The
:class:`~postkit.worker.maintenance.runner.Maintenance` runner calls it, on a connection of
its own, until its stop event is set.
"""

from __future__ import annotations

import abc
import random
from typing import Any

import psycopg

from postkit.queue import QueueClient
from postkit.worker.maintenance.report import RoundReport


class Service(abc.ABC):
    """One maintenance duty. See the module docstring."""

    def __init__(self, *, interval: float, jitter: float = 0.0) -> None:
        """
        Args:
            interval: mean seconds between two runs.
            jitter: each wait is drawn from ``interval * (1 - jitter)`` to
                ``interval * (1 + jitter)``.

        Raises:
            ValueError: ``interval`` is not positive or ``jitter`` not in [0, 1).
        """
        if not interval > 0 or not 0 <= jitter < 1:
            raise ValueError("interval must be positive and jitter in [0, 1)")
        self.interval = interval
        self.jitter = jitter

    def next_wait(self) -> float:
        """Seconds until the next run, jittered."""
        return self.interval * random.uniform(1 - self.jitter, 1 + self.jitter)

    @abc.abstractmethod
    def run(
        self,
        connection: psycopg.Connection[Any],
        client: QueueClient,
        report: RoundReport,
        *,
        eager: bool = False,
    ) -> float:
        """Do the duty once, on ``connection`` (autocommit; ``client`` is a client of the
        namespace on it), and add what it did to ``report``. With ``eager`` do it even where
        an earlier look said nothing would be due.

        Returns:
            Seconds until the service wants to run again; ``math.inf``: never.

        Raises:
            psycopg.Error: a database error; the runner retries with backoff.
        """

    def stop(self, client: QueueClient) -> None:  # noqa: B027 - most services have nothing to undo
        """Undo what running left behind, once the runner stops (``client`` is on a connection
        of its own). Nothing, unless the service says otherwise.

        Raises:
            psycopg.Error: a database error; the runner logs it and stops all the same.
        """


__all__ = ["Service"]
