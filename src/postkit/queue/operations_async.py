"""The operating calls of the queue client: inspecting and steering queues, their settings,
their outcomes and retention. The dead letters, the schedules and the worker registry have
modules of their own (dead_letters_async.py, schedules_async.py, registry_async.py).

operations_async.py is the source of both: :class:`AsyncOperations`, which
:class:`~postkit.queue.client_async.AsyncQueueClient` inherits, is written here, and
operations.py (``Operations``, which ``QueueClient`` inherits) is generated from it by
tools/async_to_sync.py.
"""

from __future__ import annotations

from datetime import datetime

from postkit.queue import protocol
from postkit.queue.calls_async import AsyncCalls
from postkit.queue.protocol import Duration
from postkit.queue.protocol.operations import KEEP, Keep, Rate
from postkit.queue.records import (
    GroupStats,
    Job,
    JobCursor,
    OutcomeMinute,
    Outcomes,
    QueuePolicy,
    QueueStats,
    RunningJob,
    WorkerInfo,
)


class AsyncOperations(AsyncCalls):
    """The operating methods of the queue client (AsyncQueueClient inherits this class, and
    QueueClient its generated twin)."""

    async def stats(
        self,
        queue: str | None = None,
        *,
        cap: int = 100_000,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[QueueStats]:
        """Per queue (or one queue), in name order: pending, scheduled, waiting, running, dead
        and cancelled counts, the age of the oldest ready job, outcomes in the last minute and
        hour, mean attempts, and the flow limits in force.

        Fast at any size: live counts are exact up to ``cap`` and then reported as ``cap``
        with ``counts_capped`` set; outcomes come from counters kept as jobs settle. Each queue
        costs a few index probes, so a namespace of thousands of queues is read a page at a
        time: ``limit`` queues (at most 10,000) named after ``after`` (the last queue of the
        previous page).
        """
        return await self._run(
            protocol.operations.stats(self._namespace, queue, cap=cap, after=after, limit=limit)
        )

    async def jobs(
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
        return await self._run(
            protocol.operations.jobs(self._namespace, queue, state, limit=limit, after=after)
        )

    async def queue_policy(self, queue: str) -> QueuePolicy:
        """The policy in force for ``queue``: its settings over the built-in defaults, as
        :meth:`configure_queue` returns it, changing nothing."""
        return await self._run(protocol.operations.get_queue_policy(self._namespace, queue))

    async def cancel(self, job_id: int) -> bool:
        """Cancel a job that has not finished, with the jobs that wait for it: a pending,
        scheduled or waiting one never runs; a running one is cancelled at once, its claim
        stale from now on (its worker's ack, nack, heartbeat and progress change nothing, and
        it is never retried), and its worker gives the handler's slot back at its next
        heartbeat, where ``postkit.worker.is_cancelled()`` turns true for the handler. The
        job is kept as cancelled for its queue's retention (``result(job_id).state``).

        Returns:
            True if it was cancelled; False if no such live job exists.
        """
        return await self._run(protocol.operations.cancel(self._namespace, job_id))

    async def pause_queue(self, queue: str) -> bool:
        """Stop handing out jobs of ``queue``; pushes are still accepted. Returns whether the
        queue is paused: True."""
        return await self._run(
            protocol.operations.set_queue_paused(self._namespace, queue, paused=True)
        )

    async def resume_queue(self, queue: str) -> bool:
        """Hand out jobs of ``queue`` again. Returns whether the queue is paused: False."""
        return await self._run(
            protocol.operations.set_queue_paused(self._namespace, queue, paused=False)
        )

    async def purge_queue(
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
        return await self._run(
            protocol.operations.purge_queue(
                self._namespace, queue, created_before=created_before, dry_run=dry_run
            )
        )

    async def cancel_tree(self, job_id: int, *, limit: int = 10_000) -> int:
        """Cancel the live jobs of job ``job_id``'s tree (:meth:`job_tree`: the job and what
        descends from it, through the completed jobs that released their children), each as
        :meth:`cancel` does. At most ``limit`` jobs per call: returns how many it cancelled;
        call it again until it returns 0. A child that an ack in progress releases while the
        tree is walked is left: the next call reaches it.

        Raises:
            PermissionDeniedError: the role lacks operator access.
        """
        return await self._run(
            protocol.operations.cancel_tree(self._namespace, job_id, limit=limit)
        )

    async def cancel_run(self, run_id: int, *, limit: int = 10_000) -> int:
        """Cancel the workflow run ``run_id`` with the live jobs of its tree and of its maps
        (the jobs each ``ctx.map`` pushed, with their trees), each as :meth:`cancel` does. At
        most ``limit`` jobs per call: returns how many it cancelled; call it again until it
        returns 0.

        Raises:
            PermissionDeniedError: the role lacks operator access.
        """
        return await self._run(protocol.operations.cancel_run(self._namespace, run_id, limit=limit))

    async def cancel_queue(
        self, queue: str, *, created_before: datetime | None = None, limit: int = 10_000
    ) -> int:
        """Cancel the live jobs of ``queue``, whatever their state (pending, scheduled, waiting
        or running), each as :meth:`cancel` does, with the jobs that wait for them in any
        queue; with ``created_before``, only those pushed at or before it (by the queue's
        clock, :meth:`clock`). At most ``limit`` of the queue's jobs per call: returns how
        many jobs it cancelled, descendants included; call it again until it returns 0.
        :meth:`purge_queue` deletes the pending and scheduled ones instead, and leaves the
        running ones to their workers.

        Raises:
            PermissionDeniedError: the role lacks operator access.
        """
        return await self._run(
            protocol.operations.cancel_queue(
                self._namespace, queue, created_before=created_before, limit=limit
            )
        )

    async def queues(self) -> list[str]:
        """The queues of this namespace, by name: those with pending, scheduled or running
        jobs, dead letters not yet retried, settings (configured or paused), or outcomes in the
        last hour."""
        return await self._run(protocol.operations.queues(self._namespace))

    async def outcomes_since(self, since: datetime) -> list[Outcomes]:
        """Per queue, the jobs completed, dead-lettered, retried and rescued from the start of
        the minute of ``since`` on; queues without any are left out.

        The counts are kept per minute for two hours: two calls with the same ``since``
        within the hour differ by exactly the outcomes between them (a live view's rates).
        """
        return await self._run(protocol.operations.outcomes_since(self._namespace, since))

    async def outcome_series(
        self, since: datetime, *, queue: str | None = None
    ) -> list[OutcomeMinute]:
        """Per queue (or of ``queue``) and minute, the jobs completed, dead-lettered, retried
        and rescued from the start of the minute of ``since`` on, by queue then minute: a
        chart's points. A minute without outcomes has no entry. The counts are kept per minute
        for two hours."""
        return await self._run(protocol.operations.outcome_series(self._namespace, since, queue))

    async def namespaces(self) -> list[str]:
        """Every namespace the caller may see, sorted, not only this client's: under tenant
        isolation a role's own (assigned) namespaces, unless it sees every namespace; else every
        namespace that holds jobs, dead letters, settings, recent outcomes, schedules or
        workers, or is assigned to a role. One index probe per namespace and table, whatever
        the backlog."""
        return await self._run(protocol.operations.namespaces())

    async def configure_queue(
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
        fair: bool | Keep = KEEP,
        max_pending: int | Keep | None = KEEP,
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

        ``fair`` shares the queue's claims among its group keys: they take turns, each key
        given up to its weight (:meth:`set_group_weight`, 1 by default) of its ready jobs per
        turn, in pull order within the key, so that one key's backlog keeps no other key
        waiting behind it. Jobs without a group key get what the keys leave. False (or None)
        claims in pull order.

        ``max_pending`` (1 to 100,000) is backpressure: a push that would make the queue hold
        more pending jobs (ready or scheduled) is refused with :class:`QueueFullError`, so a
        runaway producer meets resistance before the disk does. Each push to such a queue
        counts its pending jobs up to the limit: it suits a queue meant to stay short.

        A queue with limits is claimed in READ COMMITTED transactions only (the worker's;
        FlowControlIsolationError otherwise). docs/guarantees.md says what each one holds to.

        Returns:
            the policy now in force.

        Raises:
            InvalidFlowControlError: a limit out of range, a rate that is not a pair, or
                ``group_ordered`` with a ``group_concurrency`` above 1.
        """
        return await self._run(
            protocol.operations.configure_queue(
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
                fair=fair,
                max_pending=max_pending,
            )
        )

    async def set_group_weight(self, queue: str, group_key: str, weight: int | None) -> int:
        """Give group ``group_key`` of fair queue ``queue`` the weight ``weight`` (1 to 1000):
        each of its turns gives it up to that many jobs, so that keys weighing 3 and 1 get
        jobs 3:1 while both have work. None puts it back to 1. Takes effect at the queue's
        next claim. Returns the weight now in force.

        Raises:
            InvalidFlowControlError: a weight out of range.
            PermissionDeniedError: the role lacks operator access.
        """
        return await self._run(
            protocol.operations.set_group_weight(self._namespace, queue, group_key, weight)
        )

    async def group_weights(
        self, queue: str, *, after: str | None = None, limit: int = 1000
    ) -> dict[str, int]:
        """The weights set on ``queue``'s group keys (:meth:`set_group_weight`), by key in key
        order, at most ``limit`` after key ``after``; a key not listed weighs 1."""
        return await self._run(
            protocol.operations.group_weights(self._namespace, queue, after=after, limit=limit)
        )

    async def group_stats(
        self, queue: str, *, after: str | None = None, limit: int = 100, cap: int = 100_000
    ) -> list[GroupStats]:
        """The group keys of ``queue`` that have live jobs (``push(..., group_key=...)``), in
        key order, at most ``limit`` (up to 10,000) after key ``after`` (the last key of the
        previous page): for each, its pending, scheduled and running jobs and its weight in a
        fair queue. Which tenant is behind, and by how much.

        Fast whatever a key's backlog: counts are exact up to ``cap`` and then read as
        ``cap`` with ``counts_capped`` set; each key costs a few index probes. A key whose jobs
        all wait for their parents is listed with zeros.
        """
        return await self._run(
            protocol.operations.group_stats(
                self._namespace, queue, after=after, limit=limit, cap=cap
            )
        )

    async def running_jobs(self, *, limit: int = 1000) -> list[RunningJob]:
        """What the workers of this namespace run now: each running job's id, queue, worker,
        attempt and claim, soonest deadline first, up to ``limit``. It reads the running jobs
        alone, through their index, whatever the backlog, and no payload."""
        return await self._run(protocol.workers.running_jobs(self._namespace, limit=limit))

    async def workers(self) -> list[WorkerInfo]:
        """The registered workers and tickers of this namespace, oldest start first, each
        with whether it is lost. O(workers): it reads no job."""
        return await self._run(protocol.workers.workers(self._namespace))
