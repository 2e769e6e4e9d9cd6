"""The dashboard's queue gauges: a QueueCollector over real ``stats()`` rows, registered in a
fresh registry, rendered by prometheus_client and parsed back."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from postkit.dashboard.metrics import QueueCollector
from postkit.queue import QueueClient
from postkit.queue.records import QueueStats
from tests.scrape import parse, value, values

Shift = Callable[[QueueClient, float], None]


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


def test_each_queue_has_its_jobs_by_state_its_oldest_pending_age_and_its_pause(
    client: QueueClient, namespace: str, shift_clock: Shift
) -> None:
    for _ in range(3):
        client.push("emails", {})
    client.push("emails", {}, delay=3600)
    running = client.pull("emails", worker_id="w")
    dead = client.pull("emails", worker_id="w")
    assert running is not None and dead is not None
    assert client.fail(dead, error="no")
    client.push("reports", {})
    client.pause_queue("reports")
    shift_clock(client, 60)  # the oldest ready job has waited a minute, by the queue's clock
    read: list[list[QueueStats]] = []

    def stats() -> list[tuple[str, list[QueueStats]]]:
        read.append(client.stats())
        return [(namespace, read[-1])]

    registry = CollectorRegistry()
    registry.register(QueueCollector(stats))
    assert read == [], "registering read the statistics"
    samples = parse(generate_latest(registry).decode())

    assert len(read) == 1, "one scrape, one read"
    emails = {"namespace": namespace, "queue": "emails"}
    reports = {"namespace": namespace, "queue": "reports"}
    assert values(samples, "postkit_queue_jobs", "state", **emails) == {
        "pending": 1,
        "scheduled": 1,
        "waiting": 0,
        "running": 1,
        "dead": 1,
        "cancelled": 0,
    }
    assert values(samples, "postkit_queue_jobs", "state", **reports) == {
        "pending": 1,
        "scheduled": 0,
        "waiting": 0,
        "running": 0,
        "dead": 0,
        "cancelled": 0,
    }
    (row,) = [row for row in read[0] if row.queue == "emails"]
    assert row.oldest_ready_age is not None
    age = value(samples, "postkit_queue_oldest_pending_age_seconds", **emails)
    assert age == row.oldest_ready_age.total_seconds()
    assert 60 <= age < 120
    assert value(samples, "postkit_queue_paused", **emails) == 0
    assert value(samples, "postkit_queue_paused", **reports) == 1
    assert value(samples, "postkit_queue_counts_capped", **emails) == 0


def test_a_queue_with_nothing_ready_reads_an_age_of_zero_and_capped_counts_say_so(
    client: QueueClient, namespace: str
) -> None:
    client.push("emails", {}, delay=3600)
    for _ in range(3):
        client.push("reports", {})

    registry = CollectorRegistry()
    registry.register(QueueCollector(lambda: [(namespace, client.stats(cap=2))]))
    samples = parse(generate_latest(registry).decode())

    emails = {"namespace": namespace, "queue": "emails"}
    reports = {"namespace": namespace, "queue": "reports"}
    assert value(samples, "postkit_queue_oldest_pending_age_seconds", **emails) == 0
    assert value(samples, "postkit_queue_jobs", state="pending", **reports) == 2
    assert value(samples, "postkit_queue_counts_capped", **reports) == 1


def test_two_namespaces_with_a_queue_of_the_same_name_are_two_series(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    cursor = connect(autocommit=True).cursor()
    names = [f"test-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    clients = [QueueClient(cursor, namespace=name) for name in names]
    for count, each in enumerate(clients, 1):
        for _ in range(count):
            each.push("emails", {})

    registry = CollectorRegistry()
    registry.register(QueueCollector(lambda: [(each.namespace, each.stats()) for each in clients]))
    samples = parse(generate_latest(registry).decode())

    assert values(samples, "postkit_queue_jobs", "namespace", queue="emails", state="pending") == {
        names[0]: 1,
        names[1]: 2,
    }


def test_a_failing_read_fails_the_scrape() -> None:
    def unreachable() -> list[tuple[str, list[QueueStats]]]:
        raise psycopg.OperationalError("connection refused")

    registry = CollectorRegistry()
    registry.register(QueueCollector(unreachable))

    with pytest.raises(psycopg.OperationalError, match="connection refused"):
        generate_latest(registry)


def test_a_queue_with_backpressure_has_its_max_pending_and_one_without_has_none(
    client: QueueClient, namespace: str
) -> None:
    client.configure_queue("imports", max_pending=500)
    client.push("emails", {})
    registry = CollectorRegistry()
    registry.register(QueueCollector(lambda: [(namespace, client.stats())]))

    samples = parse(generate_latest(registry).decode())

    assert value(samples, "postkit_queue_max_pending", namespace=namespace, queue="imports") == 500
    assert values(samples, "postkit_queue_max_pending", "queue", namespace=namespace) == {
        "imports": 500
    }
