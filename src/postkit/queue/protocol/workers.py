"""The worker registry's calls: register, heartbeat, deregister, list and prune, and what the
workers run now (workers.sql)."""

from __future__ import annotations

from collections.abc import Sequence

from postkit import errors
from postkit.queue import limits
from postkit.queue.protocol import checks as check
from postkit.queue.protocol import readers as read
from postkit.queue.protocol.call import Call, Duration
from postkit.queue.records import RunningJob, WorkerInfo


def register_worker(
    namespace: str,
    worker_id: str,
    *,
    kind: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
    version: str,
    heartbeat_interval: Duration,
) -> Call[None]:
    if kind not in limits.WORKER_KINDS:
        raise errors.InvalidWorkerError(
            f"kind must be one of {', '.join(limits.WORKER_KINDS)}, got {kind!r}"
        )
    params = check.base(
        namespace,
        worker_id=check.name("worker_id", worker_id, required=True),
        kind=kind,
        host=check.name("host", host, required=True),
        pid=check.required_integer("pid", pid, errors.InvalidWorkerError, bounds=limits.WORKER_PID),
        queues=[] if not queues else check.queue_list(queues),
        concurrency=check.required_integer(
            "concurrency", concurrency, errors.InvalidWorkerError, bounds=limits.WORKER_CONCURRENCY
        ),
        version=check.name("version", version, required=True),
        heartbeat_interval=check.required_duration("heartbeat_interval", heartbeat_interval),
    )
    return Call("register_worker", params, lambda rows: None)


def worker_heartbeat(namespace: str, worker_id: str) -> Call[bool]:
    params = check.base(namespace, worker_id=check.name("worker_id", worker_id, required=True))
    return Call("worker_heartbeat", params, lambda rows: bool(read.scalar(rows)))


def deregister_worker(namespace: str, worker_id: str) -> Call[bool]:
    params = check.base(namespace, worker_id=check.name("worker_id", worker_id, required=True))
    return Call("deregister_worker", params, lambda rows: bool(read.scalar(rows)))


def workers(namespace: str) -> Call[list[WorkerInfo]]:
    return Call(
        "workers",
        check.base(namespace),
        lambda rows: [WorkerInfo(**{**row, "queues": list(row["queues"])}) for row in rows],
    )


def prune_workers(namespace: str, *, older_than: Duration) -> Call[int]:
    params = check.base(namespace, older_than=check.required_duration("older_than", older_than))
    return Call("prune_workers", params, lambda rows: int(read.scalar(rows)))


def running_jobs(namespace: str, *, limit: int) -> Call[list[RunningJob]]:
    params = check.base(namespace, limit=check.limit("running_jobs", limit))
    return Call("running_jobs", params, lambda rows: [RunningJob(**row) for row in rows])
