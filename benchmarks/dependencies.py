"""What jobs that wait for jobs, and progress reports, cost (issue 30): a fan-in of N parents
into one child, drained by the same workers as N + 1 plain jobs; and the plain drain again
while 1,000 other jobs, held claimed, get 100 progress reports a second.

Each row starts the flow benchmark's worker processes (2 x 32 slots, a no-op handler) on an
empty namespace of its own, lets them settle into waiting, then commits its backlog in one
transaction and times from that commit to the moment the namespace's jobs table is empty (a
poll every 5 ms): the plain row pushes N + 1 jobs; the fan-in row pushes N parents and one child
that depends on all of them (the child runs last, after the last parent's ack made it pending,
and reads its N parents' results). The child's push, which locks and marks its N parents, is
timed on its own. The progress row pushes what the plain row pushes, while a thread of its own
reports progress on 1,000 running jobs of another namespace (claimed for an hour before the
row starts), one report every 10 ms, each its own transaction: the same table, the same
indexes, written while the workers drain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg

from benchmarks import suite
from benchmarks.adapters import WorkerConfig
from benchmarks.common import environment
from benchmarks.flow import FlowAdapter
from postkit.queue import QueueClient

PARENTS_QUEUE = "parents"
CHILD_QUEUE = "children"
WORKERS = WorkerConfig(2, 32)
SETTLE = 3.0
"""Seconds the workers get to start and wait before a row's backlog commits."""
REPORTED = 1_000
"""Running jobs the progress row reports on."""
REPORT_EVERY = 0.01
"""Seconds between two progress reports: 100 a second."""


def run(dsn: str, *, quick: bool, runs: int, command: str) -> str:
    """The plain, fan-in and progress rows, ``runs`` times each, each turn starting with the
    next row, as markdown."""
    parents = 1_000 if quick else 10_000
    started = time.time()
    plain: list[float] = []
    fan_in: list[float] = []
    child_push: list[float] = []
    reported: list[float] = []
    reports: list[int] = []

    def plain_row(turn: int) -> None:
        plain.append(_timed(dsn, f"bench-plain-{turn}", lambda client: _plain(client, parents)))

    def fan_in_row(turn: int) -> None:
        fan_in.append(
            _timed(dsn, f"bench-fan-in-{turn}", lambda client: _fan_in(client, parents, child_push))
        )

    def progress_row(turn: int) -> None:
        with _reporting(dsn, f"bench-reported-{turn}", reports):
            reported.append(
                _timed(dsn, f"bench-progress-{turn}", lambda client: _plain(client, parents))
            )

    order = [plain_row, fan_in_row, progress_row]
    for turn in range(runs):
        # Each turn starts with the next row: no row always comes first, or after another.
        for row in order[turn % 3 :] + order[: turn % 3]:
            row(turn)
    rows = Rows(plain, fan_in, child_push, reported, reports)
    return _render(dsn, parents, rows, quick, command, started)


@dataclasses.dataclass(frozen=True)
class Rows:
    """Each row's drain times, the fan-in's child pushes, and the progress reports each
    progress row wrote."""

    plain: list[float]
    fan_in: list[float]
    child_push: list[float]
    reported: list[float]
    reports: list[int]


