"""What flow control costs (issue 14): drain throughput of a queue under each limit, and the
fair share a worker serving two queues gives the one with the small backlog.

Every row drains a preloaded backlog with the same worker processes (2 x 32 slots, the
comparison's fastest Postkit configuration, started as its adapter starts them:
``benchmarks.adapters.Workers``) and the same no-op handler, in a namespace of its own on one
database, timed by the comparison's drain (``workloads.drain``: from the last poll before the
first claim to the poll that saw the backlog done). The handler keeps, in memory, the queue, id,
``created_at`` and ``claimed_at`` of each job it runs, and each worker process writes them to a
file when it stops: ``completed_jobs`` keeps neither the claim time nor anything a claim sets,
and ``claimed_at`` is the server's claim timestamp, the one the rate limit counts by. While a
row drains, the harness's progress poll also counts the namespace's running jobs, and the row
reports the largest count it saw (a sample, not a proof of the limit).

A fair queue's row (``fair=True``, 1,000 group keys) against the unlimited grouped row is
what fair share costs a drain; benchmarks/fair_claims.py times single claims of fair queues
whatever their backlog's shape, and the result ends with its table.

The fairness figure: one worker process (1 x 32 slots) serves ``tenant_a`` and ``tenant_b``;
tenant_a gets a backlog, the worker starts on it, and once a tenth, three tenths, a half, seven
tenths and nine tenths of it are claimed, tenant_b pushes 100 jobs (one push each time). The
figure is how long after each push its jobs were claimed (``claimed_at - created_at``, both by
the server's clock), against the time tenant_a's backlog took to be claimed, and how many of
tenant_a's claims (distinct claim timestamps) fell within tenant_b's wait.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import fair_claims, suite, workloads
from benchmarks.adapters import WorkerConfig, Workers
from benchmarks.adapters.postkit import PostkitAdapter
from benchmarks.common import environment
from postkit.queue import Job, QueueClient
from postkit.worker import Worker

QUEUE = "flow"
TENANTS = ("tenant_a", "tenant_b")
WORKERS = WorkerConfig(2, 32)
FAIRNESS_WORKER = WorkerConfig(1, 32)
RATE = (1000, 1.0)
GROUP_KEYS = 1000
FAIRNESS_JOBS = 100
PUSH_AT = (0.1, 0.3, 0.5, 0.7, 0.9)
"""tenant_b pushes once each of these fractions of tenant_a's backlog has been claimed."""
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Scale:
    """Job counts of one mode (full or ``--quick``)."""

    jobs: int
    """The backlog of each throughput row."""
    rate_jobs: int
    """The backlog of the rate-limited row (it drains at the limit)."""
    fairness_backlog: int
    """tenant_a's backlog in the fairness figure."""
    cap: float
    """Longest a row is timed, seconds; a slower row reports its rate so far."""


FULL = Scale(jobs=50_000, rate_jobs=10_000, fairness_backlog=100_000, cap=60.0)
QUICK = Scale(jobs=2_000, rate_jobs=2_000, fairness_backlog=10_000, cap=15.0)


@dataclass(frozen=True)
class Claim:
    """One job as the handler saw it: its queue, id, and when it was created and claimed
    (microseconds since the epoch, by the server's clock)."""

    queue: str
    id: int
    group_key: str | None
    created_at: int
    claimed_at: int


@dataclass(frozen=True)
class Row:
    """One throughput row: what was configured, and what its drain measured."""

    label: str
    limits: dict[str, Any]
    drained: workloads.Drained
    max_running: int
    claims: list[Claim]
    commits_per_job: float | None


