"""The workloads, written once against the adapter interface (``benchmarks.adapters``).

Throughput is measured from the outside: the harness polls the library's count of unfinished
jobs (``Adapter.remaining``) and takes the time from the last poll before the first job
completed to the poll that saw the target reached, so worker start-up is not counted. The poll
interval adapts to the cost of the count (five times its duration, 20 ms to 0.5 s).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from benchmarks import pg
from benchmarks.adapters import Adapter, WorkerConfig, Workers, children
from benchmarks.common import percentile
from benchmarks.floor import Floor

log = logging.getLogger("benchmarks")


@dataclass(frozen=True)
class Scale:
    """Job counts and durations of one mode (the full preset, ``--quick``, ``--long``)."""

    single_seconds: float
    """W1: how long jobs are pushed one per transaction (then pgbench inserts as long)."""
    w1_jobs: int
    """W1: jobs enqueued in batches, then drained (the burst)."""
    w1s_jobs: int
    """W1s: jobs preloaded, then drained to the end (the headline sustained drain)."""
    latency_jobs: int
    backlogs: tuple[int, ...]
    """W3: the backlog sizes preloaded, each drained by ``backlog_measure`` jobs per run."""
    backlog_measure: int
    endurance_jobs: int
    held_seconds: float
    batch: int
    calibration_jobs: int
    calibration_cap: float
    """Longest a calibration drain is timed (seconds)."""
    refill: int
    drain_cap: float
    """Longest a drain is timed (seconds); a slower library reports its rate so far."""
    endurance_seconds: float
    floor_seconds: float
    """Longest pgbench's single insert runs after each single enqueue (W1)."""
    process_counts: tuple[int, ...] = (1, 2, 4, 8)
    """The processes curve: the chosen configuration's drain at each process count."""
    snapshot_seconds: float = 0.0
    """W4: how long a reader holds a snapshot from the start of its middle phase (0: none),
    so that no VACUUM can remove what the workers delete meanwhile."""
    vacuum_every: float = 0.0
    """Seconds between VACUUMs of the library's database while workers run (0: never); the
    suite sets it when the server's autovacuum is off, to stand in for it."""


FULL = Scale(
    single_seconds=3.0,
    w1_jobs=10_000,
    w1s_jobs=100_000,
    latency_jobs=200,
    backlogs=(1_000_000,),
    backlog_measure=50_000,
    endurance_jobs=10_000_000,
    held_seconds=30.0,
    batch=1000,
    calibration_jobs=50_000,
    calibration_cap=5.0,
    refill=5_000,
    drain_cap=8.0,
    endurance_seconds=150.0,
    floor_seconds=3.0,
)
LONG = Scale(
    **{
        **vars(FULL),
        "backlogs": (1_000_000, 5_000_000),
        # 10,000,000 jobs through at the least, with a snapshot held for 60 s.
        "endurance_seconds": 3600.0,
        "snapshot_seconds": 60.0,
        "held_seconds": 60.0,
    }
)
QUICK = Scale(
    single_seconds=1.0,
    w1_jobs=1_000,
    w1s_jobs=5_000,
    latency_jobs=30,
    backlogs=(50_000,),
    backlog_measure=5_000,
    endurance_jobs=10_000,
    held_seconds=5.0,
    batch=500,
    calibration_jobs=2_000,
    calibration_cap=5.0,
    refill=1_000,
    drain_cap=10.0,
    endurance_seconds=10.0,
    floor_seconds=1.0,
    process_counts=(1, 2),
)

LATENCY_GAP = 0.020


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def running(
    adapter: Adapter, config: WorkerConfig, scale: Scale, probe_port: int | None = None
) -> Iterator[Workers]:
    """Worker processes (and the stand-in for autovacuum, if asked) for the ``with`` body."""
    workers = adapter.start_workers(config, probe_port)
    vacuumer = Vacuumer.start(adapter, scale.vacuum_every)
    try:
        yield workers
    finally:
        if vacuumer is not None:
            vacuumer.stop()
        workers.stop()


