# Generated from producer_async.py by tools/async_to_sync.py: edit that file, not this one.
"""What a producer does: push jobs in the caller's transaction, and follow them to their results.

producer_async.py is the source of both: :class:`AsyncProducer` is written here, and
producer.py (``Producer``) is generated from it by tools/async_to_sync.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from postkit import errors
from postkit.queue import limits, protocol
from postkit.queue.calls import Calls
from postkit.queue.listen import ResultListener
from postkit.queue.protocol import Duration
from postkit.queue.records import Job, JobResult, TreeJob, WorkflowStep
from postkit.queue.tracing import current_trace_context


class Producer(Calls):
    """Push jobs and follow them: :meth:`push`, :meth:`push_batch`, :meth:`get_job`,
    :meth:`result`, :meth:`wait_for_result`, :meth:`parent_results`, :meth:`waiting_children`,
    :meth:`job_tree`, :meth:`workflow_steps`. A role needs the ``producer`` access kind
    (``postkit install --grant ROLE:producer``). Each call is one statement in the caller's
    transaction: a push commits, or vanishes, with the caller's own writes."""

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
        depends_on: Sequence[int | Job] | None = None,
        wait_for_room: Duration | None = None,
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
            depends_on: the job's parents (job ids or Jobs, of any queue of this namespace,
                at most 10,000): the job is 'waiting', never claimed, until every parent has
                completed, and becomes pending in the transaction of the last parent's ack.
                A parent already completed counts while its completion is recorded (its
                queue's ``retain_results`` or ``retain_completed``). A parent dead-lettered,
                cancelled or purged later cancels the job (``result(id).reason`` says why).
                The parents are checked first, in a statement of their own: a refusal leaves
                the caller's transaction usable.
            wait_for_room: how long a push to a queue at its ``max_pending`` waits for room
                (workers claiming its jobs) before it is refused (a timedelta or seconds, at
                most an hour); None or 0: refused at once. The caller's transaction waits with
                it, holding what it wrote. It needs READ COMMITTED (PostgreSQL's default):
                under REPEATABLE READ or SERIALIZABLE the push is refused at once, as the
                transaction would never see the room.

        With OpenTelemetry in use, the job records the current span's trace context, and the
        worker's span for each of its runs links to it (docs/tracing.md).

        Returns:
            the new job's id, or None when ``unique_key`` deduplicated the push.

        Raises:
            InvalidPayloadError, InvalidNameError, InvalidPriorityError,
            InvalidMaxAttemptsError, InvalidDurationError: bad arguments; nothing is written.
            InvalidRunAtError (an InvalidDurationError): ``run_at`` is naive, not a datetime,
                more than 3650 days ahead, or given with ``delay``; nothing is written.
            InvalidDependencyError: ``depends_on`` is not a list of job ids, or names a job
                that is unknown here, dead-lettered or cancelled; nothing is written.
            QueueFullError: the queue holds its ``max_pending`` pending jobs already, and
                still did when ``wait_for_room`` ended (the SQL module raises it: the
                transaction is aborted; push in a savepoint to go on).
        """
        call = protocol.lifecycle.push(
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
            depends_on=depends_on,
            wait_for_room=wait_for_room,
        )
        self._check_parents([call.params["depends_on"] or []])
        return self._run(call)

    def _check_parents(self, entries: Sequence[Sequence[int]]) -> None:
        """Raise InvalidDependencyError, before anything is pushed, when the SQL module would
        refuse one of these parents: a refusal by the push itself would abort the caller's
        transaction. One statement per 10,000 distinct parents; none without parents."""
        parents = sorted({parent for entry in entries for parent in entry})
        for start in range(0, len(parents), limits.MAX_PARENTS):
            chunk = parents[start : start + limits.MAX_PARENTS]
            problem = self._run(protocol.lifecycle.dependency_problem(self._namespace, chunk))
            if problem is not None:
                raise errors.InvalidDependencyError(problem)

    def parent_results(self, job_id: int) -> dict[int, Any]:
        """The results of job ``job_id``'s parents (its push's ``depends_on``), by parent id,
        in the order its push listed them: what each parent's handler returned, once it
        completed in a queue that keeps results; None for a parent that has not completed,
        or whose queue keeps no results. Empty: the job has no parents, or is unknown."""
        return self._run(protocol.lifecycle.parent_results(self._namespace, job_id))

    def waiting_children(self, job_id: int, *, limit: int = 100) -> list[int]:
        """The ids of the jobs that wait for job ``job_id`` to complete (their push named it
        in ``depends_on``), in id order, at most ``limit``. Known while the job has not
        finished: its ack releases them, and its dead letter or cancel cancels them; empty
        once it finished, or for an unknown job."""
        return self._run(protocol.lifecycle.waiting_children(self._namespace, job_id, limit))

    def workflow_steps(self, run_id: int) -> list[WorkflowStep]:
        """The steps the workflow run ``run_id`` recorded, in order: each one's position, name,
        result, the attempt that recorded it and when. Kept while the run is live, and for its
        queue's ``retain_dead`` once it finished. Empty: none recorded, or an unknown run."""
        return self._run(protocol.lifecycle.workflow_steps(self._namespace, run_id))

    def send_event(
        self, run_id: int, name: str, payload: Any = None, *, key: str | None = None
    ) -> bool:
        """Send the event ``name``, with ``payload`` (a JSON value, by the rules of a job's
        result), to the live workflow run ``run_id``, in the caller's transaction: the run gets
        it when it waits for it (``ctx.wait_for``), now or later, and one that waits already
        is woken. One event per name and run.

        Returns:
            True if it was sent; False, with nothing changed, when an event of that name was
            sent with the same ``key`` already (a repeat is a no-op).

        Raises:
            WorkflowEventError: the run is not live (finished, or unknown), or has an event of
                that name already, sent without this ``key`` (the SQL module raises it: the
                transaction is aborted).
            InvalidResultError: ``payload`` cannot be one; nothing is sent.
        """
        return self._run(
            protocol.lifecycle.send_event(
                self._namespace, run_id, name=name, payload=payload, key=key
            )
        )

    def job_tree(self, job_id: int, *, limit: int = 1000) -> list[TreeJob]:
        """Job ``job_id`` and what descends from it through ``depends_on`` (its children,
        theirs, and so on), generation by generation, at most ``limit`` jobs: the root first
        (depth 0), then each generation's live jobs and its completed ones, each in id order.
        A descendant is listed while it is live, or completed with children of its own (kept
        for its queue's ``retain_dead``): the tree goes on through it to the jobs it
        released. A branch ends at a job that completed without children, and at one
        dead-lettered or cancelled (its waiting descendants were cancelled with it). Empty
        when the job is unknown and nothing descends from it."""
        return self._run(protocol.lifecycle.job_tree(self._namespace, job_id, limit))

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
        depends_on: Sequence[Sequence[int | Job] | None] | None = None,
        wait_for_room: Duration | None = None,
    ) -> list[int | None]:
        """Push many jobs to ``queue`` in one round trip and one INSERT, in the caller's
        transaction; listeners get one notification. ``delay`` or ``run_at`` (at most one),
        ``priority`` and ``max_attempts`` apply to every job, as :meth:`push` applies them.
        ``group_keys``, if given, holds one group key per payload (None: no group), as
        :meth:`push` takes ``group_key``; the jobs of a key are in payload order.
        Each job records the current span's trace context, as :meth:`push` does.
        ``depends_on``, if given, holds each payload's parents (a list of job ids, or None),
        as :meth:`push` takes them; a batch with parents pushes its jobs one after another in
        the SQL module (each locks its own parents), in the same round trip.
        ``wait_for_room`` waits for room for the whole batch, as :meth:`push` waits for one
        job; a batch larger than ``max_pending`` is refused at once.

        Returns:
            one entry per payload, in order: the new job's id, or None when its unique key
            (``unique_keys[i]``) matched a live job or an earlier payload of the batch.

        Raises:
            QueueFullError: the batch would make the queue hold more than its ``max_pending``
                pending jobs, and still would when ``wait_for_room`` ended: none of it is
                written (the SQL module raises it: the transaction is aborted; push in a
                savepoint to go on).
        """
        call = protocol.lifecycle.push_batch(
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
            depends_on=depends_on,
            wait_for_room=wait_for_room,
        )
        if depends_on is not None:
            self._check_parents([entry or [] for entry in json.loads(call.params["depends_on"])])
        return self._run(call)

    def get_job(self, job_id: int) -> Job | None:
        """One job of this namespace: pending, running, or dead (in the dead-letter queue).

        Returns:
            the job, or None when no such job exists here (never pushed, in another namespace,
            or completed: acknowledged jobs leave the queue).
        """
        return self._run(protocol.lifecycle.get_job(self._namespace, job_id))

    def result(self, job_id: int) -> JobResult:
        """What became of job ``job_id`` of this namespace, read now: not finished yet
        (``state`` 'pending', 'scheduled' or 'running'), 'completed' with the ``value`` its ack
        kept (its queue keeps results: ``configure_queue(retain_results=...)``), 'dead' with
        the dead letter's ``error``, or 'unknown' when nothing is known of it (never pushed,
        or completed in a queue that keeps no results). A few primary-key lookups, whatever
        the backlog."""
        return self._run(protocol.lifecycle.job_result(self._namespace, job_id))

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

    def clock(self) -> datetime:
        """The queue's clock: the database's time, which every deadline, delay, schedule and
        age in the queue follows (whatever the client's own clock says)."""
        return self._run(protocol.lifecycle.clock())