@contextlib.contextmanager
def _reporting(dsn: str, namespace: str, counts: list[int]) -> Iterator[None]:
    """While the block runs, report progress on REPORTED running jobs of ``namespace``, one
    report every REPORT_EVERY seconds, each committed on its own; appends how many it wrote."""
    stop = threading.Event()
    written = 0
    with psycopg.connect(dsn, autocommit=True) as connection:
        client = QueueClient(connection.cursor(), namespace=namespace)
        client.push_batch("long", [{"n": n} for n in range(REPORTED)])
        jobs = client.pull_batch(
            "long", worker_id="reporter", limit=REPORTED, visibility_timeout=3600
        )

        def report() -> None:
            nonlocal written
            next_at = time.perf_counter()
            while not stop.is_set():
                job = jobs[written % len(jobs)]
                client.report_progress(job, (written % 100) / 100, note=f"step {written}")
                written += 1
                next_at += REPORT_EVERY
                stop.wait(max(0.0, next_at - time.perf_counter()))

        thread = threading.Thread(target=report, name="progress-reports", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            connection.execute("DELETE FROM postkit_queue.jobs WHERE namespace = %s", (namespace,))
    counts.append(written)


def _plain(client: QueueClient, parents: int) -> None:
    client.push_batch(PARENTS_QUEUE, [{"n": n} for n in range(parents + 1)])


def _fan_in(client: QueueClient, parents: int, pushes: list[float]) -> None:
    ids = client.push_batch(PARENTS_QUEUE, [{"n": n} for n in range(parents)])
    asked = time.perf_counter()
    client.push(CHILD_QUEUE, {"n": parents}, depends_on=[i for i in ids if i is not None])
    pushes.append(time.perf_counter() - asked)


def _timed(dsn: str, namespace: str, push: Callable[[QueueClient], None]) -> float:
    """Seconds from the commit of ``push``'s backlog to the namespace's last job's ack."""
    adapter = FlowAdapter(dsn, namespace)
    adapter.open()
    adapter.clear()
    adapter.client.configure_queue(PARENTS_QUEUE, retain_results=3600)
    with (
        tempfile.TemporaryDirectory() as record,
        psycopg.connect(dsn) as producer,
        psycopg.connect(dsn, autocommit=True) as monitor,
    ):
        workers = adapter.start_flow_workers(WORKERS, [PARENTS_QUEUE, CHILD_QUEUE], Path(record))
        try:
            time.sleep(SETTLE)
            push(QueueClient(producer.cursor(), namespace=namespace))
            producer.commit()
            committed = time.perf_counter()
            while True:
                row = monitor.execute(
                    "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (namespace,)
                ).fetchone()
                if row is not None and row[0] == 0:
                    return time.perf_counter() - committed
                if time.perf_counter() - committed > 300:
                    raise RuntimeError(f"{namespace}: not drained after 300 s")
                time.sleep(0.005)
        finally:
            workers.stop()
            adapter.clear()


def _render(dsn: str, parents: int, rows: Rows, quick: bool, command: str, started: float) -> str:
    def seconds(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"

    plain = rows.plain
    ratio = statistics.median(rows.fan_in) / statistics.median(plain)
    progress_ratio = statistics.median(rows.reported) / statistics.median(plain)
    return "\n".join(
        [
            "# Dependencies and progress: a fan-in, and progress reports, against a plain drain",
            "",
            f"{environment(dsn)}; Postkit from {suite.postkit_source()}. Command: `{command}`"
            + (" (quick: counts too small for the figures to mean much)." if quick else "."),
            f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
            f"{time.time() - started:.0f} s, {len(plain)} runs of each row, each turn starting "
            "with the next row; "
            "medians (min-max).",
            "",
            f"Each row: {WORKERS.processes} worker processes x {WORKERS.concurrency} slots, "
            "idle on an empty namespace, then one committed transaction of jobs; timed from "
            "the commit to the namespace's last ack (benchmarks/dependencies.py).",
            "",
            "| row | jobs | drained in |",
            "|---|---:|---:|",
            f"| plain: {parents + 1:,} jobs | {parents + 1:,} | {seconds(plain)} |",
            f"| fan-in: {parents:,} parents, one child depending on all | {parents + 1:,} | "
            f"{seconds(rows.fan_in)} |",
            f"| plain, while {REPORTED:,} other running jobs get {1 / REPORT_EVERY:.0f} progress "
            f"reports a second | {parents + 1:,} | {seconds(rows.reported)} |",
            "",
            f"Fan-in / plain: **{ratio:.2f}x**. The child's push (locking and marking its "
            f"{parents:,} parents, with the SDK's check before it): {seconds(rows.child_push)}.",
            "",
            f"Plain with progress reports / plain: **{progress_ratio:.2f}x** "
            f"({statistics.median(rows.reports):.0f} reports written in each such row, its "
            "workers' start included, median).",
            "",
        ]
    )
