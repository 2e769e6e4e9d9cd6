"""An App: typed tasks in one namespace, and the Handlers a worker runs for them."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, overload

import psycopg

from postkit import errors
from postkit.queue import QueueClient, QueuePolicy, limits
from postkit.queue.protocol import Duration
from postkit.queue.protocol import checks as check
from postkit.queue.records import WorkflowStep
from postkit.tasks.task import BaseTask, Task, TaskSettings, TransactionalTask, Workflow
from postkit.worker import Handlers, Worker
from postkit.worker.handlers import Transaction

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("postkit.tasks")


@dataclass(frozen=True)
class RunStatus:
    """A workflow run as :meth:`App.run_status` reads it."""

    run_id: int
    state: str
    """As ``QueueClient.result`` says it: 'pending', 'scheduled' (sleeping or waiting for an
    event too), 'running', 'waiting', 'completed', 'dead', 'cancelled' or 'unknown'."""
    reason: str | None
    """Why it was dead-lettered or cancelled."""
    result: Any
    """What the workflow returned, once completed, when its queue keeps results."""
    steps: list[WorkflowStep]
    """The steps it recorded, in order."""


class App:
    """Typed tasks of one namespace:

        app = App(namespace="my-app")

        @app.task(queue="send_otp", max_attempts=5, timeout=30)
        def send_otp(user_id: str, *, channel: str = "whatsapp") -> None: ...

        send_otp.push(cursor, user_id="42")   # a job in the caller's transaction

    and the worker side: :attr:`handlers` holds one handler per task (it decodes the job's
    payload into the call), so ``postkit worker myapp.tasks`` runs an App as it runs a
    ``Handlers``; :meth:`worker` does it from Python. Plain handlers may join the tasks'
    (``@app.handlers.register("queue")``).
    """

    def __init__(self, namespace: str = "default") -> None:
        """``namespace``: where the tasks' jobs are pushed and where a worker of this App
        claims them.

        Raises:
            InvalidNameError: the namespace is not a valid name.
        """
        check.name("namespace", namespace, required=True)
        self.namespace = namespace
        self.handlers = Handlers()
        """The handlers a worker runs: one per task, and any registered on it directly."""
        self.tasks: dict[str, BaseTask[..., Any]] = {}
        """The tasks by queue."""

    def __repr__(self) -> str:
        return f"<App {self.namespace!r}: {', '.join(self.tasks) or 'no tasks'}>"

    @overload
    def task(
        self,
        *,
        queue: str,
        max_attempts: int | None = ...,
        backoff_base: Duration | None = ...,
        backoff_cap: Duration | None = ...,
        visibility_timeout: Duration | None = ...,
        retain_results: Duration | None = ...,
        timeout: float | None = ...,
        priority: int = ...,
        unique_by: Sequence[str] = ...,
        transactional: Literal[False] = ...,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    @overload
    def task(
        self,
        *,
        queue: str,
        max_attempts: int | None = ...,
        backoff_base: Duration | None = ...,
        backoff_cap: Duration | None = ...,
        visibility_timeout: Duration | None = ...,
        retain_results: Duration | None = ...,
        timeout: float | None = ...,
        priority: int = ...,
        unique_by: Sequence[str] = ...,
        transactional: Literal[True],
        transaction: Transaction | None = ...,
    ) -> Callable[[Callable[Concatenate[Any, P], R]], TransactionalTask[P, R]]: ...

    def task(
        self,
        *,
        queue: str,
        max_attempts: int | None = None,
        backoff_base: Duration | None = None,
        backoff_cap: Duration | None = None,
        visibility_timeout: Duration | None = None,
        retain_results: Duration | None = None,
        timeout: float | None = None,
        priority: int = 0,
        unique_by: Sequence[str] = (),
        transactional: bool = False,
        transaction: Transaction | None = None,
        batch: int = 1,
    ) -> Callable[[Callable[..., Any]], BaseTask[Any, Any]]:
        """Decorate a function to make it a :class:`Task` whose jobs go to ``queue`` (a
        :class:`TransactionalTask` when ``transactional``).

        Each option has one home, and the first that says something wins: a push's own
        (:meth:`Task.options`), then the task's, then the queue's policy, then the built-in
        default (max_attempts 20; visibility timeout 30 s; backoff from 1 s doubling up to
        1 h; handler timeout the worker's, an hour).

        Args:
            queue: the queue of the task's jobs; one task per queue.
            max_attempts: 1..1000 claims before a job is dead-lettered. Every push of the task
                carries it, and the worker writes it to the queue's policy when it starts,
                for jobs pushed another way (by hand, by SQL, by a schedule).
            backoff_base, backoff_cap: the retry backoff; visibility_timeout: how long a
                claim lasts between heartbeats. Queue policies: the worker writes them to the
                queue's policy when it starts (``configure_queue``, logged), and every
                job of the queue follows them (a worker's own ``visibility_timeout`` still
                overrides the claim's length). A setting the task leaves out stays the
                operator's (``postkit queue configure``); one it declares is the code's, and
                each worker start writes it again over an operator's change.
            retain_results: how long the queue keeps what each job's function returns, for
                ``QueueClient.result`` and ``wait_for_result``: a queue policy like the three
                above. A queue keeps no results unless told: a worker whose handler returns a
                value on such a queue logs once, at WARNING, that it is discarded.
            timeout: the handler's maximum run time in seconds (``Handlers.add(timeout=)``).
            priority: the jobs' priority unless a push says otherwise.
            unique_by: names of the function's parameters whose values key each job: while
                a job of the queue with the same values is pending or running, another push
                is a no-op that returns None. The key is those values (defaults included) as a
                compact JSON array, e.g. ``["42"]``; past 128 characters, ``sha256:`` and the
                array's digest.
            transactional: the function takes a cursor first, ``def f(cursor, ...)``, and the
                worker passes one in the transaction of the job's ack: the function's writes
                commit with the ack, exactly once, and roll back with it when the function
                raises or its claim went stale (``Handlers.add(transactional=True)``). The
                cursor is no argument of the pushes (see :class:`TransactionalTask`).
            transaction: where a transactional task's transaction runs, as
                ``Handlers.add(transaction=)`` takes it: a factory of a context that begins a
                transaction and yields a cursor in it, such as Django's
                (``postkit.contrib.django.transaction``); by default a connection of the
                worker's pool.
            batch: up to this many of a transactional task's jobs share one transaction and
                its commit, on the worker's pool (``Handlers.add(batch=)``, which says what
                it costs).

        Raises:
            InvalidNameError, InvalidMaxAttemptsError, InvalidDurationError,
            InvalidPriorityError: an option is out of range, as the queue checks it.
            InvalidArgumentsError: ``unique_by`` names something that is not a named
                parameter of the function (when decorating), or is a str; a transactional
                task's function takes no cursor first, or pydantic cannot validate an
                annotation that holds a model (when decorating).
            ValueError: ``transaction`` is given without ``transactional``; the queue already
                has a task or handler, ``timeout`` is not positive, ``batch`` does not fit the
                task (below 1, or above 1 without ``transactional`` or with a
                ``transaction``), or a transactional task's function is ``async def`` (when
                decorating, from :meth:`Handlers.add`).
        """
        settings = _settings(
            queue=queue,
            max_attempts=max_attempts,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            visibility_timeout=visibility_timeout,
            retain_results=retain_results,
            timeout=timeout,
            priority=priority,
            unique_by=unique_by,
            transactional=transactional,
            transaction=transaction,
        )

        def decorate(function: Callable[..., Any]) -> BaseTask[Any, Any]:
            if transactional and inspect.iscoroutinefunction(function):
                raise ValueError("transactional tasks must be synchronous functions")
            kind = TransactionalTask if transactional else Task
            task: BaseTask[Any, Any] = kind(self.namespace, function, settings)
            self.handlers.add(
                queue,
                task.handler(),
                transactional=transactional,
                timeout=timeout,
                transaction=transaction,
                batch=batch,
            )
            self.tasks[queue] = task
            return task

        return decorate

    def workflow(
        self,
        *,
        queue: str,
        max_attempts: int | None = None,
        backoff_base: Duration | None = None,
        backoff_cap: Duration | None = None,
        visibility_timeout: Duration | None = None,
        retain_results: Duration | None = None,
        timeout: float | None = None,
        priority: int = 0,
        unique_by: Sequence[str] = (),
    ) -> Callable[[Callable[Concatenate[Any, P], R]], Workflow[P, R]]:
        """Decorate a function to make it a :class:`Workflow` whose runs are jobs of
        ``queue``: the function takes a :class:`~postkit.worker.workflow.WorkflowContext`
        first and calls its steps through it (``ctx.step``, ``ctx.transaction``); each step
        completed is recorded, fenced by the run's claim, and a run that runs again (a retry, a
        rescue, a restart) replays the recorded steps instead of running them again. A run is
        retried, dead-lettered, cancelled and rate-limited as any job of its queue; its result
        is what the function returns. An ``async def`` function gets an
        :class:`~postkit.worker.workflow.AsyncWorkflowContext` and awaits its steps. The
        options are :meth:`task`'s.

        Raises:
            as :meth:`task`.
        """
        settings = _settings(
            queue=queue,
            max_attempts=max_attempts,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            visibility_timeout=visibility_timeout,
            retain_results=retain_results,
            timeout=timeout,
            priority=priority,
            unique_by=unique_by,
            transactional=False,
            transaction=None,
        )

        def decorate(function: Callable[Concatenate[Any, P], R]) -> Workflow[P, R]:
            workflow: Workflow[P, R] = Workflow(self.namespace, function, settings)
            self.handlers.add(queue, workflow.handler(), timeout=timeout, workflow=True)
            self.tasks[queue] = workflow
            return workflow

        return decorate

    def send_event(
        self, cursor: Any, run_id: int, name: str, payload: Any = None, *, key: str | None = None
    ) -> bool:
        """Send the event ``name`` with ``payload`` to the workflow run ``run_id`` of this App's
        namespace, in the caller's transaction on ``cursor``: ``QueueClient.send_event``."""
        return QueueClient(cursor, self.namespace).send_event(run_id, name, payload, key=key)

    def run_status(self, cursor: Any, run_id: int) -> RunStatus:
        """Where the workflow run ``run_id`` of this App's namespace is (its job's
        ``QueueClient.result``: state, reason, its return value once completed) and the steps
        it recorded, in order; two reads in the caller's transaction on ``cursor``."""
        client = QueueClient(cursor, self.namespace)
        result = client.result(run_id)
        return RunStatus(
            run_id=run_id,
            state=result.state,
            reason=result.reason,
            result=result.value,
            steps=client.workflow_steps(run_id),
        )

    def cancel_run(self, cursor: Any, run_id: int) -> int:
        """Cancel the workflow run ``run_id`` of this App's namespace, whatever it is doing,
        with the live jobs of its tree and of its maps (``QueueClient.cancel_run``, called
        until it finds none), in the caller's transaction on ``cursor``. Returns how many it
        cancelled (0: nothing was live)."""
        client = QueueClient(cursor, self.namespace)
        cancelled = 0
        while done := client.cancel_run(run_id):
            cancelled += done
        return cancelled

    def apply_policies(
        self, cursor: Any, *, queues: Collection[str] | None = None
    ) -> dict[str, QueuePolicy]:
        """Write each task's queue policy settings (max_attempts, backoff_base, backoff_cap,
        visibility_timeout, retain_results: those it declares) to its queue with
        ``configure_queue``, in the caller's transaction on ``cursor``; the caller
        commits. Logs each queue's change on the ``postkit.tasks`` logger.

        ``queues``: only these queues' tasks (default: every task's).

        Returns:
            the policy now in force, by queue, for each queue it wrote to.

        Raises:
            PermissionDeniedError: the role lacks operator access; the transaction is
                aborted.
        """
        client = QueueClient(cursor, self.namespace)
        applied: dict[str, QueuePolicy] = {}
        for queue, task in self.tasks.items():
            settings: dict[str, Any] = task.settings.queue_policy()
            if not settings or (queues is not None and queue not in queues):
                continue
            policy = client.configure_queue(queue, **settings)
            applied[queue] = policy
            logger.info(
                "queue %s: applied the policy of task %s (%s); in force: max attempts %d, "
                "visibility timeout %gs, backoff %gs doubling up to %gs",
                queue,
                task.signature.name,
                _shown(settings),
                policy.max_attempts,
                policy.visibility_timeout,
                policy.backoff_base,
                policy.backoff_cap,
                extra={"event": "policy_applied", "queue": queue, "settings": settings},
            )
        return applied

    def configure_queues(
        self, dsn: str, *, queues: Collection[str] | None = None
    ) -> dict[str, QueuePolicy]:
        """What a worker of this App does as it starts: :meth:`apply_policies` on a
        connection of its own, committed. A role without operator access changes nothing: it
        logs a warning naming what it could not apply and returns an empty dict, and the
        queues keep the policies they have. No task with a queue policy: no connection.

        Returns:
            the policy now in force, by queue, for each queue it wrote to.
        """
        wanted = {
            queue: settings
            for queue, task in self.tasks.items()
            if (settings := task.settings.queue_policy()) and (queues is None or queue in queues)
        }
        if not wanted:
            return {}
        with psycopg.connect(dsn, prepare_threshold=None) as connection:
            try:
                return self.apply_policies(connection.cursor(), queues=queues)
            except errors.PermissionDeniedError as exc:
                connection.rollback()
                logger.warning(
                    "could not apply the tasks' queue policies (%s): %s; the queues keep the "
                    "policies they have (an operator sets them: postkit queue configure)",
                    "; ".join(f"{queue}: {_shown(settings)}" for queue, settings in wanted.items()),
                    exc,
                    extra={"event": "policy_not_applied", "queues": list(wanted)},
                )
                return {}

    def worker(self, dsn: str, **options: Any) -> Worker:
        """A :class:`~postkit.worker.Worker` for this App's handlers in its namespace, after
        :meth:`configure_queues` (for the queues it will serve): ``app.worker(dsn,
        concurrency=8).run()``. ``options`` are the Worker's, but ``namespace``.
        """
        self.configure_queues(dsn, queues=options.get("queues"))
        return Worker(dsn, self.handlers, namespace=self.namespace, **options)


