"""What a workflow's steps cost (issue 31): a worker of this process (one, 8 slots) drains N runs
of a workflow, and the same N plain tasks, and the difference per step is a step's overhead.

Rows, each timed from the commit of its N pushes to the moment the namespace's jobs table is
empty (a poll every 5 ms), on a namespace of its own:

- plain: N tasks whose function returns at once (the baseline: a claim and an ack per job);
- 10 steps: N runs of a workflow of ten ``ctx.step`` that return at once (each step one
  statement, ``record_step``, committed on its own);
- 10 transactional steps: the same with ``ctx.transaction`` (each step a transaction of its
  own: the function's cursor, ``record_step``, the commit);
- 3 steps: N runs of a three-step workflow, for runs per second;

and the same shapes on DBOS Transact, in the same run, when it is installed
(benchmarks/workflows_dbos.py). Last, what sleeping runs cost: the transactions a waiting
worker's database commits per second while 100,000 runs sleep, against none.

A step's overhead is (row - plain) / (N x 10), with the worker's slots busy; and, for one run
alone, the time its ten steps take one after another, measured inside the workflow's function
(from before the first to after the last), divided by ten, over runs pushed one at a time. The
replay of the recorded steps happens only when a run runs again, which these runs do not.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import psycopg

from benchmarks import suite, workflows_dbos
from benchmarks.common import environment
from postkit import tasks
from postkit.queue import QueueClient

RUNS = 300
SLOTS = 8


def _app(namespace: str) -> tasks.App:
    app = tasks.App(namespace=namespace)

    def nothing(*_: Any) -> None:
        return None

    @app.task(queue="plain")
    def plain() -> None:
        return None

    @app.workflow(queue="ten")
    def ten(ctx: tasks.WorkflowContext) -> None:
        for step in range(10):
            ctx.step(f"step {step}", nothing)

    @app.workflow(queue="ten_tx")
    def ten_tx(ctx: tasks.WorkflowContext) -> None:
        for step in range(10):
            ctx.transaction(f"step {step}", nothing)

    @app.workflow(queue="three")
    def three(ctx: tasks.WorkflowContext) -> None:
        for step in range(3):
            ctx.step(f"step {step}", nothing)

    return app


def _timed(dsn: str, namespace: str, queue: str, runs: int) -> float:
    """Seconds from the commit of ``runs`` pushes to ``queue`` to an empty namespace."""
    app = _app(namespace)
    worker = app.worker(dsn, concurrency=SLOTS, queues=[queue])
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        time.sleep(1.0)  # the worker starts and waits
        with psycopg.connect(dsn) as connection:
            task = app.tasks[queue]
            task.push_many(connection.cursor(), [{} for _ in range(runs)])
            connection.commit()
            started = time.perf_counter()
            while True:
                (live,) = connection.execute(
                    "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (namespace,)
                ).fetchone()  # type: ignore[misc]
                connection.rollback()
                if live == 0:
                    return time.perf_counter() - started
                time.sleep(0.005)
    finally:
        worker.stop()
        thread.join()


def _alone(dsn: str, namespace: str, runs: int) -> list[float]:
    """Seconds each of ``runs`` runs of a ten-step workflow, pushed one at a time, spent in its
    ten steps, from inside its function."""
    app = tasks.App(namespace=namespace)
    spent: list[float] = []

    @app.workflow(queue="alone")
    def alone(ctx: tasks.WorkflowContext) -> None:
        started = time.perf_counter()
        for step in range(10):
            ctx.step(f"step {step}", lambda: None)
        spent.append(time.perf_counter() - started)

    worker = app.worker(dsn, concurrency=SLOTS, queues=["alone"])
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        time.sleep(1.0)  # the worker starts and waits
        with psycopg.connect(dsn) as connection:
            for done in range(runs):
                alone.push(connection.cursor())
                connection.commit()
                while len(spent) <= done:
                    time.sleep(0.005)
    finally:
        worker.stop()
        thread.join()
    return spent


def _idle_transactions(dsn: str, namespace: str, sleeping: int, seconds: float) -> float:
    """Transactions per second the database commits while a worker waits and ``sleeping``
    runs of its queue sleep (pending, due in a day: what a parked run is), over ``seconds``."""
    app = _app(namespace)
    with psycopg.connect(dsn) as connection:
        client = QueueClient(connection.cursor(), namespace=namespace)
        for start in range(0, sleeping, 10_000):
            client.push_batch(
                "three", [{"args": [], "kwargs": {}}] * min(10_000, sleeping - start), delay=86400
            )
            connection.commit()
    worker = app.worker(dsn, concurrency=SLOTS, queues=["three"])
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        time.sleep(3.0)  # the worker starts and settles into waiting
        with psycopg.connect(dsn, autocommit=True) as connection:

            def commits() -> int:
                row = connection.execute(
                    "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                ).fetchone()
                connection.execute("SELECT pg_stat_clear_snapshot()")
                return int(row[0]) if row else 0

            before = commits()
            time.sleep(seconds)
            return (commits() - before - 1) / seconds
    finally:
        worker.stop()
        thread.join()


def _dbos(dsn: str, jobs: int, runs: int) -> dict[str, list[float]] | None:
    """DBOS's rows (benchmarks/workflows_dbos.py), or None when DBOS is not installed."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        return None
    return workflows_dbos.measure(dsn, jobs=jobs, runs=runs)


