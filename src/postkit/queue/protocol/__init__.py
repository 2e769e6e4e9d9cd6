"""The sans-IO core of the SDK: it builds each call's statement and reads its rows.

Nothing here touches a connection. A client hands a :class:`Call` to
:mod:`postkit.queue.executor`, which runs it as one ``execute`` and one ``fetchall`` and passes
the rows back to :meth:`Call.parse`. The SQL functions own every rule of the state machine;
this package checks every argument before anything is sent (:mod:`.checks`), so a refusal here
leaves the caller's transaction as it was, while a refusal by the SQL module aborts it.

- :mod:`.call`: :class:`Call` and the named statements of ``queries.sql``
- :mod:`.checks`: argument checks; :mod:`.readers`: row readers
- :mod:`.lifecycle`, :mod:`.operations`, :mod:`.scheduling`: the calls, one per SDK method
- :mod:`.workers`: the worker registry
- :mod:`.session`: the session settings of a worker's connections, and the schema's version
- :mod:`.cron`: the cron grammar and the next run of a schedule
"""

from __future__ import annotations

from postkit.queue.protocol.call import Call, Duration, JobRef, Rows, queries
from postkit.queue.protocol.cron import check_cron, cron_problem, next_run_after
from postkit.queue.protocol.lifecycle import (
    ack,
    ack_and_pull,
    ack_batch,
    ack_many,
    channels,
    clock,
    extend_visibility,
    fail,
    get_job,
    listen,
    nack,
    next_run_at,
    next_schedule_at,
    pull,
    pull_any,
    push,
    push_batch,
    release,
    tick_timeouts,
    wake,
)
from postkit.queue.protocol.operations import (
    JOB_STATES,
    QUEUE_SETTINGS,
    VacuumState,
    cancel,
    configure_queue,
    dead_letters,
    jobs,
    known_queues,
    outcomes_since,
    prune,
    purge_dead_letters,
    purge_queue,
    queues,
    redrive,
    register_queues,
    set_queue_paused,
    stats,
    update_queue_settings,
    vacuum_jobs,
    vacuum_lock,
    vacuum_state,
    vacuum_unlock,
)
from postkit.queue.protocol.readers import NextDue
from postkit.queue.protocol.scheduling import (
    DueRun,
    NewSchedule,
    delete_schedule,
    due_schedules,
    fire_schedule,
    mark_schedule_broken,
    new_schedule,
    save_schedule,
    schedules,
    set_schedule_paused,
)
from postkit.queue.protocol.session import (
    asynchronous_commit,
    durable_commit,
    schema_probe,
    schema_version,
)
from postkit.queue.protocol.workers import (
    deregister_worker,
    prune_workers,
    register_worker,
    worker_heartbeat,
    workers,
)

__all__ = [
    "JOB_STATES",
    "QUEUE_SETTINGS",
    "Call",
    "DueRun",
    "Duration",
    "JobRef",
    "NewSchedule",
    "NextDue",
    "Rows",
    "VacuumState",
    "ack",
    "ack_and_pull",
    "ack_batch",
    "ack_many",
    "asynchronous_commit",
    "cancel",
    "channels",
    "check_cron",
    "clock",
    "configure_queue",
    "cron_problem",
    "dead_letters",
    "delete_schedule",
    "deregister_worker",
    "due_schedules",
    "durable_commit",
    "extend_visibility",
    "fail",
    "fire_schedule",
    "get_job",
    "jobs",
    "known_queues",
    "listen",
    "mark_schedule_broken",
    "nack",
    "new_schedule",
    "next_run_after",
    "next_run_at",
    "next_schedule_at",
    "outcomes_since",
    "prune",
    "prune_workers",
    "pull",
    "pull_any",
    "purge_dead_letters",
    "purge_queue",
    "push",
    "push_batch",
    "queries",
    "queues",
    "redrive",
    "register_queues",
    "register_worker",
    "release",
    "save_schedule",
    "schedules",
    "schema_probe",
    "schema_version",
    "set_queue_paused",
    "set_schedule_paused",
    "stats",
    "tick_timeouts",
    "update_queue_settings",
    "vacuum_jobs",
    "vacuum_lock",
    "vacuum_state",
    "vacuum_unlock",
    "wake",
    "worker_heartbeat",
    "workers",
]