class FlowAdapter(PostkitAdapter):
    """The comparison's Postkit adapter, on the benchmark's database instead of one of its own,
    confined to one namespace per row: its progress poll counts that namespace's jobs (and the
    most it saw running), and its workers are :func:`worker_main`'s."""

    def __init__(self, dsn: str, namespace: str) -> None:
        super().__init__(dsn)
        self.dsn = dsn
        self.namespace = namespace
        self.max_running = 0

    def open(self) -> None:
        self.connection = psycopg.connect(self.dsn, autocommit=True)
        self.client = QueueClient(self.connection.cursor(), namespace=self.namespace)

    def progress(self) -> tuple[int, int]:
        row = (
            self._monitor()
            .execute(
                "SELECT count(*) FILTER (WHERE state = 'pending'), count(*),"
                " count(*) FILTER (WHERE state = 'running')"
                " FROM postkit_queue.jobs WHERE namespace = %s",
                (self.namespace,),
            )
            .fetchone()
        )
        self.monitor_transactions += 1
        assert row is not None
        self.max_running = max(self.max_running, int(row[2]))
        return int(row[0]), int(row[1])

    def clear(self) -> None:
        """Remove the namespace's jobs, settings and flow state."""
        monitor = self._monitor()
        for table in ("jobs", "dead_letters", "queue_settings", "flow_state", "queue_stats"):
            monitor.execute(
                f"DELETE FROM postkit_queue.{table} WHERE namespace = %s", (self.namespace,)
            )

    def fill_queue(
        self, queue: str, count: int, group_key: Callable[[int], str] | None = None
    ) -> None:
        """Push ``count`` jobs to ``queue``, 5,000 per push_batch, with ``group_key(n)`` as the
        n-th job's key when given."""
        for first in range(0, count, 5000):
            numbers = range(first, min(first + 5000, count))
            self.client.push_batch(
                queue,
                [{"n": n} for n in numbers],
                group_keys=[group_key(n) for n in numbers] if group_key else None,
            )

    def start_flow_workers(
        self, config: WorkerConfig, queues: Sequence[str], record: Path
    ) -> Workers:
        options = (
            ("namespace", self.namespace),
            ("queues", ",".join(queues)),
            ("record", str(record)),
        )
        flow_config = WorkerConfig(config.processes, config.concurrency, options)
        return Workers.start(worker_main, self.dsn, flow_config, None)


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    """A worker process: a Worker with ``config.concurrency`` slots in the ``namespace`` option,
    serving the ``queues`` option (comma-separated) with the recording handler; on stop it
    writes what it ran to a file of its own in the ``record`` directory."""
    seen: list[tuple[str, int, str | None, datetime, datetime | None]] = []

    def handler(job: Job) -> None:
        seen.append((job.queue, job.id, job.group_key, job.created_at, job.claimed_at))

    queues = str(config.option("queues")).split(",")
    worker = Worker(
        dsn,
        {queue: handler for queue in queues},
        namespace=str(config.option("namespace")),
        concurrency=config.concurrency,
        grace_period=5,
        poll_interval=5.0,
    )
    try:
        worker.run()
    finally:
        lines = [
            f"{queue} {job_id} {key or '-'} {_micros(created)} {_micros(claimed)}"
            for queue, job_id, key, created, claimed in seen
            if claimed is not None
        ]
        path = Path(str(config.option("record"))) / f"{os.getpid()}.txt"
        path.write_text("\n".join(lines), encoding="ascii")


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def _read_claims(record: Path) -> list[Claim]:
    claims = []
    for path in record.glob("*.txt"):
        for line in path.read_text(encoding="ascii").split("\n"):
            if line:
                queue, job_id, key, created, claimed = line.split()
                claims.append(
                    Claim(
                        queue, int(job_id), None if key == "-" else key, int(created), int(claimed)
                    )
                )
    return sorted(claims, key=lambda claim: (claim.claimed_at, claim.id))


