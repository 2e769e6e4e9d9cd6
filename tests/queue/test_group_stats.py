"""group_stats (fair.sql): each group key of a queue with live jobs, its pending, scheduled and
running jobs and its weight, a page at a time, with counts that stop at a cap."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from postkit.queue import QueueClient
from postkit.queue.records import GroupStats

Q = "reports"


@pytest.fixture
def client(make_client: Callable[..., QueueClient]) -> QueueClient:
    """An autocommit client: each call commits at once."""
    return make_client(autocommit=True)


def keys(rows: list[GroupStats]) -> list[str]:
    return [row.group_key for row in rows]


def test_each_key_shows_its_pending_scheduled_and_running_jobs_and_its_weight(
    client: QueueClient,
) -> None:
    client.push(Q, {"n": 0}, group_key="globex")
    client.push(Q, {"n": 1}, group_key="globex")
    client.push_batch(Q, [{}] * 3, group_keys=["acme"] * 3)
    client.push(Q, {"later": True}, group_key="acme", delay=60)
    client.push(Q, {"no": "key"})
    client.set_group_weight(Q, "acme", 3)
    claimed = client.pull(Q, worker_id="w")
    assert claimed is not None and claimed.group_key == "globex"

    assert client.group_stats(Q) == [
        GroupStats("acme", pending=3, scheduled=1, running=0, weight=3, counts_capped=False),
        GroupStats("globex", pending=1, scheduled=0, running=1, weight=1, counts_capped=False),
    ]


def test_the_keys_come_in_key_order_a_page_at_a_time(client: QueueClient) -> None:
    client.push_batch(Q, [{}] * 5, group_keys=["e", "c", "a", "d", "b"])

    first = client.group_stats(Q, limit=2)
    second = client.group_stats(Q, after=first[-1].group_key, limit=2)
    last = client.group_stats(Q, after=second[-1].group_key, limit=2)

    assert (keys(first), keys(second), keys(last)) == (["a", "b"], ["c", "d"], ["e"])


def test_counts_stop_at_the_cap_whatever_the_priorities_of_the_keys_jobs(
    client: QueueClient,
) -> None:
    for priority in (1, 0, -1):
        client.push_batch(Q, [{}] * 3, group_keys=["acme"] * 3, priority=priority)

    (capped,) = client.group_stats(Q, cap=4)
    (exact,) = client.group_stats(Q, cap=10)

    assert (capped.pending, capped.counts_capped) == (4, True)
    assert (exact.pending, exact.counts_capped) == (9, False)


def test_a_key_leaves_the_list_with_its_last_live_job(client: QueueClient) -> None:
    client.push(Q, {}, group_key="acme")
    job = client.pull(Q, worker_id="w")
    assert job is not None and keys(client.group_stats(Q)) == ["acme"]

    assert client.ack(job)

    assert client.group_stats(Q) == []


def test_a_queue_without_group_keys_lists_none(client: QueueClient) -> None:
    client.push(Q, {})

    assert client.group_stats(Q) == []
