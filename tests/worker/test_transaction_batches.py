"""Batched transactional handlers (``Handlers.add(transactional=True, batch=N)``): jobs share a
transaction and its commit, and each job's writes still commit exactly when its own ack does."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.queue import Job, QueueClient
from postkit.worker import Handlers
from tests.signals import wait_until
from tests.worker.conftest import StartWorker

Q = "work"


@pytest.fixture
def table(connect: Callable[..., psycopg.Connection[Any]]) -> Iterator[sql.Identifier]:
    """A table for handlers to write to: the job and the transaction that wrote it."""
    admin = connect(autocommit=True)
    name = sql.Identifier(f"batch_test_{uuid.uuid4().hex[:12]}")
    admin.execute(
        sql.SQL("CREATE TABLE {} (job_id bigint PRIMARY KEY, txid bigint NOT NULL)").format(name)
    )
    yield name
    admin.execute(sql.SQL("DROP TABLE {}").format(name))


def written(client: QueueClient, table: sql.Identifier) -> dict[int, int]:
    """The rows that committed: the transaction of each job's write, by job id."""
    client.cursor.execute(sql.SQL("SELECT job_id, txid FROM {}").format(table))
    return dict(client.cursor.fetchall())


def insert(cursor: Any, table: sql.Identifier, job: Job) -> None:
    cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s, txid_current())").format(table), (job.id,))


def test_a_batch_is_refused_where_no_shared_transaction_can_hold_it() -> None:
    handlers = Handlers()
    with pytest.raises(ValueError, match="batch must be at least 1"):
        handlers.add("a", lambda job, cursor: None, transactional=True, batch=0)
    with pytest.raises(ValueError, match="only a transactional handler on the worker's pool"):
        handlers.add("b", lambda job: None, batch=10)
    with pytest.raises(ValueError, match="only a transactional handler on the worker's pool"):
        handlers.add(
            "c", lambda job, cursor: None, transactional=True, transaction=lambda: None, batch=10
        )  # type: ignore[arg-type,return-value]


def test_the_jobs_of_a_batched_handler_share_transactions_and_all_commit(
    start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    handlers = Handlers()
    handlers.add(Q, lambda job, cursor: insert(cursor, table, job), transactional=True, batch=50)
    ids = client.push_batch(Q, [{} for _ in range(300)])
    worker = start_worker(handlers, concurrency=2)
    wait_until(lambda: worker.stats.completed == 300, "the 300 jobs to be acked", 30)
    rows = written(client, table)
    assert sorted(rows) == sorted(ids)
    # Many jobs to a transaction: a transaction each would make 300.
    assert len(set(rows.values())) < 100, f"{len(set(rows.values()))} transactions"
    client.cursor.execute(
        "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (client.namespace,)
    )
    assert client.cursor.fetchone()[0] == 0


def test_a_handler_that_raises_in_a_batch_loses_its_writes_and_the_others_commit(
    start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    def handler(job: Job, cursor: Any) -> None:
        insert(cursor, table, job)
        if job.payload.get("bad"):
            raise RuntimeError("this one fails after writing")

    handlers = Handlers()
    handlers.add(Q, handler, transactional=True, batch=50)
    good = client.push_batch(Q, [{} for _ in range(40)])
    bad = client.push(Q, {"bad": True}, max_attempts=1)
    good += client.push_batch(Q, [{} for _ in range(40)])
    worker = start_worker(handlers, concurrency=1)
    wait_until(
        lambda: worker.stats.completed == 80 and worker.stats.dead_lettered == 1,
        "80 jobs acked and the bad one dead-lettered",
        30,
    )
    assert sorted(written(client, table)) == sorted(good)
    (letter,) = client.dead_letters(Q)
    assert letter.job_id == bad
    assert "this one fails after writing" in (letter.error or "")


def test_a_stale_claim_rolls_its_batch_back_and_each_job_runs_again_alone(
    start_worker: StartWorker,
    client: QueueClient,
    table: sql.Identifier,
    connect: Callable[..., psycopg.Connection[Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = connect(autocommit=True)
    runs: dict[int, int] = {}
    lock = threading.Lock()

    def handler(job: Job, cursor: Any) -> None:
        with lock:
            runs[job.id] = runs.get(job.id, 0) + 1
        insert(cursor, table, job)
        if job.payload.get("stolen") and runs[job.id] == 1:
            # Another worker holds this job now, as after an expiry and a new claim.
            other.execute(
                "UPDATE postkit_queue.jobs SET claim_token = gen_random_uuid() WHERE id = %s",
                (job.id,),
            )

    handlers = Handlers()
    handlers.add(Q, handler, transactional=True, batch=50)
    first = client.push_batch(Q, [{} for _ in range(20)])
    stolen = client.push(Q, {"stolen": True})
    rest = client.push_batch(Q, [{} for _ in range(20)])
    with caplog.at_level("WARNING", logger="postkit.worker"):
        worker = start_worker(handlers, concurrency=1)
        wait_until(
            lambda: worker.stats.completed == 40 and worker.stats.stale == 1,
            "40 jobs acked and the stolen one's ack found stale",
            30,
        )
    rows = written(client, table)
    # The stolen job's writes rolled back with its stale ack; every other job's committed once.
    assert sorted(rows) == sorted(first + rest)
    assert stolen is not None and client.get_job(stolen) is not None
    assert runs[stolen] == 2
    assert any("rolled back (a claim went stale)" in r.getMessage() for r in caplog.records)
