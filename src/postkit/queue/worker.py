"""Re-exports the worker runtime of :mod:`postkit.worker` for code that imports it from here."""

from postkit.worker import Handlers, HandlerSpec, Worker, WorkerStats, error_summary

__all__ = ["HandlerSpec", "Handlers", "Worker", "WorkerStats", "error_summary"]
