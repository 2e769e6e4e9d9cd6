"""A workflow run's steps, as its handler goes through them (the SQL module's workflows.sql).

A workflow is a handler that takes a :class:`WorkflowContext` beside its job and calls its
work through it: ``ctx.step(name, fn, ...)`` and ``ctx.transaction(name, fn, ...)``. Each step
completed is recorded (``record_step``), fenced by the run's claim; when the run runs again (a
retry after a failure, a rescue after a crash, a restart), the handler is called from the
start and each step already recorded returns its recorded result without running: the first
step not recorded runs. So:

- ``ctx.step`` runs ``fn`` until it succeeds once, at least once: a process that dies after
  ``fn`` returned and before its checkpoint committed runs it again on the next attempt.
- ``ctx.transaction`` runs ``fn(cursor, ...)`` in one transaction with its checkpoint: its
  writes commit exactly once, with the checkpoint, or not at all. A stale claim (the run was
  rescued, cancelled or finished meanwhile) rolls them back.
- ``ctx.sleep(duration)`` records the time the run wakes and parks it: until then the run is
  a pending job due later, holding no slot, claim or connection. ``ctx.wait_for(event,
  timeout=)`` parks it the same way until the event is sent (``send_event``) or the deadline
  passes. ``ctx.map(task, calls)`` pushes a job of ``task`` per call and parks the run until
  they have all completed, as a job waits for its parents.
- A replay that reaches a recorded step under another name than the one recorded fails the run
  for good (:class:`NonDeterministicWorkflowError`): the code changed under a run in flight,
  and following it would pair results with the wrong steps.

A step's result is what ``fn`` returned, as JSON gives it back (a tuple comes back a list): the
first run gets the same value a replay gets. It must be a JSON value of at most 1 MiB, as a
job's result."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from postkit import errors
from postkit.queue import Job, QueueClient, protocol
from postkit.queue.protocol import Duration
from postkit.queue.protocol import checks as check
from postkit.queue.records import WorkflowStep
from postkit.worker.pool import Connections

T = TypeVar("T")

STEP_KINDS = ("step", "transaction", "sleep", "wait", "map")
"""The kinds of steps a run records, as the worker's metrics count them
(``postkit_workflow_steps``): ``ctx.step``'s, ``ctx.transaction``'s, ``ctx.sleep``'s, a
``ctx.wait_for``'s two (its deadline, its outcome) and a ``ctx.map``'s two (its jobs, their
results)."""


class NonDeterministicWorkflowError(errors.PermanentError):
    """A replay reached a recorded step under another name than the one recorded: the
    workflow's code changed under a run in flight. The run fails for good (a dead letter); see
    the docs on changing a workflow with runs in flight."""


class StaleRunError(errors.PostkitError):
    """The run's claim went stale while it ran (rescued, cancelled or finished meanwhile): its
    step was not recorded, and a transactional step's writes were rolled back. The worker drops
    the run's outcome; whoever holds the run now goes on."""


class RunParked(BaseException):
    """Raised by ``ctx.sleep`` once the run is parked: its claim ended, and it is pending again
    from ``until``. It ends the handler's call; the worker gives the slot back without settling
    the job. A BaseException, as asyncio's CancelledError is, so that a handler's ``except
    Exception`` does not swallow it and run on without a claim."""

    def __init__(self, run_id: int, until: datetime | None) -> None:
        super().__init__(
            f"run {run_id} waits for its jobs"
            if until is None
            else f"run {run_id} sleeps until {until.isoformat()}"
        )
        self.until = until
        """When it is due again; None: when the jobs it waits for (a map's) have completed."""


