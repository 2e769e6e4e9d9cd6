"""A signup as a durable workflow: create the account in a transactional step (exactly once),
send a welcome e-mail as a step (at least once), wait for the e-mail's confirmation, an event
sent from outside, for at most a while, and send a reminder if it does not come.

Two signups run: Ada confirms her e-mail while her run waits; Grace never does, and gets the
reminder when her wait times out. The database is the one ``POSTKIT_DSN`` or ``DATABASE_URL``
names, else Postkit's embedded PostgreSQL (as for the ``postkit`` command). The script runs its
own worker on a thread and stops it once both runs finished.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from postkit import tasks
from postkit.embedded import resolve_dsn
from postkit.queue import QueueClient, install

NAMESPACE = "workflow-example"
CONFIRMATION_WINDOW = 3.0  # seconds here; days in a real signup

app = tasks.App(namespace=NAMESPACE)


def create_account(cursor: Any, email: str) -> int:
    """Runs in one transaction with the step's checkpoint: the account exists exactly once."""
    cursor.execute("INSERT INTO accounts (email) VALUES (%s) RETURNING id", (email,))
    (account_id,) = cursor.fetchone()
    return int(account_id)


def send_email(email: str, text: str) -> None:
    """An e-mail provider's API: may run again if the worker dies before its checkpoint."""
    print(f"to {email}: {text}", flush=True)


@app.workflow(queue="signups", retain_results=3600)
def signup(ctx: tasks.WorkflowContext, email: str) -> str:
    account_id = ctx.transaction("account", create_account, email)
    ctx.step("welcome", send_email, email, f"welcome! your account is {account_id}")
    confirmation = ctx.wait_for("confirmed", timeout=CONFIRMATION_WINDOW)
    if confirmation is None:
        ctx.step("reminder", send_email, email, "please confirm your e-mail address")
        return "reminded"
    return f"confirmed at {confirmation['at']}"


def main() -> None:
    dsn = resolve_dsn()
    with psycopg.connect(dsn) as connection:
        install(connection)
        connection.execute("CREATE TABLE IF NOT EXISTS accounts (id serial, email text UNIQUE)")
        with connection.cursor() as cursor:
            ada = signup.push(cursor, email="ada@example.com")  # in the signup's transaction
            grace = signup.push(cursor, email="grace@example.com")
        connection.commit()
    assert ada is not None and grace is not None

    worker = app.worker(dsn)
    running = threading.Thread(target=worker.run)
    running.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as connection:
            queue = QueueClient(connection.cursor(), namespace=NAMESPACE)
            # Ada clicks the link in her e-mail: the web app sends the event in its own
            # transaction, and her waiting run wakes at once.
            while [step.name for step in queue.workflow_steps(ada)][-1:] != ["wait_for"]:
                threading.Event().wait(0.05)
            app.send_event(connection.cursor(), ada, "confirmed", {"at": "the link"})
            for run_id in (ada, grace):
                outcome = queue.wait_for_result(run_id, timeout=30).value
                steps = [step.name for step in queue.workflow_steps(run_id)]
                print(f"run {run_id}: {outcome}; steps {', '.join(steps)}", flush=True)
    finally:
        worker.stop()
        running.join()


if __name__ == "__main__":
    main()
