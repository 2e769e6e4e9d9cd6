"""The worker's side: one typed task, run by ``postkit worker tasks``.

Its return value is the job's result: the app's queue keeps results (see ``app.py``), so
``GET /users/{id}`` shows what the welcome returned.
"""

from __future__ import annotations

from postkit import tasks

app = tasks.App(namespace="fastapi-example")


@app.task(queue="send_welcome", max_attempts=5, timeout=30)
def send_welcome(email: str) -> dict[str, str]:
    """Send the welcome email (here: print it); an exception retries it with backoff."""
    print(f"Welcome to the app, {email}!", flush=True)
    return {"sent_to": email}
