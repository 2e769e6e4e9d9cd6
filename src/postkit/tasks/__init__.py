"""Typed tasks on top of queues: a function whose calls become jobs, checked against its
signature when pushed, and run by a worker with the same arguments:

    from postkit import tasks

    app = tasks.App(namespace="my-app")

    @app.task(queue="send_otp", max_attempts=5, timeout=30)
    def send_otp(user_id: str, *, channel: str = "whatsapp") -> None: ...

    send_otp.push(cursor, user_id="42")                  # in the caller's transaction
    send_otp.options(delay=10).push(cursor, "42")        # push options beside the arguments
    send_otp.push_many(cursor, [{"user_id": "1"}, {"user_id": "2"}])   # one round trip

``postkit worker myapp.tasks`` (or ``app.worker(dsn).run()``) runs them. A parameter annotated
with a pydantic model takes the model (``models.py``); a transactional task
(``@app.task(queue=..., transactional=True)``) takes a cursor in its job's ack's transaction
first, which its pushes do not pass.

The layers: this package builds on the SDK (``postkit.queue``: every push is a ``QueueClient``
push) and on the worker runtime (``postkit.worker``: an App's handlers are a ``Handlers``), and
adds no queue semantics of its own. ``payload.py`` is the payload's shape, ``models.py``
pydantic models in it, ``task.py`` a task and its pushes, ``app.py`` the App and the queue
policies it applies, ``context.py`` what a function reads of its job (``parent_results``).
"""

from postkit.tasks.app import App, RunStatus
from postkit.tasks.context import parent_results
from postkit.tasks.task import (
    BaseTask,
    PushOptions,
    Task,
    TaskSettings,
    TransactionalTask,
    Workflow,
)
from postkit.worker.workflow import AsyncWorkflowContext, WorkflowContext

__all__ = [
    "App",
    "AsyncWorkflowContext",
    "BaseTask",
    "PushOptions",
    "RunStatus",
    "Task",
    "TaskSettings",
    "TransactionalTask",
    "Workflow",
    "WorkflowContext",
    "parent_results",
]
