"""The calls of a job's life: push, claim, settle, rescue, waiting for due work, and what
became of a job (its result)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from postkit import errors
from postkit.queue import limits
from postkit.queue.protocol import checks as check
from postkit.queue.protocol import readers as read
from postkit.queue.protocol.call import Call, Duration, JobRef, Rows
from postkit.queue.protocol.readers import NextDue
from postkit.queue.records import Job, JobResult, NackOutcome, TreeJob, WorkflowStep


def push(
    namespace: str,
    queue: str,
    payload: object,
    *,
    delay: Duration | None,
    run_at: datetime | None,
    priority: int,
    max_attempts: int | None,
    unique_key: str | None,
    backoff_base: Duration | None,
    backoff_cap: Duration | None,
    trace_context: Mapping[str, str] | None,
    group_key: str | None = None,
    depends_on: Sequence[int | Job] | None = None,
    wait_for_room: Duration | None = None,
) -> Call[int | None]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        payload=check.payload(payload),
        delay=check.duration("delay", delay),
        run_at=check.run_at(run_at, delay=delay),
        priority=check.required_integer(
            "priority", priority, errors.InvalidPriorityError, bounds=limits.PRIORITY
        ),
        max_attempts=check.integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=limits.MAX_ATTEMPTS
        ),
        unique_key=check.name("unique_key", unique_key, required=False),
        backoff_base=check.duration("backoff_base", backoff_base),
        backoff_cap=check.duration("backoff_cap", backoff_cap),
    )
    params["trace_context"] = check.trace_context(trace_context)
    params["group_key"] = check.name("group_key", group_key, required=False)
    params["depends_on"] = check.parents("depends_on", depends_on)
    params["wait_for_room"] = check.duration("wait_for_room", wait_for_room)
    return Call("push", params, read.scalar)


def dependency_problem(namespace: str, depends_on: Sequence[int | Job]) -> Call[str | None]:
    """Why the SQL module would refuse a push with these parents (None: it would not), asked
    before the push so that a refusal leaves the caller's transaction usable."""
    params = check.base(namespace, depends_on=check.parents("depends_on", depends_on))
    return Call("dependency_problem", params, read.scalar)


def parent_results(namespace: str, job_id: int) -> Call[dict[int, Any]]:
    """The results of job ``job_id``'s parents, by parent id, in the order its push listed
    them: what each parent's handler returned once it completed in a queue that keeps results,
    None otherwise."""
    params = check.base(namespace, job_id=check.job_id(job_id))
    return Call("parent_results", params, read.parent_results)


def waiting_children(namespace: str, job_id: int, limit: int) -> Call[list[int]]:
    """The ids of the jobs waiting for job ``job_id`` to complete, in id order, at most
    ``limit``."""
    params = check.base(
        namespace,
        job_id=check.job_id(job_id),
        limit=check.limit("waiting_children", limit),
    )
    return Call("waiting_children", params, lambda rows: [row["child_id"] for row in rows])


def job_tree(namespace: str, job_id: int, limit: int) -> Call[list[TreeJob]]:
    """Job ``job_id`` and what descends from it, generation by generation, at most ``limit``
    jobs."""
    params = check.base(
        namespace,
        job_id=check.job_id(job_id),
        limit=check.limit("job_tree", limit),
    )
    return Call("job_tree", params, read.tree_jobs)


def pull(
    namespace: str,
    queue: str,
    *,
    worker_id: str | None,
    visibility_timeout: Duration | None,
    limit: int,
) -> Call[list[Job]]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        worker_id=check.name("worker_id", worker_id, required=False),
        visibility_timeout=check.duration("visibility_timeout", visibility_timeout),
        limit=check.limit("pull", limit),
    )
    return Call("pull", params, lambda rows: [read.job(row) for row in rows])


def ack(
    namespace: str, job: JobRef, *, worker_id: str | None, claim_token: object, result: object
) -> Call[bool]:
    """Ack ``job``, with its ``result`` (None: none; a :class:`check.CheckedResult` as it
    is)."""
    params = check.base(namespace, **check.claim("ack", job, worker_id, claim_token))
    checked = check.result(result)
    params["result"] = None if checked is None else checked.text
    return Call("ack", params, read.scalar)


def job_result(namespace: str, job_id: int) -> Call[JobResult]:
    params = check.base(namespace, job_id=check.job_id(job_id))
    return Call("job_result", params, read.job_result)


def results_channel(namespace: str) -> Call[str]:
    """The LISTEN channel of the namespace's results (the SQL module names it)."""
    return Call("results_channel", check.base(namespace), read.scalar)


def unlisten(channel: str) -> Call[None]:
    """UNLISTEN ``channel``."""
    return Call("unlisten", {}, lambda rows: None, identifiers={"channel": channel})


def nack(
    namespace: str,
    job: JobRef,
    *,
    error: object,
    worker_id: str | None,
    claim_token: object,
    backoff: Duration | None,
) -> Call[NackOutcome]:
    params = check.base(
        namespace,
        **check.claim("nack", job, worker_id, claim_token),
        error=check.error_text(error),
        backoff=check.duration("backoff", backoff),
    )
    return Call("nack", params, lambda rows: NackOutcome(read.scalar(rows)))


def fail(
    namespace: str, job: JobRef, *, error: object, worker_id: str | None, claim_token: object
) -> Call[bool]:
    params = check.base(
        namespace, **check.claim("fail", job, worker_id, claim_token), error=check.error_text(error)
    )
    return Call("fail", params, read.scalar)


def extend_visibility(
    namespace: str,
    job: JobRef,
    *,
    extension: Duration,
    worker_id: str | None,
    claim_token: object,
) -> Call[bool]:
    params = check.base(
        namespace,
        **check.claim("extend_visibility", job, worker_id, claim_token),
        extension=check.required_duration("extension", extension),
    )
    return Call("extend_visibility", params, read.scalar)


def report_progress(
    namespace: str,
    job: JobRef,
    *,
    fraction: object,
    note: object,
    worker_id: str | None,
    claim_token: object,
) -> Call[bool]:
    params = check.base(
        namespace,
        **check.claim("report_progress", job, worker_id, claim_token),
        fraction=check.fraction(fraction),
        note=check.progress_note(note),
    )
    return Call("report_progress", params, read.scalar)


def record_step(
    namespace: str, job: JobRef, *, claim_token: object, position: int, name: str, result: object
) -> Call[bool]:
    """Record step ``position`` (``name``) of the run ``job``, fenced by its claim token, with
    the step's ``result`` (None: none)."""
    params = check.base(namespace, **fenced("record_step", job, claim_token))
    params["position"] = check_position(position)
    params["name"] = check.name("step name", name, required=True)
    checked = check.result(result)
    params["result"] = None if checked is None else checked.text
    return Call("record_step", params, read.scalar)


def park(namespace: str, job: JobRef, *, claim_token: object, until: datetime) -> Call[bool]:
    """End the claim of the run ``job`` and make it pending again from ``until``, its attempt
    given back."""
    params = check.base(namespace, **fenced("park", job, claim_token))
    if check.time("until", until) is None:
        raise errors.InvalidDurationError("until must be a timezone-aware datetime")
    params["until"] = until
    return Call("park", params, read.scalar)


def send_event(
    namespace: str, run_id: int, *, name: str, payload: object, key: str | None
) -> Call[bool]:
    """Send the event ``name`` with ``payload`` to the run ``run_id``."""
    checked = check.result(payload)
    params = check.base(
        namespace,
        job_id=check.job_id(run_id),
        name=check.name("event name", name, required=True),
        payload=None if checked is None else checked.text,
        key=check.name("key", key, required=False),
    )
    return Call("send_event", params, read.scalar)


def wait_event(
    namespace: str,
    job: JobRef,
    *,
    claim_token: object,
    position: int,
    name: str,
    until: datetime,
) -> Call[tuple[str, Any]]:
    """Take the run's event ``name`` (recorded as step ``position``), or park the run until
    ``until``: ('received', payload), ('timed_out', None), ('parked', None) or ('stale',
    None)."""
    params = check.base(namespace, **fenced("wait_event", job, claim_token))
    if check.time("until", until) is None:
        raise errors.InvalidDurationError("until must be a timezone-aware datetime")
    params.update(
        position=check_position(position),
        name=check.name("event name", name, required=True),
        until=until,
    )
    return Call("wait_event", params, read.event)


def await_jobs(
    namespace: str, job: JobRef, *, claim_token: object, job_ids: Sequence[int]
) -> Call[tuple[str, str | None]]:
    """The run ``job`` waits for ``job_ids`` to complete: ('waiting', None), ('ready', None),
    ('failed', the problem) or ('stale', None)."""
    params = check.base(namespace, **fenced("await_jobs", job, claim_token))
    params["job_ids"] = check.parents("job_ids", job_ids)
    return Call("await_jobs", params, lambda rows: (str(rows[0]["status"]), rows[0]["problem"]))


def fenced(call: str, job: JobRef, claim_token: object) -> dict[str, Any]:
    """The parameters of a workflow run's call: its job id and its claim token (the Job's own
    when none is given), which the call requires: a worker_id alone does not fence it."""
    params = check.claim(call, job, None, claim_token)
    if params["claim_token"] is None:
        raise errors.InvalidClaimTokenError(
            f"{call} needs the claim token pull returned (pass the Job, or claim_token=)"
        )
    del params["worker_id"]
    return params


