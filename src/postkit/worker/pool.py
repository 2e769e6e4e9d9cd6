"""The worker's pool of connections: claims, settles, heartbeats and transactional handlers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from postkit.queue import QueueClient, executor, protocol

T = TypeVar("T")


def asynchronous_commit(connection: psycopg.Connection[Any]) -> None:
    """The worker's bookkeeping commits without waiting for the WAL flush: a claim or ack lost
    in a crash is a redelivery, which at-least-once delivery allows."""
    executor.run(connection, protocol.asynchronous_commit(), given_to=None)


class WorkerPool:
    """A pool of autocommit connections, each call on one of them with a :class:`QueueClient`
    of the worker's namespace."""

    def __init__(self, dsn: str, *, namespace: str, max_size: int, pooler: bool, name: str) -> None:
        self.namespace = namespace
        self._resizing = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            psycopg_pool.ConnectionPool(
                dsn,
                min_size=1,
                max_size=max_size,
                # Autocommit: each of the worker's calls is one statement, hence one
                # transaction and one round trip; a transactional handler opens a transaction
                # on the connection it takes (see connection).
                kwargs=(
                    # No session state through a pooler: no server-side prepared statements.
                    {"autocommit": True, "prepare_threshold": None}
                    if pooler
                    else {"autocommit": True}
                ),
                configure=None if pooler else asynchronous_commit,
                # While the server is away the pool's own reconnect attempts back off (1 s,
                # 2 s, 4 s, ...), so that after a long outage its next attempt could come many
                # seconds after the server is back. An attempt gives up after a second
                # instead, and a caller waits at most two for a connection: the worker's own
                # retries (at most a second apart) start fresh attempts.
                reconnect_timeout=1.0,
                timeout=2.0,
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
        return QueueClient(connection.cursor(), namespace=self.namespace)

    def resize(self, change: int) -> None:
        """Grow (or shrink back) by ``change`` connections: a handler past its timeout keeps
        its connection until it returns."""
        with self._resizing:
            self._pool.resize(1, self._pool.max_size + change)

    def check(self) -> None:
        """Drop every pooled connection that died (a server restart kills them all), so the
        next call gets a live one instead of meeting the dead ones one retry at a time."""
        self._pool.check()

    def close(self) -> None:
        self._pool.close(timeout=5)


__all__ = ["WorkerPool", "asynchronous_commit"]
