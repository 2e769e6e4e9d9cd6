"""What each read of a dashboard costs on a large backlog: the SDK calls its pages make.

The dashboard must answer every page in under 100 ms with a backlog of 1,000,000 jobs and a
dead-letter queue of 100,000, and add no query that scans the jobs. This loads that state into
a scratch database of its own (written as the owner bulk-loads, INSERT ... SELECT, then
vacuumed and analyzed): 1,000,000 ready jobs in one queue, a few dozen scheduled ones and a few
running ones, a small second queue, 100,000 dead letters over a week (one in a hundred in a
small queue, errors of a few hundred characters with a traceback, one in ten thousand matching
the searched text), archived jobs, schedules, outcome counters and workers. Then it times each
read through :class:`~postkit.queue.QueueClient`, as the dashboard calls it, each call in a
transaction of its own: the median of ``calls`` calls, after two to warm the session's plans.

Then, on the same database, it times every page and API endpoint of the dashboard through a
real server (:func:`postkit.dashboard.server.running`) with one keep-alive HTTP connection, as
the page requests them (lists paged on through ``next_cursor``, the actions' dry runs with the
CSRF header), beside the same work called on a DashboardSource without HTTP: where a slow
request's time goes. That part needs the dashboard extra and httpx (``--no-http`` skips it).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg

from benchmarks import pg
from benchmarks.common import environment, percentile
from postkit.queue import JobCursor, QueueClient, install

if TYPE_CHECKING:  # the HTTP part needs the dashboard extra and httpx, imported when it runs
    import httpx

    from postkit.dashboard.source import DashboardSource

DATABASE = "postkit_bench_dashboard"
NAMESPACE = "dashboard"
BULK = "bulk"
SMALL = "small"
RARE = "rare"  # the dead-letter queue's small queue
NEEDLE = "needle"  # in one dead letter's error in ten thousand
SCHEDULED = 50
RUNNING = 20

# A traceback summary such as a worker records (the last frames of a handler's exception).
_TRACEBACK = "\nTraceback (most recent call last):\n" + 4 * (
    '  File "/srv/app/handlers/billing.py", line 212, in charge_customer\n'
    "    response = client.post(url, json=payload, timeout=10)\n"
)


def load(dsn: str, *, jobs: int, dead: int) -> None:
    """Fill the installed database at ``dsn`` with the backlog, then vacuum and analyze it."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            """
            INSERT INTO postkit_queue.jobs (
                namespace, queue, payload, priority, run_at, max_attempts, created_at)
            SELECT %(ns)s, q, jsonb_build_object('order', g, 'customer', 'c-' || g %% 977),
                   0, now() - interval '2 hours' + g * (interval '1 hour' / size), 20,
                   now() - interval '2 hours'
            FROM (VALUES (%(bulk)s, %(jobs)s), (%(small)s, 1000)) AS backlog(q, size),
                 generate_series(1, size) AS g
            """,
            {"ns": NAMESPACE, "bulk": BULK, "small": SMALL, "jobs": jobs},
        )
        connection.execute(
            """
            INSERT INTO postkit_queue.jobs (
                namespace, queue, payload, priority, run_at, max_attempts, created_at)
            SELECT %(ns)s, %(bulk)s, jsonb_build_object('later', g), 0,
                   now() + g * interval '1 minute', 20, now()
            FROM generate_series(1, %(scheduled)s) AS g
            """,
            {"ns": NAMESPACE, "bulk": BULK, "scheduled": SCHEDULED},
        )
        client = QueueClient(connection.cursor(), namespace=NAMESPACE)
        for number in range(RUNNING):
            client.pull(BULK, worker_id=f"worker-{number % 4}", visibility_timeout=300 + number)
        connection.execute(
            """
            INSERT INTO postkit_queue.dead_letters (
                namespace, job_id, queue, payload, priority, attempts, max_attempts, reason,
                error, errors, created_at, failed_at, expires_at, redriven_job_id, redriven_at)
            SELECT %(ns)s, 100000000 + g, CASE WHEN g %% 100 = 0 THEN %(rare)s ELSE %(bulk)s END,
                   jsonb_build_object('order', g), 0, 3, 3, 'attempts_exhausted',
                   CASE WHEN g %% 10000 = 0 THEN 'ConnectionError: ' || %(needle)s || ' ' || g
                        ELSE 'ValueError: bad input ' || g END || %(traceback)s,
                   jsonb_build_array(jsonb_build_object('attempt', 3, 'error', 'ValueError')),
                   now() - interval '8 days', now() - g * (interval '7 days' / %(dead)s),
                   now() + interval '23 days',
                   -- One in fifty was retried, as a job of the backlog.
                   CASE WHEN g %% 50 = 25 THEN g END, CASE WHEN g %% 50 = 25 THEN now() END
            FROM generate_series(1, %(dead)s) AS g
            """,
            {
                "ns": NAMESPACE,
                "bulk": BULK,
                "rare": RARE,
                "needle": NEEDLE,
                "traceback": _TRACEBACK,
                "dead": dead,
            },
        )
        connection.execute(
            """
            INSERT INTO postkit_queue.completed_jobs (
                namespace, job_id, queue, payload, priority, attempts, worker_id, errors,
                created_at, completed_at, expires_at)
            SELECT %(ns)s, 200000000 + g, %(small)s, '{}', 0, 1, 'worker-0', '[]',
                   now() - interval '1 day', now() - g * interval '1 second',
                   now() + interval '1 day'
            FROM generate_series(1, 10000) AS g
            """,
            {"ns": NAMESPACE, "small": SMALL},
        )
        # 100 schedules whose last jobs are live, dead, archived or gone.
        connection.execute(
            """
            INSERT INTO postkit_queue.schedules (
                namespace, name, queue, payload, every, next_run_at, last_run_at,
                last_job_id, created_at, updated_at)
            SELECT %(ns)s, 'schedule-' || g, %(small)s, '{}', interval '1 hour',
                   now() + g * interval '1 minute', now() - interval '1 hour',
                   (ARRAY[g * 5000, 100000000 + g, 200000000 + g, 900000000 + g])[1 + g %% 4],
                   now(), now()
            FROM generate_series(1, 100) AS g
            """,
            {"ns": NAMESPACE, "small": SMALL},
        )
        connection.execute(
            """
            INSERT INTO postkit_queue.queue_stats (
                namespace, queue, minute, slot, completed, retried, dead, completed_attempts)
            SELECT %(ns)s, q, date_trunc('minute', now()) - m * interval '1 minute', s,
                   40, 2, 1, 44
            FROM unnest(ARRAY[%(bulk)s, %(small)s, %(rare)s]) AS q,
                 generate_series(0, 119) AS m, generate_series(0, 7) AS s
            """,
            {"ns": NAMESPACE, "bulk": BULK, "small": SMALL, "rare": RARE},
        )
        for number in range(8):
            client.register_worker(
                f"worker-{number}",
                host=f"host-{number % 2}",
                pid=1000 + number,
                queues=[BULK, SMALL],
                concurrency=8,
                version="bench",
                heartbeat_interval=5,
            )
        # A second namespace, so that the skip scans of namespaces() step over one.
        QueueClient(connection.cursor(), namespace="other").push_batch(BULK, list(range(1000)))
        connection.execute("VACUUM ANALYZE")


@dataclass(frozen=True)
class Place:
    """Where the deep pages start, and the ids and times the reads ask about, read once from
    the loaded tables (so that no read pays for finding them)."""

    now: datetime
    pending_deep: JobCursor
    scheduled_deep: JobCursor
    running_next: JobCursor
    dead_deep: JobCursor
    job_id: int
    redriven_job_id: int
    selection: tuple[int, ...]
    """The 50 newest dead letters not redriven: a page's selection."""


