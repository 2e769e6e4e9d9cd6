"""What one round of maintenance did: the figures ``postkit tick`` prints and the worker logs."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone

from postkit.queue.records import BrokenSchedule, Fired, Pruned


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class RoundReport:
    """What the services that ran in one round did. Each service fills in its own figures; a
    service that did not run leaves its figures at zero."""

    at: datetime = field(default_factory=_now)
    """When the round ended (UTC)."""
    rescued: int = 0
    """Expired claims rescued (:class:`~postkit.worker.maintenance.rescue.Rescue`)."""
    fired: list[Fired] = field(default_factory=list)
    """Schedule runs fired (:class:`~postkit.worker.maintenance.schedules.Schedules`)."""
    broken: list[BrokenSchedule] = field(default_factory=list)
    """Due schedules marked broken instead of firing."""
    pruned: Pruned = field(default_factory=lambda: Pruned(0, 0, 0))
    """What retention deleted (:class:`~postkit.worker.maintenance.prune.Prune`)."""

    @property
    def anything(self) -> bool:
        """Whether the round did anything worth a line."""
        return bool(self.rescued or self.fired or self.broken or any(self.pruned.batches))

    def log(self, logger: logging.Logger) -> None:
        """A line per thing done, as a worker logs its rounds: rescued claims, each broken
        schedule (an error: it no longer fires), each schedule run fired, what was pruned."""
        if self.rescued:
            logger.info(
                "rescued %d expired claim(s)",
                self.rescued,
                extra={"event": "rescued", "count": self.rescued},
            )
        for broken in self.broken:
            logger.error(
                "schedule %s is broken and no longer fires: %s (save it again to repair it)",
                broken.name,
                broken.reason,
                extra={"event": "schedule_broken", "schedule": broken.name},
            )
        for fired in self.fired:
            logger.info(
                "schedule %s fired job %d; next run at %s",
                fired.name,
                fired.job_id,
                fired.next_run_at.isoformat(),
                extra={"event": "schedule_fired", "job_id": fired.job_id, "schedule": fired.name},
            )
        if any(self.pruned.batches):
            logger.info(
                "retention pruned %d archived job(s), %d dead letter(s), %d job result(s), "
                "%d cancelled job(s), %d ancestry link(s) and %d workflow step(s)",
                *self.pruned.batches,
                extra={"event": "pruned"},
            )


__all__ = ["RoundReport"]
