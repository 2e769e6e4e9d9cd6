# Generated from schedules_async.py by tools/async_to_sync.py: edit that file, not this one.
"""The schedule calls of the queue client: create, list, pause, resume and delete schedules, and
fire the due ones.

schedules_async.py is the source of both: :class:`AsyncSchedules`, which
:class:`~postkit.queue.client_async.AsyncQueueClient` inherits, is written here, and
schedules.py (``Schedules``, which ``QueueClient`` inherits) is generated from it by
tools/async_to_sync.py.
"""

from __future__ import annotations

from typing import Any

from postkit.queue import protocol
from postkit.queue.calls import Calls
from postkit.queue.protocol import Duration
from postkit.queue.records import Schedule, ScheduleRun


class Schedules(Calls):
    """The schedule methods of the queue client (AsyncQueueClient inherits this class, and
    QueueClient its generated twin)."""

    def create_schedule(
        self,
        name: str,
        queue: str,
        payload: Any,
        *,
        cron: str | None = None,
        timezone: str = "UTC",
        every: Duration | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
    ) -> Schedule:
        """Create (or replace) the schedule ``name``: push ``payload`` to ``queue`` at the
        times of a 5-field ``cron`` expression in ``timezone``, or ``every`` interval.
        Replacing a broken schedule repairs it.

        The cron grammar (the SQL module's ``save_schedule`` accepts exactly the same):
        minute, hour, day of month, month (or jan-dec) and day of week (0-7 or sun-sat, 7 is
        Sunday), each ``*``, a value, a range ``a-b``, ``*/n``, ``a-b/n`` or ``a/n``, or a
        comma-separated list of those; ``L`` (last day) and ``?`` in the day of month, ``?``
        and ``v#n`` (n-th weekday v) in the day of week. An expression that never fires
        ("0 0 30 2 *") is refused.

        Raises:
            InvalidScheduleError: a bad cron expression (or one that never fires) or time
                zone, or not exactly one of ``cron`` and ``every``.
        """
        # Checked before the clock is read, so that a bad schedule raises before any SQL.
        schedule = protocol.scheduling.new_schedule(
            self._namespace,
            name,
            queue,
            payload,
            cron=cron,
            timezone=timezone,
            every=every,
            priority=priority,
            max_attempts=max_attempts,
        )
        now = self._run(protocol.lifecycle.clock())
        return self._run(protocol.scheduling.save_schedule(schedule, now=now))

    def schedules(self, *, after: str | None = None, limit: int | None = None) -> list[Schedule]:
        """The schedules of this namespace, by name: every one, or a page of ``limit``
        (1..10,000) after the name ``after``."""
        return self._run(protocol.scheduling.schedules(self._namespace, after=after, limit=limit))

    def schedule_runs(
        self, *, after: str | None = None, limit: int | None = None
    ) -> list[ScheduleRun]:
        """Each schedule's last run, by name, and what became of its job: live, dead-lettered,
        archived as completed, or gone without a trace (the usual end of a completed job).
        Three primary-key lookups per schedule: of every one, or of the page
        :meth:`schedules` returns for the same ``after`` and ``limit``."""
        return self._run(
            protocol.scheduling.schedule_runs(self._namespace, after=after, limit=limit)
        )

    def pause_schedule(self, name: str) -> bool:
        """Stop firing a schedule. Returns False when there is no such schedule."""
        return self._run(
            protocol.scheduling.set_schedule_paused(self._namespace, name, paused=True)
        )

    def resume_schedule(self, name: str) -> bool:
        """Fire a paused schedule again (once at once, if a run fell due while paused)."""
        return self._run(
            protocol.scheduling.set_schedule_paused(self._namespace, name, paused=False)
        )

    def delete_schedule(self, name: str) -> bool:
        """Delete a schedule. Returns False when there is no such schedule."""
        return self._run(protocol.scheduling.delete_schedule(self._namespace, name))
