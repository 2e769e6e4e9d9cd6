"""The dashboard's reads stay index range scans on a backlog: none scans the jobs or the dead
letters.

A database of its own holds a backlog of 20,000 jobs (three priorities, some scheduled, a few
running) in one queue beside smaller ones and another namespace, 5,000 dead letters, archived
jobs, schedules, outcome counters and workers, vacuumed and analyzed. Each read runs through
the SDK, as the dashboard calls it, and two things are checked about it:

* its plans, as PostgreSQL really runs them inside the functions (auto_explain), both the
  custom plans and the generic plans plpgsql may settle on: no sequential or bitmap scan of
  jobs or dead_letters, and the index each read is meant to walk;
* how much it reads (PostgreSQL's per-transaction counters of the rows each backend reads per
  table and index, the statements inside functions included): a page costs its own rows and a
  few index probes, however deep it starts and however long the queue.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.queue import JobCursor, QueueClient, install
from tests.queue.conftest import start_collecting_plans

NAMESPACE = "dash-a"
BULK = "bulk"
JOBS = 20_000
SCHEDULED_EVERY = 10  # one job in ten runs an hour later
RUNNING = 12  # in BULK, with a small queue's 4 beside them
DEAD = 5_000
DEAD_RARE_EVERY = 100  # one dead letter in a hundred belongs to queue 'rare'


def read_cursor(client: QueueClient, state: str, position: int) -> JobCursor:
    """The cursor after the job at ``position`` of BULK's ``state`` listing, read from the
    table."""
    if state == "dead":
        client.cursor.execute(
            "SELECT d.job_id FROM postkit_queue.dead_letters d WHERE d.namespace = %s"
            " AND d.queue = %s AND d.redriven_job_id IS NULL ORDER BY d.job_id OFFSET %s LIMIT 1",
            (NAMESPACE, BULK, position),
        )
        return JobCursor("dead", client.cursor.fetchone()[0])
    if state == "running":
        client.cursor.execute(
            "SELECT j.id, j.visible_until FROM postkit_queue.jobs j WHERE j.namespace = %s"
            " AND j.queue = %s AND j.state = 'running' ORDER BY j.visible_until, j.id"
            " OFFSET %s LIMIT 1",
            (NAMESPACE, BULK, position),
        )
        job_id, deadline = client.cursor.fetchone()
        return JobCursor("running", job_id, None, deadline)
    ready = "<=" if state == "pending" else ">"
    client.cursor.execute(
        "SELECT j.id, j.priority, j.run_at FROM postkit_queue.jobs j WHERE j.namespace = %s"
        f" AND j.queue = %s AND j.state = 'pending' AND j.run_at {ready} now()"
        " ORDER BY j.priority DESC, j.run_at, j.id OFFSET %s LIMIT 1",
        (NAMESPACE, BULK, position),
    )
    job_id, priority, run_at = client.cursor.fetchone()
    return JobCursor(state, job_id, priority, run_at)


@pytest.fixture(scope="module")
def backlog(server_dsn: str) -> Iterator[str]:
    """The DSN of a database of its own with the backlog, vacuumed and analyzed."""
    name = f"postkit_dashboard_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(server_dsn, dbname=name)
    try:
        with psycopg.connect(dsn, autocommit=True) as connection:
            install(connection)
            load(connection)
        yield dsn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def load(connection: psycopg.Connection) -> None:
    # The jobs, written as the owner would bulk-load them: priorities 0-2, every tenth an hour
    # out; a smaller queue beside them, and another namespace.
    connection.execute(
        """
        INSERT INTO postkit_queue.jobs (
            namespace, queue, payload, priority, run_at, max_attempts, created_at)
        SELECT n, q, jsonb_build_object('n', g), g %% 3,
               CASE WHEN g %% %(every)s = 0 THEN now() + interval '1 hour'
                    ELSE now() - interval '1 hour' + g * interval '1 millisecond' END,
               20, now() - interval '1 hour'
        FROM (VALUES (%(ns)s, %(bulk)s, %(jobs)s), (%(ns)s, 'small', 200),
                     ('dash-b', %(bulk)s, 5000)) AS backlog(n, q, size),
             generate_series(1, size) AS g
        """,
        {"ns": NAMESPACE, "bulk": BULK, "jobs": JOBS, "every": SCHEDULED_EVERY},
    )
    client = QueueClient(connection.cursor(), namespace=NAMESPACE)
    for minutes in range(RUNNING):
        client.pull(BULK, worker_id=f"w{minutes % 3}", visibility_timeout=60 * (minutes + 1))
    for minutes in range(4):
        client.pull("small", worker_id="w9", visibility_timeout=90 * (minutes + 1))
    connection.execute(
        """
        INSERT INTO postkit_queue.dead_letters (
            namespace, job_id, queue, payload, priority, attempts, max_attempts, reason, error,
            errors, created_at, failed_at, expires_at, redriven_job_id, redriven_at)
        SELECT %(ns)s, 1000000 + g, CASE WHEN g %% %(rare)s = 0 THEN 'rare' ELSE %(bulk)s END,
               '{}', 0, 3, 3, 'failed',
               CASE WHEN g %% 1000 = 0 THEN 'needle ' ELSE 'ValueError ' END || g, '[]',
               now() - interval '31 days', now() - g * interval '8 minutes',
               now() - g * interval '8 minutes' + interval '30 days',
               CASE WHEN g %% 10 = 5 THEN g END, CASE WHEN g %% 10 = 5 THEN now() END
        FROM generate_series(1, %(dead)s) AS g
        """,
        {"ns": NAMESPACE, "bulk": BULK, "rare": DEAD_RARE_EVERY, "dead": DEAD},
    )
    connection.execute(
        """
        INSERT INTO postkit_queue.completed_jobs (
            namespace, job_id, queue, payload, priority, attempts, worker_id, errors,
            created_at, completed_at, expires_at)
        SELECT %(ns)s, 2000000 + g, %(bulk)s, '{}', 0, 1, 'w', '[]', now() - interval '1 day',
               now() - g * interval '1 second', now() + interval '1 day'
        FROM generate_series(1, 1000) AS g
        """,
        {"ns": NAMESPACE, "bulk": BULK},
    )
    # Schedules whose last jobs are live, dead, archived and gone.
    connection.execute(
        """
        INSERT INTO postkit_queue.schedules (
            namespace, name, queue, payload, every, next_run_at, last_run_at, last_job_id,
            created_at, updated_at)
        SELECT %(ns)s, 'schedule-' || g, %(bulk)s, '{}', interval '1 hour',
               now() + g * interval '1 minute', now() - interval '1 hour',
               (ARRAY[g * 50, 1000000 + g, 2000000 + g, 9000000 + g])[1 + g %% 4],
               now(), now()
        FROM generate_series(1, 200) AS g
        """,
        {"ns": NAMESPACE, "bulk": BULK},
    )
    connection.execute(
        """
        INSERT INTO postkit_queue.queue_stats
            (namespace, queue, minute, slot, completed, dead_lettered)
        SELECT %(ns)s, q, date_trunc('minute', now()) - m * interval '1 minute', s, 10, 1
        FROM unnest(ARRAY[%(bulk)s, 'small', 'rare']) AS q, generate_series(0, 119) AS m,
             generate_series(0, 7) AS s
        """,
        {"ns": NAMESPACE, "bulk": BULK},
    )
    for number in range(10):
        client.register_worker(
            f"w{number}",
            host="host",
            pid=1000 + number,
            queues=[BULK],
            concurrency=4,
            version="1",
            heartbeat_interval=5,
        )
    connection.execute("VACUUM ANALYZE")


# Each read the dashboard makes, by name: given a client, the call (its arguments read first,
# so that their reads are not the call's); the index its scans of jobs or dead_letters must
# include, if any; and the indexes they may use.
Read = Callable[[QueueClient], Callable[[], Any]]


def _deep(state: str, position: int) -> Read:
    def prepare(client: QueueClient) -> Callable[[], Any]:
        cursor = read_cursor(client, state, position)
        return lambda: client.jobs(BULK, state, limit=100, after=cursor)

    return prepare


def _ago(client: QueueClient, days: float) -> datetime:
    return client.clock() - timedelta(days=days)


PULL = {"jobs_pull_idx"}
DEADLINE = {"jobs_deadline_idx"}
PRIMARY = {"jobs_pkey", "dead_letters_pkey"}
SEARCHED = {"dead_letters_failed_at_idx", "dead_letters_pkey"}
READS: dict[str, tuple[Read, str | None, set[str]]] = {
    "jobs pending, first page": (
        lambda c: lambda: c.jobs(BULK, "pending"),
        "jobs_pull_idx",
        PULL,
    ),
    "jobs pending, deep page": (_deep("pending", 15_000), "jobs_pull_idx", PULL),
    "jobs scheduled, first page": (
        lambda c: lambda: c.jobs(BULK, "scheduled"),
        "jobs_pull_idx",
        PULL,
    ),
    "jobs scheduled, deep page": (_deep("scheduled", 1_500), "jobs_pull_idx", PULL),
    "jobs running, next page": (_deep("running", 3), "jobs_deadline_idx", DEADLINE),
    # The planner may walk the queue's partial index or the primary key's range of the
    # namespace, filtered to the queue: for a queue that holds most dead letters, both read
    # about a page of rows.
    "jobs dead, deep page": (
        _deep("dead", 3_000),
        None,
        {"dead_letters_queue_idx", "dead_letters_pkey"},
    ),
    "running_jobs": (lambda c: c.running_jobs, "jobs_deadline_idx", DEADLINE),
    "namespaces": (lambda c: c.namespaces, "jobs_pkey", PRIMARY),
    "outcome_series": (lambda c: lambda: c.outcome_series(_ago(c, 1 / 24)), None, set()),
    "schedule_runs": (lambda c: c.schedule_runs, "jobs_pkey", PRIMARY),
    "search_dead_letters": (
        lambda c: lambda: c.search_dead_letters("needle"),
        "dead_letters_failed_at_idx",
        SEARCHED,
    ),
    "search_dead_letters of a queue in a window": (
        lambda c: (
            lambda: c.search_dead_letters(
                "needle", "rare", failed_after=_ago(c, 20), failed_before=_ago(c, 1)
            )
        ),
        "dead_letters_failed_at_idx",
        SEARCHED,
    ),
    "count_dead_letters of a queue": (
        lambda c: lambda: c.count_dead_letters(BULK, cap=1000),
        "dead_letters_queue_idx",
        {"dead_letters_queue_idx"},
    ),
    "count_dead_letters before a cutoff": (
        lambda c: (
            lambda: c.count_dead_letters(failed_before=_ago(c, 1), include_redriven=True, cap=1000)
        ),
        "dead_letters_failed_at_idx",
        {"dead_letters_failed_at_idx"},
    ),
    # Job 15 was redriven from dead letter 1000015 (the backlog's every tenth dead letter, from
    # the fifth on, was redriven as the job of its number).
    "job_lineage": (
        lambda c: lambda: c.job_lineage(15),
        "dead_letters_redriven_idx",
        {"dead_letters_redriven_idx", "dead_letters_pkey", "jobs_pkey"},
    ),
    "dead_letters of a small queue": (
        lambda c: lambda: c.dead_letters("rare"),
        None,
        {"dead_letters_failed_at_idx", "dead_letters_queue_idx"},
    ),
    "dead_letters of a small queue in a window": (
        lambda c: (
            lambda: c.dead_letters("rare", failed_after=_ago(c, 20), failed_before=_ago(c, 1))
        ),
        None,
        {"dead_letters_failed_at_idx", "dead_letters_queue_idx"},
    ),
}

SCAN = re.compile(
    r"(Seq Scan|Bitmap Heap Scan|Index Scan|Index Only Scan)(?: Backward)?"
    r"(?: using (\w+))? on (\w+)"
)
WATCHED = ("jobs", "dead_letters")


@pytest.fixture
def collected(backlog: str) -> Iterator[tuple[QueueClient, list[str]]]:
    """A superuser client on the backlog, and the plans of everything it runs from now on."""
    with psycopg.connect(backlog, autocommit=True) as connection:
        plans = start_collecting_plans(connection)
        yield QueueClient(connection.cursor(), namespace=NAMESPACE), plans


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("read", sorted(READS))
def test_a_dashboard_read_walks_its_index_and_scans_no_jobs_or_dead_letters(
    collected: tuple[QueueClient, list[str]], mode: str, read: str
) -> None:
    client, plans = collected
    prepare, required, allowed = READS[read]
    call = prepare(client)
    client.cursor.execute(f"SET plan_cache_mode = {mode}")
    before = len(plans)

    call()

    scans = [scan for plan in plans[before:] for scan in SCAN.findall(plan)]
    watched = {(kind, index) for kind, index, table in scans if table in WATCHED}
    assert {kind for kind, _ in watched} <= {"Index Scan", "Index Only Scan"}, watched
    assert {index for _, index in watched} <= allowed, watched
    assert required is None or required in {index for _, index in watched}, watched


# What this backend has read from a table and its indexes in its current transaction: rows
# returned by scans (index entries included) and fetched from the heap by index scans.
READS_SO_FAR = """
SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)
                    + pg_stat_get_xact_tuples_fetched(c.oid)), 0)::bigint
