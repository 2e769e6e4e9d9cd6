"""The base of the queue client's parts: the caller's cursor, the namespace, and how a call runs.

calls_async.py is the source of both: :class:`AsyncCalls` is written here, and calls.py
(``Calls``) is generated from it by tools/async_to_sync.py. Each call is one statement in the
caller's transaction, run by :mod:`postkit.queue.executor`; the client never commits.
"""

from __future__ import annotations

from typing import Any, TypeVar

from postkit.queue import executor, protocol

T = TypeVar("T")


class AsyncCalls:
    """What every part of the queue client shares: the caller's cursor and the namespace the
    client was given, and :meth:`_run`, which runs one call on that cursor."""

    def __init__(self, cursor: Any, namespace: str = "default") -> None:
        """Wrap ``cursor``. ``namespace`` keeps this application's jobs apart from every other
        application using the same installation; each call reads and writes only its own."""
        self._cursor = cursor
        self._namespace = namespace

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def cursor(self) -> Any:
        return self._cursor

    async def _run(self, call: protocol.Call[T]) -> T:
        return await executor.run_async(self._cursor, call, given_to="QueueClient")
