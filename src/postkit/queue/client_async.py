"""The queue client: the article's API on top of the caller's own cursor.

client_async.py is the source of both clients: the asyncio client (for psycopg 3 async cursors)
is written there, and client.py, the synchronous client (for any DB-API cursor), is generated
from it by tools/async_to_sync.py; a test checks that the two are in step. Both only execute the
calls that postkit.queue.protocol builds, so they share every statement, check and error.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from postkit.queue import executor, protocol
from postkit.queue.protocol import Duration, JobRef, NextDue
from postkit.queue.records import (
    BrokenSchedule,
    DeadLetter,
    Fired,
    Job,
    NackOutcome,
    Outcomes,
    Pruned,
    QueuePolicy,
    QueueStats,
    Redriven,
    Schedule,
)

T = TypeVar("T")

REMEMBERED_CLAIMS = 10_000
"""How many claims a client remembers at most (see :class:`AsyncQueueClient`); past that it
forgets the oldest."""


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

    async def _run(self, call: protocol.Call[T]) -> T:
        return await executor.run_async(self._cursor, call, owner="QueueClient")

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

        A payload that the SQL API accepted but Python cannot decode (JSON nested deeper than
        the recursion limit, an integer past Python's 4,300-digit limit) never makes this
        raise: the job is claimed and returned with ``payload`` None and ``payload_error``
        saying why, so the caller can fail it (the worker runtime does) while the other jobs
        go on.

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
            the claimed jobs, in no particular order; empty when none is ready. A job whose
            payload Python cannot decode is among them, marked by ``payload_error``.
        """
        jobs = await self._run(
            protocol.pull(
                self._namespace,
                queue,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
            )
        )
        return self._remember(jobs)

    async def ack(
        self, job: JobRef, *, worker_id: str | None = None, claim_token: Any = None
    ) -> bool:
        """The job succeeded: remove it from the queue.

        ``job`` is a :class:`Job` (whose claim token is then the fence), or a job id: this
        client remembers the claim token of each job it pulled and fences on it; else pass the
        ``claim_token``, or the ``worker_id`` the job was claimed under (which cannot tell two
        claims of that worker apart).

        Returns:
            True if the job was acknowledged; False, with nothing changed, when the caller no
            longer holds the claim (the job was reclaimed, settled or is unknown). A claim
            whose deadline passed still holds until :meth:`tick_timeouts` reclaims it.
        """
        token = self._token(job, claim_token)
        acked = await self._run(
            protocol.ack(self._namespace, job, worker_id=worker_id, claim_token=token)
        )
        self._forget([job])
        return acked

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
        outcome = await self._run(
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
        failed = await self._run(
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
                claim_token=self._token(job, claim_token),
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
        token = self._token(job, claim_token)
        released = await self._run(
            protocol.release(self._namespace, job, worker_id=worker_id, claim_token=token)
        )
        self._forget([job])
        return released

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

    async def dead_letters(
        self,
        queue: str | None = None,
        *,
        limit: int = 100,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        error_contains: str | None = None,
        include_redriven: bool = False,
        after: DeadLetter | None = None,
    ) -> list[DeadLetter]:
        """The dead letters of this namespace, newest first: of one queue, failed in a time
        range, or whose last error contains a substring (case-insensitive), if given.

        Each keeps the payload, the last error and every attempt's error, the attempt count,
        the queue, the last worker and the timestamps. Redriven dead letters are left out
        unless ``include_redriven``. For the next page, pass the last one of this page as
        ``after``.
        """
        return await self._run(
            protocol.dead_letters(
                self._namespace,
                queue,
                limit=limit,
                failed_after=failed_after,
                failed_before=failed_before,
                error_contains=error_contains,
                include_redriven=include_redriven,
                after=after,
            )
        )

    async def pull_any(
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
        jobs = await self._run(
            protocol.pull_any(
                self._namespace,
                queues,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
            )
        )
        return self._remember(jobs)

    async def push_batch(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        delay: Duration | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        unique_keys: Sequence[str | None] | None = None,
    ) -> list[int | None]:
        """Push many jobs to ``queue`` in one round trip and one INSERT, in the caller's
        transaction; listeners get one notification.

        Returns:
            one entry per payload, in order: the new job's id, or None when its unique key
            (``unique_keys[i]``) matched a live job or an earlier payload of the batch.
        """
        return await self._run(
            protocol.push_batch(
                self._namespace,
                queue,
                payloads,
                delay=delay,
                priority=priority,
                max_attempts=max_attempts,
                unique_keys=unique_keys,
            )
        )

    async def ack_many(self, jobs: Sequence[Job]) -> list[int]:
        """Acknowledge many claimed jobs in one round trip, each fenced on its own claim.

        Returns:
            the ids acknowledged; a job whose claim went stale is skipped, not an error.
        """
        acked = await self._run(protocol.ack_many(self._namespace, jobs))
        self._forget(jobs)
        return acked

    async def ack_and_pull(
        self,
        queue: str,
        acks: Sequence[Job],
        *,
        limit: int,
        worker_id: str | None = None,
        visibility_timeout: Duration | None = None,
    ) -> tuple[list[int], list[Job]]:
        """A worker's round trip: acknowledge ``acks`` (as :meth:`ack_many`) and claim up to
        ``limit`` jobs of ``queue`` (as :meth:`pull_batch`), in one statement.

        Returns:
            the ids acknowledged, and the jobs claimed.
        """
        acked, jobs = await self._run(
            protocol.ack_and_pull(
                self._namespace,
                queue,
                acks,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
            )
        )
        self._forget(acks)
        return acked, self._remember(jobs)

    async def ack_batch(self, jobs: Sequence[Job], *, worker_id: str | None = None) -> bool:
        """Acknowledge many claimed jobs in one round trip, all or nothing.

        Returns:
            True if every job was still held by its claim and all are acknowledged; False,
            with nothing changed, if any claim was stale.
        """
        acked = await self._run(protocol.ack_batch(self._namespace, jobs, worker_id=worker_id))
        if acked:
            self._forget(jobs)
        return acked

    async def stats(self, queue: str | None = None, *, cap: int = 100_000) -> list[QueueStats]:
        """Per queue (or one queue): pending, scheduled, running and dead counts, the age of
        the oldest ready job, outcomes in the last minute and hour, and mean attempts.

        Fast at any size: live counts are exact up to ``cap`` and then reported as ``cap``
        with ``counts_capped`` set; outcomes come from counters kept as jobs settle.
        """
        return await self._run(protocol.stats(self._namespace, queue, cap=cap))

    async def jobs(
        self, queue: str, state: str = "pending", *, limit: int = 100, after_id: int = 0
    ) -> list[Job]:
        """The jobs of ``queue`` in ``state`` ('pending' = ready now, 'scheduled', 'running'
        or 'dead'), by id. For the next page pass the last id as ``after_id``.

        Raises:
            InvalidStateError: an unknown state.
        """
        return await self._run(
            protocol.jobs(self._namespace, queue, state, limit=limit, after_id=after_id)
        )

    async def redrive(
        self,
        job_ids: Sequence[int] | None = None,
        *,
        queue: str | None = None,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        error_contains: str | None = None,
        to_queue: str | None = None,
        limit: int = 1000,
        dry_run: bool = False,
    ) -> list[Redriven]:
        """Retry dead letters as new jobs with fresh attempts: the ones in ``job_ids``, or else
        every one matching the filters, into their own queue or ``to_queue``.

        Each dead letter is redriven at most once, even by two operators at once; it stays in
        the dead-letter queue, linked to its new job (``redriven_job_id``). With ``dry_run``
        nothing changes: the result is what would be retried.
        """
        return await self._run(
            protocol.redrive(
                self._namespace,
                job_ids=job_ids,
                queue=queue,
                failed_after=failed_after,
                failed_before=failed_before,
                error_contains=error_contains,
                to_queue=to_queue,
                limit=limit,
                dry_run=dry_run,
            )
        )

    async def purge_dead_letters(
        self,
        *,
        older_than: Duration | None = None,
        failed_before: datetime | None = None,
        queue: str | None = None,
    ) -> int:
        """Delete the dead letters (of one queue, if given), retried or not, that failed more
        than ``older_than`` ago by the queue's clock, or before ``failed_before``; give exactly
        one. To show what will go before deleting it, read the cutoff once (:meth:`clock`
        minus the age), count with ``dead_letters(failed_before=cutoff,
        include_redriven=True)`` and purge with the same ``failed_before``: ``older_than``
        is measured again when the purge runs. Returns how many were deleted."""
        return await self._run(
            protocol.purge_dead_letters(
                self._namespace, older_than=older_than, failed_before=failed_before, queue=queue
            )
        )

    async def next_schedule_at(self) -> NextDue:
        """When the namespace's next active schedule falls due, by the queue's clock
        (``seconds`` 0 or less: due now; None: no active schedule). A ticker sleeps until then:
        :meth:`tick_schedules` fires it."""
        return await self._run(protocol.next_schedule_at(self._namespace))

    async def clock(self) -> datetime:
        """The queue's clock: the database's time, which every deadline, delay, schedule and
        age in the queue follows (whatever the client's own clock says)."""
        return await self._run(protocol.clock())

    async def cancel(self, job_id: int) -> bool:
        """Remove a pending or scheduled job.

        Returns:
            True if it was cancelled; False if no such live job exists.

        Raises:
            JobRunningError: the job is running; its worker holds the claim.
        """
        return await self._run(protocol.cancel(self._namespace, job_id))

    async def pause_queue(self, queue: str) -> bool:
        """Stop handing out jobs of ``queue``; pushes are still accepted. Returns True."""
        return await self._run(protocol.set_queue_paused(self._namespace, queue, paused=True))

    async def resume_queue(self, queue: str) -> bool:
        """Hand out jobs of ``queue`` again. Returns False (not paused)."""
        return await self._run(protocol.set_queue_paused(self._namespace, queue, paused=False))

    async def purge_queue(
        self, queue: str, *, created_before: datetime | None = None, dry_run: bool = False
    ) -> int:
        """Delete every pending and scheduled job of ``queue``, or with ``created_before``
        only those created at or before it (by the queue's clock, :meth:`clock`); running jobs
        are left to their workers. Returns how many were deleted, or with ``dry_run`` (which
        needs ``created_before``) how many would be, deleting nothing: a prompt that shows the
        dry run's count and then purges with the same cutoff deletes at most that many.

        Raises:
            InvalidDurationError: ``dry_run`` without ``created_before``, or a time that is
                not timezone-aware.
        """
        return await self._run(
            protocol.purge_queue(
                self._namespace, queue, created_before=created_before, dry_run=dry_run
            )
        )

    async def prune(self, *, limit: int = 1000) -> Pruned:
        """Apply retention once: delete up to ``limit`` expired archived jobs and dead letters
        and old outcome counters. The worker runtime calls this on its tick."""
        return await self._run(protocol.prune(self._namespace, limit=limit))

    async def create_schedule(
        self,
        name: str,
        queue: str,
        payload: Any,
        *,
        cron: str | None = None,
        timezone: str = "UTC",
        every: Duration | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
    ) -> Schedule:
        """Create (or replace) the schedule ``name``: push ``payload`` to ``queue`` at the
        times of a 5-field ``cron`` expression in ``timezone``, or ``every`` interval.
        Replacing a broken schedule repairs it.

        The cron grammar (the SQL module's ``save_schedule`` accepts exactly the same):
        minute, hour, day of month, month (or jan-dec) and day of week (0-7 or sun-sat, 7 is
        Sunday), each ``*``, a value, a range ``a-b``, ``*/n``, ``a-b/n`` or ``a/n``, or a
        comma-separated list of those; ``L`` (last day) and ``?`` in the day of month, ``?``
        and ``v#n`` (n-th weekday v) in the day of week. An expression that never fires
        ("0 0 30 2 *") is refused.

        Raises:
            InvalidScheduleError: a bad cron expression (or one that never fires) or time
                zone, or not exactly one of ``cron`` and ``every``.
        """
        # Checked before the clock is read, so that a bad schedule raises before any SQL.
        schedule = protocol.new_schedule(
            self._namespace,
            name,
            queue,
            payload,
            cron=cron,
            timezone=timezone,
            every=every,
            priority=priority,
            max_attempts=max_attempts,
        )
        now = await self._run(protocol.clock())
        return await self._run(protocol.save_schedule(schedule, now=now))

    async def queues(self) -> list[str]:
        """The queues of this namespace, by name: those with pending, scheduled or running
        jobs, dead letters not yet retried, settings (configured or paused), or outcomes in the
        last hour."""
        return await self._run(protocol.queues(self._namespace))

    async def known_queues(self) -> list[str]:
        """Every queue name this namespace has used, sorted: :meth:`queues`, the queues its
        workers serve (:meth:`register_queues`) and those its schedules push to. Producers may
        ask (names only); the command line refuses a queue name outside it as a typo."""
        return await self._run(protocol.known_queues(self._namespace))

    async def register_queues(self, queues: Sequence[str]) -> int:
        """Record that a worker serves ``queues`` (the runtime does, as it starts), so that
        they stay known while idle: a settings row of built-in defaults for each queue that
        has none. Returns how many were new."""
        return await self._run(protocol.register_queues(self._namespace, queues))

    async def outcomes_since(self, since: datetime) -> list[Outcomes]:
        """Per queue, the jobs completed, dead-lettered, retried and rescued from the start of
        the minute of ``since`` on; queues without any are left out.

        The counts are kept per minute for two hours: two calls with the same ``since``
        within the hour differ by exactly the outcomes between them (a live view's rates).
        """
        return await self._run(protocol.outcomes_since(self._namespace, since))

    async def schedules(self) -> list[Schedule]:
        """Every schedule of this namespace, by name."""
        return await self._run(protocol.schedules(self._namespace))

    async def pause_schedule(self, name: str) -> bool:
        """Stop firing a schedule. Returns False when there is no such schedule."""
        return await self._run(protocol.set_schedule_paused(self._namespace, name, paused=True))

    async def resume_schedule(self, name: str) -> bool:
        """Fire a paused schedule again (once at once, if a run fell due while paused)."""
        return await self._run(protocol.set_schedule_paused(self._namespace, name, paused=False))

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule. Returns False when there is no such schedule."""
        return await self._run(protocol.delete_schedule(self._namespace, name))

    async def tick_schedules(self, *, limit: int = 100) -> list[Fired | BrokenSchedule]:
        """Fire every due schedule once, in the caller's transaction; commit to make it stick.

        Any number of tickers may run at once: due schedules are locked (SKIP LOCKED) and each
        run is fenced on its due time, so each fires exactly once. Runs missed while nothing
        ticked collapse into one (the catch-up policy).

        A due schedule whose next run cannot be computed (a cron expression saved before the
        SQL module checked them, a time zone this Python does not know), or whose job its
        queue refuses (a payload over a max_payload_bytes set later), is marked broken
        instead, and the others fire: it is left out of later ticks until it is saved again
        (:meth:`create_schedule`), and :meth:`schedules` shows it with ``broken_reason``.

        Returns:
            a :class:`Fired` for each run fired and a :class:`BrokenSchedule` for each
            schedule this tick marked broken.
        """
        outcomes: list[Fired | BrokenSchedule] = []
        for run in await self._run(protocol.due_schedules(self._namespace, limit=limit)):
            outcome: Fired | BrokenSchedule | None
            if run.next_run_at is None:
                outcome = await self._run(protocol.mark_schedule_broken(self._namespace, run))
            else:
                outcome = await self._run(protocol.fire_schedule(self._namespace, run))
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    async def configure_queue(
        self,
        queue: str,
        *,
        max_attempts: int | None = None,
        visibility_timeout: Duration | None = None,
        backoff_base: Duration | None = None,
        backoff_cap: Duration | None = None,
        retain_completed: Duration | None = None,
        retain_dead: Duration | None = None,
        max_payload_bytes: int | None = None,
    ) -> QueuePolicy:
        """Set the defaults of ``queue``'s jobs and how long its finished jobs are kept; None
        restores the built-in default (max_attempts 20, visibility timeout 30 s, backoff from
        1 s doubling up to 1 h, completed jobs deleted at once, dead letters kept 30 days,
        payloads up to 1 MiB).
        Pausing is separate: :meth:`pause_queue`.

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
                retain_completed=retain_completed,
                retain_dead=retain_dead,
                max_payload_bytes=max_payload_bytes,
            )
        )

    async def update_queue_settings(
        self,
        queue: str,
        *,
        max_attempts: int | None = None,
        visibility_timeout: Duration | None = None,
        backoff_base: Duration | None = None,
        backoff_cap: Duration | None = None,
        retain_completed: Duration | None = None,
        retain_dead: Duration | None = None,
        max_payload_bytes: int | None = None,
        reset: Sequence[str] = (),
    ) -> QueuePolicy:
        """Change some settings of ``queue`` and keep the others, unlike
        :meth:`configure_queue`: a setting given is set, a setting named in ``reset``
        (``"max_attempts"``, ``"retain_dead"``, ...) goes back to the built-in default, and
        every other one keeps its value. Two updates of one queue at once both keep their
        change (the second waits for the first to commit).

        Returns:
            the policy now in force.

        Raises:
            InvalidNameError: an unknown setting in ``reset``, or one both given and reset.
        """
        return await self._run(
            protocol.update_queue_settings(
                self._namespace,
                queue,
                max_attempts=max_attempts,
                visibility_timeout=visibility_timeout,
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
                retain_completed=retain_completed,
                retain_dead=retain_dead,
                max_payload_bytes=max_payload_bytes,
                reset=reset,
            )
        )