FROM pg_class c
WHERE c.oid = %(table)s::regclass
   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %(table)s::regclass)
"""


def rows_read(client: QueueClient, call: Callable[[], Any], table: str) -> int:
    """The rows of ``table`` (and its indexes) that ``call`` reads, in a transaction of its own
    (the client's connection is not in autocommit)."""
    connection = client.cursor.connection
    connection.rollback()
    client.cursor.execute(READS_SO_FAR, {"table": f"postkit_queue.{table}"})
    before = client.cursor.fetchone()[0]
    call()
    client.cursor.execute(READS_SO_FAR, {"table": f"postkit_queue.{table}"})
    after = client.cursor.fetchone()[0]
    connection.rollback()
    return int(after - before)


@pytest.fixture(params=["force_custom_plan", "force_generic_plan"])
def measured(backlog: str, request: pytest.FixtureRequest) -> Iterator[QueueClient]:
    """A client on the backlog whose session plans every statement custom, or generic."""
    with psycopg.connect(backlog) as connection:
        connection.execute(f"SET plan_cache_mode = {request.param}")
        connection.commit()
        yield QueueClient(connection.cursor(), namespace=NAMESPACE)


# A page of 100 reads its rows from the index and the heap (two counts each) and a few probes;
# these bounds are a small multiple of that, and far below the backlog's 20,000 jobs.
BOUNDS: dict[str, tuple[str, int]] = {
    "jobs pending, first page": ("jobs", 250),
    "jobs pending, deep page": ("jobs", 250),
    "jobs scheduled, first page": ("jobs", 250),
    "jobs scheduled, deep page": ("jobs", 250),
    "jobs running, next page": ("jobs", 4 * (RUNNING + 4) + 10),
    "jobs dead, deep page": ("dead_letters", 250),
    "running_jobs": ("jobs", 4 * (RUNNING + 4) + 10),
    "namespaces": ("jobs", 20),
    "schedule_runs": ("jobs", 4 * 200),
    # The queue's 50 dead letters, not the namespace's 5,000: each call is planned for its
    # queue (a plan for any queue walks the failed_at index through every one).
    "job_lineage": ("dead_letters", 20),
    # Counts stop at their cap of 1,000, whatever the 5,000 dead letters.
    "count_dead_letters of a queue": ("dead_letters", 2 * 1000 + 10),
    "count_dead_letters before a cutoff": ("dead_letters", 2 * 1000 + 10),
    "dead_letters of a small queue": ("dead_letters", 250),
    "dead_letters of a small queue in a window": ("dead_letters", 250),
}


@pytest.mark.parametrize("read", sorted(BOUNDS))
def test_a_dashboard_read_costs_its_own_rows_whatever_the_backlog(
    measured: QueueClient, read: str
) -> None:
    prepare, _, _ = READS[read]
    table, bound = BOUNDS[read]

    assert rows_read(measured, prepare(measured), table) <= bound


def test_a_search_reads_no_more_dead_letters_than_its_bound(measured: QueueClient) -> None:
    def search() -> None:
        found = measured.search_dead_letters("no such error", scan_limit=500)
        assert found.cut and not found.letters

    # The 500 rows of the index range and their heap rows, and one primary-key lookup.
    assert rows_read(measured, search, "dead_letters") <= 2 * 500 + 4
