"""The maintenance runner: a few services, on one connection of their own, off the claim path.

The worker runs two runners on threads of their own (see ``postkit.worker.runtime``), and
``postkit tick`` runs one in its process: the same services either way. A runner runs each
service when it falls due and, after a database error, tries again with backoff on a new
connection. Any other error (a role that may not run a duty, a missing schema) ends it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import psycopg

from postkit.queue import QueueClient
from postkit.worker.backoff import Backoff
from postkit.worker.maintenance.prune import Prune
from postkit.worker.maintenance.registry import Registry
from postkit.worker.maintenance.report import RoundReport
from postkit.worker.maintenance.rescue import Rescue
from postkit.worker.maintenance.schedules import Schedules
from postkit.worker.maintenance.service import Service
from postkit.worker.pool import WorkerClient
from postkit.worker.server_guard import ServerGuard
from postkit.worker.threads import start_thread

logger = logging.getLogger("postkit.worker")

_STOP_TIMEOUT = 5
"""Seconds the services' stop waits for a connection, and then for its statements."""

OnError = Callable[[psycopg.Error, float], None]
"""Called with a database error and the seconds until the next try."""


def _log_error(error: psycopg.Error, delay: float) -> None:
    logger.warning(
        "maintenance: database error (%s); next try in %.1fs",
        error,
        delay,
        extra={"event": "db_error"},
    )


def _cut(connection: psycopg.Connection[Any]) -> None:
    """End the statement ``connection`` waits on: cancel it, then shut the socket down, which
    fails the wait at once. The cancel alone stops a server waiting on a lock, but PgBouncer
    ignores one for a client that waits for a server (the database is down)."""
    with contextlib.suppress(psycopg.Error):
        connection.cancel_safe(timeout=1.0)
    # psycopg.Error: the connection closed meanwhile (its statement ended on its own).
    with (
        contextlib.suppress(OSError, psycopg.Error),
        socket.fromfd(connection.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM) as duplicate,
    ):
        duplicate.shutdown(socket.SHUT_RDWR)


