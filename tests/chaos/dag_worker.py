"""One worker process of the DAG chaos test (test_dag_chaos.py): postkit's Worker running the
handler below on the queue ``dag``, whose jobs wait for one another (``depends_on``).

Run as ``python dag_worker.py`` with its settings in the environment (CHAOS_DSN,
CHAOS_NAMESPACE, CHAOS_WORKER_ID, CHAOS_RUN_LOG, CHAOS_VISIBILITY, CHAOS_CONCURRENCY). Each
handler run:

- appends one line ``job_id attempt parents_done pid`` to CHAOS_RUN_LOG (a file, so that runs
  are counted even while the database is down), where ``parents_done`` is 1 when every parent
  of the job had completed as the run began (``postkit_queue.parent_results``);
- for a job of kind ``permanent``, raises PermanentError: the job is dead-lettered and its
  descendants are cancelled;
- else sleeps a little (jobs in flight when the faults strike) and inserts one row in
  ``dag_effects`` through the cursor the worker gives a transactional handler: it commits with
  the ack, or not at all.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Any

from postkit.errors import PermanentError
from postkit.queue import Job
from postkit.worker import Handlers, Worker

QUEUE = "dag"

DSN = os.environ["CHAOS_DSN"]
NAMESPACE = os.environ["CHAOS_NAMESPACE"]
WORKER_ID = os.environ["CHAOS_WORKER_ID"]
RUN_LOG = os.environ["CHAOS_RUN_LOG"]
VISIBILITY = float(os.environ.get("CHAOS_VISIBILITY", "2.0"))
CONCURRENCY = int(os.environ.get("CHAOS_CONCURRENCY", "4"))

handlers = Handlers()
_run_log = os.open(RUN_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


@handlers.register(QUEUE, transactional=True)
def handle(job: Job, cursor: Any) -> None:
    cursor.execute(
        "SELECT count(*) FILTER (WHERE p.state <> 'completed')"
        " FROM postkit_queue.parent_results(%s, %s) AS p",
        (NAMESPACE, job.id),
    )
    (unfinished,) = cursor.fetchone()
    # One write to an O_APPEND file: lines never mix.
    line = f"{job.id} {job.attempts} {int(unfinished == 0)} {os.getpid()}\n"
    os.write(_run_log, line.encode())
    if job.payload["kind"] == "permanent":
        raise PermanentError(f"permanent failure of job {job.id}")
    time.sleep(job.payload["sleep"])
    cursor.execute(
        "INSERT INTO dag_effects (job_id, attempt, worker_id) VALUES (%s, %s, %s)",
        (job.id, job.attempts, WORKER_ID),
    )


def main() -> None:
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.WARNING,
        format=f"%(asctime)s {WORKER_ID} %(levelname)s %(name)s: %(message)s",
    )
    worker = Worker(
        DSN,
        handlers,
        namespace=NAMESPACE,
        worker_id=WORKER_ID,
        concurrency=CONCURRENCY,
        visibility_timeout=VISIBILITY,
        poll_interval=1.0,
        tick_interval=0.5,
        grace_period=5.0,
    )
    # Until run() installs its own handler, a SIGTERM still means a graceful stop.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: worker.stop())
    print(f"{WORKER_ID} starting (pid {os.getpid()})", flush=True)
    worker.run()
    print(f"{WORKER_ID} exited cleanly", flush=True)


if __name__ == "__main__":
    main()