def _vacuum(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM (ANALYZE) postkit_queue.jobs, postkit_queue.flow_state")


def throughput_row(
    dsn: str, label: str, limits: dict[str, Any], jobs: int, cap: float, grouped: bool = False
) -> Row:
    """Configure a fresh namespace's queue with ``limits``, preload ``jobs`` jobs (spread
    round-robin over :data:`GROUP_KEYS` keys when ``grouped``), and drain them with
    :data:`WORKERS`."""
    adapter = FlowAdapter(dsn, f"bench-flow-{time.time_ns()}")
    adapter.open()
    try:
        if limits:
            adapter.client.configure_queue(QUEUE, **limits)
        adapter.fill_queue(QUEUE, jobs, (lambda n: f"key-{n % GROUP_KEYS}") if grouped else None)
        _vacuum(dsn)
        before = adapter.transactions()
        with tempfile.TemporaryDirectory(prefix="postkit-flow-") as record:
            workers = adapter.start_flow_workers(WORKERS, [QUEUE], Path(record))
            try:
                drained = workloads.drain(adapter, workers, jobs, cap=cap)
            finally:
                workers.stop()
            claims = _read_claims(Path(record))
        after = adapter.transactions()
        commits = None
        if before is not None and after is not None and drained.jobs:
            commits = (after - before) / drained.jobs
        return Row(label, limits, drained, adapter.max_running, claims, commits)
    finally:
        adapter.clear()
        adapter.close()
        adapter.close_monitor()


def max_in_window(times: list[int], window: int) -> int:
    """The most of ``times`` (sorted) that fall in any half-open interval ``window`` long."""
    most, low = 0, 0
    for high, moment in enumerate(times):
        while times[low] <= moment - window:
            low += 1
        most = max(most, high - low + 1)
    return most


def in_order(claims: list[Claim]) -> bool:
    """Whether each group key's jobs (``claims`` in claim order) were claimed in id order, one
    claim after another."""
    by_key: dict[str, list[Claim]] = defaultdict(list)
    for claim in claims:
        if claim.group_key is not None:
            by_key[claim.group_key].append(claim)
    for runs in by_key.values():
        for before, after in itertools.pairwise(runs):
            if not (before.id < after.id and before.claimed_at < after.claimed_at):
                return False
    return True


@dataclass(frozen=True)
class Push:
    """One of tenant_b's pushes during tenant_a's drain: when (the fraction of tenant_a's
    backlog claimed by then), how long its jobs waited to be claimed, in how many claims they
    arrived, and how many of tenant_a's claims (and jobs) fell between the push and the last
    of them."""

    at_fraction: float
    wait_p50: float
    wait_max: float
    claims: int
    a_claims_between: int
    a_jobs_between: int


@dataclass(frozen=True)
class Fairness:
    """The fairness figure: tenant_a's backlog, the time it took to claim, and tenant_b's
    pushes."""

    backlog: int
    a_claim_span: float
    pushes: list[Push]


def fairness(dsn: str, backlog: int, cap: float) -> Fairness:
    """tenant_a's ``backlog`` first; then, each time another of :data:`PUSH_AT` of it has been
    claimed, tenant_b's :data:`FAIRNESS_JOBS` jobs in one push. One worker process serves both
    queues."""
    adapter = FlowAdapter(dsn, f"bench-fair-{time.time_ns()}")
    adapter.open()
    try:
        adapter.fill_queue(TENANTS[0], backlog)
        _vacuum(dsn)
        with tempfile.TemporaryDirectory(prefix="postkit-fair-") as record:
            workers = adapter.start_flow_workers(FAIRNESS_WORKER, TENANTS, Path(record))
            try:
                deadline = time.monotonic() + 120 + cap
                waiting = list(PUSH_AT)
                while True:
                    # tenant_b's jobs are claimed within milliseconds: what is unclaimed is
                    # tenant_a's backlog.
                    unclaimed, unfinished = adapter.progress()
                    if waiting and unclaimed <= backlog * (1 - waiting[0]):
                        adapter.client.push_batch(
                            TENANTS[1], [{"n": n} for n in range(FAIRNESS_JOBS)]
                        )
                        waiting.pop(0)
                    if not waiting and unfinished == 0:
                        break
                    if not workers.alive():
                        raise RuntimeError("the worker process exited")
                    if time.monotonic() > deadline:
                        raise TimeoutError("the fairness run did not finish in time")
                    time.sleep(0.02)
            finally:
                workers.stop()
            claims = _read_claims(Path(record))
    finally:
        adapter.clear()
        adapter.close()
        adapter.close_monitor()
    a = [claim for claim in claims if claim.queue == TENANTS[0]]
    by_push: dict[int, list[Claim]] = defaultdict(list)
    for claim in claims:
        if claim.queue == TENANTS[1]:
            by_push[claim.created_at].append(claim)  # one push: one statement timestamp
    pushes = []
    for fraction, pushed_at in zip(PUSH_AT, sorted(by_push), strict=True):
        b = by_push[pushed_at]
        waits = [(claim.claimed_at - claim.created_at) / 1e6 for claim in b]
        last = max(claim.claimed_at for claim in b)
        between = [claim for claim in a if pushed_at <= claim.claimed_at <= last]
        pushes.append(
            Push(
                at_fraction=fraction,
                wait_p50=statistics.median(waits),
                wait_max=max(waits),
                claims=len({claim.claimed_at for claim in b}),
                a_claims_between=len({claim.claimed_at for claim in between}),
                a_jobs_between=len(between),
            )
        )
    return Fairness(backlog, (a[-1].claimed_at - a[0].claimed_at) / 1e6, pushes)


class LoadSampler:
    """The machine's load average (1 min), read every few seconds on a thread of its own, so the
    report can say how busy the shared cores were while the rows ran."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="load", daemon=True)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stopping.wait(5.0):
                return

    def render(self) -> str:
        if not self.samples:
            return "not sampled"
        return (
            f"{statistics.median(self.samples):.2f} median "
            f"({min(self.samples):.2f}-{max(self.samples):.2f})"
        )


def other_sessions(dsn: str) -> int:
    """Sessions on the server outside this benchmark's database that are running a statement
    now: other people's work on the shared machine."""
    with psycopg.connect(dsn) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
            " AND datname IS DISTINCT FROM current_database() AND backend_type = 'client backend'"
        ).fetchone()
    return int(row[0]) if row else 0