def check_position(position: object) -> int:
    """A step's position, 0 to limits.MAX_STEPS - 1."""
    if (
        isinstance(position, bool)
        or not isinstance(position, int)
        or not 0 <= position < limits.MAX_STEPS
    ):
        raise errors.WorkflowStepError(
            f"a step's position must be from 0 to {limits.MAX_STEPS - 1}, got {position!r}"
        )
    return position


def workflow_steps(namespace: str, job_id: int) -> Call[list[WorkflowStep]]:
    """The steps run ``job_id`` recorded, in order."""
    params = check.base(namespace, job_id=check.job_id(job_id))
    return Call("workflow_steps", params, read.workflow_steps)


def release(
    namespace: str, job: JobRef, *, worker_id: str | None, claim_token: object
) -> Call[bool]:
    params = check.base(namespace, **check.claim("release", job, worker_id, claim_token))
    return Call("release", params, read.scalar)


def next_run_at(namespace: str, queues: list[str]) -> Call[NextDue]:
    return Call(
        "next_run_at", check.base(namespace, queues=check.queue_list(queues)), read.next_due
    )


@dataclass(frozen=True)
class WakeupRequest:
    """What :func:`request_wakeup` did."""

    made: bool
    """It made a request that was not there (see ``WorkListener.wait_for_work``)."""
    waiting: bool
    """The calling backend waits for a slot of some of the queues, which a concurrency or group
    limit holds back (``postkit_queue.wait_for_slot``): a wake-up for another reason calls
    :func:`stop_waiting`."""


def request_wakeup(namespace: str, queues: list[str]) -> Call[WakeupRequest]:
    """Ask to be notified by the next transaction that makes a job of these queues ready, and
    to be woken, alone, by one that frees a slot of those a limit holds back (run it in a
    transaction of its own, on the listening connection, before the last look for jobs)."""
    params = check.base(namespace, queues=check.queue_list(queues))
    return Call(
        "request_wakeup",
        params,
        lambda rows: WakeupRequest(bool(rows[0]["made"]), bool(rows[0]["waiting"])),
    )


def stop_waiting(namespace: str) -> Call[int]:
    """The calling backend waits for no slot of the namespace any more (its listener woke for
    another reason); how many waits it ended."""
    return Call("stop_waiting", check.base(namespace), lambda rows: int(read.scalar(rows)))


def next_schedule_at(namespace: str) -> Call[NextDue]:
    """When the namespace's next active schedule falls due (None: it has none)."""
    return Call("next_schedule_at", check.base(namespace), read.next_due)


def channels(namespace: str, queues: list[str]) -> Call[list[str]]:
    """The LISTEN channels of these queues (the SQL module names them)."""
    params = check.base(namespace, queues=check.queue_list(queues))
    return Call("channels", params, lambda rows: [row["channel"] for row in rows])


def listen(channel: str) -> Call[None]:
    """LISTEN on ``channel`` (a name :func:`channels` returned, or a listener's wake channel)."""
    return Call("listen", {}, lambda rows: None, identifiers={"channel": channel})


def wake(channel: str) -> Call[None]:
    """Notify ``channel`` (a listener's wake channel), which ends that listener's wait."""
    return Call("wake", {"channel": channel}, lambda rows: None)


def tick_timeouts(namespace: str, *, limit: int) -> Call[int]:
    params = check.base(namespace, limit=check.limit("tick_timeouts", limit))
    return Call("tick_timeouts", params, lambda rows: int(read.scalar(rows)))


def get_job(namespace: str, job_id: int) -> Call[Job | None]:
    params = check.base(namespace, job_id=check.job_id(job_id))
    return Call("get_job", params, read.optional_job)


def clock() -> Call[datetime]:
    """The queue's clock (the database's, plus any test offset)."""
    return Call("clock", {}, read.scalar)


def pull_any(
    namespace: str,
    queues: list[str],
    *,
    worker_id: str | None,
    visibility_timeout: Duration | None,
    limit: int,
    weights: Mapping[str, int] | None = None,
) -> Call[list[Job]]:
    checked = check.queue_list(queues)
    params = check.base(
        namespace,
        queues=checked,
        worker_id=check.name("worker_id", worker_id, required=False),
        visibility_timeout=check.duration("visibility_timeout", visibility_timeout),
        limit=check.limit("pull_any", limit),
        weights=None if weights is None else check.queue_weights(checked, weights),
    )
    return Call("pull_any", params, lambda rows: [read.job(row) for row in rows])