def _shown(settings: dict[str, Any]) -> str:
    """``max_attempts 5, backoff_base 2``: queue settings as a log line shows them."""
    return ", ".join(f"{name} {value}" for name, value in settings.items())


def _settings(
    *,
    queue: str,
    max_attempts: int | None,
    backoff_base: Duration | None,
    backoff_cap: Duration | None,
    visibility_timeout: Duration | None,
    retain_results: Duration | None,
    timeout: float | None,
    priority: int,
    unique_by: Sequence[str],
    transactional: bool,
    transaction: Transaction | None,
) -> TaskSettings:
    """A task's settings, each checked as the queue checks it (see :meth:`App.task`)."""
    check.name("queue", queue, required=True)
    if transaction is not None and not transactional:
        raise ValueError("only a transactional task runs in a given transaction")
    check.integer(
        "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=limits.MAX_ATTEMPTS
    )
    for what, duration in (
        ("backoff_base", backoff_base),
        ("backoff_cap", backoff_cap),
        ("visibility_timeout", visibility_timeout),
        ("retain_results", retain_results),
    ):
        check.duration(what, duration)
    check.required_integer(
        "priority", priority, errors.InvalidPriorityError, bounds=limits.PRIORITY
    )
    if isinstance(unique_by, str):
        raise errors.InvalidArgumentsError(
            f"unique_by takes a sequence of parameter names, e.g. ({unique_by!r},), not a str"
        )
    return TaskSettings(
        queue=queue,
        max_attempts=max_attempts,
        backoff_base=backoff_base,
        backoff_cap=backoff_cap,
        visibility_timeout=visibility_timeout,
        retain_results=retain_results,
        timeout=timeout,
        priority=priority,
        unique_by=tuple(unique_by),
        transactional=transactional,
        transaction=transaction,
    )


__all__ = ["App", "RunStatus"]