def place(connection: psycopg.Connection, *, jobs: int, dead: int) -> Place:
    def one(query: str, *params: Any) -> tuple[Any, ...]:
        row = connection.execute(query, params).fetchone()
        assert row is not None, query
        return tuple(row)

    (now,) = one("SELECT postkit_queue.clock()")
    pending = one(
        "SELECT id, priority, run_at FROM postkit_queue.jobs WHERE namespace = %s AND queue = %s"
        " AND state = 'pending' AND run_at <= now() ORDER BY priority DESC, run_at, id"
        " OFFSET %s LIMIT 1",
        NAMESPACE,
        BULK,
        jobs * 9 // 10,
    )
    scheduled = one(
        "SELECT id, priority, run_at FROM postkit_queue.jobs WHERE namespace = %s AND queue = %s"
        " AND state = 'pending' AND run_at > now() ORDER BY priority DESC, run_at, id"
        " OFFSET %s LIMIT 1",
        NAMESPACE,
        BULK,
        SCHEDULED // 2,
    )
    running = one(
        "SELECT id, visible_until FROM postkit_queue.jobs WHERE namespace = %s AND queue = %s"
        " AND state = 'running' ORDER BY visible_until, id OFFSET 9 LIMIT 1",
        NAMESPACE,
        BULK,
    )
    (dead,) = one(
        "SELECT job_id FROM postkit_queue.dead_letters WHERE namespace = %s AND queue = %s"
        " AND redriven_job_id IS NULL ORDER BY job_id OFFSET %s LIMIT 1",
        NAMESPACE,
        BULK,
        dead // 2,
    )
    (redriven,) = one(
        "SELECT redriven_job_id FROM postkit_queue.dead_letters WHERE namespace = %s"
        " AND redriven_job_id IS NOT NULL ORDER BY job_id LIMIT 1",
        NAMESPACE,
    )
    selection = connection.execute(
        "SELECT job_id FROM postkit_queue.dead_letters WHERE namespace = %s"
        " AND redriven_job_id IS NULL ORDER BY failed_at DESC, job_id DESC LIMIT 50",
        (NAMESPACE,),
    ).fetchall()
    connection.rollback()
    return Place(
        now=now,
        pending_deep=JobCursor("pending", pending[0], pending[1], pending[2]),
        scheduled_deep=JobCursor("scheduled", scheduled[0], scheduled[1], scheduled[2]),
        running_next=JobCursor("running", running[0], None, running[1]),
        dead_deep=JobCursor("dead", dead),
        job_id=pending[0],
        redriven_job_id=redriven,
        selection=tuple(job_id for (job_id,) in selection),
    )


