"""The worker runtime: threads and processes that run handlers for the queue's jobs.

``postkit.queue`` is the SDK (statements and clients, no threads); this package builds on it:
:class:`Worker` (``runtime.py``) claims with ``fetcher.py``, runs with ``job_executor.py``, keeps
claims alive with ``heartbeat.py`` and runs the housekeeping in ``maintenance/``;
``supervisor.py`` runs several worker processes, and :class:`SharedWorker` (``shared.py``) one
worker per namespace in one process, sharing its slots.
"""

from postkit.worker.handlers import Handlers, HandlerSpec
from postkit.worker.outcomes import error_summary
from postkit.worker.progress import is_cancelled, report_progress
from postkit.worker.runtime import Worker
from postkit.worker.shared import SharedWorker
from postkit.worker.stats import WorkerStats

__all__ = [
    "HandlerSpec",
    "Handlers",
    "SharedWorker",
    "Worker",
    "WorkerStats",
    "error_summary",
    "is_cancelled",
    "report_progress",
]
