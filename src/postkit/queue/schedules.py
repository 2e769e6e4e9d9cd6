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
from postkit.queue.protocol import Duration, NextDue
from postkit.queue.records import BrokenSchedule, Fired, Schedule, ScheduleRun


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
        schedule = protocol.new_schedule(
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
        now = self._run(protocol.clock())
        return self._run(protocol.save_schedule(schedule, now=now))

    def schedules(self, *, after: str | None = None, limit: int | None = None) -> list[Schedule]:
        """The schedules of this namespace, by name: every one, or a page of ``limit``
        (1..10,000) after the name ``after``."""
        return self._run(protocol.schedules(self._namespace, after=after, limit=limit))

    def schedule_runs(
        self, *, after: str | None = None, limit: int | None = None
    ) -> list[ScheduleRun]:
        """Each schedule's last run, by name, and what became of its job: live, dead-lettered,
        archived as completed, or gone without a trace (the usual end of a completed job).
        Three primary-key lookups per schedule: of every one, or of the page
        :meth:`schedules` returns for the same ``after`` and ``limit``."""
        return self._run(protocol.schedule_runs(self._namespace, after=after, limit=limit))

    def pause_schedule(self, name: str) -> bool:
        """Stop firing a schedule. Returns False when there is no such schedule."""
        return self._run(protocol.set_schedule_paused(self._namespace, name, paused=True))

    def resume_schedule(self, name: str) -> bool:
        """Fire a paused schedule again (once at once, if a run fell due while paused)."""
        return self._run(protocol.set_schedule_paused(self._namespace, name, paused=False))

    def delete_schedule(self, name: str) -> bool:
        """Delete a schedule. Returns False when there is no such schedule."""
        return self._run(protocol.delete_schedule(self._namespace, name))

    def next_schedule_at(self) -> NextDue:
        """When the namespace's next active schedule falls due, by the queue's clock
        (``seconds`` 0 or less: due now; None: no active schedule). A ticker sleeps until then:
        :meth:`tick_schedules` fires it."""
        return self._run(protocol.next_schedule_at(self._namespace))

    def tick_schedules(self, *, limit: int = 100) -> list[Fired | BrokenSchedule]:
        """Fire every due schedule once, in the caller's transaction; commit to make it stick.

        Any number of tickers may run at once: due schedules are locked (SKIP LOCKED) and each
        run is fenced on its due time, so each fires exactly once. Runs missed while nothing
        ticked collapse into one (the catch-up policy).

        A due schedule whose next run cannot be computed (a cron expression croniter cannot
        use, a time zone this Python does not know), or whose job its queue refuses (a
        payload over a max_payload_bytes set later), is marked broken
        instead, and the others fire: it is left out of later ticks until it is saved again
        (:meth:`create_schedule`), and :meth:`schedules` shows it with ``broken_reason``.

        Returns:
            a :class:`Fired` for each run fired and a :class:`BrokenSchedule` for each
            schedule this tick marked broken.
        """
        outcomes: list[Fired | BrokenSchedule] = []
        for run in self._run(protocol.due_schedules(self._namespace, limit=limit)):
            outcome: Fired | BrokenSchedule | None
            if run.next_run_at is None:
                outcome = self._run(protocol.mark_schedule_broken(self._namespace, run))
            else:
                outcome = self._run(protocol.fire_schedule(self._namespace, run))
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes
