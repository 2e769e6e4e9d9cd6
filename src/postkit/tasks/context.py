"""What a task's function may ask of the job it runs for: its parents' results.

A task's function takes its own arguments, not the job; the handler that calls it
(:meth:`postkit.tasks.BaseTask.handler`) makes the job current for the call, in a context
variable, so that the function can read what its parents returned:

    @app.task(queue="totals")
    def total() -> int:
        return sum(tasks.parent_results().values())

    total.options(depends_on=[a, b]).push(cursor)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from postkit.queue import Job

_current_job: contextvars.ContextVar[Job | None] = contextvars.ContextVar(
    "postkit_current_job", default=None
)


@contextlib.contextmanager
def running(job: Job) -> Iterator[None]:
    """Make ``job`` the current one while its task's function runs."""
    token = _current_job.set(job)
    try:
        yield
    finally:
        _current_job.reset(token)


def parent_results() -> Mapping[int, Any]:
    """The results of the parents of the job this task's function runs for (its push's
    ``depends_on``), by parent id, in the order the push named them: what each parent
    returned, or None where its queue keeps no results (``retain_results``). Empty for a job
    without parents.

    Raises:
        RuntimeError: called outside a task's function run by a worker (or
            ``postkit.testing.drain``).
    """
    job = _current_job.get()
    if job is None:
        raise RuntimeError(
            "parent_results() reads the job a worker runs this task for: call it from the "
            "task's function while a worker (or postkit.testing.drain) runs it"
        )
    return job.parent_results or {}
