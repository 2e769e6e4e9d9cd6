"""One worker process of the chaos test: postkit's Worker running the handler below.

Run as ``python chaos_worker.py`` with its settings in the environment (CHAOS_DSN,
CHAOS_NAMESPACE, CHAOS_WORKER_ID, CHAOS_RUN_LOG, CHAOS_VISIBILITY, CHAOS_CONCURRENCY). The test
starts several, kills, stops and restarts them, and reads what they left behind:

- every handler run appends one line ``job_id attempt kind pid`` to CHAOS_RUN_LOG (a file, so
  runs are counted even while the database is down);
- every run (but a poison pill's) also writes an "external" side effect, one row in
  ``chaos_external`` through a separate autocommit connection: it commits whatever happens to
  the job afterwards, like an email that cannot be unsent (duplicates are expected and counted);
- a run that succeeds inserts one row in ``chaos_effects`` through the cursor the worker gives a
  transactional handler: it commits with the ack, or not at all.

Jobs of the queue ``chaos_plain`` go to a plain (not transactional) handler instead, whose
successes the worker acknowledges in batches: it writes its external row at the end of a
successful run, so every acked job of that queue must have at least one.

What a job does depends on its payload's ``kind``:

- ``ok``: succeeds;
- ``slow``: sleeps ``sleep`` seconds, then succeeds (so that workers have jobs in flight when the
  test stops or kills them);
- ``flaky``: writes its effect, then fails (an exception, or RetryLater) while its attempt is at
  most ``fail_times``; the effect of a failed attempt must roll back;
- ``permanent``: raises PermanentError, so the job is dead-lettered at once;
- ``poison``: kills its own process (SIGKILL or os._exit) every time, so only the visibility
  timeout can get rid of it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import psycopg

from postkit.errors import PermanentError, RetryLater
from postkit.queue import Job
from postkit.worker import Handlers, Worker

QUEUE = "chaos"
PLAIN_QUEUE = "chaos_plain"

DSN = os.environ["CHAOS_DSN"]
NAMESPACE = os.environ["CHAOS_NAMESPACE"]
WORKER_ID = os.environ["CHAOS_WORKER_ID"]
RUN_LOG = os.environ["CHAOS_RUN_LOG"]
VISIBILITY = float(os.environ.get("CHAOS_VISIBILITY", "2.0"))
CONCURRENCY = int(os.environ.get("CHAOS_CONCURRENCY", "4"))

handlers = Handlers()
_run_log = os.open(RUN_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
_external_lock = threading.Lock()
_external: psycopg.Connection[Any] | None = None


def record_run(job: Job) -> None:
    """One line per handler run; a single write to an O_APPEND file, so lines never mix."""
    line = f"{job.id} {job.attempts} {job.payload['kind']} {os.getpid()}\n"
    os.write(_run_log, line.encode())


def external_effect(job: Job) -> None:
    """Commit a row at once, outside the job's transaction (reconnecting once if the
    connection was cut); raises if the database cannot be reached."""
    global _external
    for attempt in range(2):
        with _external_lock:
            if _external is None or _external.closed:
                _external = psycopg.connect(DSN, autocommit=True, connect_timeout=5)
            connection = _external
        try:
            connection.execute(
                "INSERT INTO chaos_external (job_id, queue, attempt, worker_id)"
                " VALUES (%s, %s, %s, %s)",
                (job.id, job.queue, job.attempts, WORKER_ID),
            )
            return
        except psycopg.OperationalError:
            with _external_lock:
                if _external is connection:
                    _external = None
            connection.close()
            if attempt:
                raise


@handlers.register(QUEUE, transactional=True)
def handle(job: Job, cursor: Any) -> None:
    payload = job.payload
    kind = payload["kind"]
    record_run(job)
    if kind == "poison":  # first: nothing (such as a lost connection) may fail it otherwise
        if payload["how"] == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    external_effect(job)
    if kind == "permanent":
        raise PermanentError(f"permanent failure of job {job.id}")
    if kind == "slow":
        time.sleep(payload["sleep"])  # slow work on purpose: jobs in flight when faults strike
    cursor.execute(
        "INSERT INTO chaos_effects (job_id, attempt, worker_id) VALUES (%s, %s, %s)",
        (job.id, job.attempts, WORKER_ID),
    )
    if kind == "flaky" and job.attempts <= payload["fail_times"]:
        # The effect above is in the ack's transaction: failing now must roll it back.
        if payload["retry_later"]:
            raise RetryLater(f"flaky job {job.id}, attempt {job.attempts}", delay=0.05)
        raise RuntimeError(f"flaky job {job.id}, attempt {job.attempts}")


@handlers.register(PLAIN_QUEUE)
def handle_plain(job: Job) -> None:
    payload = job.payload
    kind = payload["kind"]
    record_run(job)
    if kind == "permanent":
        raise PermanentError(f"permanent failure of job {job.id}")
    if kind == "slow":
        time.sleep(payload["sleep"])  # slow work on purpose: jobs in flight when faults strike
    if kind == "flaky" and job.attempts <= payload["fail_times"]:
        if payload["retry_later"]:
            raise RetryLater(f"flaky job {job.id}, attempt {job.attempts}", delay=0.05)
        raise RuntimeError(f"flaky job {job.id}, attempt {job.attempts}")
    external_effect(job)  # the run succeeded: the worker acks it in its next batch


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
    # Until run() installs its own handler, a SIGTERM still means a graceful stop: run() then
    # returns at once. The test sends SIGTERM only after this line is printed.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: worker.stop())
    print(f"{WORKER_ID} starting (pid {os.getpid()})", flush=True)
    worker.run()
    print(f"{WORKER_ID} exited cleanly", flush=True)


if __name__ == "__main__":
    main()