class WorkflowContext:
    """What a workflow's handler calls its steps through (see the module docstring)."""

    def __init__(
        self,
        job: Job,
        *,
        recorded: list[WorkflowStep],
        record: Callable[[int, str, Any], bool],
        transaction: Callable[[], AbstractContextManager[Any]],
        on_step: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self._job = job
        self._recorded = recorded
        self._record = record
        self._transaction = transaction
        self._on_step = on_step
        """Told the kind of each step recorded (STEP_KINDS): the worker's metrics."""
        self._position = 0

    @property
    def run_id(self) -> int:
        """The run's id: its job's."""
        return self._job.id

    @property
    def job(self) -> Job:
        """The run's job, as claimed."""
        return self._job

    def step(self, name: str, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``function(*args, **kwargs)`` as the step ``name`` and record what it returned;
        on a replay, return what was recorded without running it. At least once: see the
        module docstring.

        Raises:
            NonDeterministicWorkflowError: the step recorded at this point has another name.
            StaleRunError: the run's claim went stale; nothing was recorded.
            InvalidResultError: what ``function`` returned cannot be recorded.
        """
        recorded, position = self._replay(name)
        if recorded is not None:
            return recorded.result
        value = _recorded_form(function(*args, **kwargs))
        if not self._record(position, name, value):
            raise StaleRunError(f"run {self.run_id} lost its claim: step {name!r} not recorded")
        self._on_step("step")
        return value

    def transaction(
        self, name: str, function: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> Any:
        """Run ``function(cursor, *args, **kwargs)`` as the step ``name`` in one transaction
        with its checkpoint, and return what it returned: its writes commit exactly once. On a
        replay, return what was recorded without running it.

        Raises:
            NonDeterministicWorkflowError: the step recorded at this point has another name.
            StaleRunError: the run's claim went stale; the step's writes were rolled back.
            InvalidResultError: what ``function`` returned cannot be recorded (rolled back).
        """
        recorded, position = self._replay(name)
        if recorded is not None:
            return recorded.result
        with self._transaction() as cursor:
            value = _recorded_form(function(cursor, *args, **kwargs))
            client = QueueClient(cursor, namespace=self._job.namespace)
            if not client.record_step(self._job, position, name, value):
                # Raised inside the transaction: it rolls back, and the step's writes with it.
                raise StaleRunError(f"run {self.run_id} lost its claim: step {name!r} rolled back")
        self._on_step("transaction")
        return value

    def sleep(self, duration: Duration) -> None:
        """Sleep for ``duration`` (seconds, or a timedelta), durably: the first time the run
        gets here, the time it wakes (by the queue's clock) is recorded as a step named
        'sleep', and the run is parked in the same transaction (``park``): the handler's call
        ends, the worker's slot, claim and connection are free, and the run is a job due then.
        Claimed again once it is due, the run replays its steps and goes on past the sleep.
        A run that runs again before then (a retry) parks again until the recorded time.

        Raises:
            NonDeterministicWorkflowError: the step recorded at this point has another name.
            StaleRunError: the run's claim went stale; it neither slept nor recorded anything.
            InvalidDurationError: ``duration`` is negative, or longer than the longest delay.
        """
        # A sleep is a delay: at most the longest a push may delay a job.
        microseconds = check.duration("delay", duration)
        if microseconds is None:
            raise errors.InvalidDurationError("a sleep's duration must be given")
        recorded, position = self._replay("sleep")
        with self._transaction() as cursor:
            client = QueueClient(cursor, namespace=self._job.namespace)
            now = client.clock()
            if recorded is None:
                until = now + timedelta(microseconds=microseconds)
                if not client.record_step(
                    self._job, position, "sleep", {"until": until.isoformat()}
                ):
                    raise StaleRunError(f"run {self.run_id} lost its claim before it slept")
                self._on_step("sleep")
            else:
                until = datetime.fromisoformat(recorded.result["until"])
                if until <= now:
                    return
            if not client.park(self._job, until):
                raise StaleRunError(f"run {self.run_id} lost its claim before it slept")
        raise RunParked(self.run_id, until)

    def wait_for(self, event: str, *, timeout: Duration) -> Any:
        """Wait for the event ``event`` sent to this run (``send_event``), at most ``timeout``
        (seconds, or a timedelta) from the first time the run gets here: return its payload,
        or None past the deadline. An event sent before the run waits is kept and delivered.
        Waiting, the run is parked (as ``ctx.sleep`` parks it) until the deadline, and an
        event sent meanwhile wakes it at once; the deadline and the outcome are recorded as
        two steps ('wait_for', 'event'), which a replay reads back.

        Raises:
            NonDeterministicWorkflowError: the steps recorded at this point are another's.
            StaleRunError: the run's claim went stale; nothing changed.
            InvalidDurationError: ``timeout`` is negative, or longer than the longest delay.
        """
        microseconds = check.duration("delay", timeout)
        if microseconds is None:
            raise errors.InvalidDurationError("wait_for's timeout must be given")
        recorded, position = self._replay("wait_for")
        if recorded is not None and recorded.result.get("event") != event:
            raise NonDeterministicWorkflowError(
                f"run {self.run_id} reached step {position} waiting for {event!r}, which it "
                f"recorded waiting for {recorded.result.get('event')!r}"
            )
        outcome, outcome_position = self._replay("event")
        if outcome is not None:
            return outcome.result
        with self._transaction() as cursor:
            client = QueueClient(cursor, namespace=self._job.namespace)
            if recorded is None:
                until = client.clock() + timedelta(microseconds=microseconds)
                deadline = {"event": event, "until": until.isoformat()}
                if not client.record_step(self._job, position, "wait_for", deadline):
                    raise StaleRunError(f"run {self.run_id} lost its claim before it waited")
                self._on_step("wait")
            else:
                until = datetime.fromisoformat(recorded.result["until"])
            status, payload = client.wait_event(self._job, outcome_position, event, until)
            if status == "stale":
                raise StaleRunError(f"run {self.run_id} lost its claim while it waited")
        if status == "parked":
            raise RunParked(self.run_id, until)
        self._on_step("wait")
        return payload

    def map(self, task: Any, calls: Sequence[Mapping[str, Any]]) -> list[Any]:
        """Fan out: push a job of ``task`` (a task of ``postkit.tasks``) for each of
        ``calls`` (each a mapping of its keyword arguments, as ``task.push_many`` takes them),
        in one transaction with the step that records their ids (exactly once); then wait for
        them all, parked as a job waits for its parents (no slot, no poll: the last one's ack
        makes the run due), and return their results in the order of ``calls``, recorded as a
        step. The task's queue must keep results (``retain_results``): a map of a task whose
        queue keeps none fails the run for good, and says so. The results together are
        recorded as one step: at most 1 MiB of JSON.

        A job of the map dead-lettered or cancelled before the run waits fails the run for
        good; one dead-lettered or cancelled while it waits cancels the run, as it cancels any
        job that waits for it.

        Raises:
            NonDeterministicWorkflowError: the step recorded at this point is another's.
            StaleRunError: the run's claim went stale; nothing changed.
            PermanentError: a job of the map is unknown, dead-lettered or cancelled, or its
                queue keeps no results.
        """
        queue = task.settings.queue
        pushed, position = self._replay("map")
        if pushed is not None and pushed.result.get("queue") != queue:
            raise NonDeterministicWorkflowError(
                f"run {self.run_id} reached step {position} as a map of {queue!r}, which it "
                f"recorded as a map of {pushed.result.get('queue')!r}"
            )
        gathered, _ = self._replay("map_results")
        if gathered is not None:
            return list(gathered.result)
        if pushed is None:
            with self._transaction() as cursor:
                ids = task.push_many(cursor, calls)
                if None in ids:
                    raise errors.PermanentError(
                        f"run {self.run_id}'s map pushed a job that its task's unique_by "
                        "deduplicated: a map's jobs must each be new"
                    )
                client = QueueClient(cursor, namespace=self._job.namespace)
                if not client.record_step(
                    self._job, position, "map", {"queue": queue, "jobs": ids}
                ):
                    raise StaleRunError(f"run {self.run_id} lost its claim: its map rolled back")
            self._on_step("map")
        else:
            ids = pushed.result["jobs"]
        with self._transaction() as cursor:
            client = QueueClient(cursor, namespace=self._job.namespace)
            status, problem = client.await_jobs(self._job, ids)
            if status == "stale":
                raise StaleRunError(f"run {self.run_id} lost its claim while it mapped")
            if status == "failed":
                raise errors.PermanentError(f"run {self.run_id}'s map failed: {problem}")
            if status == "ready":
                results = client.parent_results(self.run_id)
                values = _recorded_form([results.get(job_id) for job_id in ids])
                if not client.record_step(self._job, position + 1, "map_results", values):
                    raise StaleRunError(f"run {self.run_id} lost its claim while it mapped")
        if status != "ready":
            raise RunParked(self.run_id, None)
        self._on_step("map")
        return list(values)

    def _replay(self, name: str) -> tuple[WorkflowStep | None, int]:
        """The step recorded at the next position, if any (checked against ``name``), and the
        position."""
        position = self._position
        self._position += 1
        if position >= len(self._recorded):
            return None, position
        recorded = self._recorded[position]
        if recorded.name != name:
            raise NonDeterministicWorkflowError(
                f"run {self.run_id} reached step {position} as {name!r}, which it recorded as "
                f"{recorded.name!r}: the workflow changed under a run in flight"
            )
        return recorded, position


class AsyncWorkflowContext:
    """What an ``async def`` workflow awaits its steps through: :class:`WorkflowContext`'s
    calls, each awaitable, with the same rules. A step's function may be ``async def`` (it is
    awaited) or not; a transactional step's function is synchronous, as its cursor is. Await
    each step before the next: the steps are recorded in the order they complete, and a
    replay must meet them in that order.
    """

    def __init__(self, context: WorkflowContext) -> None:
        self._context = context

    @property
    def run_id(self) -> int:
        """The run's id: its job's."""
        return self._context.run_id

    @property
    def job(self) -> Job:
        """The run's job, as claimed."""
        return self._context.job

    async def step(
        self, name: str, function: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        """As :meth:`WorkflowContext.step`; ``function`` may be ``async def``."""
        context = self._context
        recorded, position = context._replay(name)
        if recorded is not None:
            return recorded.result
        value = function(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        value = _recorded_form(value)
        if not await asyncio.to_thread(context._record, position, name, value):
            raise StaleRunError(f"run {self.run_id} lost its claim: step {name!r} not recorded")
        context._on_step("step")
        return value

    async def transaction(
        self, name: str, function: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        """As :meth:`WorkflowContext.transaction`, on a thread: ``function`` is synchronous."""
        return await asyncio.to_thread(self._context.transaction, name, function, *args, **kwargs)

    async def sleep(self, duration: Duration) -> None:
        """As :meth:`WorkflowContext.sleep`."""
        await asyncio.to_thread(self._context.sleep, duration)

    async def wait_for(self, event: str, *, timeout: Duration) -> Any:
        """As :meth:`WorkflowContext.wait_for`."""
        return await asyncio.to_thread(self._context.wait_for, event, timeout=timeout)

    async def map(self, task: Any, calls: Sequence[Mapping[str, Any]]) -> list[Any]:
        """As :meth:`WorkflowContext.map`."""
        return await asyncio.to_thread(self._context.map, task, calls)


def _recorded_form(value: Any) -> Any:
    """``value`` as a replay will read it back: checked as a result, then through JSON."""
    checked = protocol.checked_result(value)
    return None if checked is None else json.loads(checked.text)


def pooled_context(
    job: Job, pool: Connections, on_step: Callable[[str], None] = lambda kind: None
) -> WorkflowContext:
    """A worker's context for the run ``job``: the steps it recorded (one read on a connection
    of ``pool``), each new step's checkpoint on one (committed on its own), and each
    transactional step's transaction on one; ``on_step`` is told each step's kind."""

    @contextmanager
    def transaction() -> Iterator[Any]:
        with pool.connection() as connection, connection.transaction():
            yield connection.cursor()

    return WorkflowContext(
        job,
        recorded=pool.run(lambda client: client.workflow_steps(job.id)),
        record=lambda position, name, result: pool.run(
            lambda client: client.record_step(job, position, name, result)
        ),
        transaction=transaction,
        on_step=on_step,
    )


__all__ = [
    "STEP_KINDS",
    "AsyncWorkflowContext",
    "NonDeterministicWorkflowError",
    "RunParked",
    "StaleRunError",
    "WorkflowContext",
    "pooled_context",
]