Read = Callable[[QueueClient, Place], Any]


def _ago(at: Place, **delta: float) -> datetime:
    return at.now - timedelta(**delta)


# Each read a dashboard page makes, by page, with what it asks; the call returns what the page
# shows (its length is reported as the rows).
READS: dict[str, Read] = {
    "overview: namespaces": lambda c, at: c.namespaces(),
    "overview: stats (cap 100,000)": lambda c, at: c.stats(),
    "overview: stats (cap 10,000)": lambda c, at: c.stats(cap=10_000),
    "overview: outcome_series, last hour": lambda c, at: c.outcome_series(_ago(at, hours=1)),
    "overview: workers": lambda c, at: c.workers(),
    "queue: queues": lambda c, at: c.queues(),
    "queue: jobs pending, first page": lambda c, at: c.jobs(BULK, "pending"),
    "queue: jobs pending, page at 90%": lambda c, at: c.jobs(
        BULK, "pending", after=at.pending_deep
    ),
    "queue: jobs scheduled, first page": lambda c, at: c.jobs(BULK, "scheduled"),
    "queue: jobs scheduled, next page": lambda c, at: c.jobs(
        BULK, "scheduled", after=at.scheduled_deep
    ),
    "queue: jobs running, first page": lambda c, at: c.jobs(BULK, "running"),
    "queue: jobs running, next page": lambda c, at: c.jobs(BULK, "running", after=at.running_next),
    "queue: jobs dead, first page": lambda c, at: c.jobs(BULK, "dead"),
    "queue: jobs dead, page at 50%": lambda c, at: c.jobs(BULK, "dead", after=at.dead_deep),
    "queue: purge count, stats of the queue (cap 10,000)": lambda c, at: c.stats(BULK, cap=10_000),
    "queue: purge count, purge_queue dry run (exact)": lambda c, at: c.purge_queue(
        BULK, created_before=at.now, dry_run=True
    ),
    "job: get_job": lambda c, at: c.get_job(at.job_id),
    "job: job_lineage of a redriven job": lambda c, at: c.job_lineage(at.redriven_job_id),
    "dead letters: newest": lambda c, at: c.dead_letters(),
    "dead letters: of the big queue": lambda c, at: c.dead_letters(BULK),
    "dead letters: of the small queue": lambda c, at: c.dead_letters(RARE),
    "dead letters: failed in one day": lambda c, at: c.dead_letters(
        failed_after=_ago(at, days=3), failed_before=_ago(at, days=2)
    ),
    "dead letters: small queue, one day": lambda c, at: c.dead_letters(
        RARE, failed_after=_ago(at, days=3), failed_before=_ago(at, days=2)
    ),
    "dead letters: error text, dead_letters (unbounded)": lambda c, at: c.dead_letters(
        error_contains=NEEDLE
    ),
    "dead letters: error text, search_dead_letters": lambda c, at: (
        c.search_dead_letters(NEEDLE).letters
    ),
    "dead letters: error text in the small queue, search": lambda c, at: (
        c.search_dead_letters(NEEDLE, RARE).letters
    ),
    "dead letters: redrive dry run, small queue (limit 1,000)": lambda c, at: c.redrive(
        queue=RARE, dry_run=True, limit=1000
    ),
    "dead letters: redrive dry run, big queue (limit 1,000)": lambda c, at: c.redrive(
        queue=BULK, dry_run=True, limit=1000
    ),
    "dead letters: redrive dry run, big queue (limit 100,000)": lambda c, at: c.redrive(
        queue=BULK, dry_run=True, limit=100_000
    ),
    "dead letters: count of the big queue (cap 10,000)": lambda c, at: c.count_dead_letters(BULK),
    "dead letters: count of the small queue in a day": lambda c, at: c.count_dead_letters(
        RARE, failed_after=_ago(at, days=3), failed_before=_ago(at, days=2)
    ),
    "dead letters: purge count, count_dead_letters (cap 10,000)": lambda c, at: (
        c.count_dead_letters(failed_before=_ago(at, days=1), include_redriven=True)
    ),
    "dead letters: purge count, 10,000 rows of dead_letters": lambda c, at: c.dead_letters(
        limit=10_000, failed_before=_ago(at, days=1), include_redriven=True
    ),
    "schedules: schedules": lambda c, at: c.schedules(),
    "schedules: schedule_runs": lambda c, at: c.schedule_runs(),
    "workers: workers": lambda c, at: c.workers(),
    "workers: running_jobs": lambda c, at: c.running_jobs(),
}


