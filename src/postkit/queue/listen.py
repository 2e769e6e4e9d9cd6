# Generated from listen_async.py by tools/async_to_sync.py: edit that file, not this one.
"""Waiting without polling: for work, and for a job's result, with LISTEN/NOTIFY.

A work listener holds one autocommit connection that LISTENs on the channels of its queues.
Before each wait it requests a wake-up (``postkit_queue.request_wakeup``), and the first push
(or retry, rescue, release) that commits after the request notifies the queue's channel; the
pushes of a queue no worker waits on notify nobody, so that their commits never queue for
NOTIFY's database-wide lock. The listener's ``wait_for_work`` blocks until a notification
arrives, the earliest delayed job falls due, or the timeout passes, and looks again for due
jobs soon after a new request (see its docstring). The timeout is only a fallback poll: a
missed notification costs latency, never a job.

In a queue that keeps results (``retain_results``), every completed or dead-lettered job is
announced on its namespace's results channel, the job ids as payload. A result listener LISTENs
there, and its ``wait_for_result`` reads the job's result, then waits for a notification that
names the job and reads it again, until the job has finished or the timeout passes.

listen_async.py is the source of both listeners: the synchronous one in listen.py is generated
from it by tools/async_to_sync.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import psycopg

from postkit import errors
from postkit.queue import executor, protocol
from postkit.queue.protocol import checks as check
from postkit.queue.records import UNFINISHED_STATES, JobResult

T = TypeVar("T")

FIRST_RECHECK = 0.002
"""After a new wake-up request, a waiting worker looks for due jobs again after this many
seconds, then after twice as long, and so on (see ``WorkListener.wait_for_work``)."""

CANCELLED = "cancelled "
"""What a running job's cancel (``postkit_queue.cancel``) sends on its queue's channel, followed
by the job's id, so that the worker holding it learns of it at once."""

RESULT_POLL_INTERVAL = 1.0
"""How long a wait for a result goes at most without reading it again (seconds): a result
whose announcement never reaches the listener (a session that turned notifications off, a
settle delegated to a Citus worker node: docs/scaling.md) costs at most this much latency."""


class WorkListener:
    """Waits until a job may be ready in some queues of one namespace.

    Use :meth:`connect` to open the dedicated connection, or pass an open autocommit
    connection that is used for nothing else. Close it with :meth:`close` or ``with``.

    A running job cancelled by an operator is announced on its queue's channel too: the
    listener calls ``on_cancel`` with its id (from the thread or task that waits or polls), and
    does not count it as work. The announcement is a hint, which anyone who may send to the
    channel can forge: the worker checks the job's claim before it acts on it.
    """

    def __init__(
        self,
        connection: psycopg.Connection[Any],
        namespace: str,
        queues: list[str],
        *,
        on_cancel: Callable[[int], None] | None = None,
    ):
        self._connection = connection
        self._namespace = namespace
        self._queues = list(queues)
        self._on_cancel = on_cancel
        self._listening = False
        self.notifications = 0
        """How many notifications :meth:`wait_for_work` has returned on (a due job or the
        timeout is none): a worker counts its wake-ups with it."""

    @classmethod
    def connect(
        cls,
        dsn: str,
        namespace: str,
        queues: list[str],
        *,
        on_cancel: Callable[[int], None] | None = None,
    ) -> WorkListener:
        """Open a dedicated autocommit connection to ``dsn`` and LISTEN on ``queues``."""
        connection = psycopg.Connection.connect(dsn, autocommit=True)
        listener = cls(connection, namespace, queues, on_cancel=on_cancel)
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
        channels = self._run(protocol.lifecycle.channels(self._namespace, self._queues))
        for channel in [*channels, self.wake_channel]:
            self._run(protocol.lifecycle.listen(channel))
        self._listening = True

    def wait_for_work(self, timeout: float = 5.0) -> bool:
        """Block until a job may be ready, or ``timeout`` seconds pass.

        Requests a wake-up first (``postkit_queue.request_wakeup``: a push notifies only a
        queue on which a worker asked, and only the first push after the request does; a queue
        with a concurrency or group limit notifies at every change, and wakes one of the
        listeners waiting for its slots, the longest waiting, on its :attr:`wake_channel`),
        then returns at once when a job of these queues is already due. Otherwise waits for a
        notification, but no longer than until the earliest delayed job falls due.

        After a new request, the wait is cut into short ones, :data:`FIRST_RECHECK` seconds and
        doubling, each followed by another look for due jobs. They find the jobs no
        notification announces: one whose transaction read no request because it pushed
        before the request was committed and commits after the look, and one committed while
        the push that took the request is still in progress (a long transaction, or one that
        rolls back). Such a job waits about as long as the worker had waited when it committed,
        never the whole timeout.

        Returns:
            True when woken because a job may be ready (a notification, or a due job); False
            when the timeout passed with neither. Either way the caller should pull: a
            notification can be missed (a reconnect, a NOTIFY from a session that disabled
            them), and the timeout is the fallback poll that still finds the job.
        """
        self.listen()
        deadline = time.monotonic() + timeout
        request = self._run(protocol.lifecycle.request_wakeup(self._namespace, self._queues))
        recheck = FIRST_RECHECK if request.made else timeout
        while True:
            due = self._run(protocol.lifecycle.next_run_at(self._namespace, self._queues))
            if due.seconds is not None and due.seconds <= 0:
                return self._end_wait(request, result=True)
            now = time.monotonic()
            until = deadline if due.seconds is None else min(deadline, now + due.seconds)
            wait_until = min(until, now + recheck)
            recheck *= 2
            woken = False
            for notify in self._connection.notifies(
                timeout=max(wait_until - now, 0.0), stop_after=1
            ):
                woken = self._is_work(notify) or woken
            if woken:
                self.notifications += 1
                return self._end_wait(request, result=True)
            if wait_until >= until:
                return self._end_wait(request, result=until < deadline)

    def _end_wait(self, request: protocol.lifecycle.WakeupRequest, *, result: bool) -> bool:
        """End a wait that recorded this listener among the workers waiting for a slot
        (``request.waiting``), whatever woke it: a slot freed later must wake a worker that
        still waits. A transaction that woke it on its wake channel took the record already,
        but that wake may be one the listener missed in an earlier wait, read only now, with
        this wait's record still standing. Returns ``result``."""
        if request.waiting:
            self._run(protocol.lifecycle.stop_waiting(self._namespace))
        return result

    def poll(self) -> bool:
        """Read the notifications that have arrived, without waiting (the cancels go to
        ``on_cancel``); returns whether any announced work. A worker whose slots are all
        taken polls between its waits, so that a cancel reaches it while it runs jobs."""
        work = False
        for notify in self._connection.notifies(timeout=0.0):
            work = self._is_work(notify) or work
        return work

    def _is_work(self, notify: psycopg.Notify) -> bool:
        """Whether ``notify`` announces work; a running job's cancel goes to ``on_cancel``."""
        if not notify.payload.startswith(CANCELLED):
            return True
        job_id = notify.payload.removeprefix(CANCELLED)
        if self._on_cancel is not None and job_id.isascii() and job_id.isdigit():
            self._on_cancel(int(job_id))
        return False

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


