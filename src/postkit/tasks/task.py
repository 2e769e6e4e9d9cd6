"""A task: a function that runs as a job of its queue, pushed with the function's own
arguments, checked against its signature before any SQL is sent. A transactional task's
function also takes, first, a cursor in the transaction of its job's ack."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, ClassVar, Concatenate, Generic, ParamSpec, TypeVar

from postkit import errors
from postkit.errors import InvalidArgumentsError, InvalidRunAtError
from postkit.queue import AsyncQueueClient, Job, QueueClient, limits
from postkit.queue.protocol import Duration
from postkit.queue.protocol import checks as check
from postkit.tasks.context import running
from postkit.tasks.payload import Signature
from postkit.worker.handlers import Transaction

P = ParamSpec("P")
R = TypeVar("R")
TaskT = TypeVar("TaskT", bound="BaseTask[Any, Any]")


@dataclass(frozen=True)
class TaskSettings:
    """What ``@app.task(...)`` declared: the task's queue and its options (see
    :meth:`postkit.tasks.App.task` for what each does and which setting wins)."""

    queue: str
    max_attempts: int | None = None
    backoff_base: Duration | None = None
    backoff_cap: Duration | None = None
    visibility_timeout: Duration | None = None
    retain_results: Duration | None = None
    timeout: float | None = None
    priority: int = 0
    unique_by: tuple[str, ...] = ()
    transactional: bool = False
    """The function takes a cursor in the ack's transaction first (``Handlers.add``'s)."""
    transaction: Transaction | None = None
    """Where a transactional task's transaction runs (``Handlers.add``'s); None: on a
    connection of the worker's pool."""

    def queue_policy(self) -> dict[str, Duration | int]:
        """The settings that are the queue's policy, as ``configure_queue`` takes them:
        only those the task declares."""
        settings: dict[str, Duration | int | None] = {
            "max_attempts": self.max_attempts,
            "backoff_base": self.backoff_base,
            "backoff_cap": self.backoff_cap,
            "visibility_timeout": self.visibility_timeout,
            "retain_results": self.retain_results,
        }
        return {name: value for name, value in settings.items() if value is not None}


@dataclass(frozen=True)
class PushOptions:
    """How a push queues its job, beside the task's arguments: see :meth:`Task.options`."""

    delay: Duration | None = None
    run_at: datetime | None = None
    priority: int | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    depends_on: tuple[int, ...] | None = None


