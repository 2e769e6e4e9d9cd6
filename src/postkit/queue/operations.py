# Generated from operations_async.py by tools/async_to_sync.py: edit that file, not this one.
"""The operating calls of the queue client: inspecting and steering queues, dead letters,
settings, retention and schedules.

operations_async.py is the source of both: :class:`AsyncOperations`, which
:class:`~postkit.queue.client_async.AsyncQueueClient` inherits, is written here, and
operations.py (``Operations``, which ``QueueClient`` inherits) is generated from it by
tools/async_to_sync.py. Each call is one statement in the caller's transaction, run by
:mod:`postkit.queue.executor`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from postkit.queue import executor, limits, protocol
from postkit.queue.protocol import Duration, NextDue
from postkit.queue.protocol.operations import KEEP, Keep, Rate
from postkit.queue.records import (
    BrokenSchedule,
    DeadLetter,
    DeadLetterPosition,
    DeadLetterSearch,
    Fired,
    Job,
    JobCursor,
    LineageStep,
    OutcomeMinute,
    Outcomes,
    Pruned,
    QueuePolicy,
    QueueStats,
    Redriven,
    RunningJob,
    Schedule,
    ScheduleRun,
    WorkerInfo,
)

T = TypeVar("T")


class Operations:
    """The operating methods of the queue client (AsyncQueueClient inherits this class, and
    QueueClient its generated twin), on the cursor and namespace the client was given."""

    _cursor: Any
    _namespace: str

    def _run(self, call: protocol.Call[T]) -> T:
        return executor.run(self._cursor, call, given_to="QueueClient")

    def dead_letters(
        self,
        queue: str | None = None,
        *,
        limit: int = 100,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        error_contains: str | None = None,
        include_redriven: bool = False,
        after: DeadLetterPosition | None = None,
    ) -> list[DeadLetter]:
        """The dead letters of this namespace, newest first: of one queue, failed in a time
        range, or whose last error contains a substring (case-insensitive), if given.

        Each keeps the payload, the last error and every attempt's error, the attempt count,
        the queue, the last worker and the timestamps. Redriven dead letters are left out
        unless ``include_redriven``. For the next page, pass the last one of this page as
        ``after``.
        """
        return self._run(
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

    def count_dead_letters(
        self,
        queue: str | None = None,
        *,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        include_redriven: bool = False,
        cap: int = 10_000,
    ) -> int:
        """How many dead letters :meth:`dead_letters` would list with these filters, had it no
        limit: exact up to ``cap``, then ``cap`` (read it as "at least"). The count stops at
        ``cap`` rows of an index range, so it stays fast on any dead-letter queue. A purge's
        confirmation counts with ``failed_before`` and ``include_redriven=True``."""
        return self._run(
            protocol.count_dead_letters(
                self._namespace,
                queue,
                failed_after=failed_after,
                failed_before=failed_before,
                include_redriven=include_redriven,
                cap=cap,
            )
        )

    def search_dead_letters(
        self,
        error_contains: str,
        queue: str | None = None,
        *,
        limit: int = 100,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        include_redriven: bool = False,
        after: DeadLetterPosition | None = None,
        scan_limit: int = limits.SEARCH_SCAN,
    ) -> DeadLetterSearch:
        """The dead letters whose last error contains ``error_contains`` (case-insensitive),
        newest first, with :meth:`dead_letters`' other filters, reading at most
        ``scan_limit`` dead letters of the namespace per call.

        No index finds a substring, so :meth:`dead_letters` with ``error_contains`` reads
        every dead letter when few match; this search reads the newest ``scan_limit`` (from
        ``after`` on, within the failed-at window; the queue filter applies to those) and
        says where it stopped: ``cut`` when it found fewer matches than ``limit`` before its
        bound, and ``next_after`` to search on from there.

        Raises:
            InvalidNameError: an empty ``error_contains``.
        """
        return self._run(
            protocol.search_dead_letters(
                self._namespace,
                error_contains,
                queue,
                limit=limit,
                failed_after=failed_after,
                failed_before=failed_before,
                include_redriven=include_redriven,
                after=after,
                scan_limit=scan_limit,
            )
        )

    def stats(
        self,
        queue: str | None = None,
        *,
        cap: int = 100_000,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[QueueStats]:
        """Per queue (or one queue), in name order: pending, scheduled, running and dead
        counts, the age of the oldest ready job, outcomes in the last minute and hour, mean
        attempts, and the flow limits in force.

        Fast at any size: live counts are exact up to ``cap`` and then reported as ``cap``
        with ``counts_capped`` set; outcomes come from counters kept as jobs settle. Each queue
        costs a few index probes, so a namespace of thousands of queues is read a page at a
        time: ``limit`` queues (at most 10,000) named after ``after`` (the last queue of the
        previous page).
        """
        return self._run(protocol.stats(self._namespace, queue, cap=cap, after=after, limit=limit))

    def jobs(
        self,
        queue: str,
        state: str = "pending",
        *,
        limit: int = 100,
        after: Job | JobCursor | None = None,
    ) -> list[Job]:
        """The jobs of ``queue`` in ``state``, a page at a time, each job with its ``age``:

        - 'pending' (ready now) and 'scheduled' (run_at to come): in pull order, the highest
          priority first, then by run_at, then by id;
        - 'running': the soonest claim deadline (visible_until) first;
        - 'dead': the dead letters not yet redriven, by id.

        For the next page pass the last job of this one as ``after`` (or a :class:`JobCursor`,
        which :meth:`JobCursor.parse` reads back from its ``token``). Every page is one index
        range scan from the cursor: it costs the same at any depth and on any backlog. A
        running job whose claim is extended meanwhile moves later, and may show on two pages.

        Raises:
            InvalidStateError: an unknown state, or a cursor of another state's listing.
        """
        return self._run(protocol.jobs(self._namespace, queue, state, limit=limit, after=after))

    def redrive(
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
        return self._run(
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

    def job_lineage(self, job_id: int, *, limit: int = 100) -> list[LineageStep]:
        """The chain of redrives ``job_id`` is part of, oldest first: the dead letters it was
        retried from, itself, and the jobs it was retried as, each with where it is now (live,
        dead, archived as completed, or gone), up to ``limit`` steps each way. Empty when the
        job is nowhere and no redrive names it. One index probe per step."""
        return self._run(protocol.job_lineage(self._namespace, job_id, limit=limit))

    def purge_dead_letters(
        self,
        *,
        older_than: Duration | None = None,
        failed_before: datetime | None = None,
        queue: str | None = None,
        job_ids: Sequence[int] | None = None,
        failed_after: datetime | None = None,
    ) -> int:
        """Delete the dead letters (of one queue, if given), retried or not, that failed more
        than ``older_than`` ago by the queue's clock, or before ``failed_before``; give exactly
        one. With ``failed_before``, the purge may also be narrowed to ``job_ids`` and to those
        failed at or after ``failed_after``.

        To show what will go before deleting it, read the cutoff once (:meth:`clock`, minus
        an age), count with :meth:`count_dead_letters` (the same filters, with
        ``include_redriven=True``) and purge with the same ``failed_before``: ``older_than``
        is measured again when the purge runs. Returns how many were deleted.

        Raises:
            InvalidDurationError: neither or both of ``older_than`` and ``failed_before``, or
                ``job_ids`` or ``failed_after`` with ``older_than``.
            PermissionDeniedError: the role lacks operator access.
        """
        return self._run(
            protocol.purge_dead_letters(
                self._namespace,
                older_than=older_than,
                failed_before=failed_before,
                queue=queue,
                job_ids=job_ids,
                failed_after=failed_after,
            )
        )

    def queue_policy(self, queue: str) -> QueuePolicy:
        """The policy in force for ``queue``: its settings over the built-in defaults, as
        :meth:`configure_queue` returns it, changing nothing."""
        return self._run(protocol.get_queue_policy(self._namespace, queue))

    def cancel(self, job_id: int) -> bool:
        """Remove a pending or scheduled job.

        Returns:
            True if it was cancelled; False if no such live job exists.

        Raises:
            JobRunningError: the job is running; its worker holds the claim.
        """
        return self._run(protocol.cancel(self._namespace, job_id))

    def pause_queue(self, queue: str) -> bool:
        """Stop handing out jobs of ``queue``; pushes are still accepted. Returns whether the
        queue is paused: True."""
        return self._run(protocol.set_queue_paused(self._namespace, queue, paused=True))

    def resume_queue(self, queue: str) -> bool:
        """Hand out jobs of ``queue`` again. Returns whether the queue is paused: False."""
        return self._run(protocol.set_queue_paused(self._namespace, queue, paused=False))

    def purge_queue(
        self, queue: str, *, created_before: datetime | None = None, dry_run: bool = False
    ) -> int:
        """Delete every pending and scheduled job of ``queue``, or with ``created_before``
        only those created at or before it (by the queue's clock, :meth:`clock`); running jobs
        are left to their workers. Returns how many were deleted, or with ``dry_run`` (which
        needs ``created_before``) how many would be, deleting nothing: a prompt that shows the
        dry run's count and then purges with the same cutoff deletes at most that many. A dry
        run counts every job of the queue (about 0.4 s for a million); :meth:`stats` with a
        ``cap`` counts the same pending and scheduled jobs up to the cap, fast at any size.

        Raises:
            InvalidDurationError: ``dry_run`` without ``created_before``, or a time that is
                not timezone-aware.
        """
        return self._run(
            protocol.purge_queue(
                self._namespace, queue, created_before=created_before, dry_run=dry_run
            )
        )

    def queues(self) -> list[str]:
        """The queues of this namespace, by name: those with pending, scheduled or running
        jobs, dead letters not yet retried, settings (configured or paused), or outcomes in the
        last hour."""
        return self._run(protocol.queues(self._namespace))

    def known_queues(self) -> list[str]:
        """Every queue name this namespace has used, sorted: :meth:`queues`, the queues its
        workers serve (:meth:`register_queues`) and those its schedules push to. Producers may
        ask (names only); the command line refuses a queue name outside it as a typo."""
        return self._run(protocol.known_queues(self._namespace))

    def register_queues(self, queues: Sequence[str]) -> int:
        """Record that a worker serves ``queues`` (the runtime does, as it starts), so that
        they stay known while idle: a settings row of built-in defaults for each queue that
        has none. Returns how many were new."""
        return self._run(protocol.register_queues(self._namespace, queues))

    def register_worker(
        self,
        worker_id: str,
        *,
        kind: str = "worker",
        host: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
        version: str,
        heartbeat_interval: Duration,
    ) -> None:
        """Record that a worker (``kind`` 'worker') or a ticker ('ticker') runs, with what it
        serves, and its first heartbeat; registering the same ``worker_id`` again replaces it.
        It reads as lost once its last heartbeat is older than three ``heartbeat_interval``.

        Raises:
            InvalidWorkerError: an unknown kind, or a pid or concurrency out of range.
        """
        self._run(
            protocol.register_worker(
                self._namespace,
                worker_id,
                kind=kind,
                host=host,
                pid=pid,
                queues=queues,
                concurrency=concurrency,
                version=version,
                heartbeat_interval=heartbeat_interval,
            )
        )

    def worker_heartbeat(self, worker_id: str) -> bool:
        """The worker is alive. False when it is not registered (its row was pruned while it
        was cut off): register it again."""
        return self._run(protocol.worker_heartbeat(self._namespace, worker_id))

    def deregister_worker(self, worker_id: str) -> bool:
        """The worker stopped cleanly. False when it was not registered."""
        return self._run(protocol.deregister_worker(self._namespace, worker_id))

    def running_jobs(self, *, limit: int = 1000) -> list[RunningJob]:
        """What the workers of this namespace run now: each running job's id, queue, worker,
        attempt and claim, soonest deadline first, up to ``limit``. It reads the running jobs
        alone, through their index, whatever the backlog, and no payload."""
        return self._run(protocol.running_jobs(self._namespace, limit=limit))

    def workers(self) -> list[WorkerInfo]:
        """The registered workers and tickers of this namespace, oldest start first, each
        with whether it is lost. O(workers): it reads no job."""
        return self._run(protocol.workers(self._namespace))

    def prune_workers(self, *, older_than: Duration = 86400) -> int:
        """Forget the lost workers whose last heartbeat is older than ``older_than`` (a day
        unless given); one that is not lost stays, however short ``older_than``. Returns how
        many."""
        return self._run(protocol.prune_workers(self._namespace, older_than=older_than))

    def outcomes_since(self, since: datetime) -> list[Outcomes]:
        """Per queue, the jobs completed, dead-lettered, retried and rescued from the start of
        the minute of ``since`` on; queues without any are left out.

        The counts are kept per minute for two hours: two calls with the same ``since``
        within the hour differ by exactly the outcomes between them (a live view's rates).
        """
        return self._run(protocol.outcomes_since(self._namespace, since))

    def outcome_series(self, since: datetime, *, queue: str | None = None) -> list[OutcomeMinute]:
        """Per queue (or of ``queue``) and minute, the jobs completed, dead-lettered, retried
        and rescued from the start of the minute of ``since`` on, by queue then minute: a
        chart's points. A minute without outcomes has no entry. The counts are kept per minute
        for two hours."""
        return self._run(protocol.outcome_series(self._namespace, since, queue))

    def namespaces(self) -> list[str]:
        """Every namespace the caller may see, sorted, not only this client's: under tenant
        isolation a role's own (assigned) namespaces, unless it sees every namespace; else every
        namespace that holds jobs, dead letters, settings, recent outcomes, schedules or
        workers, or is assigned to a role. One index probe per namespace and table, whatever
        the backlog."""
        return self._run(protocol.namespaces())

    def configure_queue(
        self,
        queue: str,
        *,
        max_attempts: int | Keep | None = KEEP,
        visibility_timeout: Duration | Keep | None = KEEP,
        backoff_base: Duration | Keep | None = KEEP,
        backoff_cap: Duration | Keep | None = KEEP,
        retain_completed: Duration | Keep | None = KEEP,
        retain_dead: Duration | Keep | None = KEEP,
        max_payload_bytes: int | Keep | None = KEEP,
        retain_results: Duration | Keep | None = KEEP,
        concurrency: int | Keep | None = KEEP,
        rate: Rate | Keep | None = KEEP,
        group_concurrency: int | Keep | None = KEEP,
        group_ordered: bool | Keep = KEEP,
    ) -> QueuePolicy:
        """Set the defaults of ``queue``'s jobs and how long its finished jobs are kept. A
        setting not given keeps its value; None restores the built-in default (max_attempts
        20, visibility timeout 30 s, backoff from 1 s doubling up to 1 h, completed jobs
        deleted at once, dead letters kept 30 days, payloads up to 1 MiB, results not kept),
        as ``default`` does in ``postkit queue configure``.
        ``retain_results`` keeps the result of each job completed from then on (what its
        handler returned: ``ack(job, result=...)``) that long, for :meth:`result` and
        :meth:`wait_for_result`; at most 3650 days.
        Pausing is separate: :meth:`pause_queue`.

        The flow limits hold across every worker, enforced by the database when jobs are
        claimed; each one not given keeps its value, and None removes it:

        - ``concurrency``: at most this many of the queue's jobs run at once (1 to 100,000);
        - ``rate``: ``(claims, period)``, at most so many claims in any window of ``period``
          (seconds or a timedelta, up to a day; 1 to 100,000 claims): it counts claims, not
          handler calls;
        - ``group_concurrency``: at most this many jobs of one group key (``push(...,
          group_key=...)``) run at once (1 to 10,000);
        - ``group_ordered``: the jobs of one group key run one at a time, in push order; a
          job being retried holds its key back until it completes or is dead-lettered.

        A queue with limits is claimed in READ COMMITTED transactions only (the worker's;
        FlowControlIsolationError otherwise). docs/guarantees.md says what each one holds to.

        Returns:
            the policy now in force.

        Raises:
            InvalidFlowControlError: a limit out of range, a rate that is not a pair, or
                ``group_ordered`` with a ``group_concurrency`` above 1.
        """
        return self._run(
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
                retain_results=retain_results,
                concurrency=concurrency,
                rate=rate,
                group_concurrency=group_concurrency,
                group_ordered=group_ordered,
            )
        )

    def update_queue_settings(
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
        retain_results: Duration | None = None,
        concurrency: int | None = None,
        rate: Rate | None = None,
        group_concurrency: int | None = None,
        group_ordered: bool | None = None,
        reset: Sequence[str] = (),
    ) -> QueuePolicy:
        """Change some settings of ``queue`` and keep the others, as :meth:`configure_queue`
        does, with resets by name: a setting given is set, a setting named in ``reset``
        (``"max_attempts"``, ``"retain_dead"``, ...; the flow limits as ``"concurrency"``,
        ``"rate"``, ``"group_concurrency"``, ``"group_ordered"``) goes back to the built-in
        default (no limit), and every other one keeps its value. Two updates of one queue at
        once both keep their change (the second waits for the first to commit).

        Returns:
            the policy now in force.

        Raises:
            InvalidNameError: an unknown setting in ``reset``, or one both given and reset.
        """
        return self._run(
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
                retain_results=retain_results,
                concurrency=concurrency,
                rate=rate,
                group_concurrency=group_concurrency,
                group_ordered=group_ordered,
                reset=reset,
            )
        )

    def prune(self, *, limit: int = 1000) -> Pruned:
        """Apply retention once: delete up to ``limit`` expired archived jobs, up to ``limit``
        dead letters and up to ``limit`` job results, and old outcome counters. The worker
        runtime's prune service and ``postkit tick`` call this."""
        return self._run(protocol.prune(self._namespace, limit=limit))

    def create_schedule(
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
        now = self._run(protocol.clock())
        return self._run(protocol.save_schedule(schedule, now=now))

    def schedules(self, *, after: str | None = None, limit: int | None = None) -> list[Schedule]:
        """The schedules of this namespace, by name: every one, or a page of ``limit``
        (1..10,000) after the name ``after``."""
        return self._run(protocol.schedules(self._namespace, after=after, limit=limit))

    def schedule_runs(
        self, *, after: str | None = None, limit: int | None = None
    ) -> list[ScheduleRun]:
        """Each schedule's last run, by name, and what became of its job: live, dead-lettered,
        archived as completed, or gone without a trace (the usual end of a completed job).
        Three primary-key lookups per schedule: of every one, or of the page
        :meth:`schedules` returns for the same ``after`` and ``limit``."""
        return self._run(protocol.schedule_runs(self._namespace, after=after, limit=limit))

    def pause_schedule(self, name: str) -> bool:
        """Stop firing a schedule. Returns False when there is no such schedule."""
        return self._run(protocol.set_schedule_paused(self._namespace, name, paused=True))

    def resume_schedule(self, name: str) -> bool:
        """Fire a paused schedule again (once at once, if a run fell due while paused)."""
        return self._run(protocol.set_schedule_paused(self._namespace, name, paused=False))

    def delete_schedule(self, name: str) -> bool:
        """Delete a schedule. Returns False when there is no such schedule."""
        return self._run(protocol.delete_schedule(self._namespace, name))

    def next_schedule_at(self) -> NextDue:
        """When the namespace's next active schedule falls due, by the queue's clock
        (``seconds`` 0 or less: due now; None: no active schedule). A ticker sleeps until then:
        :meth:`tick_schedules` fires it."""
        return self._run(protocol.next_schedule_at(self._namespace))

    def tick_schedules(self, *, limit: int = 100) -> list[Fired | BrokenSchedule]:
        """Fire every due schedule once, in the caller's transaction; commit to make it stick.

        Any number of tickers may run at once: due schedules are locked (SKIP LOCKED) and each
        run is fenced on its due time, so each fires exactly once. Runs missed while nothing
        ticked collapse into one (the catch-up policy).

        A due schedule whose next run cannot be computed (a cron expression croniter cannot
        use, a time zone this Python does not know), or whose job its queue refuses (a
        payload over a max_payload_bytes set later), is marked broken
        instead, and the others fire: it is left out of later ticks until it is saved again
        (:meth:`create_schedule`), and :meth:`schedules` shows it with ``broken_reason``.

        Returns:
            a :class:`Fired` for each run fired and a :class:`BrokenSchedule` for each
            schedule this tick marked broken.
        """
        outcomes: list[Fired | BrokenSchedule] = []
        for run in self._run(protocol.due_schedules(self._namespace, limit=limit)):
            outcome: Fired | BrokenSchedule | None
            if run.next_run_at is None:
                outcome = self._run(protocol.mark_schedule_broken(self._namespace, run))
            else:
                outcome = self._run(protocol.fire_schedule(self._namespace, run))
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes
