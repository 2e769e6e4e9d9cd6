# Generated from client_async.py by tools/async_to_sync.py: edit that file, not this one.
"""The queue client: push, pull and settle jobs on top of the caller's own cursor; the
operating calls (dead letters, settings, schedules...) come from
:mod:`postkit.queue.operations_async`.

client_async.py is the source of both clients: the asyncio client (for psycopg 3 async cursors)
is written there, and client.py, the synchronous client (for any DB-API cursor), is generated
from it by tools/async_to_sync.py; a test checks that the two are in step. Both only execute,
through postkit.queue.executor, the calls that postkit.queue.protocol builds, so they share
every statement, check and error.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from postkit import errors
from postkit.queue import protocol
from postkit.queue.dead_letters import DeadLetters
from postkit.queue.listen import ResultListener
from postkit.queue.operations import Operations
from postkit.queue.protocol import Duration, JobRef
from postkit.queue.records import Job, JobResult, NackOutcome
from postkit.queue.registry import Registry
from postkit.queue.schedules import Schedules
from postkit.queue.tracing import current_trace_context

REMEMBERED_CLAIMS = 10_000
"""How many claims a client remembers at most (see the client's docstring); past that it
forgets the oldest."""


class QueueClient(Operations, DeadLetters, Schedules, Registry):
    """Push, pull and settle jobs through a DB-API cursor the caller owns.

    The client never commits or rolls back: each call is one statement in the caller's current
    transaction. A push therefore commits, or vanishes, together with the caller's own writes;
    a pull's claim sticks when the caller commits; an ack commits with whatever else the caller
    wrote in its transaction.

    The synchronous client takes any DB-API cursor: psycopg 3 (tuple, dict or namedtuple rows),
    psycopg2, or Django's ``connection.cursor()``. The asyncio client takes a psycopg 3 async
    cursor.

    Invalid arguments raise a :class:`postkit.errors.ValidationError` subclass before anything
    is sent, so the caller's transaction and its own writes are untouched: the client checks
    every limit the SQL functions check (:mod:`postkit.queue.limits`). The one exception is a
    payload larger than its queue's ``max_payload_bytes``, a setting only the database knows:
    the SQL module refuses it, and like any failed statement that aborts the current
    transaction, so the caller rolls back before going on. Errors the SQL module does not own
    (a lost connection, a deadlock) are raised as the driver raised them.

    The client remembers the claim token of every job it pulls until it settles the job (at
    most :data:`REMEMBERED_CLAIMS` of them), so settling by a bare job id is fenced on the claim
    token too: ``queue.ack(job["id"])`` after ``job = queue.pull(...)`` settles that claim and
    no other. A bare id the client did not pull, without ``worker_id`` or ``claim_token``,
    names no claim and raises :class:`postkit.errors.InvalidClaimTokenError`.
    """

    def __init__(self, cursor: Any, namespace: str = "default") -> None:
        """Wrap ``cursor``. ``namespace`` keeps this application's jobs apart from every other
        application using the same installation; each call reads and writes only its own."""
        self._cursor = cursor
        self._namespace = namespace
        self._claims: dict[int, str] = {}  # job id -> claim token, oldest first

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def cursor(self) -> Any:
        return self._cursor

    def _remember(self, jobs: list[Job]) -> list[Job]:
        for job in jobs:
            if job.claim_token is not None:
                self._claims.pop(job.id, None)
                self._claims[job.id] = job.claim_token
        while len(self._claims) > REMEMBERED_CLAIMS:
            del self._claims[next(iter(self._claims))]
        return jobs

    def _forget(self, jobs: Sequence[JobRef]) -> None:
        for job in jobs:
            self._claims.pop(job.id if isinstance(job, Job) else job, None)

    def _token(self, job: JobRef, claim_token: Any) -> Any:
        """The claim token to settle ``job`` with: the one given, the Job's own, or the one
        remembered from this client's pull of that job id."""
        if claim_token is not None or isinstance(job, Job) or not isinstance(job, int):
            return claim_token
        return self._claims.get(job)

    def push(
        self,
        queue: str,
        payload: Any,
        *,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        backoff_base: Duration | None = None,
        backoff_cap: Duration | None = None,
        group_key: str | None = None,
    ) -> int | None:
        """Add a job to ``queue`` in the caller's transaction.

        Args:
            payload: any JSON-serializable value; the worker gets it back as ``job["payload"]``.
            delay: run no earlier than this long after the push (a timedelta or seconds).
            run_at: run no earlier than this time: a timezone-aware datetime, instead of
                ``delay``. It becomes the delay from the queue's clock (the database's, not
                this machine's) in the push's own statement, so the job's ``run_at`` is exactly
                this time; a time already past makes the job ready now. At most 3650 days
                ahead, like ``delay``.
            priority: -32768..32767; higher runs first among ready jobs of the queue.
            max_attempts: 1..1000 claims before the job is dead-lettered; default: the queue's
                setting, else 20.
            unique_key: while a job with this key is pending or running in this queue, pushing
                another is a no-op that returns None.
            backoff_base, backoff_cap: this job's retry policy for nack (see :meth:`nack`).
            group_key: the job's group within the queue (a name, like ``"user-42"``), which
                the queue's group limits apply to: ``group_concurrency`` (so many of a key
                at once) and ``group_ordered`` (one of a key at a time, in push order); see
                :meth:`configure_queue`. None: no group, only the queue-wide limits apply.

        With OpenTelemetry in use, the job records the current span's trace context, and the
        worker's span for each of its runs links to it (docs/tracing.md).

        Returns:
            the new job's id, or None when ``unique_key`` deduplicated the push.

        Raises:
            InvalidPayloadError, InvalidNameError, InvalidPriorityError,
            InvalidMaxAttemptsError, InvalidDurationError: bad arguments; nothing is written.
            InvalidRunAtError (an InvalidDurationError): ``run_at`` is naive, not a datetime,
                more than 3650 days ahead, or given with ``delay``; nothing is written.
        """
        return self._run(
            protocol.push(
                self._namespace,
                queue,
                payload,
                delay=delay,
                run_at=run_at,
                priority=priority,
                max_attempts=max_attempts,
                unique_key=unique_key,
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
                trace_context=current_trace_context(),
                group_key=group_key,
            )
        )

    def pull(
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

        A payload that the SQL API accepted but Python cannot decode (JSON nested deeper than
        the recursion limit, an integer past Python's 4,300-digit limit) never makes this
        raise: the job is claimed and returned with ``payload`` None and ``payload_error``
        saying why, so the caller can fail it (the worker runtime does) while the other jobs
        go on.

        Returns:
            the claimed job, or None when no job is ready.
        """
        jobs = self.pull_batch(
            queue, limit=1, worker_id=worker_id, visibility_timeout=visibility_timeout
        )
        return jobs[0] if jobs else None

    def pull_batch(
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
            the claimed jobs, in no particular order; empty when none is ready. A job whose
            payload Python cannot decode is among them, marked by ``payload_error``.
        """
        jobs = self._run(
            protocol.pull(
                self._namespace,
                queue,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
            )
        )
        return self._remember(jobs)

    def ack(
        self,
        job: JobRef,
        *,
        worker_id: str | None = None,
        claim_token: Any = None,
        result: Any = None,
    ) -> bool:
        """The job succeeded: remove it from the queue.

        ``job`` is a :class:`Job` (whose claim token is then the fence), or a job id: this
        client remembers the claim token of each job it pulled and fences on it; else pass the
        ``claim_token``, or the ``worker_id`` the job was claimed under (which cannot tell two
        claims of that worker apart).

        ``result`` is the job's result (any JSON value, at most 1 MiB as JSON text; None:
        none). The SQL module keeps it, in the ack's transaction, when the job's queue keeps
        results (``configure_queue(retain_results=...)``), and drops it otherwise; a stale ack
        keeps none. See :meth:`result`.

        Returns:
            True if the job was acknowledged; False, with nothing changed, when the caller no
            longer holds the claim (the job was rescued, settled or is unknown). A claim
            whose deadline passed still holds until :meth:`tick_timeouts` rescues it.

        Raises:
            InvalidResultError: ``result`` is not JSON-serializable or is too big; nothing is
                sent.
        """
        token = self._token(job, claim_token)
        acked = self._run(
            protocol.ack(
                self._namespace, job, worker_id=worker_id, claim_token=token, result=result
            )
        )
        self._forget([job])
        return acked

    def nack(
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
        outcome = self.nack_outcome(
            job, error=error, worker_id=worker_id, backoff=backoff, claim_token=claim_token
        )
        return outcome is not NackOutcome.STALE

    def nack_outcome(
        self,
        job: JobRef,
        *,
        error: Any = None,
        worker_id: str | None = None,
        backoff: Duration | None = None,
        claim_token: Any = None,
    ) -> NackOutcome:
        """:meth:`nack`, returning what it did: RETRIED, DEAD_LETTERED or STALE."""
        outcome = self._run(
            protocol.nack(
                self._namespace,
                job,
                error=error,
                worker_id=worker_id,
                claim_token=self._token(job, claim_token),
                backoff=backoff,
            )
        )
        self._forget([job])
        return outcome

    def fail(
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
        failed = self._run(
            protocol.fail(
                self._namespace,
                job,
                error=error,
                worker_id=worker_id,
                claim_token=self._token(job, claim_token),
            )
        )
        self._forget([job])
        return failed

    def extend_visibility(
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
        return self._run(
            protocol.extend_visibility(
                self._namespace,
                job,
                extension=extension,
                worker_id=worker_id,
                claim_token=self._token(job, claim_token),
            )
        )

    def release(
        self, job: JobRef, *, worker_id: str | None = None, claim_token: Any = None
    ) -> bool:
        """Give a claimed job back without running it: it is pending again at once, and the
        attempt this claim counted is returned (a worker shutting down uses this).

        Returns:
            True if the job was released; False, with nothing changed, when the caller no
            longer holds the claim.
        """
        token = self._token(job, claim_token)
        released = self._run(
            protocol.release(self._namespace, job, worker_id=worker_id, claim_token=token)
        )
        self._forget([job])
        return released

    def tick_timeouts(self, *, limit: int = 1000) -> int:
        """Rescue up to ``limit`` expired claims of this namespace.

        A rescued job with attempts left is pending again at once; one whose attempts are
        spent is dead-lettered with a timeout error, so a job that crashes its worker every
        time cannot loop forever. Safe to run from any number of processes at once: each
        expired job is rescued by exactly one of them.

        Returns:
            how many jobs this call rescued (returned to the queue or dead-lettered).
        """
        return self._run(protocol.tick_timeouts(self._namespace, limit=limit))

    def result(self, job_id: int) -> JobResult:
        """What became of job ``job_id`` of this namespace, read now: not finished yet
        (``state`` 'pending', 'scheduled' or 'running'), 'completed' with the ``value`` its ack
        kept (its queue keeps results: ``configure_queue(retain_results=...)``), 'dead' with
        the dead letter's ``error``, or 'unknown' when nothing is known of it (never pushed,
        or completed in a queue that keeps no results). A few primary-key lookups, whatever
        the backlog."""
        return self._run(protocol.job_result(self._namespace, job_id))

    def wait_for_result(self, job_id: int, *, timeout: float) -> JobResult:
        """Wait until job ``job_id`` has finished, at most ``timeout`` seconds, and return
        :meth:`result` then: completed, dead, or unknown. It waits for the notification its
        queue sends when the job completes or is dead-lettered, and reads again at least every
        ``RESULT_POLL_INTERVAL`` seconds (1, in its listen module) in case one never
        comes; the queue must keep results (``configure_queue(retain_results=...)``), or a
        completed job is unknown once its row is gone.

        It waits on the client's own connection, which must be a psycopg 3 connection in
        autocommit mode: LISTEN takes effect only outside a transaction, and the client never
        commits the caller's (it stops listening when the wait ends). For many waits, or
        from a connection that runs transactions, use a ResultListener (AsyncResultListener
        with asyncio), which has a connection of its own.

        Raises:
            ResultTimeoutError: the job has not finished when the timeout ends (also a
                built-in TimeoutError); its ``result`` attribute is the last read.
            ListenUnavailableError: the client's connection cannot LISTEN (not psycopg 3, or
                not in autocommit mode); nothing is sent.
        """
        connection = getattr(self._cursor, "connection", None)
        if not isinstance(connection, psycopg.Connection) or not connection.autocommit:
            raise errors.ListenUnavailableError()
        if connection.closed:
            raise errors.ClientClosedError(
                "the cursor (or its connection) given to QueueClient is closed"
            )
        listener = ResultListener(connection, self._namespace)
        try:
            return listener.wait_for_result(job_id, timeout=timeout)
        finally:
            if not connection.closed:
                listener.unlisten()

    def get_job(self, job_id: int) -> Job | None:
        """One job of this namespace: pending, running, or dead (in the dead-letter queue).

        Returns:
            the job, or None when no such job exists here (never pushed, in another namespace,
            or completed: acknowledged jobs leave the queue).
        """
        return self._run(protocol.get_job(self._namespace, job_id))

    def pull_any(
        self,
        queues: list[str],
        *,
        limit: int = 1,
        worker_id: str | None = None,
        visibility_timeout: Duration | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` ready jobs from several queues, in the order the queues are
        given: the first queue is emptied before the second is tried. A paused queue is
        skipped. Each claim is as :meth:`pull` makes it."""
        jobs = self._run(
            protocol.pull_any(
                self._namespace,
                queues,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
            )
        )
        return self._remember(jobs)

    def push_batch(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        unique_keys: Sequence[str | None] | None = None,
        group_keys: Sequence[str | None] | None = None,
    ) -> list[int | None]:
        """Push many jobs to ``queue`` in one round trip and one INSERT, in the caller's
        transaction; listeners get one notification. ``delay`` or ``run_at`` (at most one),
        ``priority`` and ``max_attempts`` apply to every job, as :meth:`push` applies them.
        ``group_keys``, if given, holds one group key per payload (None: no group), as
        :meth:`push` takes ``group_key``; the jobs of a key are in payload order.
        Each job records the current span's trace context, as :meth:`push` does.

        Returns:
            one entry per payload, in order: the new job's id, or None when its unique key
            (``unique_keys[i]``) matched a live job or an earlier payload of the batch.
        """
        return self._run(
            protocol.push_batch(
                self._namespace,
                queue,
                payloads,
                delay=delay,
                run_at=run_at,
                priority=priority,
                max_attempts=max_attempts,
                unique_keys=unique_keys,
                trace_context=current_trace_context(),
                group_keys=group_keys,
            )
        )

    def ack_many(self, jobs: Sequence[Job], *, results: Sequence[Any] | None = None) -> list[int]:
        """Acknowledge many claimed jobs in one round trip, each fenced on its own claim.
        ``results``, if given, holds one result per job (None: none), each as :meth:`ack`
        takes it.

        Returns:
            the ids acknowledged; a job whose claim went stale is skipped, not an error (and
            its result is not kept).
        """
        acked = self._run(protocol.ack_many(self._namespace, jobs, results))
        self._forget(jobs)
        return acked

    def ack_and_pull(
        self,
        queue: str,
        acks: Sequence[Job],
        *,
        limit: int,
        results: Sequence[Any] | None = None,
        worker_id: str | None = None,
        visibility_timeout: Duration | None = None,
    ) -> tuple[list[int], list[Job]]:
        """A worker's round trip: acknowledge ``acks`` (as :meth:`ack_many`, with their
        ``results``) and claim up to ``limit`` jobs of ``queue`` (as :meth:`pull_batch`), in
        one statement.

        Returns:
            the ids acknowledged, and the jobs claimed.
        """
        acked, jobs = self._run(
            protocol.ack_and_pull(
                self._namespace,
                queue,
                acks,
                results=results,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
            )
        )
        self._forget(acks)
        return acked, self._remember(jobs)

    def ack_batch(self, jobs: Sequence[Job], *, worker_id: str | None = None) -> bool:
        """Acknowledge many claimed jobs in one round trip, all or nothing.

        Returns:
            True if every job was still held by its claim and all are acknowledged; False,
            with nothing changed, if any claim was stale.
        """
        acked = self._run(protocol.ack_batch(self._namespace, jobs, worker_id=worker_id))
        if acked:
            self._forget(jobs)
        return acked

    def clock(self) -> datetime:
        """The queue's clock: the database's time, which every deadline, delay, schedule and
        age in the queue follows (whatever the client's own clock says)."""
        return self._run(protocol.clock())
