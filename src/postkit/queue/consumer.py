# Generated from consumer_async.py by tools/async_to_sync.py: edit that file, not this one.
"""What a consumer does: claim jobs, settle them, and keep their claims alive.

consumer_async.py is the source of both: :class:`AsyncConsumer` is written here, and
consumer.py (``Consumer``) is generated from it by tools/async_to_sync.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from postkit.queue import protocol
from postkit.queue.calls import Calls
from postkit.queue.protocol import Duration, JobRef
from postkit.queue.records import Job, NackOutcome

REMEMBERED_CLAIMS = 10_000
"""How many claims a consumer remembers at most (see :class:`AsyncConsumer`); past that it
forgets the oldest."""


class Consumer(Calls):
    """Claim and settle jobs: :meth:`pull` (and its batch forms), :meth:`ack`, :meth:`nack`,
    :meth:`fail`, :meth:`extend_visibility`, :meth:`report_progress`, :meth:`release`, and
    :meth:`tick_timeouts`, which rescues the expired claims of every worker. A role needs the
    ``worker`` access kind (``postkit install --grant ROLE:worker``).

    A consumer remembers the claim token of every job it pulls until it settles the job (at
    most :data:`REMEMBERED_CLAIMS` of them), so settling by a bare job id is fenced on the claim
    token too: ``queue.ack(job["id"])`` after ``job = queue.pull(...)`` settles that claim and
    no other. A bare id it did not pull, without ``worker_id`` or ``claim_token``, names no
    claim and raises :class:`postkit.errors.InvalidClaimTokenError`.
    """

    def __init__(self, cursor: Any, namespace: str = "default") -> None:
        super().__init__(cursor, namespace)
        self._claims: dict[int, str] = {}  # job id -> claim token, oldest first

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
            protocol.lifecycle.pull(
                self._namespace,
                queue,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
            )
        )
        return self._remember(jobs)

    def pull_any(
        self,
        queues: list[str],
        *,
        limit: int = 1,
        worker_id: str | None = None,
        visibility_timeout: Duration | None = None,
        weights: Mapping[str, int] | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` ready jobs from several queues. A paused queue is skipped.
        Each claim is as :meth:`pull` makes it.

        Without ``weights``, in the order the queues are given: the first queue is emptied
        before the second is tried. With ``weights`` (queue name to weight, 1 to 1000; a
        listed queue without one weighs 1; ``{}`` shares equally), the queues share the claims
        by weight whatever their order: each call tries them in a weighted random order, and
        each queue may first take its part of ``limit`` (``limit * weight / total``, rounded
        down, the rest one each to the first queues in that order). What a queue leaves of
        its part, for want of ready jobs, goes to the others. So claims of 4 from weights
        ``{"a": 3, "b": 1}`` take 3 and 1, and claims of 1 take ``a``'s job three times in
        four, on average; an empty queue's share goes to the others at once. The SQL module
        draws the order, so a client in any language gets the same shares.

        Raises:
            InvalidFlowControlError: a weight is not an int from 1 to 1000, or names a queue
                not listed. Nothing is sent.
        """
        jobs = self._run(
            protocol.lifecycle.pull_any(
                self._namespace,
                queues,
                worker_id=worker_id,
                visibility_timeout=visibility_timeout,
                limit=limit,
                weights=weights,
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
            protocol.lifecycle.ack(
                self._namespace, job, worker_id=worker_id, claim_token=token, result=result
            )
        )
        self._forget([job])
        return acked

    def ack_many(self, jobs: Sequence[Job], *, results: Sequence[Any] | None = None) -> list[int]:
        """Acknowledge many claimed jobs in one round trip, each fenced on its own claim.
        ``results``, if given, holds one result per job (None: none), each as :meth:`ack`
        takes it.

        Returns:
            the ids acknowledged; a job whose claim went stale is skipped, not an error (and
            its result is not kept).
        """
        acked = self._run(protocol.lifecycle.ack_many(self._namespace, jobs, results))
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
            protocol.lifecycle.ack_and_pull(
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
        acked = self._run(protocol.lifecycle.ack_batch(self._namespace, jobs, worker_id=worker_id))
        if acked:
            self._forget(jobs)
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
            protocol.lifecycle.nack(
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
            protocol.lifecycle.fail(
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
            protocol.lifecycle.extend_visibility(
                self._namespace,
                job,
                extension=extension,
                worker_id=worker_id,
                claim_token=self._token(job, claim_token),
            )
        )

    def report_progress(
        self,
        job: JobRef,
        fraction: float,
        *,
        note: str | None = None,
        worker_id: str | None = None,
        claim_token: Any = None,
    ) -> bool:
        """Say how far a running job got: ``fraction`` from 0 to 1, and a ``note`` of at most
        200 characters (None: none). ``get_job`` returns them (``progress``,
        ``progress_note``, ``progress_at``), as do ``postkit job`` and the dashboard; a retry,
        a release or a rescue clears them. One small UPDATE of the job's row, fenced by the
        claim: a handler run by a worker calls :func:`postkit.worker.report_progress` instead.

        Returns:
            True if it was recorded; False, with nothing changed, when the caller no longer
            holds the claim.

        Raises:
            InvalidProgressError: ``fraction`` is not a number from 0 to 1, or ``note`` is
                not text of at most 200 characters; nothing is written.
        """
        return self._run(
            protocol.lifecycle.report_progress(
                self._namespace,
                job,
                fraction=fraction,
                note=note,
                worker_id=worker_id,
                claim_token=self._token(job, claim_token),
            )
        )

    def record_step(
        self, job: JobRef, position: int, name: str, result: Any = None, *, claim_token: Any = None
    ) -> bool:
        """Record step ``position`` (0, 1, 2... in order) of the workflow run ``job``, named
        ``name``, with the step's ``result`` (None: none; a JSON value, by the rules of a job's
        result), in the caller's transaction, fenced by the claim as an ack is. A step whose
        database writes share this transaction commits exactly once: with its checkpoint, or
        not at all. ``workflow_steps`` reads them back; ``postkit.tasks`` workflows call this
        for you.

        Returns:
            True if it was recorded; False, with nothing recorded, when the caller no longer
            holds the claim: roll the transaction back, so that the step's writes go too.

        Raises:
            WorkflowStepError: a step is recorded at ``position`` already, or none at the
                position before it (the SQL module raises it: the transaction is aborted).
            InvalidResultError: ``result`` cannot be a result; nothing is sent.
        """
        return self._run(
            protocol.lifecycle.record_step(
                self._namespace,
                job,
                claim_token=self._token(job, claim_token),
                position=position,
                name=name,
                result=result,
            )
        )

    def park(self, job: JobRef, until: datetime, *, claim_token: Any = None) -> bool:
        """End the claim of the workflow run ``job`` and make it pending again from ``until``
        (by the queue's clock), the attempt this claim counted given back: a durable sleep,
        which holds no slot, claim or connection while it lasts. ``postkit.tasks`` workflows
        call this for ``ctx.sleep``.

        Returns:
            True if it was parked; False, with nothing changed, when the caller no longer
            holds the claim.
        """
        return self._run(
            protocol.lifecycle.park(
                self._namespace, job, claim_token=self._token(job, claim_token), until=until
            )
        )

    def wait_event(
        self, job: JobRef, position: int, name: str, until: datetime, *, claim_token: Any = None
    ) -> tuple[str, Any]:
        """The workflow run ``job`` waits for its event ``name`` until ``until``, as step
        ``position`` (``postkit.tasks`` workflows call this for ``ctx.wait_for``): an event
        sent is taken and recorded as the step, ``('received', payload)``; past ``until`` the
        step is recorded without one, ``('timed_out', None)``; else the run is parked until
        ``until`` and woken by an event sent meanwhile, ``('parked', None)``. ``('stale',
        None)``: the caller no longer holds the claim, and nothing changed."""
        return self._run(
            protocol.lifecycle.wait_event(
                self._namespace,
                job,
                claim_token=self._token(job, claim_token),
                position=position,
                name=name,
                until=until,
            )
        )

    def await_jobs(
        self, job: JobRef, job_ids: Sequence[int], *, claim_token: Any = None
    ) -> tuple[str, str | None]:
        """The workflow run ``job`` waits for the jobs ``job_ids`` it pushed to complete, as a
        job pushed with ``depends_on`` waits for its parents (``postkit.tasks`` workflows call
        this for ``ctx.map``); they become its parents (``parent_results`` reads theirs). The
        status: ``'waiting'``, the run's claim ended and the last job's ack makes it pending
        again; ``'ready'``, they all completed already; ``'failed'``, one is unknown,
        dead-lettered or cancelled (the second item says which), and nothing changed;
        ``'stale'``, the caller no longer holds the claim, and nothing changed."""
        return self._run(
            protocol.lifecycle.await_jobs(
                self._namespace, job, claim_token=self._token(job, claim_token), job_ids=job_ids
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
            protocol.lifecycle.release(self._namespace, job, worker_id=worker_id, claim_token=token)
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
        return self._run(protocol.lifecycle.tick_timeouts(self._namespace, limit=limit))
