"""The worker's pool of connections: claims, settles, heartbeats and transactional handlers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, TypeVar

import psycopg
import psycopg_pool

from postkit.queue import QueueClient, protocol
from postkit.worker.server_guard import ServerGuard

T = TypeVar("T")


class WorkerClient(QueueClient):
    """The worker's client: each of its calls is a statement in autocommit, its own
    transaction, and commits without waiting for the WAL flush. A claim or ack lost in a crash
    is a redelivery, which at-least-once delivery allows. The setting is the transaction's, so
    a connection keeps no trace of it: a transactional handler's transaction, on the same
    pooled connection, commits durably (it uses a plain :class:`QueueClient`)."""

    def _run(self, call: protocol.Call[T]) -> T:
        return super()._run(call.committed_asynchronously())


class Connections(Protocol):
    """Where a worker's handlers and settles run their statements: a :class:`WorkerPool` of
    autocommit connections in a worker, the caller's own transaction in
    ``postkit.testing.drain`` (each transaction asked for is a savepoint of it there)."""

    def run(self, action: Callable[[QueueClient], T]) -> T:
        """Run ``action`` with a client of the worker's namespace."""

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection for a transaction of the caller's (``connection.transaction()``)."""

    def client_on(self, connection: psycopg.Connection[Any]) -> QueueClient:
        """A client of the worker's namespace on ``connection``."""

    def resize(self, change: int) -> None:
        """Grow (or shrink back) by ``change`` connections."""


POOL_MAX_IDLE = 10.0
"""Seconds a pooled connection stays open unused before the pool closes it (one at a time,
one check every such period)."""


class WorkerPool:
    """A pool of autocommit connections, each call on one of them with a :class:`QueueClient`
    of the worker's namespace."""

    def __init__(
        self,
        dsn: str,
        *,
        namespace: str,
        max_size: int,
        pooler: bool,
        name: str,
        guard: ServerGuard | None = None,
    ) -> None:
        self.namespace = namespace
        self._resizing = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            psycopg_pool.ConnectionPool(
                dsn,
                # Opened on demand and closed after a while unused: an idle worker holds its
                # listener's connection only (docs/operations.md counts them).
                min_size=0,
                max_size=max_size,
                max_idle=POOL_MAX_IDLE,
                # Autocommit: each of the worker's calls is one statement, hence one
                # transaction and one round trip; a transactional handler opens a transaction
                # on the connection it takes (see connection).
                kwargs=(
                    # No session state through a pooler: no server-side prepared statements.
                    {"autocommit": True, "prepare_threshold": None}
                    if pooler
                    else {"autocommit": True}
                ),
                # While the server is away the pool's own reconnect attempts back off (1 s,
                # 2 s, 4 s, ...), so that after a long outage its next attempt could come many
                # seconds after the server is back. An attempt gives up after a second
                # instead, and a caller waits at most two for a connection: the worker's own
                # retries (at most a second apart) start fresh attempts.
                reconnect_timeout=1.0,
                timeout=2.0,
                # Each new connection's server is checked before its first use: a standby or a
                # former primary is refused (server_guard.py).
                configure=None if guard is None else guard.check,
                open=True,
                name=name,
            )
        )

    def run(self, action: Callable[[QueueClient], T]) -> T:
        """Run ``action`` on a pooled connection: each statement commits on its own."""
        with self._pool.connection() as connection:
            return action(self.client_on(connection))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for the caller's own transaction."""
        with self._pool.connection() as connection:
            yield connection

    def client_on(self, connection: psycopg.Connection[Any]) -> QueueClient:
        """A :class:`WorkerClient` on ``connection``, which must be in autocommit."""
        return WorkerClient(connection.cursor(), namespace=self.namespace)

    def resize(self, change: int) -> None:
        """Grow (or shrink back) by ``change`` connections: a handler past its timeout keeps
        its connection until it returns."""
        with self._resizing:
            self._pool.resize(1, self._pool.max_size + change)

    def drain(self) -> None:
        """Replace every connection: those in use as they come back (a failover moved the
        primary, server_guard.py)."""
        self._pool.drain()

    def check(self) -> None:
        """Drop every pooled connection that died (a server restart kills them all), so the
        next call gets a live one instead of meeting the dead ones one retry at a time."""
        self._pool.check()

    def close(self) -> None:
        self._pool.close(timeout=5)


__all__ = ["POOL_MAX_IDLE", "Connections", "WorkerClient", "WorkerPool"]
