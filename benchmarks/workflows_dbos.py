"""The same shapes as benchmarks/workflows.py on DBOS Transact (``pip install dbos``), in the
same run: a DBOS application in this process (``DBOS.launch``) with its queue's
``worker_concurrency`` at 8 (the Postkit worker's slots) and its polling interval at 0.1 s, as
the comparison's DBOS adapter tunes it (benchmarks/adapters/dbos.py). N workflows enqueued,
timed until every one's result is back: a workflow without steps (plain), one of ten
``@DBOS.step`` that return at once, one of ten transactional steps (a ``SQLAlchemyDatasource``'s
``transaction``, DBOS 3's: the function's session, its checkpoint in the datasource's
database and a check that the workflow is still this process's, at the isolation level its
docs default to, SERIALIZABLE), one of three steps. And one workflow alone, called directly,
with ten steps and without: the difference over ten is a step's cost."""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

import psycopg

from benchmarks import pg

ALONE_CALLS = 10
"""Direct calls of each workflow alone per run."""


def _fresh(dsn: str, name: str) -> str:
    """A database ``name`` on the server of ``dsn``, new and empty; its DSN."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(dsn, dbname=name)


def measure(dsn: str, *, jobs: int, runs: int) -> dict[str, list[float]]:
    """Seconds for each row, ``runs`` times: 'plain', 'ten', 'ten_tx', 'three' (``jobs``
    enqueued workflows each) and 'alone ten', 'alone plain' (one workflow, called directly)."""
    from dbos import DBOS, SQLAlchemyDatasource

    logging.getLogger("dbos").setLevel(logging.WARNING)
    url = pg.as_uri(_fresh(dsn, "bench_dbos_workflows"))
    DBOS(config={"name": "bench-workflows", "system_database_url": url, "log_level": "WARNING"})
    datasource = SQLAlchemyDatasource.create(pg.as_uri(_fresh(dsn, "bench_dbos_application")))

    @DBOS.step()
    def nothing() -> None:
        return None

    @datasource.transaction()
    def nothing_in_a_transaction() -> None:
        return None

    @DBOS.workflow()
    def plain() -> None:
        return None

    @DBOS.workflow()
    def ten() -> None:
        for _ in range(10):
            nothing()

    @DBOS.workflow()
    def ten_tx() -> None:
        for _ in range(10):
            nothing_in_a_transaction()

    @DBOS.workflow()
    def three() -> None:
        for _ in range(3):
            nothing()

    DBOS.launch()
    DBOS.register_queue("bench-workflows", worker_concurrency=8, polling_interval_sec=0.1)
    queue = DBOS.retrieve_queue("bench-workflows")
    shapes: dict[str, Any] = {"plain": plain, "ten": ten, "ten_tx": ten_tx, "three": three}
    times: dict[str, list[float]] = {name: [] for name in [*shapes, "alone ten", "alone plain"]}
    try:
        for _ in range(runs):
            for name, workflow in shapes.items():
                started = time.perf_counter()
                handles = [queue.enqueue(workflow) for _ in range(jobs)]
                for handle in handles:
                    handle.get_result()
                times[name].append(time.perf_counter() - started)
            for _ in range(ALONE_CALLS):
                for name, workflow in (("alone ten", ten), ("alone plain", plain)):
                    started = time.perf_counter()
                    workflow()
                    times[name].append(time.perf_counter() - started)
    finally:
        DBOS.destroy()
    return times


def lines(times: dict[str, list[float]], jobs: int) -> list[str]:
    """The DBOS rows of the workflows report."""
    median = {name: statistics.median(values) for name, values in times.items()}
    per_step = (median["ten"] - median["plain"]) / (jobs * 10) * 1000
    per_tx_step = (median["ten_tx"] - median["plain"]) / (jobs * 10) * 1000
    alone = (median["alone ten"] - median["alone plain"]) / 10 * 1000
    rows = [
        f"| DBOS {label}: {jobs} | {median[name]:.3f} s "
        f"({min(times[name]):.3f}-{max(times[name]):.3f}) |"
        for name, label in (
            ("plain", "plain"),
            ("ten", "10 steps"),
            ("ten_tx", "10 transactional steps"),
            ("three", "3 steps"),
        )
    ]
    summary = (
        f"DBOS, the same shapes: a step's overhead **{per_step:.2f} ms** (`@DBOS.step`), "
        f"**{per_tx_step:.2f} ms** (a datasource's `transaction`) with 8 workflows at once, "
        f"**{jobs / median['three']:.0f} three-step runs/s**; one workflow alone, called "
        f"directly, **{alone:.2f} ms per step**. Its queue starts the workflows its pollers "
        "find (every 0.1 s here, 8 at once at most), which bounds its runs per second."
    )
    return [*rows, "", summary]
