"""The worker runtime's former home, kept importable: it lives in :mod:`postkit.worker`."""

from postkit.worker import Handlers, HandlerSpec, Worker, WorkerStats, error_summary

__all__ = ["HandlerSpec", "Handlers", "Worker", "WorkerStats", "error_summary"]
