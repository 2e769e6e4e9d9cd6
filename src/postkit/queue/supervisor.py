"""The supervisor's former home, kept importable: it lives in :mod:`postkit.worker.supervisor`."""

from postkit.worker.supervisor import Supervisor

__all__ = ["Supervisor"]
