"""The worker runtime's public names under the SDK package: ``from postkit.queue.worker
import Handlers`` gives the same classes as ``from postkit.worker import Handlers``.

The runtime lives in :mod:`postkit.worker`; import it from there. This module is the one place
the SDK package names the runtime, and nothing in postkit imports it: importing the SDK never
imports the runtime.
"""

from postkit.worker import Handlers, HandlerSpec, Worker, WorkerStats, error_summary

__all__ = ["HandlerSpec", "Handlers", "Worker", "WorkerStats", "error_summary"]
