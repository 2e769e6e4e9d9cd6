"""Re-exports the vacuum service of :mod:`postkit.worker.maintenance.vacuum` for code that
imports it from here."""

from postkit.worker.maintenance.vacuum import JobsVacuum

__all__ = ["JobsVacuum"]
