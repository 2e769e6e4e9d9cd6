"""What the chaos tests share: the test's own connection, which retries through the server's
crashes, and worker positions, each a real process restarted whenever it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

DB_DEADLINE = 60.0
"""Seconds the test keeps retrying its own statements while the server is down or restarting."""


# ---------------------------------------------------------------------------------------------
# The database, as the test sees it: every statement retried while the server is away.
# ---------------------------------------------------------------------------------------------


class Database:
    """The test's own connection. Each call is retried, reconnecting, until the server answers
    or DB_DEADLINE passes: the test crashes the server on purpose."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._connection: psycopg.Connection[Any] | None = None

    def call(self, action: Callable[[psycopg.Connection[Any]], T]) -> T:
        deadline = time.monotonic() + DB_DEADLINE
        while True:
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
                return action(self._connection)
            except psycopg.OperationalError:
                if self._connection is not None:
                    self._connection.close()
                self._connection = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # the server is away (crashed on purpose): try again shortly

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.call(lambda connection: connection.execute(query, params).fetchall())

    def value(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        rows = self.rows(query, params)
        return rows[0][0]

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


# ---------------------------------------------------------------------------------------------
# Worker processes.
# ---------------------------------------------------------------------------------------------


class WorkerSlot:
    """One worker position: a process, restarted under a new worker_id whenever it dies."""

    def __init__(
        self,
        index: int,
        dsn: str,
        directory: Path,
        *,
        script: Path,
        namespace: str,
        visibility: float,
        concurrency: int,
    ) -> None:
        self.index = index
        self.script = script
        self.namespace = namespace
        self.visibility = visibility
        self.concurrency = concurrency
        self.name = f"w{index}"
        self.application_name = f"chaos-{self.name}"
        self.dsn = psycopg.conninfo.make_conninfo(dsn, application_name=self.application_name)
        self.log_path = directory / f"{self.name}.log"
        self.run_log = directory / f"{self.name}.runs"
        self.incarnation = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped_until: float | None = None

    @property
    def worker_id(self) -> str:
        return f"{self.name}.{self.incarnation}"

    def start(self) -> None:
        self.incarnation += 1
        env = {
            **os.environ,
            "CHAOS_DSN": self.dsn,
            "CHAOS_NAMESPACE": self.namespace,
            "CHAOS_WORKER_ID": self.worker_id,
            "CHAOS_RUN_LOG": str(self.run_log),
            "CHAOS_VISIBILITY": str(self.visibility),
            "CHAOS_CONCURRENCY": str(self.concurrency),
        }
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(self.script)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        """Send ``signum`` (nothing if the process has exited and been waited for)."""
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process is None:
            return
        if self.stopped_until is not None:
            self.signal(signal.SIGCONT)
            self.stopped_until = None
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)

    @property
    def ready(self) -> bool:
        """Has this incarnation said it handles SIGTERM?"""
        try:
            return f"{self.worker_id} starting" in self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return False

    def ready_or_gone(self) -> bool:
        """Has this incarnation said it handles SIGTERM, or exited?"""
        return self.ready or not self.alive

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


__all__ = ["DB_DEADLINE", "Database", "WorkerSlot"]
