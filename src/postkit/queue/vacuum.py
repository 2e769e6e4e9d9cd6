"""The vacuum service's former home, kept importable: it lives in
:mod:`postkit.worker.maintenance.vacuum`."""

from postkit.worker.maintenance.vacuum import JobsVacuum

__all__ = ["JobsVacuum"]
