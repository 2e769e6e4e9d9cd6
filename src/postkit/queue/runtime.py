# Generated from runtime_async.py by tools/async_to_sync.py: edit that file, not this one.
"""What the worker runtime calls besides its claims: its entry in the worker registry (register,
heartbeat, deregister, and the pruning of lost workers), the queues it serves, and the
maintenance it runs (due schedules, retention).

runtime_async.py is the source of both: :class:`AsyncRuntime` is written here, and runtime.py
(``Runtime``) is generated from it by tools/async_to_sync.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from postkit.queue import protocol
from postkit.queue.calls import Calls
from postkit.queue.protocol import Duration, NextDue
from postkit.queue.records import BrokenSchedule, Fired, Pruned


class Runtime(Calls):
    """The worker runtime's calls besides its claims; the ``worker`` access kind may make them
    all. The runtime (postkit.worker) and ``postkit tick`` use them; an application seldom
    does."""

    def register_worker(
        self,
        worker_id: str,
        *,
        kind: str = "worker",
        host: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
        version: str,
        heartbeat_interval: Duration,
    ) -> None:
        """Record that a worker (``kind`` 'worker') or a ticker ('ticker') runs, with what it
        serves, and its first heartbeat; registering the same ``worker_id`` again replaces it.
        It reads as lost once its last heartbeat is older than three ``heartbeat_interval``.

        Raises:
            InvalidWorkerError: an unknown kind, or a pid or concurrency out of range.
        """
        self._run(
            protocol.workers.register_worker(
                self._namespace,
                worker_id,
                kind=kind,
                host=host,
                pid=pid,
                queues=queues,
                concurrency=concurrency,
                version=version,
                heartbeat_interval=heartbeat_interval,
            )
        )

    def worker_heartbeat(self, worker_id: str) -> bool:
        """The worker is alive. False when it is not registered (its row was pruned while it
        was cut off): register it again."""
        return self._run(protocol.workers.worker_heartbeat(self._namespace, worker_id))

    def deregister_worker(self, worker_id: str) -> bool:
        """The worker stopped cleanly. False when it was not registered."""
        return self._run(protocol.workers.deregister_worker(self._namespace, worker_id))

    def prune_workers(self, *, older_than: Duration = 86400) -> int:
        """Forget the lost workers whose last heartbeat is older than ``older_than`` (a day
        unless given); one that is not lost stays, however short ``older_than``. Returns how
        many."""
        return self._run(protocol.workers.prune_workers(self._namespace, older_than=older_than))

    def register_queues(self, queues: Sequence[str]) -> int:
        """Record that a worker serves ``queues`` (the runtime does, as it starts), so that
        they stay known while idle: a settings row of built-in defaults for each queue that
        has none. Returns how many were new."""
        return self._run(protocol.operations.register_queues(self._namespace, queues))

    def known_queues(self) -> list[str]:
        """Every queue name this namespace has used, sorted: :meth:`queues`, the queues its
        workers serve (:meth:`register_queues`) and those its schedules push to. Producers may
        ask (names only); the command line refuses a queue name outside it as a typo."""
        return self._run(protocol.operations.known_queues(self._namespace))

    def prune(self, *, limit: int = 1000) -> Pruned:
        """Apply retention once: delete up to ``limit`` of each kind of expired record (archived
        jobs, dead letters, job results, cancelled jobs, ancestry links, finished runs' steps)
        and the old outcome counters. The worker runtime's prune service and ``postkit tick``
        call this."""
        return self._run(protocol.operations.prune(self._namespace, limit=limit))

    def next_schedule_at(self) -> NextDue:
        """When the namespace's next active schedule falls due, by the queue's clock
        (``seconds`` 0 or less: due now; None: no active schedule). A ticker sleeps until then:
        :meth:`tick_schedules` fires it."""
        return self._run(protocol.lifecycle.next_schedule_at(self._namespace))

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
        for run in self._run(protocol.scheduling.due_schedules(self._namespace, limit=limit)):
            outcome: Fired | BrokenSchedule | None
            if run.next_run_at is None:
                outcome = self._run(protocol.scheduling.mark_schedule_broken(self._namespace, run))
            else:
                outcome = self._run(protocol.scheduling.fire_schedule(self._namespace, run))
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes
