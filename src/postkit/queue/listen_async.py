"""Waiting for work without polling: LISTEN/NOTIFY on a dedicated connection.

Every push (and every retry, rescue or release) notifies its queue's channel when its
transaction commits. A listener holds one autocommit connection that LISTENs on the channels of
its queues, and the listener's ``wait_for_work`` blocks until a notification arrives, the
earliest delayed job falls due, or the timeout passes. The timeout is only a fallback poll: a
missed notification costs latency, never a job.

listen_async.py is the source of both listeners: the synchronous one in listen.py is generated
from it by tools/async_to_sync.py.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar

import psycopg

from postkit.queue import executor, protocol

T = TypeVar("T")


class AsyncWorkListener:
    """Waits until a job may be ready in some queues of one namespace.

    Use :meth:`connect` to open the dedicated connection, or pass an open autocommit
    connection that is used for nothing else. Close it with :meth:`close` or ``with``.
    """

    def __init__(self, connection: psycopg.AsyncConnection[Any], namespace: str, queues: list[str]):
        self._connection = connection
        self._namespace = namespace
        self._queues = list(queues)
        self._listening = False
        self.notifications = 0
        """How many notifications :meth:`wait_for_work` has returned on (a due job or the
        timeout is none): a worker counts its wake-ups with it."""

    @classmethod
    async def connect(cls, dsn: str, namespace: str, queues: list[str]) -> AsyncWorkListener:
        """Open a dedicated autocommit connection to ``dsn`` and LISTEN on ``queues``."""
        connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        listener = cls(connection, namespace, queues)
        await listener.listen()
        return listener

    @property
    def connection(self) -> psycopg.AsyncConnection[Any]:
        """The dedicated autocommit connection. Between waits its owner may run statements on
        it (a worker claims there the job a notification announced, on a backend that is awake
        already); notifications that arrive meanwhile are kept for the next wait."""
        return self._connection

    async def _run(self, call: protocol.Call[T]) -> T:
        # The listener's connection is its own: closed, it is a lost connection.
        return await executor.run_async(self._connection, call, given_to=None)

    @property
    def wake_channel(self) -> str:
        """A channel of this listener's alone: ``SELECT pg_notify(channel, '')`` from any
        connection makes its current or next :meth:`wait_for_work` return at once (a worker
        stopping uses it to end its listener's wait without waiting out the timeout)."""
        return f"postkit_wake_{self._connection.info.backend_pid}"

    async def listen(self) -> None:
        """LISTEN on the queues' channels and the wake channel. Notifications sent from now
        on are not missed."""
        if self._listening:
            return
        channels = await self._run(protocol.channels(self._namespace, self._queues))
        for channel in [*channels, self.wake_channel]:
            await self._run(protocol.listen(channel))
        self._listening = True

    async def wait_for_work(self, timeout: float = 5.0) -> bool:
        """Block until a job may be ready, or ``timeout`` seconds pass.

        Returns at once when a job of these queues is already due. Otherwise waits for a
        notification, but no longer than until the earliest delayed job falls due.

        Returns:
            True when woken because a job may be ready (a notification, or a due job); False
            when the timeout passed with neither. Either way the caller should pull: a
            notification can be missed (a reconnect, a NOTIFY from a session that disabled
            them), and the timeout is the fallback poll that still finds the job.
        """
        await self.listen()
        due = await self._run(protocol.next_run_at(self._namespace, self._queues))
        if due.seconds is not None and due.seconds <= 0:
            return True
        wait = timeout if due.seconds is None else min(timeout, due.seconds)
        async for _ in self._connection.notifies(timeout=max(wait, 0.0), stop_after=1):
            self.notifications += 1
            return True
        return wait < timeout

    async def close(self) -> None:
        await self._connection.close()

    async def __aenter__(self) -> AsyncWorkListener:
        await self.listen()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
