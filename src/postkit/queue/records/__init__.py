"""What the SDK returns (jobs and the cursors of their listings, what became of a job (its
result), dead letters and their searches, queue policies, statistics and outcomes per minute,
schedules, their last runs and what a tick fired, registered workers and the jobs they run),
each a read-only mapping with a typed attribute view (``job["payload"]`` and ``job.payload``
are the same value); and the two vocabularies they use, the job states and the outcomes, each
defined once (records/jobs.py) and kept in step with the SQL module's enum types
(``postkit_queue.job_state``, ``postkit_queue.outcome``) by a test."""

from __future__ import annotations

from postkit.queue.records.dead_letters import (
    DeadLetter,
    DeadLetterPosition,
    DeadLetterSearch,
    LineageStep,
    Redriven,
)
from postkit.queue.records.jobs import (
    UNFINISHED_STATES,
    Job,
    JobCursor,
    JobResult,
    JobState,
    NackOutcome,
    Outcome,
    TreeJob,
    WorkflowStep,
)
from postkit.queue.records.mapping import (
    to_jsonable,
)
from postkit.queue.records.queues import (
    GroupStats,
    OutcomeMinute,
    Outcomes,
    Pruned,
    QueuePolicy,
    QueueStats,
)
from postkit.queue.records.schedules import (
    BrokenSchedule,
    Fired,
    Schedule,
    ScheduleRun,
)
from postkit.queue.records.workers import (
    RunningJob,
    WorkerInfo,
)

__all__ = [
    "UNFINISHED_STATES",
    "BrokenSchedule",
    "DeadLetter",
    "DeadLetterPosition",
    "DeadLetterSearch",
    "Fired",
    "GroupStats",
    "Job",
    "JobCursor",
    "JobResult",
    "JobState",
    "LineageStep",
    "NackOutcome",
    "Outcome",
    "OutcomeMinute",
    "Outcomes",
    "Pruned",
    "QueuePolicy",
    "QueueStats",
    "Redriven",
    "RunningJob",
    "Schedule",
    "ScheduleRun",
    "TreeJob",
    "WorkerInfo",
    "WorkflowStep",
    "to_jsonable",
]
