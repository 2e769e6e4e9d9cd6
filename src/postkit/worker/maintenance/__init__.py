"""The queue's housekeeping as small services, each with its interval and jitter, run by a
:class:`Maintenance` runner on a connection of its own: by the worker, off its claim path, and
by ``postkit tick``.

- :class:`Rescue`: rescue expired claims (``tick_timeouts``);
- :class:`Schedules`: fire due schedules (``tick_schedules``), waking for the next one;
- :class:`Prune`: apply retention (``prune``);
- :class:`JobsVacuum`: vacuum the jobs table when claims left enough dead rows in it;
- :class:`Registry`: keep the process in the worker registry, and take it out on a clean stop.
"""

from postkit.worker.maintenance.prune import Prune
from postkit.worker.maintenance.registry import Registry
from postkit.worker.maintenance.report import RoundReport
from postkit.worker.maintenance.rescue import Rescue
from postkit.worker.maintenance.runner import Maintenance, OnError
from postkit.worker.maintenance.schedules import Schedules
from postkit.worker.maintenance.service import Service
from postkit.worker.maintenance.vacuum import JobsVacuum

__all__ = [
    "JobsVacuum",
    "Maintenance",
    "OnError",
    "Prune",
    "Registry",
    "Rescue",
    "RoundReport",
    "Schedules",
    "Service",
]
