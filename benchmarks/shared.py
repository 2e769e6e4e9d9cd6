"""What a shared worker (postkit.worker.SharedWorker) gives and costs: how the namespaces share
its slots, how soon a namespace whose jobs arrive late gets its part, and its drain rate against
a worker of one namespace.

- **Shares.** Two namespaces weighing 3 and 1, each with a backlog of 5 ms jobs, one shared
  worker of 8 slots: the jobs each namespace started, past the first 100 (the first claims may
  take every slot for one namespace before the other asks), until 2,000 started.
- **Late namespace.** One namespace's 50 ms jobs hold all 8 slots; another's job is pushed
  (five times, one after another): from the push's commit to its handler's start.
- **Drain.** No-op jobs, 16 slots, in one process: one worker of one namespace (adaptive
  prefetch, and without prefetch), and a shared worker of two namespaces, half of the jobs in
  each. Timed from the worker's start (the backlog committed before) to the last handler's
  end. A shared worker holds no prefetch, so the row without it is the like for like.

Workers run on threads of this process, as ``postkit worker`` runs them.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg

from benchmarks import suite
from benchmarks.common import environment
from postkit.queue import Job, QueueClient, install
from postkit.worker import SharedWorker, Worker

QUEUE = "work"
QUIET: dict[str, Any] = {"poll_interval": 5.0, "tick_interval": 60.0, "grace_period": 5.0}


class Starts:
    """The namespaces of the jobs whose handlers started, in order; ``done`` is set once
    ``until`` have started (or, with ``finish``, finished)."""

    def __init__(self, until: int, run_for: float = 0.0) -> None:
        self.until = until
        self.run_for = run_for
        self.order: list[str] = []
        self.at: dict[str, list[float]] = {}
        self.ended = 0
        self.last_end = 0.0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def handler(self, job: Job) -> None:
        with self._lock:
            self.order.append(job.namespace)
            self.at.setdefault(job.namespace, []).append(time.monotonic())
        if self.run_for:
            time.sleep(self.run_for)  # the job's work: holding its slot is the point
        with self._lock:
            self.ended += 1
            self.last_end = time.monotonic()
            if self.ended >= self.until:
                self.done.set()


def _fill(dsn: str, namespace: str, jobs: int) -> None:
    with psycopg.connect(dsn) as connection:
        client = QueueClient(connection.cursor(), namespace=namespace)
        for start in range(0, jobs, 1000):
            client.push_batch(QUEUE, [{"n": n} for n in range(start, min(start + 1000, jobs))])
        connection.commit()


def _clear(dsn: str, namespaces: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        for table in ("jobs", "dead_letters", "queue_settings", "queue_stats"):
            connection.execute(
                f"DELETE FROM postkit_queue.{table} WHERE namespace = ANY(%s)", (namespaces,)
            )


def _running(worker: Worker | SharedWorker, until: threading.Event, timeout: float) -> None:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    finished = until.wait(timeout)
    worker.stop()
    thread.join(60)
    if not finished:
        raise TimeoutError("the row did not finish in time")


def shares(dsn: str, turn: int) -> float:
    """The heavy namespace's jobs per light one's, past the first 100 of 2,000 started."""
    heavy, light = f"bench-shared-heavy-{turn}", f"bench-shared-light-{turn}"
    for namespace in (heavy, light):
        _fill(dsn, namespace, 2_000)
    starts = Starts(until=2_000, run_for=0.005)
    worker = SharedWorker(
        dsn, {QUEUE: starts.handler}, namespaces={heavy: 3, light: 1}, concurrency=8, **QUIET
    )
    try:
        _running(worker, starts.done, 120)
    finally:
        _clear(dsn, [heavy, light])
    counted = Counter(starts.order[100:2_000])
    return counted[heavy] / counted[light]


def late_waits(dsn: str, turn: int) -> list[float]:
    """Seconds from the commit of a late namespace's push to its handler's start, while the
    other's 50 ms jobs hold every slot: five pushes, one after another."""
    busy, late = f"bench-shared-busy-{turn}", f"bench-shared-late-{turn}"
    _fill(dsn, busy, 2_000)
    starts = Starts(until=10**9, run_for=0.05)
    worker = SharedWorker(
        dsn, {QUEUE: starts.handler}, namespaces=[busy, late], concurrency=8, **QUIET
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    waits: list[float] = []
    try:
        _until(lambda: len(starts.at.get(busy, [])) >= 16, 30)
        with psycopg.connect(dsn, autocommit=True) as connection:
            client = QueueClient(connection.cursor(), namespace=late)
            for n in range(5):
                client.push(QUEUE, {"n": n})
                pushed = time.monotonic()
                _until(lambda: len(starts.at.get(late, [])) > len(waits), 30)
                waits.append(starts.at[late][n] - pushed)
    finally:
        worker.stop()
        thread.join(60)
        _clear(dsn, [busy, late])
    return waits


def drain(dsn: str, turn: int, kind: str, jobs: int) -> float:
    """Jobs per second of a drain of ``jobs`` no-op jobs by a worker of ``kind``."""
    first, second = f"bench-drain-{kind}-a-{turn}", f"bench-drain-{kind}-b-{turn}"
    if kind == "shared":
        _fill(dsn, first, jobs // 2)
        _fill(dsn, second, jobs - jobs // 2)
    else:
        _fill(dsn, first, jobs)
    starts = Starts(until=jobs)
    worker: Worker | SharedWorker = (
        SharedWorker(
            dsn, {QUEUE: starts.handler}, namespaces=[first, second], concurrency=16, **QUIET
        )
        if kind == "shared"
        else Worker(
            dsn,
            {QUEUE: starts.handler},
            namespace=first,
            concurrency=16,
            prefetch=0 if kind == "no-prefetch" else None,
            **QUIET,
        )
    )
    began = time.monotonic()
    try:
        _running(worker, starts.done, 300)
    finally:
        _clear(dsn, [first, second])
    return jobs / (starts.last_end - began)


def _until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the row did not finish in time")
        time.sleep(0.001)


def run(dsn: str, *, quick: bool, runs: int, command: str) -> str:
    """Every row, ``runs`` times (the drain rows in a changing order), as markdown."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        install(connection)
    jobs = 4_000 if quick else 40_000
    started = time.time()
    ratios: list[float] = []
    waits: list[float] = []
    kinds = ["one namespace", "no-prefetch", "shared"]
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    for turn in range(runs):
        ratios.append(shares(dsn, turn))
        waits += late_waits(dsn, turn)
        for kind in kinds[turn % 3 :] + kinds[: turn % 3]:
            rates[kind].append(drain(dsn, turn, kind, jobs))

    def spread(values: list[float], digits: int = 0) -> str:
        median = statistics.median(values)
        return f"{median:,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"

    labels = {
        "one namespace": "one namespace, adaptive prefetch (a `Worker`'s default)",
        "no-prefetch": "one namespace, `prefetch=0`",
        "shared": "two namespaces, a `SharedWorker` (no prefetch)",
    }
    milliseconds = [wait * 1000 for wait in waits]
    return "\n".join(
        [
            "# A shared worker: namespaces sharing one worker's slots",
            "",
            f"{environment(dsn)}; Postkit from {suite.postkit_source()}. Command: `{command}`"
            + (" (quick: counts too small for the figures to mean much)." if quick else "."),
            f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
            f"{time.time() - started:.0f} s, {runs} runs of each row; medians (min-max). "
            "What each row does: benchmarks/shared.py.",
            "",
            "| row | figure |",
            "|---|---:|",
            f"| weights 3:1, both with a backlog: jobs started, heavy / light | "
            f"{spread(ratios, 2)} |",
            f"| a late namespace's job, the other holding all 8 slots with 50 ms jobs: push to "
            f"start, ms ({len(waits)} pushes; max {max(milliseconds):.1f}) | "
            f"{spread(milliseconds, 1)} |",
            *(
                f"| drain of {jobs:,} no-op jobs, 16 slots: {labels[kind]}, jobs/s | "
                f"{spread(rates[kind])} |"
                for kind in kinds
            ),
            "",
        ]
    )
