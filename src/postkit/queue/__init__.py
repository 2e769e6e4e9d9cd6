"""The Postkit queue: push, pull, ack, nack, fail, visibility timeouts and dead letters.

from postkit.queue import QueueClient, install

install(connection)                       # once; idempotent, upgrades in place
queue = QueueClient(cursor, namespace="my-app")
job_id = queue.push("send_otp", {"user_id": "42"})
queue.result(job_id)                      # what became of it (its result, if its queue keeps them)

QueueClient holds every role's calls. Each role also has a client of its own, which holds only
what its grant lets it call: Producer (push and follow), Consumer (claim and settle) and
Operator (inspect and steer), and their asyncio twins.
"""

from postkit.queue.client import QueueClient
from postkit.queue.client_async import AsyncQueueClient
from postkit.queue.consumer import Consumer
from postkit.queue.consumer_async import AsyncConsumer
from postkit.queue.listen import ResultListener, WorkListener
from postkit.queue.listen_async import AsyncResultListener, AsyncWorkListener
from postkit.queue.operator import Operator
from postkit.queue.operator_async import AsyncOperator
from postkit.queue.producer import Producer
from postkit.queue.producer_async import AsyncProducer
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
    "AsyncConsumer",
    "AsyncOperator",
    "AsyncProducer",
    "AsyncQueueClient",
    "AsyncResultListener",
    "AsyncWorkListener",
    "Consumer",
    "DeadLetter",
    "DeadLetterSearch",
    "Duration",
    "InstallResult",
    "Job",
    "JobCursor",
    "JobResult",
    "JobState",
    "NackOutcome",
    "Operator",
    "Outcome",
    "Producer",
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
