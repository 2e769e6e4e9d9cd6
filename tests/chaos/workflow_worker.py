"""One worker process of the workflow chaos test (test_workflow_chaos.py): postkit's Worker
running the App below, whose workflow ``order`` goes through five transactional steps, a
durable sleep, a wait for an event and a map of ten jobs.

Run as ``python workflow_worker.py`` with its settings in the environment (CHAOS_DSN,
CHAOS_NAMESPACE, CHAOS_WORKER_ID, CHAOS_RUN_LOG, CHAOS_VISIBILITY, CHAOS_CONCURRENCY). Each
transactional step inserts one row in ``wf_effects``, in the transaction that records the
step: it commits exactly once, or not at all. Each run of the workflow's function appends a
line ``run_id attempt pid`` to CHAOS_RUN_LOG.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Any

from postkit import tasks

NAMESPACE = os.environ["CHAOS_NAMESPACE"]
DSN = os.environ["CHAOS_DSN"]
WORKER_ID = os.environ["CHAOS_WORKER_ID"]
RUN_LOG = os.environ["CHAOS_RUN_LOG"]
VISIBILITY = float(os.environ.get("CHAOS_VISIBILITY", "2.0"))
CONCURRENCY = int(os.environ.get("CHAOS_CONCURRENCY", "4"))

app = tasks.App(namespace=NAMESPACE)
_run_log = os.open(RUN_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


@app.task(queue="items", retain_results=86400, max_attempts=50, backoff_base=0.1, backoff_cap=1)
def double(item: int) -> int:
    time.sleep(0.005)
    return item * 2


def effect(cursor: Any, run_id: int, step: int) -> int:
    time.sleep(0.01)  # steps in flight when a worker dies
    cursor.execute("INSERT INTO wf_effects (run_id, step) VALUES (%s, %s)", (run_id, step))
    return step


@app.workflow(
    queue="orders", retain_results=86400, max_attempts=50, backoff_base=0.1, backoff_cap=1
)
def order(ctx: tasks.WorkflowContext, number: int) -> dict[str, Any]:
    os.write(_run_log, f"{ctx.run_id} {ctx.job.attempts} {os.getpid()}\n".encode())
    for step in range(3):
        ctx.transaction(f"effect {step}", effect, ctx.run_id, step)
    ctx.sleep(0.2)
    event = ctx.wait_for("go", timeout=1.5)
    doubled = ctx.map(double, [{"item": number * 10 + i} for i in range(10)])
    for step in range(3, 5):
        ctx.transaction(f"effect {step}", effect, ctx.run_id, step)
    return {"sum": sum(doubled), "event": event}


def main() -> None:
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.WARNING,
        format=f"%(asctime)s {WORKER_ID} %(levelname)s %(name)s: %(message)s",
    )
    worker = app.worker(
        DSN,
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