class Vacuumer:
    """VACUUM (ANALYZE)s the library's tables every ``every`` seconds on a thread of its own."""

    def __init__(self, dsn: str, every: float) -> None:
        self.dsn = dsn
        self.every = every
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="vacuumer", daemon=True)

    @classmethod
    def start(cls, adapter: Adapter, every: float) -> Vacuumer | None:
        if every <= 0 or adapter.backend != "PostgreSQL":
            return None
        vacuumer = cls(adapter.dsn, every)
        vacuumer.thread.start()
        return vacuumer

    def _loop(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            self.connection = connection
            while not self.stopping.wait(self.every):
                # The library's own tables, as autovacuum (and autoanalyze) would pick them.
                tables = connection.execute(
                    "SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables"
                ).fetchall()
                if tables:
                    statement = "VACUUM (ANALYZE) " + ", ".join(table for (table,) in tables)
                    with contextlib.suppress(psycopg.Error):
                        connection.execute(statement.encode())

    def stop(self) -> None:
        self.stopping.set()
        connection = getattr(self, "connection", None)
        if connection is not None:
            with contextlib.suppress(psycopg.Error):
                connection.cancel()
        self.thread.join(30)


@dataclass(frozen=True)
class Drained:
    """A timed drain: the rate, how many jobs it covered, and whether it hit the time cap;
    and, over the same span, the CPU the worker processes and the server's processes used,
    in microseconds per job (None where not measured: a backend other than PostgreSQL)."""

    rate: float
    jobs: int
    capped: bool
    client_us: float | None = None
    server_us: float | None = None


def drain(
    adapter: Adapter, workers: Workers, total: int, *, jobs: int | None = None, cap: float
) -> Drained:
    """Jobs per second while the workers complete ``jobs`` of ``total`` pending (default: all),
    timed for at most ``cap`` seconds.

    The clock starts at the last poll before the first claim and stops at the poll that saw
    the jobs completed, so worker start-up is not counted, and neither is a library's habit
    of recording completions late (Chancy flushes them once a second)."""
    target = total - (jobs if jobs is not None else total)
    samples: list[tuple[float, int, int]] = []
    cpu: list[tuple[float, float]] = []
    server = adapter.server_pid()
    stalled_after = time.perf_counter() + 120  # nothing claimed by then: give up
    start: float | None = None
    first = 0
    while True:
        asked = time.perf_counter()
        unclaimed, unfinished = adapter.progress()
        spent = time.perf_counter() - asked
        samples.append((asked, unclaimed, unfinished))
        cpu.append((cpu_seconds(workers.pids()), cpu_seconds(_tree(server)) if server else 0.0))
        if start is None and unclaimed < total:
            before = [i for i, (_, unclaimed, _) in enumerate(samples) if unclaimed >= total]
            first = before[-1] if before else 0
            start = samples[first][0] if before else workers.started_at
        if unfinished <= target:
            break
        if start is not None and asked - start > cap:
            break
        if not workers.alive():
            raise RuntimeError("a worker process exited")
        if start is None and asked > stalled_after:
            raise TimeoutError("the workers claimed no job in 120 s")
        time.sleep(min(0.5, max(0.02, 5 * spent)))
    assert start is not None
    end, _, unfinished = samples[-1]
    done = max(1, total - unfinished)
    return Drained(
        (total - unfinished) / max(end - start, 1e-6),
        total - unfinished,
        unfinished > target,
        (cpu[-1][0] - cpu[first][0]) / done * 1e6,
        (cpu[-1][1] - cpu[first][1]) / done * 1e6 if server else None,
    )


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU the processes ``pids`` have used so far (those that ended are
    not counted: a drain's processes live until it is read)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / _TICK


def _tree(pid: int) -> list[int]:
    """``pid`` and its children: a postmaster and the server's processes (backends,
    autovacuum, the WAL writer, the checkpointer...)."""
    return [pid, *children(pid)]


def fresh(adapter: Adapter) -> None:
    adapter.clear()
    vacuum(adapter)


def vacuum(adapter: Adapter) -> None:
    """VACUUM ANALYZE the library's database (not timed), so every library starts from the
    state autovacuum would reach on its own."""
    if adapter.backend != "PostgreSQL":
        return
    with psycopg.connect(adapter.dsn, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")


def timed(action: object) -> float:
    assert callable(action)
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------
# Calibration: the best worker configuration on this machine
# ---------------------------------------------------------------------------------------------


def calibrate(adapter: Adapter, scale: Scale) -> dict[str, float]:
    """Drain rate of each of the adapter's worker configurations, by label. Once one is
    measured, a library too slow to drain ``calibration_jobs`` within the cap gets only what
    it could reach (see :func:`reachable`)."""
    rates: dict[str, float] = {}
    for config in adapter.configs:
        fresh(adapter)
        adapter.fill(0, reachable(scale.calibration_jobs, max(rates.values(), default=None), scale))
        with running(adapter, config, scale) as workers:
            rates[config.label] = drain(
                adapter, workers, adapter.remaining(), cap=scale.calibration_cap
            ).rate
        log.info("  %s: %s drains %.0f jobs/s", adapter.name, config.label, rates[config.label])
    return rates


# ---------------------------------------------------------------------------------------------
# W1 / W1s: throughput
# ---------------------------------------------------------------------------------------------


def w1(
    adapter: Adapter, config: WorkerConfig, scale: Scale, bench_floor: Floor | None = None
) -> dict[str, float]:
    """Enqueue one at a time for ``single_seconds``, then ``w1_jobs`` in batches; drain the
    batch-enqueued jobs (a burst into an empty queue).

    Single enqueue is bound by the commit's WAL flush, which other load on the machine slows
    down, so pgbench's single-row insert (the floor) is measured right after it, for a ratio
    taken under the same conditions. The drain also counts the transactions the library
    committed in its database per job (from pg_stat_database, less the harness's own)."""
    fresh(adapter)
    pushed, started = 0, time.perf_counter()
    while time.perf_counter() - started < scale.single_seconds:
        adapter.enqueue_single(pushed, 50)
        pushed += 50
    elapsed = time.perf_counter() - started
    result = {"enqueue_single": pushed / elapsed}
    if bench_floor is not None:
        try:
            result["floor_insert"] = bench_floor.insert_rate(min(scale.floor_seconds, elapsed))
            result["single_vs_floor"] = result["enqueue_single"] / result["floor_insert"]
        except Exception:
            log.exception("pgbench insert failed")
    jobs = scale.w1_jobs
    fresh(adapter)
    result["enqueue_batch"] = jobs / timed(lambda: adapter.enqueue_batch(0, jobs, scale.batch))
    before = adapter.transactions()
    with running(adapter, config, scale) as workers:
        drained = drain(adapter, workers, jobs, cap=scale.drain_cap)
    after = adapter.transactions()
    result["drain_burst"] = drained.rate
    if before is not None and after is not None and drained.jobs:
        result["commits_per_job"] = (after - before) / drained.jobs
    return result


def w1s(adapter: Adapter, config: WorkerConfig, scale: Scale) -> dict[str, float]:
    """Sustained: a large backlog (preloaded with the library's bulk path; W1 already times
    batch enqueue) drained to the end, or for ``drain_cap`` seconds."""
    drained = preloaded_drain(adapter, config, scale, scale.w1s_jobs)
    result = {"drain_sustained": drained.rate, "drain_sustained_jobs": drained.jobs}
    if drained.client_us is not None:
        result["cpu_client_us"] = drained.client_us
    if drained.server_us is not None:
        result["cpu_server_us"] = drained.server_us
    return result


def reachable(jobs: int, rate: float | None, scale: Scale) -> int:
    """``jobs``, or twice what a library draining ``rate`` jobs/s completes within the drain
    cap when that is fewer (at least 1,000): a capped drain's rate is the rate over the cap,
    and the jobs past it are never reached, so they are not filled (RQ's fill alone would
    take longer than its drain)."""
    if not rate:
        return jobs
    return min(jobs, max(1000, math.ceil(rate * max(scale.drain_cap, scale.calibration_cap) * 2)))


def preloaded_drain(adapter: Adapter, config: WorkerConfig, scale: Scale, jobs: int) -> Drained:
    """``jobs`` (at most what the library can reach: :func:`reachable`, from its calibration
    rate) preloaded into an empty queue, then VACUUM ANALYZE (as autovacuum's ANALYZE would
    give the planner statistics for the backlog), drained by ``config``."""
    jobs = reachable(jobs, adapter.expected_rate, scale)
    fresh(adapter)
    adapter.fill(0, jobs)
    vacuum(adapter)
    with running(adapter, config, scale) as workers:
        return drain(adapter, workers, jobs, cap=scale.drain_cap)


def processes_curve(adapter: Adapter, config: WorkerConfig, scale: Scale) -> list[dict[str, float]]:
    """The sustained drain (W1s's) of ``config`` at each of ``scale.process_counts``, with
    ``config``'s concurrency per process."""
    return [
        {
            f"drain_processes@{count}": preloaded_drain(
                adapter, config.with_processes(count), scale, scale.w1s_jobs
            ).rate
        }
        for count in scale.process_counts
    ]


def fitting_concurrency(adapter: Adapter, config: WorkerConfig) -> int:
    """``config``'s concurrency, or less where its processes would open more connections
    (:meth:`Adapter.connections`, a transactional handler holding one each) than the server's
    ``max_connections`` less 10 for the harness."""
    limit = int(pg.server_settings(adapter.server_dsn)["max_connections"]) - 10
    concurrency = config.concurrency
    while concurrency > 1 and config.processes * adapter.connections(concurrency) > limit:
        concurrency -= 1
    return concurrency


W6_BATCH = 100
"""The transactional handler's ``batch`` in W6's batched drain (``Handlers.add(batch=...)``)."""


def w6(adapter: Adapter, config: WorkerConfig, scale: Scale) -> dict[str, float]:
    """Transactional handlers: W1s's drain with a handler that inserts one row in the ack's
    transaction (``config`` with the ``transactional`` option), first a transaction per job
    and then up to :data:`W6_BATCH` jobs to a transaction (the ``batch`` option). Each running
    handler holds a connection for its transaction, so the concurrency is capped to what the
    server's ``max_connections`` allows (:func:`fitting_concurrency`)."""
    concurrency = fitting_concurrency(adapter, config)
    rates: dict[str, float] = {"transactional_concurrency": float(concurrency)}
    for metric, batch in (("drain_transactional_each", 1), ("drain_transactional", W6_BATCH)):
        options = (*config.options, ("transactional", True), ("batch", batch))
        transactional = WorkerConfig(config.processes, concurrency, options)
        rates[metric] = preloaded_drain(adapter, transactional, scale, scale.w1s_jobs).rate
    return rates


# ---------------------------------------------------------------------------------------------
# W2: idle latency
# ---------------------------------------------------------------------------------------------


def w2(adapter: Adapter, scale: Scale) -> dict[str, float]:
    """Push commit to handler start on an idle worker, jobs pushed 20 ms apart."""
    fresh(adapter)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        with running(adapter, adapter.latency_config, scale, probe.getsockname()[1]):
            _warm_up(adapter, probe)
            committed = adapter.push_paced(scale.latency_jobs, LATENCY_GAP)
            started = _receive(probe, set(committed), timeout=15.0)
    latencies = [(started[n] - committed[n]) / 1e6 for n in committed if n in started]
    if len(latencies) < len(committed):
        raise RuntimeError(f"only {len(latencies)} of {len(committed)} jobs reported starting")
    return {
        "latency_p50_ms": percentile(latencies, 0.50),
        "latency_p99_ms": percentile(latencies, 0.99),
        "latency_max_ms": max(latencies),
    }


def _warm_up(adapter: Adapter, probe: socket.socket) -> None:
    """Push marker jobs until the worker runs one, then let it settle into its idle wait."""
    deadline = time.monotonic() + 60
    probe.settimeout(1.0)
    while True:
        adapter.push_one(-1)
        try:
            probe.recv(64)
            break
        except TimeoutError:
            if time.monotonic() > deadline:
                raise RuntimeError("the worker never ran a job") from None
    time.sleep(1.0)
    with contextlib.suppress(BlockingIOError):
        probe.setblocking(False)
        while probe.recv(64):
            pass


def _receive(probe: socket.socket, expected: set[int], timeout: float) -> dict[int, int]:
    started: dict[int, int] = {}
    probe.settimeout(timeout)
    with contextlib.suppress(TimeoutError):
        while not expected <= started.keys():
            sequence, at = probe.recv(64).split()
            if int(sequence) >= 0:
                started[int(sequence)] = int(at)
    return started


# ---------------------------------------------------------------------------------------------
# W3: drain with a large backlog pending
# ---------------------------------------------------------------------------------------------


def w3(
    adapter: Adapter, config: WorkerConfig, scale: Scale, runs: int, backlog: int
) -> list[dict[str, float]]:
    """Fill ``backlog`` jobs once, then ``runs`` times drain ``backlog_measure`` from it."""
    fresh(adapter)
    adapter.fill(0, backlog)
    vacuum(adapter)
    measure = min(scale.backlog_measure, backlog // (runs + 1))  # keep a backlog
    results = []
    for _ in range(runs):
        pending = adapter.remaining()
        with running(adapter, config, scale) as workers:
            drained = drain(adapter, workers, pending, jobs=measure, cap=scale.drain_cap)
        results.append(
            {
                f"drain_backlog@{backlog}": drained.rate,
                f"drain_backlog_jobs@{backlog}": drained.jobs,
            }
        )
    adapter.clear()
    return results


# ---------------------------------------------------------------------------------------------
# W4 / W5: steady state, a producer keeping the queue topped up
# ---------------------------------------------------------------------------------------------


@dataclass
class Steady:
    """Samples of (time, jobs completed) while the producer keeps a backlog."""

    samples: list[tuple[float, int]]

    @classmethod
    def joined(cls, *parts: Steady) -> Steady:
        """One timeline of consecutive phases, jobs counted from the first's start."""
        samples: list[tuple[float, int]] = []
        for part in parts:
            offset = samples[-1][1] if samples else 0
            samples += [(at, offset + done) for at, done in part.samples]
        return cls(samples)

    def between(self, start: float, end: float) -> float:
        """Jobs per second between the times ``start`` and ``end`` (jobs done at a time
        between two samples interpolated linearly)."""
        return (self._done_at(end) - self._done_at(start)) / max(end - start, 1e-6)

    def _done_at(self, at: float) -> float:
        times = [sample[0] for sample in self.samples]
        after = min(max(bisect.bisect_right(times, at), 1), len(times) - 1)
        (t0, d0), (t1, d1) = self.samples[after - 1], self.samples[after]
        if t1 <= t0:
            return float(d1)
        return d0 + (d1 - d0) * min(max((at - t0) / (t1 - t0), 0.0), 1.0)

    def deciles(self) -> list[float]:
        """Jobs per second in each tenth of the timeline's time."""
        begin, end = self.samples[0][0], self.samples[-1][0]
        step = (end - begin) / 10
        return [self.between(begin + k * step, begin + (k + 1) * step) for k in range(10)]

    def rate(self, low: float = 0.0, high: float = 1.0) -> float:
        """Jobs per second between the fractions ``low`` and ``high`` of completed jobs."""
        done = self.samples[-1][1]
        # The last sample at or before each threshold, so the span is never empty.
        first = [s for s in self.samples if s[1] <= low * done][-1:] or self.samples[:1]
        last = next(s for s in self.samples if s[1] >= high * done)
        if last[0] <= first[0][0]:
            first = self.samples[:1]
        return (last[1] - first[0][1]) / max(last[0] - first[0][0], 1e-6)


@contextlib.contextmanager
def held_snapshot(dsn: str, seconds: float) -> Iterator[list[float]]:
    """For the ``with`` body, a reader holding one snapshot (REPEATABLE READ, after its first
    read) for ``seconds`` from the start, in a thread of its own; yields, once it let go, the
    ``perf_counter`` span it held it (empty if ``seconds`` is 0)."""
    span: list[float] = []
    if not seconds:
        yield span
        return
    released = threading.Event()

    def hold() -> None:
        with psycopg.connect(dsn) as reader:
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT count(*) FROM pg_class").fetchone()  # the snapshot is taken
            span.append(time.perf_counter())
            released.wait(seconds)
            reader.rollback()
            span.append(time.perf_counter())

    holder = threading.Thread(target=hold, name="snapshot", daemon=True)
    holder.start()
    try:
        yield span
    finally:
        released.set()
        holder.join()


def steady(
    adapter: Adapter,
    workers: Workers,
    scale: Scale,
    *,
    jobs: int | None = None,
    seconds: float | None = None,
    pushed: int = 0,
) -> tuple[Steady, int]:
    """Keep between ``refill`` and twice that pending until ``jobs`` are done or ``seconds``
    pass. Returns the samples and how many jobs were pushed in all."""
    completed_before = pushed - adapter.remaining()
    samples: list[tuple[float, int]] = []
    started = time.perf_counter()
    while True:
        now = time.perf_counter()
        left = adapter.remaining()
        done = pushed - left - completed_before
        samples.append((now, done))
        if (jobs is not None and done >= jobs) or (
            seconds is not None and now - started >= seconds
        ):
            return Steady(samples), pushed
        if not workers.alive():
            raise RuntimeError("a worker process exited")
        if left < scale.refill:
            adapter.fill(pushed, scale.refill)
            pushed += scale.refill
        else:
            time.sleep(0.05)


def w4(adapter: Adapter, config: WorkerConfig, scale: Scale) -> dict[str, float]:
    """Endurance: up to ``endurance_jobs`` (or ``endurance_seconds``) through a kept-up queue.
    Start: the first tenth of the budget (less a warm-up); end: as many jobs, at the end.
    Storage is read after the first tenth, halfway and at the end; RSS is the workers' peak."""
    fresh(adapter)
    tenth = max(1, scale.endurance_jobs // 10)
    half = (scale.endurance_jobs - tenth) // 2
    with running(adapter, config, scale) as workers:
        head, pushed = steady(
            adapter, workers, scale, jobs=tenth, seconds=scale.endurance_seconds / 10
        )
        early = adapter.storage()
        rss_early = workers.rss_bytes()
        with held_snapshot(adapter.dsn, scale.snapshot_seconds) as snapshot:
            middle, pushed = steady(
                adapter,
                workers,
                scale,
                jobs=half,
                seconds=scale.endurance_seconds * 0.45,
                pushed=pushed,
            )
        halfway = adapter.storage()
        tail, _ = steady(
            adapter,
            workers,
            scale,
            jobs=half,
            seconds=scale.endurance_seconds * 0.45,
            pushed=pushed,
        )
        late = adapter.storage()
        rss_late = workers.rss_bytes()
        rss = workers.peak_rss_bytes()
    adapter.clear()
    head_jobs, tail_jobs = head.samples[-1][1], tail.samples[-1][1]
    timeline = Steady.joined(head, middle, tail)
    series = {f"endurance_decile_{k}": rate for k, rate in enumerate(timeline.deciles(), 1)}
    if snapshot:
        series["endurance_snapshot"] = timeline.between(*snapshot)
    return {
        **series,
        "endurance_jobs": float(head_jobs + middle.samples[-1][1] + tail_jobs),
        "endurance_start": head.rate(0.1, 1.0),
        "endurance_end": tail.rate(max(0.0, 1 - head_jobs / max(1, tail_jobs)), 1.0),
        "storage_start_mb": _megabytes(early),
        "storage_mid_mb": _megabytes(halfway),
        "storage_end_mb": _megabytes(late),
        "dead_tuples_end": float(late["dead_tuples"]),
        "peak_rss_mb": rss / 2**20,
        "rss_start_mb": rss_early / 2**20,
        "rss_end_mb": rss_late / 2**20,
    }


def _megabytes(storage: dict[str, Any]) -> float:
    return float(storage["table_bytes"] + storage["index_bytes"]) / 2**20


def w5(adapter: Adapter, config: WorkerConfig, scale: Scale, server_dsn: str) -> dict[str, float]:
    """Held horizon: steady throughput for ``held_seconds`` without, then with, another
    session holding a transaction (and so the xmin horizon) open on the same server."""
    fresh(adapter)
    with running(adapter, config, scale) as workers:
        adapter.fill(0, scale.refill)
        free, pushed = steady(
            adapter, workers, scale, seconds=scale.held_seconds, pushed=scale.refill
        )
        with psycopg.connect(adapter.dsn) as holder:
            holder.execute("SELECT txid_current()")  # BEGIN is implicit: the xid stays open
            held, _ = steady(adapter, workers, scale, seconds=scale.held_seconds, pushed=pushed)
            during = adapter.storage()
            holder.rollback()
    adapter.clear()
    return {
        "held_without": free.rate(0.05, 1.0),
        "held_with": held.rate(0.05, 1.0),
        "held_dead_tuples": float(during["dead_tuples"]),
    }
