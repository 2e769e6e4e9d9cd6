"""The worker's side: ``postkit worker tasks --namespace flask-example`` runs these handlers.

The handler is transactional: it gets a cursor in the transaction that acks its job, so its
write to the user's row commits with the ack, exactly once, and rolls back with it if the
handler raises (the job is then retried) or its claim went stale.
"""

from __future__ import annotations

from typing import Any

from postkit.queue import Job
from postkit.worker import Handlers

handlers = Handlers()


@handlers.register("send_welcome", transactional=True, timeout=30)
def send_welcome(job: Job, cursor: Any) -> None:
    """Send the welcome email (here: print it) and record when, in the ack's transaction."""
    print(f"Welcome to the app, {job.payload['email']}!", flush=True)
    cursor.execute("UPDATE flask_users SET welcomed_at = now() WHERE welcome_job = %s", (job.id,))
