"""Handlers by queue name: what a worker runs for each job, registered by the application."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

Transaction = Callable[[], AbstractContextManager[Any]]
"""A factory of the transaction a transactional handler's writes and its ack share: entering
the context begins it and yields a DB-API cursor in it; leaving it normally commits, and
leaving it by an exception rolls it back."""


@dataclass(frozen=True)
class HandlerSpec:
    """One registered handler."""

    function: Callable[..., Any]
    transactional: bool
    is_async: bool
    timeout: float | None = None
    """The handler's maximum run time in seconds; None: the worker's ``handler_timeout``."""
    transaction: Transaction | None = None
    """Where a transactional handler's transaction runs; None: on a connection of the worker's
    pool."""
    batch: int = 1
    """How many jobs of a transactional handler may share one transaction (1: each its own)."""
    workflow: bool = False
    """The handler is a workflow's: ``function(job, ctx)`` with a
    :class:`~postkit.worker.workflow.WorkflowContext` (postkit/worker/workflow.py)."""

    @property
    def holds_pool_connection(self) -> bool:
        """Whether the handler runs on a connection of the worker's pool while it runs (a
        transactional handler without a ``transaction`` of its own)."""
        return self.transactional and self.transaction is None


class Handlers(Mapping[str, HandlerSpec]):
    """Handlers by queue name. A module registers its handlers here; ``postkit worker`` finds
    the module's ``Handlers`` and runs them."""

    def __init__(self, handlers: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self._specs: dict[str, HandlerSpec] = {}
        for queue, function in (handlers or {}).items():
            self.add(queue, function)

    def add(
        self,
        queue: str,
        function: Callable[..., Any],
        *,
        transactional: bool = False,
        timeout: float | None = None,
        transaction: Transaction | None = None,
        batch: int = 1,
        workflow: bool = False,
    ) -> None:
        """Run ``function(job)`` for each job of ``queue`` (``function(job, cursor)`` when
        ``transactional``; ``function(job, ctx)`` when ``workflow``, with a
        :class:`~postkit.worker.workflow.WorkflowContext` that records each step the run
        completes and replays them when it runs again, an ``AsyncWorkflowContext`` for an
        ``async def`` one: see postkit/worker/workflow.py).

        ``timeout`` is the handler's maximum run time in seconds (default: the worker's
        ``handler_timeout``). Past it the attempt counts as timed out: the job is nacked with a
        ``HandlerTimeout`` error (retried with backoff, or dead-lettered with its attempts
        spent) and its claim is no longer extended. An ``async def`` handler is cancelled; a
        synchronous one cannot be stopped (Python cannot kill a thread): it runs on, on a
        thread of its own, and whatever it returns or raises is dropped; a transactional one's
        writes roll back (its ack is not sent), and the worker's pool grows by a connection
        while it holds its own. Another thread takes its slot.

        ``transaction`` (transactional handlers only) is where the handler's writes and the ack
        run: a factory of a context that begins a transaction and yields a cursor in it
        (committing on a normal exit, rolling back on an exception), such as one on the
        application's own connection (``postkit.contrib.django.transaction``). By default the
        transaction runs on a connection of the worker's pool.

        ``batch`` (transactional handlers on the worker's pool only) lets up to that many of
        the queue's claimed jobs share one transaction, and so one commit: a thread takes the
        jobs waiting for a slot, runs their handlers one after another in one transaction,
        acknowledges every one in one statement, and commits once; for at most 50 ms of
        handlers (or a sixth of the claim's visibility timeout) per transaction. Each job's
        writes still commit exactly when its ack does. When a handler raises or runs past its
        timeout, when a job no longer holds its claim at the ack (it expired, or an operator
        cancelled the job), or when the transaction fails (a deadlock, a lost connection), the
        whole transaction rolls back: the job whose handler raised is retried or failed as
        usual, and each job whose handler had returned runs again in a transaction of its own
        (its handler a second time, its first writes undone).

        What it costs: a job's writes become visible when its batch commits, not when its
        handler returns; locks a handler takes are held until then, so handlers that lock rows
        in different orders deadlock more often; and a job that fails makes the jobs before it
        in its batch run twice. Batches pay where handlers are short and seldom fail, and the
        commit is the cost, as in benchmarks/results/comparison.md (W6).

        Raises:
            ValueError: the queue already has a handler, an ``async def`` handler is
                transactional (the ack's transaction lives on a synchronous connection), or
                ``timeout`` is not positive, or ``transaction`` is given to a handler that is
                not transactional, or ``batch`` is below 1, or above 1 for a handler that is
                not transactional or has a ``transaction`` of its own, or a ``workflow``
                handler is transactional or batched.
        """
        if queue in self._specs:
            raise ValueError(f"queue {queue!r} already has a handler")
        is_async = inspect.iscoroutinefunction(function)
        if workflow and (transactional or transaction is not None or batch != 1):
            raise ValueError(
                "a workflow's handler is neither transactional nor batched: its steps bring "
                "their own transactions (ctx.transaction)"
            )
        if is_async and transactional:
            raise ValueError("transactional handlers must be synchronous functions")
        if timeout is not None and not timeout > 0:
            raise ValueError("a handler's timeout must be positive")
        if transaction is not None and not transactional:
            raise ValueError("only a transactional handler runs in a given transaction")
        if batch < 1:
            raise ValueError("a handler's batch must be at least 1")
        if batch > 1 and (not transactional or transaction is not None):
            raise ValueError(
                "only a transactional handler on the worker's pool (no transaction of its "
                "own) runs in batches"
            )
        self._specs[queue] = HandlerSpec(
            function, transactional, is_async, timeout, transaction, batch, workflow
        )

    def register(
        self,
        queue: str,
        *,
        transactional: bool = False,
        timeout: float | None = None,
        transaction: Transaction | None = None,
        batch: int = 1,
        workflow: bool = False,
    ) -> Callable[[F], F]:
        """Decorator form of :meth:`add`."""

        def decorate(function: F) -> F:
            self.add(
                queue,
                function,
                transactional=transactional,
                timeout=timeout,
                transaction=transaction,
                batch=batch,
                workflow=workflow,
            )
            return function

        return decorate

    def __getitem__(self, queue: str) -> HandlerSpec:
        return self._specs[queue]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


__all__ = ["HandlerSpec", "Handlers", "Transaction"]