def run(dsn: str, *, quick: bool, command: str) -> str:
    """Every row and the fairness figure, as the markdown of benchmarks/results/flow.md."""
    scale = QUICK if quick else FULL
    started = time.time()
    rows: list[Row] = []
    others: list[int] = []
    with LoadSampler() as load:
        specs: list[tuple[str, dict[str, Any], int, bool]] = [
            ("unlimited (baseline)", {}, scale.jobs, False),
            ("concurrency=20", {"concurrency": 20}, scale.jobs, False),
            ("concurrency=200", {"concurrency": 200}, scale.jobs, False),
            (f"rate={RATE}", {"rate": RATE}, scale.rate_jobs, False),
            ("unlimited, 1,000 group keys", {}, scale.jobs, True),
            ("fair, 1,000 group keys", {"fair": True}, scale.jobs, True),
            ("group_concurrency=1, 1,000 keys", {"group_concurrency": 1}, scale.jobs, True),
            ("group_ordered=True, 1,000 keys", {"group_ordered": True}, scale.jobs, True),
        ]
        for label, limits, jobs, grouped in specs:
            others.append(other_sessions(dsn))
            rows.append(throughput_row(dsn, label, limits, jobs, scale.cap, grouped))
        others.append(other_sessions(dsn))
        fair = fairness(dsn, scale.fairness_backlog, scale.cap)
        claims = fair_claims.lines(fair_claims.measure(dsn, quick=quick))
    text = render(dsn, rows, fair, scale, quick, command, load.render(), others, started)
    return text + "\n" + "\n".join(claims) + "\n"