@dataclass(frozen=True)
class Timing:
    read: str
    median_ms: float
    p90_ms: float
    max_ms: float
    rows: int


def measure(dsn: str, *, jobs: int, dead: int, calls: int) -> list[Timing]:
    """Time every read: ``calls`` calls each, after two warm-up calls, each call in a
    transaction of its own that is rolled back (a redrive dry run takes row locks)."""
    timings = []
    with psycopg.connect(dsn) as connection:
        at = place(connection, jobs=jobs, dead=dead)
        client = QueueClient(connection.cursor(), namespace=NAMESPACE)
        for name, read in READS.items():
            elapsed = []
            for call in range(calls + 2):
                started = time.perf_counter()
                result = read(client, at)
                took = (time.perf_counter() - started) * 1000
                connection.rollback()
                if call >= 2:
                    elapsed.append(took)
            rows = len(result) if isinstance(result, list) else 1
            timings.append(
                Timing(
                    name,
                    statistics.median(elapsed),
                    percentile(elapsed, 0.9),
                    max(elapsed),
                    rows,
                )
            )
    return timings


BUDGET_MS = 100.0


def report(
    timings: list[Timing],
    *,
    dsn: str,
    jobs: int,
    dead: int,
    calls: int,
    command: str,
    load_average: float,
) -> str:
    autovacuum = pg.server_settings(dsn).get("autovacuum", "?")
    lines = [
        "# The dashboard's reads on a large backlog",
        "",
        f"{environment(dsn)}. {jobs:,} ready jobs in one queue (and {SCHEDULED} scheduled,",
        f"{RUNNING} running, a queue of 1,000 beside it), {dead:,} dead letters over a week",
        f"(1% in a small queue, 2% redriven; errors of about {len(_TRACEBACK) + 30} characters",
        "with their traceback, one in 10,000 with the searched text), 10,000 archived jobs, 100",
        "schedules, 8 workers; vacuumed and analyzed once loaded (the server's autovacuum is",
        f"{autovacuum}). Each read through QueueClient, in a transaction of its own: median of",
        f"{calls} calls (p90, max), after two warm-up calls. Pages hold 100 rows unless the",
        f"read says otherwise. The machine's load average was {load_average:.1f} as the",
        f"benchmark began (other work shares its cores). Command: `{command}`.",
        "",
        "| read | median ms | p90 ms | max ms | rows |",
        "|---|---:|---:|---:|---:|",
    ]
    for timing in timings:
        over = " **over 100 ms**" if timing.median_ms > BUDGET_MS else ""
        lines.append(
            f"| {timing.read}{over} | {timing.median_ms:,.2f} | {timing.p90_ms:,.2f} |"
            f" {timing.max_ms:,.2f} | {timing.rows:,} |"
        )
    lines += [
        "",
        "The reads over 100 ms are the ones a dashboard does without: each reads every row it",
        "counts or matches. For a queue purge's confirmation, stats of the queue counts its",
        "pending and scheduled jobs up to a cap; for a dead-letter purge's, count_dead_letters;",
        "for a redrive's, count_dead_letters and a dry run of one page; for an error text,",
        "search_dead_letters, which reads a bounded window and says where it stopped.",
    ]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------
