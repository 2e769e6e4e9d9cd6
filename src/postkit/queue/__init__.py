"""The Postkit queue: push, pull, ack, nack, fail, visibility timeouts and dead letters.

from postkit.queue import QueueClient, install

install(connection)                       # once; idempotent, upgrades in place
queue = QueueClient(cursor, namespace="my-app")
queue.push("send_otp", {"user_id": "42"})
"""

from postkit.queue.client import QueueClient
from postkit.queue.client_async import AsyncQueueClient
from postkit.queue.listen import WorkListener
from postkit.queue.listen_async import AsyncWorkListener
from postkit.queue.records import (
    DeadLetter,
    DeadLetterSearch,
    Job,
    JobCursor,
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
    "AsyncWorkListener",
    "DeadLetter",
    "DeadLetterSearch",
    "InstallResult",
    "Job",
    "JobCursor",
    "JobState",
    "NackOutcome",
    "Outcome",
    "QueueClient",
    "QueuePolicy",
    "WorkListener",
    "WorkerInfo",
    "install",
    "install_async",
    "install_script",
    "installed_version",
    "latest_version",
]
