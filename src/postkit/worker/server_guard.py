"""Which server a worker works on: a primary, of one cluster, on the newest timeline it saw.

A failover moves the primary: a standby is promoted and starts a new timeline, the number that
PostgreSQL gives each history of a cluster (a promotion adds one). Every connection the worker
opens (its pool's, its listener's, its housekeeping's) is checked before its first use, in one
query: the server's system identifier (the cluster's, shared by its standbys), whether it is in
recovery, and the timeline of its current WAL position. The worker refuses:

- a server in recovery: a standby, which can serve no claim (it would fail every write);
- a server of another cluster than the one it started on (another database behind the same
  name);
- a server on an older timeline than one the worker has worked on: a former primary restarted
  after its standby was promoted, which would otherwise take claims and acks beside the new one
  (a multi-host DSN with ``target_session_attrs=read-write`` accepts it, as it accepts any
  writable server).

A refused connection is closed and fails as a lost one does, so the worker retries with
backoff and logs why, once per reason. A newer timeline of the same cluster is a failover the
worker follows: it moves to it, and every connection still open to the old primary is dropped
(the pool's at their next return, the listener's and the housekeeping's at their next use), so
that no process works on two servers at once. docs/failover.md says what each replication
mode keeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

logger = logging.getLogger("postkit.worker")

# One query, readable by any role: pg_control_system() and the WAL functions are PUBLIC. A
# standby has no current WAL position to read.
_IDENTITY = (
    "SELECT s.system_identifier, pg_catalog.pg_is_in_recovery(), "
    "CASE WHEN NOT pg_catalog.pg_is_in_recovery() "
    "THEN pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()) END "
    "FROM pg_catalog.pg_control_system() s"
)


class ServerRefusedError(psycopg.OperationalError):
    """The worker will not work on this server (see the module docstring); retried like a lost
    connection."""


@dataclass(frozen=True)
class ServerIdentity:
    """A primary as the guard knows it."""

    system_identifier: int
    timeline: int


class ServerGuard:
    """Checks each connection of one worker process. See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.identity: ServerIdentity | None = None
        """The primary the worker works on; None before its first connection."""
        self.generation = 0
        """Counts the failovers the worker followed: a connection opened in an older
        generation goes to a former primary."""
        self._on_failover: list[Callable[[], None]] = []
        self.disabled = False
        """The server hides what the guard reads (a managed service may): every server is
        accepted."""
        self._said: set[str] = set()

    def on_failover(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the thread that met the new primary) at each failover."""
        self._on_failover.append(callback)

    def check(self, connection: psycopg.Connection[Any]) -> None:
        """Accept ``connection``'s server, or close the connection and raise.

        Raises:
            ServerRefusedError: a standby, another cluster, or a former primary.
            psycopg.Error: the query failed (the connection is lost).
        """
        if self.disabled:
            return
        try:
            row = connection.execute(_IDENTITY).fetchone()
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction) as exc:
            # A managed service that hides the control functions: no guard rather than no
            # worker.
            self.disabled = True
            logger.warning(
                "cannot tell a standby or a former primary from the primary (%s): the worker "
                "trusts the DSN to lead to the primary",
                exc.diag.message_primary or exc,
                extra={"event": "server_guard_off"},
            )
            return
        assert row is not None
        system_identifier, in_recovery, wal_file = row
        where = _where(connection)
        if in_recovery:
            self._refuse(connection, f"{where} is a standby (in recovery): waiting for a primary")
        timeline = int(wal_file[:8], 16)
        followed = False
        with self._lock:
            known = self.identity
            if known is not None and system_identifier != known.system_identifier:
                reason = (
                    f"{where} belongs to another cluster (system identifier "
                    f"{system_identifier}, not {known.system_identifier})"
                )
            elif known is not None and timeline < known.timeline:
                reason = (
                    f"{where} is on timeline {timeline}, older than timeline {known.timeline} "
                    "this worker works on: a former primary, restarted after a failover; fence "
                    "it, or take it out of the DSN"
                )
            else:
                reason = ""
                if known is not None and timeline > known.timeline:
                    self.generation += 1
                    followed = True
                self.identity = ServerIdentity(system_identifier, timeline)
        if reason:
            self._refuse(connection, reason)
        if followed:
            logger.warning(
                "failover: %s is the primary now (timeline %d, was %d); dropping every "
                "connection to the former one",
                where,
                timeline,
                known.timeline if known is not None else 0,
                extra={"event": "failover", "timeline": timeline},
            )
            for callback in self._on_failover:
                callback()

    def _refuse(self, connection: psycopg.Connection[Any], reason: str) -> None:
        with self._lock:
            first = reason not in self._said
            self._said.add(reason)
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "refusing the server: %s",
            reason,
            extra={"event": "server_refused"},
        )
        connection.close()
        raise ServerRefusedError(reason)


def _where(connection: psycopg.Connection[Any]) -> str:
    info = connection.info
    return f"{info.host}:{info.port}"


__all__ = ["ServerGuard", "ServerIdentity", "ServerRefusedError"]
