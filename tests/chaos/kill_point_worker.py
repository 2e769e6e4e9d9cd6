"""One worker process of test_workflow_kills.py: postkit's Worker running the workflow below,
which stops dead at one point of its run when CHAOS_KILL_AT names it, so that the test can
SIGKILL the process there.

Run as ``python kill_point_worker.py`` with CHAOS_DSN, CHAOS_NAMESPACE, CHAOS_WORKER_ID,
CHAOS_MARKER (a file it creates when it reaches the point) and CHAOS_KILL_AT: 'inside the
transaction' (the step's row written, its transaction not committed), 'after the
transaction' (committed, the next step not begun), 'inside the step' (a step's function
running, its result not recorded), or '' (never stop).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from postkit import tasks

NAMESPACE = os.environ["CHAOS_NAMESPACE"]
KILL_AT = os.environ.get("CHAOS_KILL_AT", "")
MARKER = Path(os.environ["CHAOS_MARKER"])

app = tasks.App(namespace=NAMESPACE)


def stop_here(point: str) -> None:
    """At ``point``, say so and wait to be killed."""
    if point == KILL_AT:
        MARKER.write_text(point)
        time.sleep(600)


def write(cursor: Any, run_id: int, step: str) -> str:
    cursor.execute("INSERT INTO kill_effects (run_id, step) VALUES (%s, %s)", (run_id, step))
    if step == "first":
        stop_here("inside the transaction")
    return step


def call_the_provider(run_id: int) -> str:
    with open(os.environ["CHAOS_CALLS"], "a") as calls:
        calls.write(f"{run_id}\n")
    stop_here("inside the step")
    return "sent"


@app.workflow(queue="orders", retain_results=3600, max_attempts=10)
def order(ctx: tasks.WorkflowContext) -> str:
    ctx.transaction("first", write, ctx.run_id, "first")
    stop_here("after the transaction")
    ctx.step("provider", call_the_provider, ctx.run_id)
    ctx.sleep(0.3)
    ctx.transaction("second", write, ctx.run_id, "second")
    return "done"


def main() -> None:
    worker = app.worker(
        os.environ["CHAOS_DSN"],
        worker_id=os.environ["CHAOS_WORKER_ID"],
        concurrency=2,
        visibility_timeout=1.0,
        poll_interval=0.5,
        tick_interval=0.2,
    )
    print(f"{os.environ['CHAOS_WORKER_ID']} starting", flush=True)
    worker.run()


if __name__ == "__main__":
    sys.exit(main())