def run(dsn: str, *, quick: bool, runs: int, command: str) -> str:
    """Each row ``runs`` times, rotated, as markdown."""
    jobs = 50 if quick else RUNS
    rows = {
        "plain": "plain",
        "ten": "10 steps",
        "ten_tx": "10 transactional steps",
        "three": "3 steps",
    }
    times: dict[str, list[float]] = {queue: [] for queue in rows}
    order = list(rows)
    for turn in range(runs):
        for queue in order[turn % len(order) :] + order[: turn % len(order)]:
            times[queue].append(_timed(dsn, f"bench-wf-{queue}-{turn}", queue, jobs))
    alone = _alone(dsn, "bench-wf-alone", 10 if quick else 50)
    latency = statistics.median(alone) / 10 * 1000
    dbos_times = _dbos(dsn, jobs, runs)
    median = {queue: statistics.median(values) for queue, values in times.items()}
    per_step = (median["ten"] - median["plain"]) / (jobs * 10) * 1000
    per_tx_step = (median["ten_tx"] - median["plain"]) / (jobs * 10) * 1000
    lines = [
        "# Workflows: what a step costs",
        "",
        f"{environment(dsn)}; Postkit from {suite.postkit_source()}. Command: `{command}`.",
        f"{runs} runs of each row, rotated; medians (min-max). One worker in the benchmark's "
        f"process, {SLOTS} slots; {jobs} jobs or runs per row (benchmarks/workflows.py).",
        "",
        "| row | drained in |",
        "|---|---:|",
    ]
    for queue, label in rows.items():
        values = times[queue]
        lines.append(
            f"| {label}: {jobs} | {median[queue]:.3f} s ({min(values):.3f}-{max(values):.3f}) |"
        )
    lines += [
        "",
        f"A step's overhead: **{per_step:.2f} ms** (`ctx.step`), "
        f"**{per_tx_step:.2f} ms** (`ctx.transaction`), over a plain task's claim and ack. "
        f"Three-step runs: **{jobs / median['three']:.0f} runs/s**.",
        "",
        f"One run alone, ten steps one after another: **{latency:.2f} ms per step** (the "
        f"median of {len(alone)} runs pushed one at a time, each timed inside its function; "
        f"p90 {statistics.quantiles(alone, n=10)[-1] / 10 * 1000:.2f} ms).",
    ]
    sleeping = 1_000 if quick else 100_000
    idle = {
        count: _idle_transactions(dsn, f"bench-wf-idle-{count}", count, 3.0 if quick else 10.0)
        for count in (0, sleeping)
    }
    lines += [
        "",
        f"While {sleeping:,} runs sleep (parked: pending, due in a day), a waiting worker's "
        f"database commits **{idle[sleeping]:.1f} transactions/s**, against "
        f"**{idle[0]:.1f}/s** with none: a sleeping run is a row, and nothing polls it.",
    ]
    if dbos_times is None:
        lines += ["", "DBOS is not installed (`pip install dbos`): no DBOS rows."]
    else:
        lines += ["", "| row | drained in |", "|---|---:|", *workflows_dbos.lines(dbos_times, jobs)]
    return "\n".join(lines) + "\n"