# The dashboard's HTTP endpoints
# -------------------------------------------------------------------------------------------

PAGES_IN = 5
"""How many pages a deep page follows ``next_cursor`` through before it is timed."""


@dataclass(frozen=True)
class Endpoint:
    """One request the dashboard's page makes, and the same work called on a DashboardSource
    directly, without HTTP (``direct``; None for the page's static files, which read
    nothing)."""

    label: str
    path: str
    direct: Callable[[DashboardSource], Any] | None
    params: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    """A POST's JSON body; None for a GET."""


@dataclass(frozen=True)
class Walked:
    """The ``next_cursor`` that :data:`PAGES_IN` pages of a listing end with, read through the
    server as the page pages on (and the error search's second window)."""

    pending: str
    dead: str
    dead_letters: str
    search_next: str


def endpoints(at: Place, walked: Walked) -> list[Endpoint]:
    """Every page and API endpoint, with the filters, cursors and ids the dashboard asks
    about."""
    ns = f"/api/ns/{NAMESPACE}"
    day_after, day_before = _ago(at, days=3), _ago(at, days=2)
    day = {"since": day_after.isoformat(), "until": day_before.isoformat()}
    selection = list(at.selection)

    def jobs(label: str, state: str, cursor: str | None = None) -> Endpoint:
        return Endpoint(
            f"jobs {state}, {label}",
            f"{ns}/queues/{BULK}/jobs",
            lambda s: s.jobs(NAMESPACE, BULK, state, cursor),
            {"state": state, **({"cursor": cursor} if cursor else {})},
        )

    def letters(
        label: str,
        queue: str | None = None,
        error: str | None = None,
        window: bool = False,
        cursor: str | None = None,
    ) -> Endpoint:
        params = {"queue": queue, "error": error, "cursor": cursor, **(day if window else {})}
        return Endpoint(
            f"dead letters: {label}",
            f"{ns}/dead-letters",
            lambda s: s.dead_letters(
                NAMESPACE,
                queue=queue,
                error=error,
                failed_after=day_after if window else None,
                failed_before=day_before if window else None,
                cursor=cursor,
            ),
            {key: value for key, value in params.items() if value},
        )

    def action(label: str, path: str, verb: Callable[..., Any], **body: Any) -> Endpoint:
        filters = {
            "job_ids": body.get("job_ids"),
            "queue": body.get("queue"),
            "error": None,
            "failed_after": day_after if "since" in body else None,
            "failed_before": day_before if "until" in body else None,
        }
        return Endpoint(
            f"POST dead-letters/{path}, dry run{label}",
            f"{ns}/dead-letters/{path}",
            lambda s: verb(s, NAMESPACE, **filters, dry_run=True),
            body={**body, "dry_run": True},
        )

    from postkit.dashboard.source import DashboardSource

    redrive, purge = DashboardSource.redrive, DashboardSource.purge_dead_letters
    return [
        Endpoint("page: /", "/", None),
        Endpoint("page: /static/app.js", "/static/app.js", None),
        Endpoint("/api/meta", "/api/meta", lambda s: s.meta()),
        Endpoint("/api/overview (every namespace)", "/api/overview", lambda s: s.overview_all()),
        Endpoint("overview", f"{ns}/overview", lambda s: s.overview(NAMESPACE)),
        Endpoint(f"queue {BULK}", f"{ns}/queues/{BULK}", lambda s: s.queue(NAMESPACE, BULK)),
        jobs("first page", "pending"),
        jobs(f"page {PAGES_IN + 1} (next_cursor)", "pending", walked.pending),
        jobs("page at 90%", "pending", at.pending_deep.token),
        jobs("first page", "scheduled"),
        jobs("from mid-list", "scheduled", at.scheduled_deep.token),
        jobs("first page", "running"),
        jobs("from mid-list", "running", at.running_next.token),
        jobs("first page", "dead"),
        jobs(f"page {PAGES_IN + 1} (next_cursor)", "dead", walked.dead),
        jobs("page at 50%", "dead", at.dead_deep.token),
        Endpoint("job: pending", f"{ns}/jobs/{at.job_id}", lambda s: s.job(NAMESPACE, at.job_id)),
        Endpoint(
            "job: dead",
            f"{ns}/jobs/{at.dead_deep.id}",
            lambda s: s.job(NAMESPACE, at.dead_deep.id),
        ),
        Endpoint(
            "job: redriven, with lineage",
            f"{ns}/jobs/{at.redriven_job_id}",
            lambda s: s.job(NAMESPACE, at.redriven_job_id),
        ),
        letters("newest"),
        letters(f"page {PAGES_IN + 1} (next_cursor)", cursor=walked.dead_letters),
        letters(f"queue {BULK}", BULK),
        letters(f"queue {RARE} (1%)", RARE),
        letters("one day", window=True),
        letters(f"queue {RARE}, one day", RARE, window=True),
        letters("error text", error=NEEDLE),
        letters("error text, next window", error=NEEDLE, cursor=walked.search_next),
        letters(f"error text, queue {RARE}", RARE, error=NEEDLE),
        Endpoint("schedules", f"{ns}/schedules", lambda s: s.schedules(NAMESPACE)),
        Endpoint("workers", f"{ns}/workers", lambda s: s.workers(NAMESPACE)),
        Endpoint("/metrics", "/metrics", _render_metrics),
        Endpoint(
            f"POST queues/{BULK}/purge, dry run",
            f"{ns}/queues/{BULK}/purge",
            lambda s: s.purge_queue(NAMESPACE, BULK, created_before=None, dry_run=True),
            body={"dry_run": True},
        ),
        action("", "redrive", redrive),
        action(f", queue {BULK}", "redrive", redrive, queue=BULK),
        action(f", queue {RARE}", "redrive", redrive, queue=RARE),
        action(f", {len(selection)} selected", "redrive", redrive, job_ids=selection),
        action("", "purge", purge),
        action(f", queue {BULK}", "purge", purge, queue=BULK),
        action(", one day", "purge", purge, **day),
        action(f", {len(selection)} selected", "purge", purge, job_ids=selection),
    ]


