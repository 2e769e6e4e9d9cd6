"""The queue on a real Citus cluster: placed by ``postkit install --citus``, each call run as
Citus runs it, alone (delegated to the namespace's node) and in a transaction block (planned
on the coordinator, each statement sent to the node).

These run only where ``POSTKIT_TEST_CITUS_WORKERS`` names a cluster's worker nodes and
``POSTKIT_TEST_DSN`` its coordinator (tests/on_citus.py); CI has no Citus and skips them.
docs/scaling.md says where they ran and what they found.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.queue import QueueClient, ResultListener, listen
from tests import on_citus

pytestmark = pytest.mark.skipif(not on_citus.ENABLED, reason="no Citus cluster named")

Q = "emails"

# Enough namespaces that, sharded by hash, they land on every worker node.
NAMESPACES = [f"tenant-{n}" for n in range(8)]


@pytest.fixture
def client_of(
    connect: Callable[..., psycopg.Connection[Any]],
) -> Callable[[str, bool], QueueClient]:
    def _client(namespace: str, alone: bool) -> QueueClient:
        return QueueClient(connect(autocommit=alone).cursor(), namespace=namespace)

    return _client


@pytest.fixture
def coordinator(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


def nodes_of(coordinator: psycopg.Connection[Any], namespaces: list[str]) -> set[int]:
    """The worker nodes (Citus's node ids) that hold these namespaces' jobs."""
    rows = coordinator.execute(
        "SELECT DISTINCT p.nodeid FROM unnest(%s::text[]) AS n(namespace), "
        "LATERAL get_shard_id_for_distribution_column('postkit_queue.jobs', n.namespace) s, "
        "pg_dist_placement pl JOIN pg_dist_node p ON p.groupid = pl.groupid "
        "WHERE pl.shardid = s",
        (namespaces,),
    ).fetchall()
    return {node for (node,) in rows}


def test_every_namespaced_table_is_sharded_by_namespace_beside_jobs(
    coordinator: psycopg.Connection[Any],
) -> None:
    placed = dict(
        coordinator.execute(
            "SELECT logicalrelid::text, partmethod::text || ':' || colocationid "
            "FROM pg_dist_partition "
            "WHERE logicalrelid::text LIKE 'postkit_queue.%'"
        ).fetchall()
    )
    jobs = placed["postkit_queue.jobs"]
    assert jobs.startswith("h:")
    for table in ("dead_letters", "job_results", "queue_settings", "flow_state", "schedules"):
        assert placed[f"postkit_queue.{table}"] == jobs, table
    for table in ("tenants", "migrations", "grants", "api", "channel_key"):
        assert placed[f"postkit_queue.{table}"].startswith("n:"), table


def test_the_namespaces_here_span_every_worker_node(coordinator: psycopg.Connection[Any]) -> None:
    assert len(nodes_of(coordinator, NAMESPACES)) == len(on_citus.WORKERS)


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "in-a-transaction"])
def test_each_namespace_pushes_pulls_and_acks_on_its_own_node(
    client_of: Callable[[str, bool], QueueClient], alone: bool
) -> None:
    for namespace in NAMESPACES:
        queue = client_of(namespace, alone)
        pushed = queue.push(Q, {"to": namespace})
        pushed_too = queue.push_batch(Q, [{"n": 1}, {"n": 2}])
        job = queue.pull(Q, worker_id="w1")
        assert job is not None and job.id == pushed and job.payload == {"to": namespace}
        assert queue.ack(job)
        rest = queue.pull_batch(Q, worker_id="w1", limit=10)
        assert sorted(j.id for j in rest) == sorted(pushed_too)
        assert queue.ack_many(rest) == [j.id for j in rest]
        if not alone:
            queue.cursor.connection.commit()
        assert queue.pull(Q) is None


def test_a_stale_workers_ack_changes_nothing(
    client_of: Callable[[str, bool], QueueClient], coordinator: psycopg.Connection[Any]
) -> None:
    first, second = client_of(NAMESPACES[0], True), client_of(NAMESPACES[0], True)
    first.push(Q, {})
    job = first.pull(Q, worker_id="slow", visibility_timeout=0.1)
    assert job is not None
    coordinator.execute("SELECT pg_sleep(0.2)")
    assert second.tick_timeouts() == 1
    again = second.pull(Q, worker_id="fast")
    assert again is not None and again.id == job.id

    assert not first.ack(job)
    assert second.ack(again)


def test_two_workers_never_claim_the_same_job(
    client_of: Callable[[str, bool], QueueClient],
) -> None:
    namespace = NAMESPACES[1]
    client_of(namespace, True).push_batch(Q, [{"n": n} for n in range(200)])
    claimed: list[list[int]] = [[], []]
    start = threading.Barrier(2)

    def drain(slot: int) -> None:
        queue = client_of(namespace, True)
        start.wait()
        while jobs := queue.pull_batch(Q, worker_id=f"w{slot}", limit=7):
            claimed[slot].extend(job.id for job in jobs)
            queue.ack_many(jobs)

    threads = [threading.Thread(target=drain, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(claimed[0]) + len(claimed[1]) == 200
    assert not set(claimed[0]) & set(claimed[1])


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "in-a-transaction"])
def test_a_push_wakes_the_listeners_on_the_coordinator(
    client_of: Callable[[str, bool], QueueClient],
    coordinator: psycopg.Connection[Any],
    dsn: str,
    alone: bool,
) -> None:
    namespace = NAMESPACES[2]
    with listen.WorkListener.connect(dsn, namespace, [Q]) as listener:
        producer = client_of(namespace, alone)
        producer.push(Q, {})
        if not alone:
            producer.cursor.connection.commit()

        notified = list(listener.connection.notifies(timeout=30, stop_after=1))

    channel = coordinator.execute("SELECT postkit_queue.channel(%s, %s)", (namespace, Q))
    assert [notify.channel for notify in notified] == [channel.fetchone()[0]]  # type: ignore[index]


def test_a_result_settled_on_a_worker_node_reaches_the_waiter_by_its_next_read(
    client_of: Callable[[str, bool], QueueClient], dsn: str
) -> None:
    """The ack is made alone, so Citus delegates it to a worker node, where it raises no
    notification: only the wait's periodic read finds the result before the timeout."""
    namespace = NAMESPACES[3]
    producer = client_of(namespace, True)
    producer.configure_queue(Q, retain_results=3600)
    job_id = producer.push(Q, {})

    def settle() -> None:
        worker = client_of(namespace, True)
        job = worker.pull(Q)
        assert job is not None
        assert worker.ack(job, result="done")

    timer = threading.Timer(0.3, settle)
    started = time.monotonic()
    timer.start()
    with ResultListener.connect(dsn, namespace) as waiter:
        result = waiter.wait_for_result(job_id, timeout=30)
    timer.join()

    assert (result.state, result.value) == ("completed", "done")
    assert time.monotonic() - started < 30, "found by a read before the timeout"


def test_the_owner_logs_in_for_the_statements_the_coordinator_sends(
    coordinator: psycopg.Connection[Any],
) -> None:
    row = coordinator.execute(
        "SELECT r.rolcanlogin FROM pg_roles r JOIN pg_namespace n ON n.nspowner = r.oid "
        "WHERE n.nspname = 'postkit_queue'"
    ).fetchone()
    assert row == (True,)


def test_install_citus_places_a_new_queue_and_says_how(fresh_database: str) -> None:
    placed = CliRunner().invoke(main, ["install", "--citus", "--dsn", fresh_database])

    assert placed.exit_code == 0, placed.output
    assert "distributed on Citus: " in placed.output
    assert "delegated to the node of their namespace" in placed.output
    with psycopg.connect(fresh_database) as connection:
        queue = QueueClient(connection.cursor(), namespace=NAMESPACES[4])
        job_id = queue.push(Q, {})
        job = queue.pull(Q)
        assert job is not None and job.id == job_id and queue.ack(job)
