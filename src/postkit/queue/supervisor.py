"""Re-exports the supervisor of :mod:`postkit.worker.supervisor` for code that imports it from
here."""

from postkit.worker.supervisor import Supervisor

__all__ = ["Supervisor"]
