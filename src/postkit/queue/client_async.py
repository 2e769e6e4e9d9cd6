"""The queue client: the article's API on top of the caller's own cursor.

client_async.py is the source of both clients: the asyncio client (for psycopg 3 async cursors)
is written there, and client.py, the synchronous client (for any DB-API cursor), is generated
from it by tools/async_to_sync.py; a test checks that the two are in step. Both only execute the
calls that postkit.queue.protocol builds, so they share every statement, check and error.
"""

from __future__ import annotations

from typing import Any, TypeVar

from postkit import errors
from postkit.queue import protocol
from postkit.queue.job import DeadLetter, Job, NackOutcome, QueuePolicy
from postkit.queue.protocol import Duration, JobRef
from postkit.queue.rows import as_dicts

T = TypeVar("T")


class AsyncQueueClient:
    """Push, pull and settle jobs through a DB-API cursor the caller owns.

    The client never commits or rolls back: each call is one statement in the caller's current
    transaction. A push therefore commits, or vanishes, together with the caller's own writes;
    a pull's claim sticks when the caller commits; an ack commits with whatever else the caller
    wrote in its transaction.

    The synchronous client takes any DB-API cursor: psycopg 3 (tuple, dict or namedtuple rows),
    psycopg2, or Django's ``connection.cursor()``. The asyncio client takes a psycopg 3 async
    cursor.

    Invalid arguments raise a :class:`postkit.errors.ValidationError` subclass before anything
    is written. When the SQL module rejects a value, the database aborts the current transaction
    (as with any failed statement), so the caller rolls back before going on. Errors the SQL
    module does not own (a lost connection, a deadlock) are raised as the driver raised them.
    """

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
        cursor = self._cursor
        connection = getattr(cursor, "connection", None)
        if getattr(cursor, "closed", False) or getattr(connection, "closed", False):
            raise errors.ClientClosedError(
                "the cursor (or its connection) given to QueueClient is closed"
            )
        try:
            await cursor.execute(call.sql, call.params)
            rows = as_dicts(cursor.description, await cursor.fetchall())
        except Exception as exc:
            translated = protocol.translate_error(exc)
            if translated is None:
                raise
            raise translated from exc
        return call.parse(rows)

    async def push(
        self,
        queue: str,
        payload: Any,
        *,
        delay: Duration | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        backoff_base: Duration | None = None,
        backoff_cap: Duration | None = None,
    ) -> int | None:
        """Add a job to ``queue`` in the caller's transaction.

        Args:
            payload: any JSON-serializable value; the worker gets it back as ``job["payload"]``.
            delay: run no earlier than this long after the push (a timedelta or seconds).
            priority: -32768..32767; higher runs first among ready jobs of the queue.
            max_attempts: 1..1000 claims before the job is dead-lettered; default: the queue's
                setting, else 20.
            unique_key: while a job with this key is pending or running in this queue, pushing
                another is a no-op that returns None.
            backoff_base, backoff_cap: this job's retry policy for nack (see :meth:`nack`).

        Returns:
            the new job's id, or None when ``unique_key`` deduplicated the push.

        Raises:
            InvalidPayloadError, InvalidNameError, InvalidPriorityError,
            InvalidMaxAttemptsError, InvalidDurationError: bad arguments; nothing is written.
        """
        return await self._run(
            protocol.push(
                self._namespace,
                queue,
                payload,
                delay=delay,
                priority=priority,
                max_attempts=max_attempts,
                unique_key=unique_key,
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
            )
        )

    async def pull(
        self,
        queue: str,
        *,
        worker_id: str | None = None,
        visibility_timeout: Duration | None = None,
    ) -> Job | None:
        """Claim the next ready job of ``queue``: highest priority, then oldest run_at.

        The claim counts an attempt, records ``worker_id`` and a fresh claim token, and lasts
        until ``visibility_timeout`` (default: the queue's setting, else 30 s; at most 12 h)
        after which :meth:`tick_timeouts` may hand the job to another worker. Rows are locked
        with ``FOR UPDATE SKIP LOCKED``: two workers never get the same job. The claim sticks
        when the caller commits; rolled back, it never happened.

        Returns:
            the claimed job, or None when no job is ready.
        """
        jobs = await self.pull_batch(
            queue, limit=1, worker_id=worker_id, visibility_timeout=visibility_timeout
        )
        return jobs[0] if jobs else None

    async def pull_batch(
        self,
        queue: str,
        *,
        limit: int,
        worker_id: str | None = None,
        visibility_timeout: Duration | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` (1..1000) ready jobs of ``queue`` in one round trip, each as
        :meth:`pull` would claim it.

        Returns:
            the claimed jobs, in no particular order; empty when none is ready.
        """
        return await self._run(
            protocol.pull(
                self._namespace,
                queue,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
            )
        )

    async def ack(
        self, job: JobRef, *, worker_id: str | None = None, claim_token: Any = None
    ) -> bool:
        """The job succeeded: remove it from the queue.

        ``job`` is a :class:`Job` (whose claim token is then the fence) or a job id with the
        ``worker_id`` it was claimed under (or its ``claim_token``).

        Returns:
            True if the job was acknowledged; False, with nothing changed, when the caller no
            longer holds the claim (the job was reclaimed, settled or is unknown). A claim
            whose deadline passed still holds until :meth:`tick_timeouts` reclaims it.
        """
        return await self._run(
            protocol.ack(self._namespace, job, worker_id=worker_id, claim_token=claim_token)
        )

    async def nack(
        self,
        job: JobRef,
        *,
        error: Any = None,
        worker_id: str | None = None,
        backoff: Duration | None = None,
        claim_token: Any = None,
    ) -> bool:
        """A temporary failure: retry the job later, or dead-letter it if its attempts are spent.

        The retry waits ``backoff`` if given, else ``base * 2**(attempt - 1)`` times a random
        factor between 1 and 2, capped (by default base 1 s and cap 1 h: the first retry comes
        after 1-2 s). ``error`` (text or an exception) joins the job's error history.

        Returns:
            True if the nack took effect (retried or dead-lettered; :meth:`nack_outcome` tells
            which); False, with nothing changed, when the caller no longer holds the claim.
        """
        outcome = await self.nack_outcome(
            job, error=error, worker_id=worker_id, backoff=backoff, claim_token=claim_token
        )
        return outcome is not NackOutcome.STALE

    async def nack_outcome(
        self,
        job: JobRef,
        *,
        error: Any = None,
        worker_id: str | None = None,
        backoff: Duration | None = None,
        claim_token: Any = None,
    ) -> NackOutcome:
        """:meth:`nack`, returning what it did: RETRIED, DEAD_LETTERED or STALE."""
        return await self._run(
            protocol.nack(
                self._namespace,
                job,
                error=error,
                worker_id=worker_id,
                claim_token=claim_token,
                backoff=backoff,
            )
        )

    async def fail(
        self,
        job: JobRef,
        *,
        error: Any = None,
        worker_id: str | None = None,
        claim_token: Any = None,
    ) -> bool:
        """A permanent failure: move the job to the dead-letter queue now, with its payload and
        every attempt's error.

        Returns:
            True if the job was dead-lettered; False, with nothing changed, when the caller no
            longer holds the claim.
        """
        return await self._run(
            protocol.fail(
                self._namespace, job, error=error, worker_id=worker_id, claim_token=claim_token
            )
        )

    async def extend_visibility(
        self,
        job: JobRef,
        *,
        extension: Duration,
        worker_id: str | None = None,
        claim_token: Any = None,
    ) -> bool:
        """Keep a slow but healthy job: its deadline becomes now + ``extension`` (never earlier
        than it was). ``extension`` is positive and at most 12 hours.

        Returns:
            True if the claim was extended; False, with nothing changed, when the caller no
            longer holds the claim.
        """
        return await self._run(
            protocol.extend_visibility(
                self._namespace,
                job,
                extension=extension,
                worker_id=worker_id,
                claim_token=claim_token,
            )
        )

    async def release(
        self, job: JobRef, *, worker_id: str | None = None, claim_token: Any = None
    ) -> bool:
        """Give a claimed job back without running it: it is pending again at once, and the
        attempt this claim counted is returned (a worker shutting down uses this).

        Returns:
            True if the job was released; False, with nothing changed, when the caller no
            longer holds the claim.
        """
        return await self._run(
            protocol.release(self._namespace, job, worker_id=worker_id, claim_token=claim_token)
        )

    async def tick_timeouts(self, *, limit: int = 1000) -> int:
        """Reclaim up to ``limit`` expired claims of this namespace.

        A reclaimed job with attempts left is pending again at once; one whose attempts are
        spent is dead-lettered with a timeout error, so a job that crashes its worker every
        time cannot loop forever. Safe to run from any number of processes at once: each
        expired job is reclaimed by exactly one of them.

        Returns:
            how many jobs this call reclaimed (returned to the queue or dead-lettered).
        """
        return await self._run(protocol.tick_timeouts(self._namespace, limit=limit))

    async def get_job(self, job_id: int) -> Job | None:
        """One job of this namespace: pending, running, or dead (in the dead-letter queue).

        Returns:
            the job, or None when no such job exists here (never pushed, in another namespace,
            or completed: acknowledged jobs leave the queue).
        """
        return await self._run(protocol.get_job(self._namespace, job_id))

    async def dead_letters(self, queue: str | None = None, *, limit: int = 100) -> list[DeadLetter]:
        """The newest dead letters of this namespace (of one queue, if given), newest first.

        Each keeps the payload, the last error and every attempt's error, the attempt count,
        the queue, the last worker and the timestamps.
        """
        return await self._run(protocol.dead_letters(self._namespace, queue, limit=limit))

    async def configure_queue(
        self,
        queue: str,
        *,
        max_attempts: int | None = None,
        visibility_timeout: Duration | None = None,
        backoff_base: Duration | None = None,
        backoff_cap: Duration | None = None,
    ) -> QueuePolicy:
        """Set the defaults of ``queue``'s jobs; None restores the built-in default.

        Returns:
            the policy now in force.
        """
        return await self._run(
            protocol.configure_queue(
                self._namespace,
                queue,
                max_attempts=max_attempts,
                visibility_timeout=visibility_timeout,
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
            )
        )