def push_batch(
    namespace: str,
    queue: str,
    payloads: Sequence[object],
    *,
    delay: Duration | None,
    run_at: datetime | None,
    priority: int,
    max_attempts: int | None,
    unique_keys: Sequence[str | None] | None,
    trace_context: Mapping[str, str] | None,
    group_keys: Sequence[str | None] | None = None,
    depends_on: Sequence[Sequence[int | Job] | None] | None = None,
    wait_for_room: Duration | None = None,
) -> Call[list[int | None]]:
    """Push ``payloads``; each job records ``trace_context`` (the SQL function takes one per
    payload, which a batch pushed from one span shares)."""
    if isinstance(payloads, (str, bytes)) or not isinstance(payloads, Sequence):
        raise errors.InvalidPayloadError("payloads must be a list of JSON-serializable values")
    if len(payloads) > limits.BATCH_PAYLOADS:
        raise errors.InvalidLimitError(
            f"at most {limits.BATCH_PAYLOADS} payloads per batch, got {len(payloads)}"
        )
    keys = None
    if unique_keys is not None:
        if isinstance(unique_keys, (str, bytes)) or not isinstance(unique_keys, Sequence):
            raise errors.InvalidNameError("unique_keys must be a list of str or None")
        keys = [check.name("unique_key", key, required=False) for key in unique_keys]
        if len(keys) != len(payloads):
            raise errors.InvalidNameError(f"{len(keys)} unique keys for {len(payloads)} payloads")
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        payloads=check.payload(list(payloads)),
        delay=check.duration("delay", delay),
        run_at=check.run_at(run_at, delay=delay),
        priority=check.required_integer(
            "priority", priority, errors.InvalidPriorityError, bounds=limits.PRIORITY
        ),
        max_attempts=check.integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=limits.MAX_ATTEMPTS
        ),
        unique_keys=keys,
    )
    context = check.trace_context(trace_context)
    params["trace_contexts"] = (
        None if context is None else "[" + ",".join([context] * len(payloads)) + "]"
    )
    params["group_keys"] = None
    if group_keys is not None:
        if isinstance(group_keys, (str, bytes)) or not isinstance(group_keys, Sequence):
            raise errors.InvalidNameError("group_keys must be a list of str or None")
        groups = [check.name("group_key", key, required=False) for key in group_keys]
        if len(groups) != len(payloads):
            raise errors.InvalidNameError(f"{len(groups)} group keys for {len(payloads)} payloads")
        params["group_keys"] = groups
    params["depends_on"] = None
    if depends_on is not None:
        if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, Sequence):
            raise errors.InvalidDependencyError(
                "depends_on must be a list of one entry per payload (a list of job ids, or None)"
            )
        if len(depends_on) != len(payloads):
            raise errors.InvalidDependencyError(
                f"{len(depends_on)} depends_on entries for {len(payloads)} payloads"
            )
        entries = [check.parents(f"depends_on[{n}]", entry) for n, entry in enumerate(depends_on)]
        params["depends_on"] = json.dumps(entries)
    params["wait_for_room"] = check.duration("wait_for_room", wait_for_room)
    return Call("push_batch", params, lambda rows: [row["id"] for row in rows])


def ack_batch(namespace: str, jobs: Sequence[Job], *, worker_id: str | None) -> Call[bool]:
    params = check.base(
        namespace,
        **check.claims("ack_batch", jobs),
        worker_id=check.name("worker_id", worker_id, required=False),
    )
    return Call("ack_batch", params, read.scalar)


def ack_many(
    namespace: str, jobs: Sequence[Job], results: Sequence[object] | None
) -> Call[list[int]]:
    """Ack ``jobs``, with their ``results`` (None, or one entry per job, each as ack takes
    it)."""
    params = check.base(namespace, **check.claims("ack_many", jobs))
    params["results"] = check.results(results, len(jobs))
    return Call("ack_many", params, lambda rows: list(read.scalar(rows)))


def ack_and_pull(
    namespace: str,
    queue: str,
    acks: Sequence[Job],
    *,
    results: Sequence[object] | None,
    worker_id: str | None,
    visibility_timeout: Duration | None,
    limit: int,
) -> Call[tuple[list[int], list[Job]]]:
    params = check.base(
        namespace,
        **check.claims("ack_and_pull", acks),
        queue=check.name("queue", queue, required=True),
        worker_id=check.name("worker_id", worker_id, required=False),
        visibility_timeout=check.duration("visibility_timeout", visibility_timeout),
        limit=check.limit("pull", limit),
    )
    params["results"] = check.results(results, len(acks))

    def parse(rows: Rows) -> tuple[list[int], list[Job]]:
        acked = list(rows[0]["acked"]) if rows else []
        return acked, [read.job(row) for row in rows if row["id"] is not None]

    return Call("ack_and_pull", params, parse)