def render(
    dsn: str,
    rows: list[Row],
    fair: Fairness,
    scale: Scale,
    quick: bool,
    command: str,
    load: str,
    others: list[int],
    started: float,
) -> str:
    baseline = rows[0].drained.rate
    lines = [
        "# Flow control: what each limit costs a draining worker",
        "",
        f"{environment(dsn)}; Postkit from {suite.postkit_source()} (the database runs the "
        "functions its install wrote). Command: "
        f"`{command}`"
        + (" (quick: counts too small for the figures to mean much)." if quick else "."),
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
        f"{time.time() - started:.0f} s. The machine's 2 cores are shared with other sessions "
        f"of the project: load average (1 min) during the run {load}; other databases' "
        f"active sessions at each row's start: {', '.join(str(n) for n in others)}.",
        "",
        "## Drain throughput",
        "",
        f"Each row: a backlog preloaded into a queue of a namespace of its own, then drained by "
        f"{WORKERS.processes} worker processes x {WORKERS.concurrency} slots (prefetch "
        f"{WORKERS.concurrency}: up to {2 * WORKERS.processes * WORKERS.concurrency} jobs "
        "claimed at once) with a no-op handler; timed from the last progress poll before the "
        "first claim to the poll that saw the backlog done (or the row's "
        f"{scale.cap:.0f} s cap). Max running: the most running jobs any progress poll saw. "
        "The claim rates of the first and last fifth come from the jobs' claim times. "
        "Transactions per job: those the database committed or rolled back while the row ran "
        "(pg_stat_database, from before the workers started to after they stopped, less the "
        "harness's own), per job drained: every claim round trip, wake-up claim, heartbeat "
        "and maintenance call of the workers. "
        "Grouped rows spread the jobs round-robin over 1,000 group keys.",
        "",
        "| queue | jobs | jobs/s | vs baseline | claims/s, first fifth -> last fifth | "
        "max running seen | transactions per job |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        capped = " (capped)" if row.drained.capped else ""
        lines.append(
            f"| {row.label} | {row.drained.jobs:,}{capped} | {row.drained.rate:,.0f} | "
            f"{row.drained.rate / baseline:.2f} | {_fifths(row.claims)} | {row.max_running} | "
            + ("-" if row.commits_per_job is None else f"{row.commits_per_job:.3f}")
            + " |"
        )
    capacity = 2 * WORKERS.processes * WORKERS.concurrency
    lines.append("")
    for row in rows:
        ceiling = row.limits.get("concurrency")
        if ceiling is None or not row.drained.rate:
            continue
        if ceiling < capacity:
            lines.append(
                f"- {row.label}: bound by the limit, not by the database: at most {ceiling} run, "
                f"so each slot turns over every {ceiling / row.drained.rate * 1000:.1f} ms "
                "(claim, handler, the batched ack's commit, then the notification that wakes a "
                "worker to claim for the freed slot)."
            )
        else:
            lines.append(
                f"- {row.label}: never binds (the workers hold at most {capacity} claimed): "
                "what it costs is the claims taking turns on the queue's flow_state row, "
                "counting the running jobs at each claim, and the wake-ups every completion "
                "sends (the extra transactions per job)."
            )
    rate_row = next(row for row in rows if "rate" in row.limits)
    limit, period = RATE
    times = [claim.claimed_at for claim in rate_row.claims]
    span = (times[-1] - times[0]) / 1e6 if len(times) > 1 else 0.0
    most = max_in_window(times, int(period * 1e6))
    windows, whole_rate = _whole_windows(times, int(period * 1e6))
    batches = len(set(times))
    lines += [
        "",
        "## Rate limit",
        "",
        f"`rate={RATE}` ({limit:,} claims in any {period:g} s). Claim times are the jobs' "
        "`claimed_at` (the server's claim timestamp, the clock the limit counts by), recorded "
        "by the handler from the claimed job, since `completed_jobs` keeps no claim time.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| jobs claimed | {len(times):,} in {batches:,} claims |",
        f"| first to last claim | {span:.2f} s |",
        f"| claims/s, first to last claim | {len(times) / span if span else 0:,.0f} |",
        f"| claims/s over the {windows} whole {period:g} s windows from the first claim | "
        f"{whole_rate:,.0f} |",
        f"| most claims in any {period:g} s window | {most:,} (limit {limit:,}) |",
    ]
    ordered_row = next(row for row in rows if row.limits.get("group_ordered"))
    lines += [
        "",
        "## Groups",
        "",
        "group_ordered: each key's jobs claimed in id order, one claim after another: "
        f"{'yes' if in_order(ordered_row.claims) else 'NO'} "
        f"({len(ordered_row.claims):,} jobs checked).",
        "",
        "## Fair share: one worker, two queues",
        "",
        f"One worker process ({FAIRNESS_WORKER.concurrency} slots, prefetch "
        f"{FAIRNESS_WORKER.concurrency}) serves `{TENANTS[0]},{TENANTS[1]}`. {TENANTS[0]} gets "
        f"{fair.backlog:,} jobs; {TENANTS[1]} then pushes {FAIRNESS_JOBS} jobs (one push) once "
        f"each of {', '.join(f'{at:.0%}' for at in PUSH_AT)} of {TENANTS[0]}'s backlog is "
        f"claimed. Wait: `claimed_at - created_at` of {TENANTS[1]}'s jobs (the server's clock). "
        f"{TENANTS[0]}'s {fair.backlog:,} jobs took {fair.a_claim_span:,.1f} s from first to "
        "last claim.",
        "",
        f"| {TENANTS[1]} pushed at | wait p50 | wait max | its jobs arrived in | "
        f"{TENANTS[0]}'s claims meanwhile | max wait / {TENANTS[0]}'s drain |",
        "|---|---|---|---|---|---|",
    ]
    for push in fair.pushes:
        lines.append(
            f"| {push.at_fraction:.0%} claimed | {push.wait_p50 * 1000:,.1f} ms | "
            f"{push.wait_max * 1000:,.1f} ms | {push.claims} claims | "
            f"{push.a_claims_between} ({push.a_jobs_between:,} jobs) | "
            f"{push.wait_max / fair.a_claim_span:.4f} |"
        )
    lines += [
        "",
        "The bound: each claim round trip gives every queue with work its equal share of the "
        "worker's free slots first (`Fetcher.settle_and_claim`: half of them here, from a "
        "rotating start), and only then the rest to the queues that filled theirs. So while "
        f"{TENANTS[1]} has jobs, every round trip that finds f slots free starts "
        f"ceil(f / 2) of them (f = 1: every other round trip), whatever {TENANTS[0]}'s "
        f"backlog: {TENANTS[1]}'s n jobs start within 2n round trips at worst, and within "
        f"ceil(n / {FAIRNESS_WORKER.concurrency}) when the round trips find every slot "
        f"free. In this run {TENANTS[1]}'s pushes took "
        f"{min(push.claims for push in fair.pushes)} to "
        f"{max(push.claims for push in fair.pushes)} claims.",
    ]
    return "\n".join(lines) + "\n"


def _fifths(claims: list[Claim]) -> str:
    """The claim rate over the first and the last fifth of the jobs (by claim time): whether
    the claims slow down as the backlog drains."""
    fifth = len(claims) // 5
    if fifth < 2:
        return "-"
    rates = []
    for part in (claims[:fifth], claims[-fifth:]):
        span = (part[-1].claimed_at - part[0].claimed_at) / 1e6
        rates.append(f"{len(part) / span:,.0f}" if span > 0 else "-")
    return " -> ".join(rates)


def _whole_windows(times: list[int], window: int) -> tuple[int, float]:
    """How many whole windows fit between the first and the last claim, and the claims per
    second within them: the rate a limit of so many claims per window allows is reached over
    whole windows, whatever bursts it lets through inside one."""
    if not times:
        return 0, 0.0
    windows = (times[-1] - times[0]) // window
    if windows == 0:
        return 0, 0.0
    end = times[0] + windows * window
    inside = sum(1 for moment in times if moment < end)
    return windows, inside / (windows * window / 1e6)
