"""The smallest complete use of Postkit: install the queue, push a job in a transaction, and
run a worker that handles it, and every job pushed after it, until Ctrl-C.

The database is the one ``POSTKIT_DSN`` or ``DATABASE_URL`` names, else Postkit's embedded
PostgreSQL (as for the ``postkit`` command).
"""

from __future__ import annotations

import psycopg

from postkit.embedded import resolve_dsn
from postkit.queue import Job, QueueClient, install
from postkit.worker import Handlers, Worker

NAMESPACE = "script-example"

handlers = Handlers()


@handlers.register("greet")
def greet(job: Job) -> None:  # returns: the job is acked; raises: it is retried with backoff
    print(f"Hello, {job.payload['name']}!", flush=True)


def main() -> None:
    dsn = resolve_dsn()
    with psycopg.connect(dsn) as connection:
        install(connection)  # idempotent: creates or upgrades the schema postkit_queue
        queue = QueueClient(connection.cursor(), namespace=NAMESPACE)
        job_id = queue.push("greet", {"name": "Ada"})
        connection.commit()  # the job exists from here on
    print(f"Pushed job {job_id}; the worker runs until Ctrl-C.", flush=True)
    Worker(dsn, handlers, namespace=NAMESPACE).run()


if __name__ == "__main__":
    main()
