"""The Postkit queue: push, pull, ack, nack, fail, visibility timeouts and dead letters.

from postkit.queue import QueueClient, install

install(connection)                       # once; idempotent, upgrades in place
queue = QueueClient(cursor, namespace="my-app")
job_id = queue.push("send_otp", {"user_id": "42"})
queue.result(job_id)                      # what became of it (its result, if its queue keeps them)
"""

from postkit.queue.client import QueueClient
from postkit.queue.client_async import AsyncQueueClient
from postkit.queue.listen import ResultListener, WorkListener
from postkit.queue.listen_async import AsyncResultListener, AsyncWorkListener
from postkit.queue.protocol import Duration
from postkit.queue.records import (
    DeadLetter,
    DeadLetterSearch,
    Job,
    JobCursor,
    JobResult,
    JobState,
    NackOutcome,
    Outcome,
    QueuePolicy,
    WorkerInfo,
)
from postkit.queue.schema import (
    InstallResult,
    install,
    install_async,
    install_script,
    installed_version,
    latest_version,
)

__all__ = [
    "AsyncQueueClient",
    "AsyncResultListener",
    "AsyncWorkListener",
    "DeadLetter",
    "DeadLetterSearch",
    "Duration",
    "InstallResult",
    "Job",
    "JobCursor",
    "JobResult",
    "JobState",
    "NackOutcome",
    "Outcome",
    "QueueClient",
    "QueuePolicy",
    "ResultListener",
    "WorkListener",
    "WorkerInfo",
    "install",
    "install_async",
    "install_script",
    "installed_version",
    "latest_version",
]
