"""What one round of maintenance did: the figures ``postkit tick`` prints and the worker logs."""

from __future__ import annotations

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


__all__ = ["RoundReport"]
