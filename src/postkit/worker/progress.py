"""A handler's progress: :func:`report_progress`, from inside a handler the worker runs.

The worker makes the job a handler runs for current (a context variable, set around the
handler's call on its thread or in its task), with the way to report on its claim, so that a
handler, or a typed task's function, says how far it got without a client of its own:

    @handlers.register("reports")
    def build_report(job):
        for n, part in enumerate(parts, 1):
            render(part)
            report_progress(n / len(parts), note=f"part {n} of {len(parts)}")
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

from postkit.queue import Job

Report = Callable[[Job, float, "str | None"], bool]
"""How the worker records a report of a job: one fenced call on a pooled connection."""

_current: contextvars.ContextVar[tuple[Job, Report] | None] = contextvars.ContextVar(
    "postkit_progress", default=None
)


@contextlib.contextmanager
def reporting(job: Job, report: Report) -> Iterator[None]:
    """Make ``job`` the one :func:`report_progress` reports on, with ``report``, while its
    handler runs."""
    token = _current.set((job, report))
    try:
        yield
    finally:
        _current.reset(token)


def report_progress(fraction: float, note: str | None = None) -> bool:
    """Say how far the job this handler runs for got: ``fraction`` from 0 to 1, and a note of
    at most 200 characters. ``get_job``, ``postkit job`` and the dashboard show it. One small
    UPDATE of the job's row on a connection of the worker's pool, fenced by the claim.

    Returns:
        True if it was recorded; False when the claim is no longer the worker's (the job
        timed out and was rescued, say): the handler's work will not be settled either.

    Raises:
        InvalidProgressError: ``fraction`` or ``note`` is out of bounds; nothing is written.
        RuntimeError: called outside a handler the worker runs.
    """
    current = _current.get()
    if current is None:
        raise RuntimeError(
            "report_progress() reports on the job a worker runs this handler for: call it "
            "from the handler while the worker runs it"
        )
    job, report = current
    return report(job, fraction, note)
