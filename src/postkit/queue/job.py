"""The records' former module path, kept importable for code that still imports it: everything
here is :mod:`postkit.queue.records`'s."""

from postkit.queue.records import (
    BrokenSchedule,
    DeadLetter,
    Fired,
    Job,
    JobState,
    NackOutcome,
    Outcome,
    Outcomes,
    Pruned,
    QueuePolicy,
    QueueStats,
    Redriven,
    Schedule,
)

__all__ = [
    "BrokenSchedule",
    "DeadLetter",
    "Fired",
    "Job",
    "JobState",
    "NackOutcome",
    "Outcome",
    "Outcomes",
    "Pruned",
    "QueuePolicy",
    "QueueStats",
    "Redriven",
    "Schedule",
]
