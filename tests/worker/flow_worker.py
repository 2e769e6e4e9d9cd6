"""One worker process of the flow-control tests: postkit's Worker serving the queue ``limited``.

Run as ``python flow_worker.py`` with its settings in the environment: FLOW_DSN,
FLOW_NAMESPACE, FLOW_CONCURRENCY (the worker's slots), FLOW_VISIBILITY and FLOW_TICK (seconds).
It prints ``ready`` just before the worker runs, and for every handler run one line when the
run starts and one when it ends, each written at once:

    started <job id> <attempt> <claimed_at, ISO> <CLOCK_MONOTONIC ns> <group key or ->
    finished <job id> <attempt> <CLOCK_MONOTONIC ns>

CLOCK_MONOTONIC is one clock for every process of the machine, so the test can order the runs
of several workers. What a run does depends on its payload: ``go`` (a path) waits for that file
to exist, ``hold`` sleeps that many seconds, and ``retry_once`` asks for a retry (RetryLater,
after ``retry_once`` seconds) on the first attempt.
"""

from __future__ import annotations

import os
import sys
import time

from postkit.errors import RetryLater
from postkit.queue import Job
from postkit.worker import Handlers, Worker

handlers = Handlers()


def say(line: str) -> None:
    """One write, line and newline together, so that lines of two threads never mix."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@handlers.register("limited")
def run(job: Job) -> None:
    claimed_at = job.claimed_at.isoformat() if job.claimed_at else "-"
    key = "-" if job.group_key is None else job.group_key.encode("unicode_escape").decode()
    say(f"started {job.id} {job.attempts} {claimed_at} {time.monotonic_ns()} {key}")
    payload = job.payload
    go = payload.get("go")
    deadline = time.monotonic() + 60
    while go and not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)  # the job runs until the test creates its go file
    time.sleep(payload.get("hold", 0))  # a job that takes this long, on purpose
    say(f"finished {job.id} {job.attempts} {time.monotonic_ns()}")
    if payload.get("retry_once") and job.attempts == 1:
        raise RetryLater("once more", delay=payload["retry_once"])


def main() -> None:
    worker = Worker(
        os.environ["FLOW_DSN"],
        handlers,
        namespace=os.environ["FLOW_NAMESPACE"],
        concurrency=int(os.environ["FLOW_CONCURRENCY"]),
        visibility_timeout=float(os.environ["FLOW_VISIBILITY"]),
        tick_interval=float(os.environ["FLOW_TICK"]),
        poll_interval=30.0,  # longer than any test waits: a job runs on a notification
        grace_period=1.0,
    )
    say("ready")
    worker.run()


if __name__ == "__main__":
    main()
