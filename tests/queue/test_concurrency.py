"""Concurrency guarantees, on real connections and threads.

Every interleaving a test depends on is forced, not hoped for: threads start together at a
``threading.Barrier``, and a test that needs one transaction to wait on another first sees the
waiting backend blocked by the lock holder in ``pg_blocking_pids`` (a bounded wait that fails with
a clear message), then lets the holder finish. A statement that must not wait runs under a
``lock_timeout``, so waiting would fail the test instead of hanging it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg

from postkit.queue import QueueClient, install, installed_version, latest_version
from postkit.queue.records import Job
from tests.queue.conftest import commit, forbid_waiting, rollback
from tests.queue.legacy import install_legacy, legacy_files, push_in_every_state

T = TypeVar("T")

BLOCK_TIMEOUT = 10.0
"""How long a test waits to see a backend blocked, or a blocked call to finish, before failing."""


def push_committed(client: QueueClient, queue_name: str, count: int) -> list[int]:
    ids = []
    for n in range(count):
        job_id = client.push(queue_name, {"n": n})
        assert job_id is not None
        ids.append(job_id)
    commit(client)
    return ids


def claim_committed(client: QueueClient, queue_name: str, count: int, **kwargs: Any) -> list[Job]:
    jobs = []
    for _ in range(count):
        job = client.pull(queue_name, **kwargs)
        assert job is not None
        jobs.append(job)
    commit(client)
    return jobs


# --------------------------------------------------------------------------------------------
# Pull: SKIP LOCKED hands each job to exactly one puller, and pullers never wait on each other.
# --------------------------------------------------------------------------------------------


def test_concurrent_pullers_claim_every_job_exactly_once(
    make_client: Callable[[], QueueClient], executor: ThreadPoolExecutor
) -> None:
    workers, job_count = 8, 240
    producer = make_client()
    pushed = push_committed(producer, "emails", job_count)
    clients = [make_client() for _ in range(workers)]
    start = threading.Barrier(workers, timeout=BLOCK_TIMEOUT)
    all_holding = threading.Barrier(workers, timeout=BLOCK_TIMEOUT)

    def work(index: int) -> list[int]:
        client = clients[index]
        start.wait()
        # First, every puller claims a job and keeps its transaction open until all of them
        # hold one: eight uncommitted claims at once, none waiting on another's row lock (a
        # puller that waited would never reach the barrier, and the barrier would time out).
        first = client.pull("emails", worker_id=f"worker-{index}")
        all_holding.wait()
        assert first is not None, f"worker-{index} found no job while the others held theirs"
        commit(client)
        claimed = [first["id"]]
        while (job := client.pull("emails", worker_id=f"worker-{index}")) is not None:
            commit(client)
            claimed.append(job["id"])
        commit(client)
        return claimed

    results = [f.result(timeout=60) for f in [executor.submit(work, i) for i in range(workers)]]

    everything = [job_id for claimed in results for job_id in claimed]
    assert len(everything) == len(set(everything)), "a job was handed to two pullers"
    assert sorted(everything) == sorted(pushed), "some job was never claimed"
    # The database agrees: every job is running, claimed once, by the worker that reported it.
    for index, claimed in enumerate(results):
        for job_id in claimed:
            job = producer.get_job(job_id)
            assert job is not None
            assert (job["state"], job["attempts"], job["worker_id"]) == (
                "running",
                1,
                f"worker-{index}",
            )


def test_a_puller_skips_a_job_another_open_claim_holds(
    make_client: Callable[[], QueueClient],
) -> None:
    a, b = make_client(), make_client()
    first, second = push_committed(a, "emails", 2)
    forbid_waiting(b)

    held = a.pull("emails", worker_id="a")  # transaction left open: the row stays locked
    assert held is not None and held["id"] == first

    skipped_to = b.pull("emails", worker_id="b")
    assert skipped_to is not None and skipped_to["id"] == second
    commit(b)
    # Nothing else is ready while a still holds the first job.
    assert b.pull("emails", worker_id="b") is None
    commit(b)

    # Once a's claim rolls back, the job it held is ready again, never claimed.
    rollback(a)
    retaken = b.pull("emails", worker_id="b")
    assert retaken is not None
    assert (retaken["id"], retaken["attempts"]) == (first, 1)


def test_the_only_job_locked_by_an_open_claim_makes_another_pull_return_none_at_once(
    make_client: Callable[[], QueueClient],
) -> None:
    a, b = make_client(), make_client()
    (only,) = push_committed(a, "emails", 1)
    forbid_waiting(b)

    assert a.pull("emails", worker_id="a") is not None  # transaction left open

    assert b.pull("emails", worker_id="b") is None
    commit(b)

    commit(a)
    job = b.get_job(only)
    assert job is not None and (job["state"], job["worker_id"]) == ("running", "a")


# --------------------------------------------------------------------------------------------
# tick_timeouts: any number of tickers, each expired claim rescued once.
# --------------------------------------------------------------------------------------------


def test_concurrent_tickers_rescue_each_expired_job_exactly_once(
    make_client: Callable[[], QueueClient],
    shift_clock: Callable[[QueueClient, float], None],
    executor: ThreadPoolExecutor,
) -> None:
    tickers, job_count = 6, 60
    worker = make_client()
    pushed = push_committed(worker, "emails", job_count)
    claim_committed(worker, "emails", job_count, worker_id="crashed", visibility_timeout=30)
    clients = [make_client() for _ in range(tickers)]
    for client in clients:
        shift_clock(client, 31)
    start = threading.Barrier(tickers, timeout=BLOCK_TIMEOUT)

    def tick(client: QueueClient) -> int:
        start.wait()
        rescued = client.tick_timeouts()
        commit(client)
        return rescued

    counts = [f.result(timeout=60) for f in [executor.submit(tick, c) for c in clients]]

    assert sum(counts) == job_count, f"tickers rescued {counts}"
    for job_id in pushed:
        job = worker.get_job(job_id)
        assert job is not None
        assert (job["state"], job["attempts"]) == ("pending", 1)
        assert [entry["kind"] for entry in job["errors"]] == ["timeout"]


def test_a_ticker_skips_expired_jobs_another_open_tick_is_rescuing(
    make_client: Callable[[], QueueClient], shift_clock: Callable[[QueueClient, float], None]
) -> None:
    worker, first, second = make_client(), make_client(), make_client()
    push_committed(worker, "emails", 3)
    claim_committed(worker, "emails", 3, visibility_timeout=30)
    shift_clock(first, 31)
    shift_clock(second, 31)
    forbid_waiting(second)

    assert first.tick_timeouts() == 3  # transaction left open: the three rows stay locked
    assert second.tick_timeouts() == 0  # skips them instead of waiting
    commit(second)
    commit(first)
    assert second.tick_timeouts() == 0  # and once committed they are pending, not expired


# --------------------------------------------------------------------------------------------
# ack racing tick_timeouts: the row lock orders them, and the fence decides.
# --------------------------------------------------------------------------------------------


def test_an_ack_waits_for_an_open_tick_and_then_finds_its_claim_gone(
    make_client: Callable[[], QueueClient],
    shift_clock: Callable[[QueueClient, float], None],
    wait_until_blocked: Callable[..., None],
    executor: ThreadPoolExecutor,
) -> None:
    worker, ticker = make_client(), make_client()
    (job_id,) = push_committed(worker, "emails", 1)
    (job,) = claim_committed(worker, "emails", 1, worker_id="slow", visibility_timeout=30)
    shift_clock(ticker, 31)

    assert ticker.tick_timeouts() == 1  # transaction left open, holding the row lock
    acked = executor.submit(worker.ack, job)
    wait_until_blocked(worker, ticker, acked)
    commit(ticker)

    assert acked.result(timeout=BLOCK_TIMEOUT) is False
    commit(worker)
    rescued = worker.get_job(job_id)
    assert rescued is not None
    assert (rescued["state"], rescued["attempts"], rescued["claim_token"]) == ("pending", 1, None)
    assert [entry["kind"] for entry in rescued["errors"]] == ["timeout"]


def test_an_ack_waiting_on_a_tick_that_rolls_back_still_succeeds(
    make_client: Callable[[], QueueClient],
    shift_clock: Callable[[QueueClient, float], None],
    wait_until_blocked: Callable[..., None],
    executor: ThreadPoolExecutor,
) -> None:
    worker, ticker = make_client(), make_client()
    (job_id,) = push_committed(worker, "emails", 1)
    (job,) = claim_committed(worker, "emails", 1, worker_id="slow", visibility_timeout=30)
    shift_clock(ticker, 31)

    assert ticker.tick_timeouts() == 1
    acked = executor.submit(worker.ack, job)
    wait_until_blocked(worker, ticker, acked)
    rollback(ticker)

    assert acked.result(timeout=BLOCK_TIMEOUT) is True
    commit(worker)
    assert worker.get_job(job_id) is None


def test_a_tick_skips_a_job_an_open_ack_is_settling(
    make_client: Callable[[], QueueClient], shift_clock: Callable[[QueueClient, float], None]
) -> None:
    worker, ticker = make_client(), make_client()
    (job_id,) = push_committed(worker, "emails", 1)
    (job,) = claim_committed(worker, "emails", 1, worker_id="slow", visibility_timeout=30)
    shift_clock(ticker, 31)
    forbid_waiting(ticker)

    assert worker.ack(job) is True  # transaction left open: the deleted row stays locked
    assert ticker.tick_timeouts() == 0
    commit(ticker)
    commit(worker)

    assert ticker.get_job(job_id) is None
    assert ticker.tick_timeouts() == 0
    commit(ticker)


# --------------------------------------------------------------------------------------------
# push with a unique_key: the unique index arbitrates between concurrent transactions.
# --------------------------------------------------------------------------------------------


def test_concurrent_pushes_of_one_unique_key_create_one_job(
    make_client: Callable[[], QueueClient],
    monitor: psycopg.Connection,
    wait_until_blocked: Callable[..., None],
    executor: ThreadPoolExecutor,
) -> None:
    a, b = make_client(), make_client()

    first = a.push("emails", {"from": "a"}, unique_key="welcome-42")  # not committed yet
    assert first is not None
    second = executor.submit(b.push, "emails", {"from": "b"}, unique_key="welcome-42")
    wait_until_blocked(b, a, second)
    commit(a)

    assert second.result(timeout=BLOCK_TIMEOUT) is None
    commit(b)
    count = monitor.execute(
        "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s AND unique_key = %s",
        (a.namespace, "welcome-42"),
    ).fetchone()
    assert count == (1,)
    job = b.pull("emails")
    assert job is not None and (job["id"], job["payload"]) == (first, {"from": "a"})


def test_a_push_waiting_on_a_duplicate_that_rolls_back_creates_the_job(
    make_client: Callable[[], QueueClient],
    wait_until_blocked: Callable[..., None],
    executor: ThreadPoolExecutor,
) -> None:
    a, b = make_client(), make_client()

    assert a.push("emails", {"from": "a"}, unique_key="welcome-42") is not None
    second = executor.submit(b.push, "emails", {"from": "b"}, unique_key="welcome-42")
    wait_until_blocked(b, a, second)
    rollback(a)

    created = second.result(timeout=BLOCK_TIMEOUT)
    assert created is not None
    commit(b)
    job = a.pull("emails")
    assert job is not None and (job["id"], job["payload"]) == (created, {"from": "b"})
    assert a.pull("emails") is None


# --------------------------------------------------------------------------------------------
# install: concurrent installers queue up on an advisory lock.
# --------------------------------------------------------------------------------------------


def test_concurrent_installs_all_succeed_and_apply_each_migration_once(
    fresh_database: str, executor: ThreadPoolExecutor
) -> None:
    installers = 6
    connections = [psycopg.connect(fresh_database) for _ in range(installers)]
    start = threading.Barrier(installers, timeout=BLOCK_TIMEOUT)

    def run(connection: psycopg.Connection) -> tuple[int, ...]:
        start.wait()
        return install(connection).applied

    try:
        applied = [f.result(timeout=60) for f in [executor.submit(run, c) for c in connections]]
        with connections[0].cursor() as cursor:
            assert installed_version(cursor) == latest_version()
            cursor.execute("SELECT version FROM postkit_queue.migrations ORDER BY version")
            assert [row[0] for row in cursor.fetchall()] == list(range(1, latest_version() + 1))
    finally:
        for connection in connections:
            connection.close()

    # Exactly one installer applied the migrations; the others found them applied.
    assert sorted(applied) == [()] * (installers - 1) + [tuple(range(1, latest_version() + 1))]


def test_concurrent_upgrades_apply_each_version_once_and_keep_the_jobs(
    fresh_database: str, executor: ThreadPoolExecutor
) -> None:
    """Installers that find an older version queue up on its migrations table: one upgrades,
    the others find the newest version there."""
    older = len(legacy_files())
    with psycopg.connect(fresh_database) as connection:
        install_legacy(connection, older)
        jobs = push_in_every_state(connection)["jobs"]
    installers = 2
    connections = [psycopg.connect(fresh_database) for _ in range(installers)]
    start = threading.Barrier(installers, timeout=BLOCK_TIMEOUT)

    def run(connection: psycopg.Connection) -> tuple[int, ...]:
        start.wait()
        return install(connection).applied

    try:
        applied = [f.result(timeout=60) for f in [executor.submit(run, c) for c in connections]]
        cursor = connections[0].cursor()
        cursor.execute("SELECT version FROM postkit_queue.migrations ORDER BY version")
        assert [row[0] for row in cursor.fetchall()] == list(range(1, latest_version() + 1))
        client = QueueClient(cursor, namespace="app")
        assert all(client.get_job(job_id) is not None for job_id in jobs.values())
    finally:
        for connection in connections:
            connection.close()

    assert sorted(applied) == [(), tuple(range(older + 1, latest_version() + 1))]


def test_an_install_with_nothing_to_do_does_not_wait_for_the_queues_transactions(
    fresh_database: str,
) -> None:
    """Applications install at startup while others push: under tenant isolation too, an
    install of the version already there leaves the tables (and their policies) alone."""
    with psycopg.connect(fresh_database) as connection:
        install(connection)
        connection.execute("SELECT postkit_queue.enable_tenant_isolation()")
        connection.commit()
        policies = connection.execute("SELECT oid FROM pg_policy ORDER BY oid").fetchall()
    with (
        psycopg.connect(fresh_database) as holder,
        psycopg.connect(fresh_database) as installer,
    ):
        # A push left open: its transaction holds a lock on the jobs table until it ends.
        assert QueueClient(holder.cursor(), namespace="open").push("emails", {}) is not None
        installer.execute("SET lock_timeout = '2s'")
        installer.commit()

        assert install(installer).applied == ()

        assert installer.execute("SELECT oid FROM pg_policy ORDER BY oid").fetchall() == policies
        holder.rollback()