def _render_metrics(source: DashboardSource) -> Any:
    from postkit.dashboard.metrics import render_metrics

    return render_metrics(source)


def walk(http: httpx.Client) -> Walked:
    """Page through the listings as the page does, following ``next_cursor``."""
    ns = f"/api/ns/{NAMESPACE}"

    def after(path: str, pages: int, **params: str) -> str:
        cursor = ""
        for _ in range(pages):
            cursor = _ok(http.get(path, params={**params, "cursor": cursor})).json()["next_cursor"]
            assert cursor, f"{path} {params} ends within {pages} pages"
        return str(cursor)

    jobs = f"{ns}/queues/{BULK}/jobs"
    return Walked(
        pending=after(jobs, PAGES_IN, state="pending"),
        dead=after(jobs, PAGES_IN, state="dead"),
        dead_letters=after(f"{ns}/dead-letters", PAGES_IN),
        search_next=after(f"{ns}/dead-letters", 1, error=NEEDLE),
    )


def _ok(response: httpx.Response) -> httpx.Response:
    if response.status_code != 200:
        raise RuntimeError(
            f"{response.request.method} {response.request.url}: {response.status_code} "
            f"{response.text[:300]}"
        )
    return response


@dataclass(frozen=True)
class HttpTiming:
    endpoint: str
    median_ms: float
    p90_ms: float
    max_ms: float
    direct_ms: float | None
    """The median of the same work called on a DashboardSource, without HTTP."""
    kilobytes: float


