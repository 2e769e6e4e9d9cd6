"""The worker runtime's public names, where the SDK's first releases documented them.

The runtime lives in :mod:`postkit.worker`; import it from there. This module is the one place
the SDK package names the runtime, so that ``from postkit.queue.worker import Handlers`` keeps
working; nothing in postkit imports it.
"""

from postkit.worker import Handlers, HandlerSpec, Worker, WorkerStats, error_summary

__all__ = ["HandlerSpec", "Handlers", "Worker", "WorkerStats", "error_summary"]
