"""The worker registry: a worker registers, heartbeats, deregisters; a silent one reads as lost
and is pruned; every argument is checked before anything is sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import QueueClient

Shift = Callable[[QueueClient, float], None]


def register(client: QueueClient, worker_id: str = "w1", **overrides: Any) -> None:
    options: dict[str, Any] = {
        "host": "host-a",
        "pid": 4242,
        "queues": ["emails", "sms"],
        "concurrency": 8,
        "version": "0.1.0",
        "heartbeat_interval": 5,
    }
    client.register_worker(worker_id, **{**options, **overrides})


def test_a_registered_worker_is_listed_with_what_it_serves(queue: QueueClient) -> None:
    register(queue)

    [worker] = queue.workers()

    assert (worker.worker_id, worker.kind, worker.host, worker.pid) == (
        "w1",
        "worker",
        "host-a",
        4242,
    )
    assert (worker.queues, worker.concurrency, worker.version) == (["emails", "sms"], 8, "0.1.0")
    assert worker.heartbeat_interval == 5.0
    assert worker.heartbeat_at == worker.started_at
    assert worker.lost is False


def test_a_ticker_registers_without_queues(queue: QueueClient) -> None:
    register(queue, "tick-1", kind="ticker", queues=[], concurrency=0)

    assert [(w.kind, w.queues, w.concurrency) for w in queue.workers()] == [("ticker", [], 0)]


def test_a_worker_whose_heartbeats_stop_reads_as_lost_after_three_intervals(
    queue: QueueClient, make_client: Callable[[], QueueClient], shift_clock: Shift
) -> None:
    register(queue, heartbeat_interval=5)
    queue.cursor.connection.commit()
    reader = make_client()

    shift_clock(reader, 14)
    assert [w.lost for w in reader.workers()] == [False]
    shift_clock(reader, 16)
    assert [w.lost for w in reader.workers()] == [True]

    shift_clock(queue, 16)
    assert queue.worker_heartbeat("w1") is True
    assert [w.lost for w in queue.workers()] == [False]


def test_a_clean_stop_deregisters_and_a_later_heartbeat_says_to_register_again(
    queue: QueueClient,
) -> None:
    register(queue)

    assert queue.deregister_worker("w1") is True
    assert queue.workers() == []
    assert queue.worker_heartbeat("w1") is False
    assert queue.deregister_worker("w1") is False


def test_registering_the_same_id_again_replaces_the_row(queue: QueueClient) -> None:
    register(queue, pid=1)
    register(queue, pid=2, queues=["emails"])

    assert [(w.pid, w.queues) for w in queue.workers()] == [(2, ["emails"])]


def test_prune_forgets_only_workers_silent_for_longer_than_the_retention(
    queue: QueueClient, shift_clock: Shift
) -> None:
    register(queue, "old")
    shift_clock(queue, 7200)
    register(queue, "new")

    assert queue.prune_workers(older_than=3600) == 1
    assert [w.worker_id for w in queue.workers()] == ["new"]


def test_prune_never_forgets_a_worker_that_is_not_lost_however_short_the_retention(
    queue: QueueClient, shift_clock: Shift
) -> None:
    register(queue, "slow", heartbeat_interval=600)
    shift_clock(queue, 1200)

    assert queue.prune_workers(older_than=0) == 0
    assert [(w.worker_id, w.lost) for w in queue.workers()] == [("slow", False)]
    shift_clock(queue, 1801)
    assert queue.prune_workers(older_than=0) == 1


def test_the_registry_of_one_namespace_is_not_another_s(queue: QueueClient) -> None:
    register(queue)
    other = QueueClient(queue.cursor, namespace=f"{queue.namespace}-other")

    assert other.workers() == []
    assert other.worker_heartbeat("w1") is False


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"kind": "daemon"}, errors.InvalidWorkerError),
        ({"pid": 0}, errors.InvalidWorkerError),
        ({"pid": 2**31}, errors.InvalidWorkerError),
        ({"concurrency": -1}, errors.InvalidWorkerError),
        ({"concurrency": True}, errors.InvalidWorkerError),
        ({"host": ""}, errors.InvalidNameError),
        ({"version": "0.1\n"}, errors.InvalidNameError),
        ({"queues": ["ok", " "]}, errors.InvalidNameError),
        ({"heartbeat_interval": 0}, errors.InvalidDurationError),
        ({"heartbeat_interval": 86401}, errors.InvalidDurationError),
    ],
)
def test_a_bad_registration_is_refused_before_anything_is_sent(
    queue: QueueClient, overrides: dict[str, Any], error: type[errors.PostkitError]
) -> None:
    with pytest.raises(error):
        register(queue, **overrides)
    # Nothing reached the database: the caller's transaction goes on.
    assert queue.workers() == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("'w', 'daemon', 'h', 1, '{}', 1, 'v', interval '5 s'", "kind"),
        ("'w', 'worker', 'h', 0, '{}', 1, 'v', interval '5 s'", "pid"),
        ("'w', 'worker', 'h', 1, '{}', 100001, 'v', interval '5 s'", "concurrency"),
        ("'w', 'worker', 'h', 1, '{}', 1, 'v', interval '0 s'", "heartbeat_interval"),
        ("'w', 'worker', 'h', 1, '{{a}}', 1, 'v', interval '5 s'", "queues"),
    ],
)
def test_the_sql_module_refuses_what_the_sdk_refuses(
    conn: psycopg.Connection, arguments: str, message: str
) -> None:
    with pytest.raises(psycopg.Error, match=message):
        conn.execute(f"SELECT postkit_queue.register_worker('ns', {arguments})")