class Maintenance:
    """Runs ``services`` for ``namespace`` on one autocommit connection to ``dsn``."""

    def __init__(
        self,
        dsn: str,
        namespace: str,
        services: Sequence[Service],
        *,
        backoff: Backoff,
        pooler: bool = False,
        asynchronous_commit: bool = False,
        guard: ServerGuard | None = None,
    ) -> None:
        """
        Args:
            guard: checks the server of each connection this runner opens, and says when a
                failover makes the open one a former primary's (server_guard.py).
            services: run in this order when several fall due at once.
            backoff: the waits between tries after database errors.
            pooler: ``dsn`` leads to a pooler in transaction mode: no prepared statements.
            asynchronous_commit: each call commits without waiting for the WAL flush (the
                worker's bookkeeping; a lost rescue or prune is done again at the next run),
                a setting of its own transaction (:class:`WorkerClient`).
        """
        self.dsn = dsn
        self.namespace = namespace
        self.services = list(services)
        self.backoff = backoff
        self.pooler = pooler
        self.asynchronous_commit = asynchronous_commit
        self._lock = threading.Lock()
        self._connection: psycopg.Connection[Any] | None = None
        self._due: list[float] | None = None  # when each service falls due (monotonic)
        self.guard = guard
        self._generation = 0  # the guard's, when the runner's connection was opened

    @classmethod
    def for_tick(cls, dsn: str, namespace: str, *, interval: float) -> Maintenance:
        """The services of ``postkit tick``: rescue, schedules and retention, each about every
        ``interval`` seconds (jittered by up to a quarter), schedules also when one falls due,
        and the registry, as a ticker. A lost connection is retried after 2, 4, 8 ... times
        ``interval``, at most a minute (and 64 times ``interval``) apart."""
        ticker = f"tick-{socket.gethostname()[:100]}-{os.getpid()}"
        return cls(
            dsn,
            namespace,
            [
                Registry(ticker, kind="ticker", queues=[], concurrency=0, interval=interval),
                Rescue(interval=interval, jitter=0.25),
                Schedules(interval=interval, jitter=0.25),
                Prune(interval=interval, jitter=0.25),
            ],
            backoff=Backoff(base=2 * interval, cap=min(60.0, 64 * interval), jitter=0.5),
        )

    def run_once(self) -> RoundReport:
        """Run every service once, now, in order, each step committed on its own, then stop
        each (a round leaves no registration behind, even when a step fails); on a connection
        opened for it and closed afterwards.

        Raises:
            psycopg.Error: the database could not be reached, or failed a step.
            postkit.errors.PostkitError: a step was refused (a missing privilege or schema).
        """
        report = RoundReport()
        connection = self._connect()
        try:
            client = self._client(connection)
            try:
                for service in self.services:
                    service.run(connection, client, report, eager=True)
            except BaseException:
                # One round leaves nothing behind (the registry's row) even when a step fails;
                # the step's error is the one to raise.
                with contextlib.suppress(psycopg.Error):
                    for service in self.services:
                        service.stop(client)
                raise
            for service in self.services:
                service.stop(client)
        finally:
            self._forget(connection)
        report.at = datetime.now(timezone.utc)
        return report

    def run_forever(
        self,
        stop: threading.Event,
        report: Callable[[RoundReport], None] | None = None,
        *,
        on_error: OnError = _log_error,
    ) -> None:
        """Run each service when it falls due (all of them at once at the start) until
        ``stop`` is set. After each round that ran a service, call ``report`` with what it
        did. A database error calls ``on_error`` and is retried with backoff on a new
        connection. Setting ``stop`` also cancels the statement a round is waiting on (a lock
        an upgrade holds, a pooler whose server is gone), so the stop never waits on it.

        Raises:
            postkit.errors.PostkitError: a step was refused (a missing privilege or schema).
        """
        connection: psycopg.Connection[Any] | None = None
        ended = threading.Event()

        def interrupt_on_stop() -> None:
            # A statement blocks its thread, which cannot look at the stop meanwhile.
            while not stop.wait(0.5):
                if ended.is_set():
                    return
            if not ended.is_set():
                self.interrupt()

        start_thread(interrupt_on_stop, "maintenance-stop")
        try:
            while not stop.is_set():
                try:
                    if (
                        connection is not None
                        and self.guard is not None
                        and self._generation != self.guard.generation
                    ):
                        # A failover: the connection leads to the former primary.
                        self._forget(connection)
                        connection = None
                    if connection is None:
                        connection = self._connect()
                    wait = self.run_due(connection, report)
                    self.backoff.reset()
                except psycopg.Error as exc:
                    if connection is not None:
                        self._forget(connection)
                        connection = None
                    if stop.is_set():
                        break  # interrupted by the stop
                    delay = self.backoff.failure()
                    on_error(exc, delay)
                    stop.wait(delay)
                    continue
                stop.wait(None if wait == math.inf else wait)
        finally:
            ended.set()
            if connection is not None:
                self._forget(connection)
        self.stop_services()

    def run_due(
        self,
        connection: psycopg.Connection[Any],
        report: Callable[[RoundReport], None] | None = None,
    ) -> float:
        """Run each service that is due (all of them at the first call), in order, on
        ``connection``: this runner's own, or one its caller lends it between uses of its own
        (the worker's listener). Call ``report`` with what the round did, if anything. Returns
        the seconds until the next service falls due.

        Raises:
            psycopg.Error: the connection failed; the services that did not run stay due.
            postkit.errors.PostkitError: a step was refused (a missing privilege or schema).
        """
        now = time.monotonic()
        if self._due is None:
            self._due = [now] * len(self.services)
        due = self._due
        ready = [index for index, at in enumerate(due) if at <= now]
        if ready:
            done = RoundReport()
            try:
                client = self._client(connection)
                for index in ready:
                    due[index] = time.monotonic() + self.services[index].run(
                        connection, client, done
                    )
            finally:
                done.at = datetime.now(timezone.utc)
                if report is not None and done.anything:
                    report(done)
        return max(min(due, default=math.inf) - time.monotonic(), 0.0)

    def stop_services(self) -> None:
        """Let each service undo what running left (the registry deregisters), on a connection
        :meth:`interrupt` does not cancel: the stop that ended the runner must not cut this
        short. A database error is logged; the runner stops all the same. :meth:`run_forever`
        calls it as it returns; whoever lends :meth:`run_due` its connection calls it after
        the last round."""
        stopping = [s for s in self.services if type(s).stop is not Service.stop]
        if not stopping:
            return
        try:
            # Bounded: a process stopping while the database is unreachable must still stop.
            # The connect timeout bounds reaching the server; the statements get a deadline
            # of their own, since a pooler accepts the connection at once and then holds each
            # statement until a server comes back, and a lock (an upgrade's) holds it too.
            with self._open(connect_timeout=_STOP_TIMEOUT) as connection:
                deadline = threading.Timer(_STOP_TIMEOUT, _cut, (connection,))
                deadline.start()
                try:
                    client = self._client(connection)
                    for service in stopping:
                        service.stop(client)
                finally:
                    deadline.cancel()
        except psycopg.Error as exc:
            logger.warning(
                "maintenance: could not stop cleanly (%s)", exc, extra={"event": "db_error"}
            )

    def interrupt(self) -> None:
        """End the statement the runner is waiting on, if any, and with it the runner's
        connection: after ``stop`` is set, a step stuck behind a lock, or held by a pooler
        whose server is gone, must not hold the runner. Safe from any thread."""
        # Under the lock: _forget closes the connection only after the cut, so the socket
        # the cut shuts down is still this connection's, not a descriptor reused since.
        with self._lock:
            if self._connection is not None:
                _cut(self._connection)

    def _open(self, **options: Any) -> psycopg.Connection[Any]:
        connection: psycopg.Connection[Any] = psycopg.connect(
            self.dsn,
            autocommit=True,
            **({"prepare_threshold": None} if self.pooler else {}),
            **options,
        )
        return connection

    def _client(self, connection: psycopg.Connection[Any]) -> QueueClient:
        kind = WorkerClient if self.asynchronous_commit else QueueClient
        return kind(connection.cursor(), namespace=self.namespace)

    def _connect(self) -> psycopg.Connection[Any]:
        connection = self._open()
        if self.guard is not None:
            self.guard.check(connection)
            self._generation = self.guard.generation
        with self._lock:
            self._connection = connection
        return connection

    def _forget(self, connection: psycopg.Connection[Any]) -> None:
        with self._lock:
            self._connection = None
        with contextlib.suppress(psycopg.Error):
            connection.close()


__all__ = ["Maintenance", "OnError"]