def _times(call: Callable[[], Any], calls: int) -> list[float]:
    """``calls`` timings of ``call`` in milliseconds, after two warm-up calls."""
    elapsed = []
    for number in range(calls + 2):
        started = time.perf_counter()
        call()
        took = (time.perf_counter() - started) * 1000
        if number >= 2:
            elapsed.append(took)
    return elapsed


def measure_http(dsn: str, *, jobs: int, dead: int, calls: int) -> list[HttpTiming]:
    """Time every endpoint through a real dashboard server (uvicorn on a thread of this
    process) with one keep-alive HTTP connection, and the same work on a DashboardSource of
    its own, each ``calls`` times after two warm-up calls."""
    import httpx

    from postkit.dashboard import DashboardSettings
    from postkit.dashboard.security import CSRF_HEADER
    from postkit.dashboard.server import running
    from postkit.dashboard.source import DashboardSource

    with psycopg.connect(dsn) as connection:
        at = place(connection, jobs=jobs, dead=dead)
    settings = DashboardSettings(dsn=dsn, port=0)
    source = DashboardSource(settings)
    source.open()
    timings = []
    try:
        with (
            running(settings) as base_url,
            httpx.Client(
                base_url=base_url, timeout=60, headers={CSRF_HEADER: settings.csrf_token}
            ) as http,
        ):
            for endpoint in endpoints(at, walk(http)):
                elapsed, size = _time_requests(http, endpoint, calls)
                direct = endpoint.direct
                timings.append(
                    HttpTiming(
                        endpoint.label,
                        statistics.median(elapsed),
                        percentile(elapsed, 0.9),
                        max(elapsed),
                        None
                        if direct is None
                        else statistics.median(_times(lambda d=direct: d(source), calls)),
                        size / 1024,
                    )
                )
    finally:
        source.close()
    return timings


def _time_requests(http: httpx.Client, endpoint: Endpoint, calls: int) -> tuple[list[float], int]:
    """The timings of ``calls`` requests of ``endpoint`` (after two warm-up requests), and
    the size of its response's body."""
    sizes = []

    def request() -> None:
        response = http.request(
            "GET" if endpoint.body is None else "POST",
            endpoint.path,
            params=endpoint.params,
            json=endpoint.body,
        )
        sizes.append(len(_ok(response).content))

    return _times(request, calls), sizes[-1]