class BaseTask(Generic[P, R]):
    """What every task has, a :class:`Task` or a :class:`TransactionalTask`: pushes whose
    arguments ``P`` are the function's (a transactional one's after its cursor), and the
    worker's handler that calls it.

    ``push`` takes the arguments exactly as the function does, and mypy checks them against
    its signature (``ParamSpec``); they are checked again at run time, before any SQL. The
    options of the push (delay, run_at, priority, unique key, max attempts) are not arguments
    of ``push``: they come from :meth:`options`, so any argument name stays the function's own
    (a task may take an argument called ``delay``), and the type checker sees the function's
    parameters and nothing else.
    """

    _takes_cursor: ClassVar[bool] = False
    """Whether the function takes the ack's cursor first: ``settings.transactional`` says so
    of a :class:`TransactionalTask`'s, and of no other's."""
    _is_workflow: ClassVar[bool] = False
    """Whether the function is a workflow's, which takes a WorkflowContext first (the worker
    passes it, as it passes a transactional task's cursor)."""

    def __init__(self, namespace: str, function: Callable[..., R], settings: TaskSettings) -> None:
        """A task of ``function`` in ``namespace``; ``@app.task(...)`` makes them.

        Raises:
            InvalidArgumentsError: ``settings.unique_by`` names something that is not a named
                parameter of the function; a transactional task's function takes no cursor
                first; pydantic cannot validate an annotation that holds a model.
            ValueError: ``settings.transactional`` is true of a :class:`Task`, or false of a
                :class:`TransactionalTask`.
        """
        if settings.transactional is not (self._takes_cursor and not self._is_workflow):
            raise ValueError(
                f"a {type(self).__name__} with settings.transactional={settings.transactional}: "
                "a transactional task is a TransactionalTask, any other a Task"
            )
        self.namespace = namespace
        self.function = function
        self.settings = settings
        self.push_options = PushOptions()
        """The options each push of this task applies (see :meth:`options`)."""
        # The name as written where it was defined: a function defined in another's body is
        # shown without its "outer.<locals>." prefix.
        qualname = getattr(function, "__qualname__", None) or repr(function)
        name = qualname.rpartition("<locals>.")[2]
        self.signature = Signature(
            name,
            function,
            takes_cursor=self._takes_cursor,
            missing_first=(
                "a workflow takes its context as its first parameter, e.g. "
                "def workflow(ctx, order_id): ..."
            )
            if self._is_workflow
            else "a transactional task takes the cursor as its first parameter, e.g. "
            "def task(cursor, order_id): ...",
        )
        self.signature.check_unique_by(settings.unique_by)

    @property
    def queue(self) -> str:
        """The queue the task's jobs go to; the worker runs the task for each job of it."""
        return self.settings.queue

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.signature.shown} on queue {self.queue!r}>"

    def options(
        self: TaskT,
        *,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        depends_on: Sequence[int | Job] | None = None,
    ) -> TaskT:
        """This task with push options: ``send_otp.options(delay=10).push(cursor, "42")``.

        Args:
            delay: run no earlier than this long after the push (a timedelta or seconds).
            run_at: run no earlier than this timezone-aware time (the queue's clock decides
                when it has come); at most one of ``delay`` and ``run_at``.
            priority: -32768..32767, higher first; replaces the task's ``priority``.
            unique_key: while a job of the queue with this key is pending or running, the push
                is a no-op that returns None; replaces the key the task's ``unique_by``
                computes. Not for :meth:`push_many`.
            max_attempts: 1..1000; replaces the task's ``max_attempts`` for these pushes.
            depends_on: the jobs these pushes wait for (``QueueClient.push``'s): each job runs
                once every one of them has completed, and its function reads their results
                with :func:`postkit.tasks.parent_results`. :meth:`push_many` gives every job
                the same parents.

        Each option given replaces the one set before, and the others stay: two calls, one
        with ``priority=1`` and one with ``delay=5``, give both. The task itself is unchanged.

        Raises:
            InvalidDurationError, InvalidRunAtError, InvalidPriorityError, InvalidNameError,
            InvalidMaxAttemptsError, InvalidDependencyError: an option is invalid, as
            ``QueueClient.push`` checks it.
        """
        parents = check.parents("depends_on", depends_on)
        given: dict[str, Any] = {
            "delay": delay,
            "run_at": run_at,
            "priority": priority,
            "unique_key": unique_key,
            "max_attempts": max_attempts,
            "depends_on": None if parents is None else tuple(parents),
        }
        merged = replace(
            self.push_options, **{name: value for name, value in given.items() if value is not None}
        )
        if merged.delay is not None and merged.run_at is not None:
            raise InvalidRunAtError("give delay or run_at, not both")
        check.duration("delay", merged.delay)
        check.run_at(merged.run_at, delay=None)
        check.integer(
            "priority", merged.priority, errors.InvalidPriorityError, bounds=limits.PRIORITY
        )
        check.integer(
            "max_attempts",
            merged.max_attempts,
            errors.InvalidMaxAttemptsError,
            bounds=limits.MAX_ATTEMPTS,
        )
        check.name("unique_key", merged.unique_key, required=False)
        configured = copy.copy(self)  # shares the signature, read once per task
        configured.push_options = merged
        return configured

    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The JSON payload a push of this call queues, ``{"args": [...], "kwargs": {...}}``
        (see :mod:`postkit.tasks.payload` for the shape).

        Raises:
            InvalidArgumentsError: the arguments do not fit the function's signature, or one
                holds a value JSON cannot carry exactly.
        """
        return self.signature.encode(self.signature.bind(args, kwargs))

    def push(self, cursor: Any, /, *args: P.args, **kwargs: P.kwargs) -> int | None:
        """Queue a job that calls the function with these arguments, in the caller's
        transaction on ``cursor`` (any DB-API cursor, as ``QueueClient`` takes: psycopg 3,
        psycopg2, Django's), in the App's namespace. Like ``QueueClient.push``, it never
        commits: the job exists once the caller commits, and never if it rolls back.
        ``cursor`` is positional-only, so a task may take an argument called ``cursor``.

        Returns:
            the job's id, or None when the unique key matched a pending or running job.

        Raises:
            InvalidArgumentsError: the arguments do not fit the function's signature (a
                missing, unknown or doubled argument, too many positional ones), or one
                holds a value JSON cannot carry exactly; nothing is sent.
        """
        payload, options = self._prepare(args, kwargs)
        return QueueClient(cursor, self.namespace).push(self.queue, payload, **options)

    async def push_async(self, cursor: Any, /, *args: P.args, **kwargs: P.kwargs) -> int | None:
        """:meth:`push` on a psycopg 3 async cursor (as ``AsyncQueueClient`` takes)."""
        payload, options = self._prepare(args, kwargs)
        return await AsyncQueueClient(cursor, self.namespace).push(self.queue, payload, **options)

    def push_many(self, cursor: Any, calls: Iterable[Mapping[str, Any]], /) -> list[int | None]:
        """Queue one job per call, in one statement and one round trip (``push_batch``), in
        the caller's transaction: ``calls`` holds the keyword arguments of each call, e.g.
        ``[{"user_id": "1"}, {"user_id": "2"}]``. Every job gets the push options; the task's
        ``unique_by`` gives each its own key.

        Returns:
            one entry per call, in order: the job's id, or None when its unique key matched a
            live job or an earlier call of the batch.

        Raises:
            InvalidArgumentsError: a call does not fit the signature (its index is named), a
                call is not a mapping, or the push options name one ``unique_key`` for many
                jobs; nothing is sent.
        """
        payloads, keys, options = self._prepare_many(calls)
        return QueueClient(cursor, self.namespace).push_batch(
            self.queue, payloads, unique_keys=keys, **self._many(options, len(payloads))
        )

    async def push_many_async(
        self, cursor: Any, calls: Iterable[Mapping[str, Any]], /
    ) -> list[int | None]:
        """:meth:`push_many` on a psycopg 3 async cursor."""
        payloads, keys, options = self._prepare_many(calls)
        return await AsyncQueueClient(cursor, self.namespace).push_batch(
            self.queue, payloads, unique_keys=keys, **self._many(options, len(payloads))
        )

    def handler(self) -> Callable[..., Any]:
        """The worker's handler for this task's queue: decode the job's payload into a call
        and make it (awaited, for an ``async def`` function; with the ack's cursor first, for a
        transactional task: ``handler(job, cursor)``, as ``Handlers.add`` calls it).

        A payload that does not fit the signature (or holds a model's argument that does not
        validate) raises PermanentError, which the worker turns into a dead letter at once,
        with that error: no retry could fix it.
        """
        function: Callable[..., Any] = self.function
        decode = self.signature.decode
        if self._takes_cursor and inspect.iscoroutinefunction(function):

            async def run_async_workflow(job: Job, ctx: Any) -> Any:
                args, kwargs = decode(job.payload)
                with running(job):
                    return await function(ctx, *args, **kwargs)

            return run_async_workflow
        if self._takes_cursor:

            def run_in_transaction(job: Job, cursor: Any) -> Any:
                args, kwargs = decode(job.payload)
                with running(job):
                    return function(cursor, *args, **kwargs)

            return run_in_transaction
        if inspect.iscoroutinefunction(function):

            async def run_async(job: Job) -> Any:
                args, kwargs = decode(job.payload)
                with running(job):
                    return await function(*args, **kwargs)

            return run_async

        def run(job: Job) -> Any:
            args, kwargs = decode(job.payload)
            with running(job):
                return function(*args, **kwargs)

        return run

    def _prepare(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The payload of a call and the push options for ``QueueClient.push``."""
        arguments = self.signature.bind(args, kwargs)
        payload = self.signature.encode(arguments)
        options = self._batch_options()
        unique_key = self.push_options.unique_key
        if unique_key is None and self.settings.unique_by:
            unique_key = self.signature.unique_key(arguments, self.settings.unique_by)
        return payload, {**options, "unique_key": unique_key}

    def _prepare_many(
        self, calls: Iterable[Mapping[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[str | None] | None, dict[str, Any]]:
        """The payloads of the calls, their unique keys, and the options for ``push_batch``."""
        if self.push_options.unique_key is not None:
            raise InvalidArgumentsError(
                "a unique_key names one job and push_many pushes many: give the task "
                "unique_by to key each job by its arguments"
            )
        if isinstance(calls, Mapping):
            raise InvalidArgumentsError(
                "push_many takes a list of calls, each a mapping of keyword arguments, e.g. "
                '[{"user_id": "1"}], not one mapping'
            )
        payloads: list[dict[str, Any]] = []
        keys: list[str | None] = []
        for index, call in enumerate(calls):
            if not isinstance(call, Mapping):
                raise InvalidArgumentsError(
                    f"push_many's call {index} is a {type(call).__name__}: each call is a "
                    "mapping of keyword arguments"
                )
            try:
                arguments = self.signature.bind((), call)
                payloads.append(self.signature.encode(arguments))
            except InvalidArgumentsError as exc:
                raise InvalidArgumentsError(f"push_many's call {index}: {exc}") from None
            if self.settings.unique_by:
                keys.append(self.signature.unique_key(arguments, self.settings.unique_by))
        return payloads, keys if self.settings.unique_by else None, self._batch_options()

    def _batch_options(self) -> dict[str, Any]:
        options = self.push_options
        return {
            "delay": options.delay,
            "run_at": options.run_at,
            "priority": self.settings.priority if options.priority is None else options.priority,
            "max_attempts": (
                self.settings.max_attempts if options.max_attempts is None else options.max_attempts
            ),
            "depends_on": options.depends_on,
        }

    @staticmethod
    def _many(options: dict[str, Any], jobs: int) -> dict[str, Any]:
        """``options`` as ``push_batch`` takes them for ``jobs`` jobs: the parents, per job."""
        parents = options["depends_on"]
        return {**options, "depends_on": None if parents is None else [parents] * jobs}


class Task(BaseTask[P, R]):
    """A function registered with ``@app.task(queue=...)``: calling it runs it here;
    :meth:`push` queues a job that runs it in a worker, with the same arguments."""

    def __init__(self, namespace: str, function: Callable[P, R], settings: TaskSettings) -> None:
        """A task of ``function`` in ``namespace``; ``@app.task(...)`` makes them.

        Raises:
            InvalidArgumentsError: ``settings.unique_by`` names something that is not a named
                parameter of the function; pydantic cannot validate an annotation that holds a
                model.
            ValueError: ``settings.transactional`` is true (that is a TransactionalTask).
        """
        super().__init__(namespace, function, settings)
        functools.update_wrapper(self, function)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now, as a plain call: no job, no checks."""
        return self.function(*args, **kwargs)


class TransactionalTask(BaseTask[P, R]):
    """A function registered with ``@app.task(queue=..., transactional=True)``: it takes a
    cursor first, and the worker passes one in the transaction of the job's ack, so the
    function's writes and the ack commit together, exactly once, or roll back together (when
    the function raises, or its claim went stale and another worker has the job):

        @app.task(queue="receipts", transactional=True)
        def record_receipt(cursor, order_id: int) -> None:
            cursor.execute("INSERT INTO receipts (order_id) VALUES (%s)", (order_id,))

        record_receipt.push(cursor, order_id=7)     # the push takes no cursor of the task's

    The cursor is not an argument: :meth:`push` takes the arguments after it (the ``cursor``
    :meth:`push` takes first is the push's own, as for every task), mypy checks them without it
    (``Concatenate``), and the payload never holds it. The function must be synchronous.
    """

    _takes_cursor = True

    def __init__(
        self, namespace: str, function: Callable[Concatenate[Any, P], R], settings: TaskSettings
    ) -> None:
        """A transactional task of ``function`` in ``namespace``; ``@app.task(...,
        transactional=True)`` makes them.

        Raises:
            InvalidArgumentsError: the function takes no cursor first (a parameter that can be
                passed by position); ``settings.unique_by`` names something that is not a named
                parameter of the function after it; pydantic cannot validate an annotation that
                holds a model.
            ValueError: ``settings.transactional`` is false.
        """
        super().__init__(namespace, function, settings)
        functools.update_wrapper(self, function)

    def __call__(self, cursor: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now with ``cursor``, as a plain call: no job, no
        checks, no transaction of its own."""
        return self.function(cursor, *args, **kwargs)


class Workflow(BaseTask[P, R]):
    """A function registered with ``@app.workflow(queue=...)``: a run of it is a job, and the
    worker passes it a :class:`~postkit.worker.workflow.WorkflowContext` first, through which
    it calls its steps; each step completed is recorded, and a run that runs again (a retry, a
    rescue, a restart) replays the recorded ones instead of running them:

        @app.workflow(queue="orders")
        def fulfil(ctx: WorkflowContext, order_id: str) -> str:
            charge = ctx.step("charge", charge_card, order_id)     # at least once
            ctx.transaction("record", record_order, order_id)       # exactly once, with its
            return charge["id"]                                     # checkpoint

        run_id = fulfil.push(cursor, order_id="42")

    The context is not an argument: :meth:`push` takes the arguments after it, and the payload
    never holds it. An ``async def`` workflow gets an
    :class:`~postkit.worker.workflow.AsyncWorkflowContext` and awaits its steps.
    """

    _takes_cursor = True
    _is_workflow = True

    def __init__(
        self, namespace: str, function: Callable[Concatenate[Any, P], R], settings: TaskSettings
    ) -> None:
        """A workflow of ``function`` in ``namespace``; ``@app.workflow(...)`` makes them.

        Raises:
            InvalidArgumentsError: the function takes no context first (a parameter that can
                be passed by position); ``settings.unique_by`` names something that is not a
                named parameter of the function after it.
            ValueError: ``settings.transactional`` is true.
        """
        super().__init__(namespace, function, settings)
        functools.update_wrapper(self, function)

    def __call__(self, ctx: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now with ``ctx``, as a plain call: no job, no checks."""
        return self.function(ctx, *args, **kwargs)


__all__ = ["BaseTask", "PushOptions", "Task", "TaskSettings", "TransactionalTask", "Workflow"]