class ResultListener:
    """Waits for the results of jobs of one namespace: it LISTENs on the namespace's results
    channel, where each job of a queue that keeps results is announced as it completes or is
    dead-lettered, and reads the job's result (``QueueClient.result``) when one names it.

    Use :meth:`connect` to open a dedicated connection, or pass an open autocommit connection;
    one listener serves any number of waits, one after the other. Close it with :meth:`close`
    or ``with``. Its role needs producer access (job_result, results_channel).
    """

    def __init__(self, connection: psycopg.Connection[Any], namespace: str):
        self._connection = connection
        self._namespace = namespace
        self._channel: str | None = None

    @classmethod
    def connect(cls, dsn: str, namespace: str) -> ResultListener:
        """Open a dedicated autocommit connection to ``dsn`` and LISTEN on the results channel
        of ``namespace``."""
        connection = psycopg.Connection.connect(dsn, autocommit=True)
        listener = cls(connection, namespace)
        listener.listen()
        return listener

    @property
    def connection(self) -> psycopg.Connection[Any]:
        return self._connection

    def _run(self, call: protocol.Call[T]) -> T:
        return executor.run(self._connection, call, given_to=None)

    def listen(self) -> None:
        """LISTEN on the namespace's results channel. Results announced from now on are not
        missed."""
        if self._channel is not None:
            return
        channel = self._run(protocol.lifecycle.results_channel(self._namespace))
        self._run(protocol.lifecycle.listen(channel))
        self._channel = channel

    def unlisten(self) -> None:
        """Stop listening (a connection that goes on serving other work stops collecting the
        namespace's notifications)."""
        if self._channel is None:
            return
        channel, self._channel = (self._channel, None)
        self._run(protocol.lifecycle.unlisten(channel))

    def result(self, job_id: int) -> JobResult:
        """What became of job ``job_id`` now (see ``QueueClient.result``)."""
        return self._run(protocol.lifecycle.job_result(self._namespace, job_id))

    def wait_for_result(self, job_id: int, *, timeout: float) -> JobResult:
        """Wait until job ``job_id`` has finished, at most ``timeout`` seconds, and return what
        became of it: completed (with its result), dead (with the dead letter's error), or
        unknown (see ``QueueClient.result``).

        It LISTENs first and reads the result next, so a job that finished before the wait
        began is found at once; then each notification that names the job makes it read the
        result again. The job's queue must keep results (``retain_results``): only its settles
        are announced. Any job is also read again each :data:`RESULT_POLL_INTERVAL` seconds, so a
        notification that never came (a session that turned them off, a settle on a Citus
        worker node) delays its result by at most that.

        Raises:
            ResultTimeoutError: the job has not finished when the timeout ends; its
                ``result`` attribute holds the last read (pending, scheduled or running).
            InvalidJobIdError, InvalidDurationError: bad arguments.
        """
        check.job_id(job_id)
        seconds = check.seconds("timeout", timeout)
        if seconds is None or seconds < 0:
            raise errors.InvalidDurationError(f"timeout must be zero or positive, got {timeout}")
        deadline = time.monotonic() + seconds
        self.listen()
        while True:
            result = self.result(job_id)
            if result.state not in UNFINISHED_STATES:
                return result
            if time.monotonic() >= deadline:
                raise errors.ResultTimeoutError(
                    f"job {job_id} has not finished after {seconds:g} s: it is {result.state}",
                    result,
                )
            self._named(job_id, min(deadline, time.monotonic() + RESULT_POLL_INTERVAL))

    def _named(self, job_id: int, deadline: float) -> None:
        """Return once a notification on the results channel names ``job_id``, or once
        ``deadline`` (time.monotonic()) passes. Other notifications are read and let go; one
        with an empty payload names every job."""
        wanted = str(job_id)
        named = False
        while not named and time.monotonic() < deadline:
            wait = deadline - time.monotonic()
            # stop_after=1 ends the iteration after the first batch the server sent, so the
            # generator always runs to its end (and gives the connection back).
            for notify in self._connection.notifies(timeout=max(wait, 0.0), stop_after=1):
                if notify.channel == self._channel and (
                    not notify.payload or wanted in notify.payload.split(",")
                ):
                    named = True

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> ResultListener:
        self.listen()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