def _ms(value: float) -> str:
    text = f"{value:,.2f}"
    return f"**{text}**" if value > BUDGET_MS else text


def report_http(timings: list[HttpTiming], *, calls: int, command: str) -> str:
    from postkit.dashboard.source import PAGE_SIZE, SEARCH_SCAN, STATS_CAP

    lines = [
        "",
        "## The dashboard's HTTP endpoints",
        "",
        "The same database, served by the dashboard (`postkit.dashboard.server.running`:",
        "uvicorn on a thread of the benchmark's process, a pool of 4 connections, as the",
        "database's owner) and requested with httpx on one keep-alive connection: median of",
        f"{calls} requests (p90, max) after two warm-up requests, from sending each to having",
        "its body. *source* is the median of the same work called on a DashboardSource of the",
        "benchmark's own (the SDK calls on a pooled connection and the JSON values, no HTTP);",
        "the rest of a request is Starlette, the thread hop, JSON encoding and the loopback.",
        f"Lists hold {PAGE_SIZE} rows; counts stop at {STATS_CAP:,}; an error-text page reads",
        f"{SEARCH_SCAN:,} dead letters; *page {PAGES_IN + 1}* follows next_cursor {PAGES_IN}",
        "times; *mid-list* starts from the SDK table's cursor; POSTs carry the CSRF header.",
        f"Figures over {BUDGET_MS:.0f} ms are in bold. Command: `{command}`.",
        "",
        "| endpoint | median ms | p90 ms | max ms | source ms | KB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for timing in timings:
        direct = "" if timing.direct_ms is None else _ms(timing.direct_ms)
        lines.append(
            f"| {timing.endpoint} | {_ms(timing.median_ms)} | {_ms(timing.p90_ms)} |"
            f" {_ms(timing.max_ms)} | {direct} | {timing.kilobytes:,.1f} |"
        )
    slow = [timing for timing in timings if timing.p90_ms > BUDGET_MS]
    lines.append("")
    if slow:
        lines.append(
            f"Over {BUDGET_MS:.0f} ms at p90: "
            + "; ".join(
                f"{timing.endpoint} ({timing.median_ms:,.0f} ms, source "
                f"{timing.direct_ms or 0:,.0f} ms)"
                for timing in slow
            )
            + "."
        )
    else:
        lines.append(f"No endpoint takes over {BUDGET_MS:.0f} ms, at the median or at p90.")
    lines += PROSE_HTTP
    return "\n".join(lines) + "\n"


PROSE_HTTP = [
    "",
    "The dearest requests are the ones that count or search: the overviews, a queue, /metrics",
    "and a queue purge's dry run count each queue's live jobs up to the cap (stats), and an",
    "error-text page reads its window of dead letters. The rest of a request, the difference",
    "from *source*, is a few milliseconds of HTTP.",
]


def run(server_dsn: str, *, jobs: int, dead: int, calls: int, http: bool, command: str) -> str:
    """Load the backlog into a scratch database on the server, time the SDK reads and (with
    ``http``) the dashboard's endpoints, drop it, and return the report."""
    load_average = os.getloadavg()[0]
    dsn = pg.recreate_database(server_dsn, DATABASE)
    try:
        with psycopg.connect(dsn) as connection:
            install(connection)
        load(dsn, jobs=jobs, dead=dead)
        timings = measure(dsn, jobs=jobs, dead=dead, calls=calls)
        text = report(
            timings,
            dsn=dsn,
            jobs=jobs,
            dead=dead,
            calls=calls,
            command=command,
            load_average=load_average,
        )
        if http:
            text += report_http(
                measure_http(dsn, jobs=jobs, dead=dead, calls=calls),
                calls=calls,
                command=command,
            )
        return text
    finally:
        pg.drop_database(server_dsn, DATABASE)
