"""What a handler asks of the job it runs for: :func:`report_progress` says how far it got, and
:func:`is_cancelled` whether it should stop.

The worker makes the job a handler runs for current (a context variable, set around the
handler's call on its thread or in its task), with the way to report on its claim and to ask
whether the claim was lost, so that a handler, or a typed task's function, needs no client of
its own:

    @handlers.register("reports")
    def build_report(job):
        for n, part in enumerate(parts, 1):
            if is_cancelled():
                return
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
Lost = Callable[[Job], bool]
"""Whether the worker found a job's claim lost (``Claims.is_lost``)."""

_current: contextvars.ContextVar[tuple[Job, Report, Lost] | None] = contextvars.ContextVar(
    "postkit_progress", default=None
)


@contextlib.contextmanager
def reporting(job: Job, report: Report, lost: Lost) -> Iterator[None]:
    """Make ``job`` the one :func:`report_progress` reports on, with ``report``, and
    :func:`is_cancelled` asks about, with ``lost``, while its handler runs."""
    token = _current.set((job, report, lost))
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
    job, report, _ = _running("report_progress")
    return report(job, fraction, note)


def is_cancelled() -> bool:
    """Whether the job this handler runs for is no longer the worker's: an operator cancelled
    it (``postkit cancel``, ``QueueClient.cancel``), or its claim expired and another worker
    took it. Its outcome will be dropped, so a long handler polls this and returns early. The
    worker learns of a cancel at once, from a notification (at the job's next heartbeat, every
    third of its visibility timeout, if the notification is lost), gives the job's slot back
    then, and cancels an ``async def`` handler's task after its ``cancel_grace``; reading this
    costs no round trip.

    Raises:
        RuntimeError: called outside a handler the worker runs.
    """
    job, _, lost = _running("is_cancelled")
    return lost(job)


def _running(call: str) -> tuple[Job, Report, Lost]:
    current = _current.get()
    if current is None:
        raise RuntimeError(
            f"{call}() asks about the job a worker runs this handler for: call it from the "
            "handler while the worker runs it"
        )
    return current
