# Generated from listen_async.py by tools/async_to_sync.py: edit that file, not this one.
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


class WorkListener:
    """Waits until a job may be ready in some queues of one namespace.

    Use :meth:`connect` to open the dedicated connection, or pass an open autocommit
    connection that is used for nothing else. Close it with :meth:`close` or ``with``.
    """

    def __init__(self, connection: psycopg.Connection[Any], namespace: str, queues: list[str]):
        self._connection = connection
        self._namespace = namespace
        self._queues = list(queues)
        self._listening = False
        self.notifications = 0
        """How many notifications :meth:`wait_for_work` has returned on (a due job or the
        timeout is none): a worker counts its wake-ups with it."""

    @classmethod
    def connect(cls, dsn: str, namespace: str, queues: list[str]) -> WorkListener:
        """Open a dedicated autocommit connection to ``dsn`` and LISTEN on ``queues``."""
        connection = psycopg.Connection.connect(dsn, autocommit=True)
        listener = cls(connection, namespace, queues)
        listener.listen()
        return listener

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """The dedicated autocommit connection. Between waits its owner may run statements on
        it (a worker claims there the job a notification announced, on a backend that is awake
        already); notifications that arrive meanwhile are kept for the next wait."""
        return self._connection

    def _run(self, call: protocol.Call[T]) -> T:
        # The listener's connection is its own: closed, it is a lost connection.
        return executor.run(self._connection, call, given_to=None)

    @property
    def wake_channel(self) -> str:
        """A channel of this listener's alone: ``SELECT pg_notify(channel, '')`` from any
        connection makes its current or next :meth:`wait_for_work` return at once (a worker
        stopping uses it to end its listener's wait without waiting out the timeout)."""
        return f"postkit_wake_{self._connection.info.backend_pid}"

    def listen(self) -> None:
        """LISTEN on the queues' channels and the wake channel. Notifications sent from now
        on are not missed."""
        if self._listening:
            return
        channels = self._run(protocol.channels(self._namespace, self._queues))
        for channel in [*channels, self.wake_channel]:
            self._run(protocol.listen(channel))
        self._listening = True

    def wait_for_work(self, timeout: float = 5.0) -> bool:
        """Block until a job may be ready, or ``timeout`` seconds pass.

        Returns at once when a job of these queues is already due. Otherwise waits for a
        notification, but no longer than until the earliest delayed job falls due.

        Returns:
            True when woken because a job may be ready (a notification, or a due job); False
            when the timeout passed with neither. Either way the caller should pull: a
            notification can be missed (a reconnect, a NOTIFY from a session that disabled
            them), and the timeout is the fallback poll that still finds the job.
        """
        self.listen()
        due = self._run(protocol.next_run_at(self._namespace, self._queues))
        if due.seconds is not None and due.seconds <= 0:
            return True
        wait = timeout if due.seconds is None else min(timeout, due.seconds)
        for _ in self._connection.notifies(timeout=max(wait, 0.0), stop_after=1):
            self.notifications += 1
            return True
        return wait < timeout

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> WorkListener:
        self.listen()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
