"""Flow control (flow.sql): each limit a queue's claims obey, across every connection.

The claims of a flow-controlled queue take turns on its flow_state row. The tests force every
interleaving they depend on: concurrent pullers start together at a ``threading.Barrier``, each
on a connection of its own; a claim that must wait for another's turn is first seen blocked by
it in ``pg_blocking_pids``; a statement that must not wait runs under a ``lock_timeout``. Time
passes on the queue's clock (the session's ``postkit_queue.clock_offset``), never by sleeping,
except where a claimer holds its jobs for a moment on purpose so that claims overlap.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import Job, QueueClient
from postkit.queue.admin import enable_tenant_isolation
from tests import signals
from tests.queue.conftest import (
    BLOCK_TIMEOUT,
    WaitUntilBlocked,
    backend_pid,
    commit,
    forbid_waiting,
    rollback,
)
from tests.roles import MakeLogin, login_maker

Q = "limited"
MakeClient = Callable[..., QueueClient]
Shift = Callable[[QueueClient, float], None]
HOLD = 0.01
"""Seconds a concurrent claimer keeps its jobs before settling them, so that claims overlap."""
RUN_FOR = 30.0
"""Seconds concurrent claimers go on at most: one that fails leaves the others no end."""


@pytest.fixture
def client(make_client: MakeClient) -> QueueClient:
    """An autocommit client: each call commits at once."""
    return make_client(autocommit=True)


def running(client: QueueClient, queue: str = Q) -> int:
    """The queue's running jobs, as the client's transaction sees them."""
    row = client.cursor.execute(
        "SELECT count(*) FROM postkit_queue.jobs"
        " WHERE namespace = %s AND queue = %s AND state = 'running'",
        (client.namespace, queue),
    ).fetchone()
    assert row is not None
    return int(row[0])


def running_per_key(client: QueueClient, queue: str = Q) -> dict[str, int]:
    rows = client.cursor.execute(
        "SELECT group_key, count(*) FROM postkit_queue.jobs"
        " WHERE namespace = %s AND queue = %s AND state = 'running' AND group_key IS NOT NULL"
        " GROUP BY group_key",
        (client.namespace, queue),
    ).fetchall()
    return {key: int(count) for key, count in rows}


def next_run_at(client: QueueClient, queue: str = Q) -> datetime | None:
    row = client.cursor.execute(
        "SELECT postkit_queue.next_run_at(%s, ARRAY[%s])", (client.namespace, queue)
    ).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def push_keyed(client: QueueClient, keys: list[str | None], queue: str = Q) -> list[int]:
    """One job per entry, in order, each with that group key; payload ``{"n": index}``."""
    ids = []
    for n, key in enumerate(keys):
        job_id = client.push(queue, {"n": n}, group_key=key)
        assert job_id is not None
        ids.append(job_id)
    return ids


def ids(jobs: list[Job]) -> list[int]:
    return sorted(job.id for job in jobs)


# --------------------------------------------------------------------------------------------
# Global concurrency: counted from the running rows, at each claim's turn.
# --------------------------------------------------------------------------------------------


def test_concurrent_pullers_never_run_more_than_the_limit(
    make_client: MakeClient, monitor: psycopg.Connection, executor: ThreadPoolExecutor
) -> None:
    limit, pullers, job_count = 3, 8, 48
    owner = make_client(autocommit=True)
    owner.configure_queue(Q, concurrency=limit)
    pushed = owner.push_batch(Q, [{"n": n} for n in range(job_count)])
    clients = [make_client() for _ in range(pullers)]
    start = threading.Barrier(pullers + 1, timeout=BLOCK_TIMEOUT)
    settled = Counter[str]()
    settled_lock = threading.Lock()

    def work(client: QueueClient) -> tuple[list[int], list[int]]:
        claimed: list[int] = []
        observed: list[int] = []
        start.wait()
        deadline = time.monotonic() + RUN_FOR
        while time.monotonic() < deadline:
            with settled_lock:
                if settled["done"] == job_count:
                    return claimed, observed
            jobs = client.pull_batch(Q, limit=2)
            # Still in the claim's transaction, after its turn: every earlier claim is
            # committed, so this count is exact, and it includes this claim's own jobs.
            observed.append(running(client))
            commit(client)
            if not jobs:
                continue
            claimed += [job.id for job in jobs]
            time.sleep(HOLD)  # the jobs run for a moment, so that claims overlap
            assert client.ack_many(jobs) == [job.id for job in jobs]
            commit(client)
            with settled_lock:
                settled["done"] += len(jobs)
        return claimed, observed

    futures = [executor.submit(work, c) for c in clients]
    start.wait()
    samples = []
    while not all(f.done() for f in futures):
        samples.append(running(owner))
    results = [f.result(timeout=60) for f in futures]

    claimed = [job_id for mine, _ in results for job_id in mine]
    observed = [count for _, seen in results for count in seen]
    assert sorted(claimed) == sorted(pushed), "every job is claimed exactly once"
    assert max(observed) <= limit, f"a claimer saw {max(observed)} running after its turn"
    assert max(samples) <= limit, f"the monitor saw {max(samples)} running"
    assert max(observed) == limit, "the pullers never filled the limit: the test proves nothing"


def test_a_claim_waits_for_the_turn_before_it_and_counts_that_turns_claims(
    make_client: MakeClient, wait_until_blocked: WaitUntilBlocked, executor: ThreadPoolExecutor
) -> None:
    first, second = make_client(), make_client()
    first.configure_queue(Q, concurrency=1)
    first.push(Q, {"n": 1})
    first.push(Q, {"n": 2})
    commit(first)

    assert first.pull(Q) is not None  # its transaction stays open, holding the turn
    waiting = executor.submit(second.pull, Q)
    wait_until_blocked(second, first, waiting)
    commit(first)

    assert waiting.result(timeout=BLOCK_TIMEOUT) is None, "the first claim holds the only slot"
    commit(second)


def test_a_limit_set_while_claims_without_one_are_in_flight_counts_them(
    make_client: MakeClient, wait_until_blocked: WaitUntilBlocked, executor: ThreadPoolExecutor
) -> None:
    """The limit waits for the claims made without it, and the claims after the limit wait
    for it: whatever order the commits come in, a claim under the limit counts every job
    running, whatever limit (or none) it was claimed under."""
    unlimited, operator, limited = make_client(), make_client(), make_client()
    for n in range(6):
        unlimited.push(Q, {"n": n})
    commit(unlimited)
    assert len(unlimited.pull_batch(Q, worker_id="w", limit=3)) == 3  # not committed yet

    setting = executor.submit(operator.configure_queue, Q, concurrency=1)
    wait_until_blocked(operator, unlimited, setting)
    claiming = executor.submit(limited.pull, Q)
    wait_until_blocked(limited, operator, claiming)
    commit(unlimited)
    assert setting.result(timeout=BLOCK_TIMEOUT).concurrency == 1
    commit(operator)

    assert claiming.result(timeout=BLOCK_TIMEOUT) is None, "three run already, the limit is one"
    commit(limited)
    assert running(limited) == 3


def test_a_claim_that_rolls_back_leaves_its_slot_to_the_turn_after_it(
    make_client: MakeClient, wait_until_blocked: WaitUntilBlocked, executor: ThreadPoolExecutor
) -> None:
    first, second = make_client(), make_client()
    first.configure_queue(Q, concurrency=1)
    job_id = first.push(Q, {"n": 1})
    commit(first)

    assert first.pull(Q) is not None
    waiting = executor.submit(second.pull, Q)
    wait_until_blocked(second, first, waiting)
    rollback(first)

    taken = waiting.result(timeout=BLOCK_TIMEOUT)
    assert taken is not None and (taken.id, taken.attempts) == (job_id, 1)
    commit(second)


def test_pull_any_takes_its_limited_queues_turns_in_one_order_and_never_deadlocks(
    make_client: MakeClient, wait_until_blocked: WaitUntilBlocked, executor: ThreadPoolExecutor
) -> None:
    """pull_any lists its queues in the caller's order, but takes the turns of the limited
    ones in one order of its own (by name) before it claims: it never holds one turn while it
    waits for another, which two callers listing the queues in opposite orders would."""
    holder, other = make_client(), make_client()
    for name in ("a", "b"):
        holder.configure_queue(name, concurrency=5)
        holder.push(name, {"queue": name})
    commit(holder)
    forbid_waiting(holder)

    assert holder.pull("a") is not None  # its transaction stays open, holding a's turn
    waiting = executor.submit(other.pull_any, ["b", "a"], limit=2)
    wait_until_blocked(other, holder, waiting)
    # The waiting pull_any holds no turn of b: the holder claims from b without waiting (a wait
    # would end in LockNotAvailable, or the deadlock error).
    assert holder.pull("b") is not None
    commit(holder)

    assert waiting.result(timeout=BLOCK_TIMEOUT) == [], "both queues' jobs are taken"
    commit(other)


@pytest.mark.parametrize("settle", ["ack", "nack", "fail", "release"])
def test_a_slot_frees_when_its_job_is_settled(client: QueueClient, settle: str) -> None:
    client.configure_queue(Q, concurrency=1)
    push_keyed(client, [None, None])
    held = client.pull(Q)
    assert held is not None
    assert client.pull(Q) is None, "the only slot is taken"

    if settle == "nack":
        assert client.nack(held, error="again", backoff=0)
    elif settle == "fail":
        assert client.fail(held, error="no")
    else:
        assert getattr(client, settle)(held)

    assert client.pull(Q) is not None, f"{settle} freed the slot"
    assert client.pull(Q) is None, "and only that one"


def test_an_expired_claim_holds_its_slot_until_tick_timeouts_rescues_it(
    client: QueueClient, make_client: MakeClient, shift_clock: Shift
) -> None:
    client.configure_queue(Q, concurrency=1)
    first, second = push_keyed(client, [None, None])
    held = client.pull(Q, visibility_timeout=30)
    assert held is not None and held.id == first
    later = make_client(autocommit=True)
    shift_clock(later, 31)

    assert later.pull(Q) is None, "an expired claim still runs until it is rescued"
    assert later.tick_timeouts() == 1

    taken = later.pull(Q)
    assert taken is not None and taken.id in (first, second)
    assert later.pull(Q) is None
    assert client.ack(held) is False, "the rescued claim is stale"


# --------------------------------------------------------------------------------------------
# Rate limits: a sliding log of claims in the flow_state row.
# --------------------------------------------------------------------------------------------


def test_claims_in_any_window_of_the_period_never_exceed_the_rate(
    client: QueueClient, shift_clock: Shift
) -> None:
    client.configure_queue(Q, rate=(3, 60))
    client.push_batch(Q, [{"n": n} for n in range(30)])
    per_pull = []
    claimed_at: list[datetime] = []
    for offset in range(0, 300, 7):  # a claim of up to two jobs every 7 s of the queue's clock
        shift_clock(client, offset)
        jobs = client.pull_batch(Q, limit=2)
        per_pull.append((offset, len(jobs)))
        claimed_at += [job.claimed_at for job in jobs if job.claimed_at is not None]

    period = timedelta(seconds=60)
    for end in claimed_at:
        window = [at for at in claimed_at if end - period < at <= end]
        assert len(window) <= 3, f"{len(window)} claims in the 60 s up to {end}"
    # A sliding window, not a fixed one: two claims at 0 s and one at 7 s; at 63 s only the two
    # of 0 s have left the window, at 70 s the one of 7 s.
    assert [pull for pull in per_pull if pull[1]] == [
        (0, 2), (7, 1), (63, 2), (70, 1), (126, 2), (133, 1),
        (189, 2), (196, 1), (252, 2), (259, 1),
    ]  # fmt: skip


def test_concurrent_pullers_claim_no_more_than_the_rate_together(
    make_client: MakeClient, executor: ThreadPoolExecutor
) -> None:
    pullers, rate = 8, 5
    owner = make_client(autocommit=True)
    owner.configure_queue(Q, rate=(rate, 3600))  # one window spans the whole test
    owner.push_batch(Q, [{"n": n} for n in range(40)])
    clients = [make_client(autocommit=True) for _ in range(pullers)]
    start = threading.Barrier(pullers, timeout=BLOCK_TIMEOUT)

    def work(client: QueueClient) -> list[int]:
        start.wait()
        claimed = []
        for _ in range(5):
            claimed += [job.id for job in client.pull_batch(Q, limit=3)]
        return claimed

    results = [f.result(timeout=60) for f in [executor.submit(work, c) for c in clients]]
    claimed = [job_id for mine in results for job_id in mine]
    assert len(claimed) == len(set(claimed)) == rate


def test_a_rate_limited_queue_falls_due_when_its_next_slot_opens(
    client: QueueClient, shift_clock: Shift
) -> None:
    client.configure_queue(Q, rate=(2, 60))
    client.push_batch(Q, [{"n": n} for n in range(5)])
    first = client.pull(Q)
    shift_clock(client, 10)
    second = client.pull(Q)
    shift_clock(client, 20)
    assert first is not None and second is not None and first.claimed_at and second.claimed_at
    assert client.pull(Q) is None, "two claims in 60 s"

    slot = first.claimed_at + timedelta(seconds=60)
    assert next_run_at(client) == slot, "ready jobs fall due when the first claim leaves"
    (stats,) = client.stats(Q)
    assert stats.rate_limited_until == slot
    assert stats.pending == 3

    shift_clock(client, 61)
    assert next_run_at(client) is not None and next_run_at(client) <= client.clock()
    assert client.pull(Q) is not None
    assert next_run_at(client) == second.claimed_at + timedelta(seconds=60)
    (stats,) = client.stats(Q)
    assert stats.rate_limited_until == second.claimed_at + timedelta(seconds=60)


def test_a_queue_with_a_concurrency_and_a_rate_limit_falls_due_at_its_next_rate_slot(
    client: QueueClient, shift_clock: Shift
) -> None:
    """Room under the concurrency limit, none under the rate: the ready jobs fall due when the
    rate's next slot opens, not never (a waiting worker would sleep until its fallback poll)."""
    client.configure_queue(Q, concurrency=10, rate=(2, 60))
    client.push_batch(Q, [{"n": n} for n in range(5)])
    first, _ = client.pull_batch(Q, limit=5)
    assert first.claimed_at is not None

    assert next_run_at(client) == first.claimed_at + timedelta(seconds=60)


def test_a_rate_slot_that_opened_before_the_look_keeps_the_ready_jobs_due_until_a_claim(
    client: QueueClient, shift_clock: Shift
) -> None:
    """No notification comes when a rate slot opens: a worker whose wait ended a moment before
    the slot looks again after it, and must find the ready jobs due, not sleep until its
    fallback poll."""
    client.configure_queue(Q, concurrency=10, rate=(2, 60))
    client.push_batch(Q, [{"n": n} for n in range(5)])
    assert len(client.pull_batch(Q, limit=5)) == 2
    shift_clock(client, 61)
    due = next_run_at(client)
    assert due is not None and due <= client.clock(), "the slot opened: the ready jobs are due"

    second = client.pull_batch(Q, limit=5)
    assert len(second) == 2 and second[0].claimed_at is not None
    assert next_run_at(client) == second[0].claimed_at + timedelta(seconds=60)


def test_a_rate_slot_that_opens_while_the_concurrency_limit_is_reached_costs_one_claim(
    client: QueueClient, shift_clock: Shift
) -> None:
    """Due at the slot, as the concurrency limit may have room; once a claim found none, only
    a freed slot's notification wakes the workers: they do not ask again and again."""
    client.configure_queue(Q, concurrency=2, rate=(2, 60))
    client.push_batch(Q, [{"n": n} for n in range(5)])
    assert len(client.pull_batch(Q, limit=5)) == 2
    shift_clock(client, 61)
    due = next_run_at(client)
    assert due is not None and due <= client.clock()

    assert client.pull_batch(Q, limit=5) == []
    assert next_run_at(client) is None


def test_a_queue_at_its_concurrency_limit_leaves_its_ready_jobs_out_of_next_run_at(
    client: QueueClient,
) -> None:
    """A waiting worker told that held-back jobs are due would ask again at once, and again:
    while the limit is reached only jobs still to fall due count, and a slot that frees
    notifies the waiting workers (record_outcomes)."""
    client.configure_queue(Q, concurrency=1)
    push_keyed(client, [None, None])
    assert client.pull(Q) is not None
    assert next_run_at(client) is None

    later = client.push(Q, {"later": True}, delay=30)
    delayed = client.get_job(later or 0)
    assert delayed is not None
    assert next_run_at(client) == delayed.run_at


# --------------------------------------------------------------------------------------------
# Group limits: group_concurrency and group_ordered, per group_key.
# --------------------------------------------------------------------------------------------


def test_group_concurrency_limits_each_key_and_leaves_jobs_without_a_key_alone(
    client: QueueClient,
) -> None:
    client.configure_queue(Q, group_concurrency=2)
    a1, a2, a3, b1, b2, _, n1, n2 = push_keyed(client, ["a", "a", "a", "b", "b", "b", None, None])

    claimed = client.pull_batch(Q, limit=100)
    assert ids(claimed) == [a1, a2, b1, b2, n1, n2]
    assert client.pull_batch(Q, limit=100) == []

    (a_job,) = [job for job in claimed if job.id == a1]
    assert client.ack(a_job)
    assert ids(client.pull_batch(Q, limit=100)) == [a3]
    assert running_per_key(client) == {"a": 2, "b": 2}


def test_concurrent_pullers_run_an_ordered_queues_keys_one_job_at_a_time_in_push_order(
    make_client: MakeClient, monitor: psycopg.Connection, executor: ThreadPoolExecutor
) -> None:
    pullers, keys, per_key = 6, 5, 8
    owner = make_client(autocommit=True)
    owner.configure_queue(Q, group_ordered=True)
    order = [f"user-{k}" for _ in range(per_key) for k in range(keys)]
    pushed = dict(zip(push_keyed(owner, list(order)), order, strict=True))
    unkeyed = set(push_keyed(owner, [None] * 6))
    clients = [make_client() for _ in range(pullers)]
    start = threading.Barrier(pullers, timeout=BLOCK_TIMEOUT)
    turns: list[int] = []  # every claimed id, in the order of the claims' turns
    turns_lock = threading.Lock()
    total = len(pushed) + len(unkeyed)

    def work(client: QueueClient) -> list[dict[str, int]]:
        observed = []
        start.wait()
        deadline = time.monotonic() + RUN_FOR
        while time.monotonic() < deadline:
            with turns_lock:
                if len(turns) == total:
                    return observed
            jobs = client.pull_batch(Q, limit=3)
            # Still holding the turn: every other claim is committed, the count is exact.
            observed.append(running_per_key(client))
            with turns_lock:
                turns.extend(job.id for job in sorted(jobs, key=lambda job: job.id))
            commit(client)
            if jobs:
                time.sleep(HOLD)  # the jobs run for a moment, so that claims overlap
                client.ack_many(jobs)
                commit(client)
        return observed

    observed = [
        seen for f in [executor.submit(work, c) for c in clients] for seen in f.result(timeout=60)
    ]

    assert sorted(turns) == sorted([*pushed, *unkeyed]), "every job is claimed exactly once"
    assert max(count for seen in observed for count in seen.values()) == 1
    for key in set(order):
        claimed = [job_id for job_id in turns if pushed.get(job_id) == key]
        assert claimed == sorted(claimed), f"{key}'s jobs ran out of push order: {claimed}"


def test_jobs_of_one_key_pushed_by_transactions_that_commit_out_of_order_run_one_at_a_time(
    make_client: MakeClient, client: QueueClient
) -> None:
    """The first push's id is lower, but the second push commits first and its job is claimed
    before the first one's exists to anyone. Once it does, it still waits for the running job
    of its key: one job of a key at a time, whatever the commit order."""
    client.configure_queue(Q, group_ordered=True)
    early, late = make_client(), make_client()
    first = early.push(Q, {"n": 1}, group_key="k")
    second = late.push(Q, {"n": 2}, group_key="k")
    assert first is not None and second is not None and first < second
    commit(late)

    running_job = client.pull(Q)
    assert running_job is not None and running_job.id == second
    commit(early)

    assert client.pull(Q) is None, "the key's job that runs holds the other back"
    assert client.ack(running_job)
    taken = client.pull(Q)
    assert taken is not None and taken.id == first


def test_a_retried_ordered_job_blocks_its_key_until_it_completes(
    client: QueueClient, shift_clock: Shift
) -> None:
    client.configure_queue(Q, group_ordered=True)
    k1, k2, other = push_keyed(client, ["k", "k", "other"])
    claimed = client.pull_batch(Q, limit=10)
    assert ids(claimed) == [k1, other]
    (first,) = [job for job in claimed if job.id == k1]

    assert client.nack(first, error="again", backoff=60)
    assert client.pull_batch(Q, limit=10) == [], "k2 is ready, but k1 is its key's oldest"
    shift_clock(client, 61)
    retried = client.pull_batch(Q, limit=10)
    assert [(job.id, job.attempts) for job in retried] == [(k1, 2)]
    assert client.pull_batch(Q, limit=10) == []

    assert client.ack(retried[0])
    assert ids(client.pull_batch(Q, limit=10)) == [k2]


@pytest.mark.parametrize("how", ["fail", "last attempt nacked"])
def test_a_dead_ordered_job_releases_its_key(client: QueueClient, how: str) -> None:
    client.configure_queue(Q, group_ordered=True, max_attempts=1)
    k1, k2 = push_keyed(client, ["k", "k"])
    first = client.pull(Q)
    assert first is not None and first.id == k1

    if how == "fail":
        assert client.fail(first, error="no")
    else:
        assert client.nack(first, error="no") and client.get_job(k1).state == "dead"  # type: ignore[union-attr]

    taken = client.pull(Q)
    assert taken is not None and taken.id == k2


def test_a_redriven_ordered_job_keeps_its_key_and_waits_for_the_job_that_runs(
    client: QueueClient,
) -> None:
    client.configure_queue(Q, group_ordered=True)
    k1, k2 = push_keyed(client, ["k", "k"])
    first = client.pull(Q)
    assert first is not None and first.id == k1 and client.fail(first, error="no")
    second = client.pull(Q)
    assert second is not None and second.id == k2

    (redriven,) = client.redrive([k1])
    assert redriven.new_job_id is not None
    again = client.get_job(redriven.new_job_id)
    assert again is not None and again.group_key == "k"
    assert client.pull(Q) is None, "k2 runs"
    assert client.ack(second)
    taken = client.pull(Q)
    assert taken is not None and taken.id == redriven.new_job_id


def test_a_rescued_ordered_job_keeps_its_place_in_its_key(
    client: QueueClient, make_client: MakeClient, shift_clock: Shift
) -> None:
    client.configure_queue(Q, group_ordered=True)
    k1, k2, k3 = push_keyed(client, ["k", "k", "k"])
    crashed = client.pull(Q, visibility_timeout=30)
    assert crashed is not None and crashed.id == k1
    later = make_client(autocommit=True)
    shift_clock(later, 31)

    assert later.tick_timeouts() == 1
    redelivered = later.pull_batch(Q, limit=10)
    assert [(job.id, job.attempts) for job in redelivered] == [(k1, 2)]
    assert later.ack(redelivered[0])
    assert ids(later.pull_batch(Q, limit=10)) == [k2]
    assert later.pull_batch(Q, limit=10) == [], f"{k3} waits for {k2}"


def test_jobs_without_a_key_ignore_the_group_limits(client: QueueClient) -> None:
    client.configure_queue(Q, group_ordered=True)
    keyed = push_keyed(client, ["k", "k"])
    plain = push_keyed(client, [None] * 5)

    assert ids(client.pull_batch(Q, limit=100)) == sorted([keyed[0], *plain])


def test_push_batch_keeps_payload_order_within_each_key(client: QueueClient) -> None:
    client.configure_queue(Q, group_ordered=True)
    keys = ["a", "b", "a", None, "b", "a"]
    pushed = client.push_batch(Q, [{"n": n} for n in range(len(keys))], group_keys=keys)
    assert [client.get_job(job_id).group_key for job_id in pushed] == keys  # type: ignore[union-attr]

    ran: list[tuple[str | None, int]] = []
    while jobs := client.pull_batch(Q, limit=100):
        ran += [(job.group_key, job.payload["n"]) for job in jobs]
        assert client.ack_many(jobs) == [job.id for job in jobs]
    for key in ("a", "b"):
        assert [n for k, n in ran if k == key] == [n for n, k in enumerate(keys) if k == key]


def test_push_batch_pairs_each_group_key_with_its_payload_when_unique_keys_skip_some(
    client: QueueClient,
) -> None:
    first, duplicate, third = client.push_batch(
        Q, [{"n": 0}, {"n": 1}, {"n": 2}], unique_keys=["u", "u", None], group_keys=["a", "b", "c"]
    )
    assert duplicate is None and first is not None and third is not None
    assert [client.get_job(job_id).group_key for job_id in (first, third)] == ["a", "c"]  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------
# Configuring the limits.
# --------------------------------------------------------------------------------------------

FLOW = errors.InvalidFlowControlError
DURATION = errors.InvalidDurationError  # a rate's period is a duration, checked as every one is
BAD_LIMITS: dict[str, tuple[dict[str, Any], type[errors.ValidationError]]] = {
    "concurrency 0": ({"concurrency": 0}, FLOW),
    "concurrency past 100000": ({"concurrency": 100_001}, FLOW),
    "concurrency not an integer": ({"concurrency": "3"}, FLOW),
    "rate of 0 claims": ({"rate": (0, 1)}, FLOW),
    "rate past 100000 claims": ({"rate": (100_001, 1)}, FLOW),
    "rate without a period": ({"rate": (5,)}, FLOW),
    "rate not a pair": ({"rate": 5}, FLOW),
    "rate period 0": ({"rate": (1, 0)}, DURATION),
    "rate period past a day": ({"rate": (1, 86_401)}, DURATION),
    "group_concurrency 0": ({"group_concurrency": 0}, FLOW),
    "group_concurrency past 10000": ({"group_concurrency": 10_001}, FLOW),
    "ordered with group_concurrency 2": ({"group_ordered": True, "group_concurrency": 2}, FLOW),
    "group_ordered not a bool": ({"group_ordered": "yes"}, FLOW),
}


@pytest.mark.parametrize(("limits", "error"), BAD_LIMITS.values(), ids=BAD_LIMITS.keys())
def test_the_sdk_refuses_a_bad_limit_before_sending_any_sql(
    connect: Callable[..., psycopg.Connection],
    namespace: str,
    limits: dict[str, Any],
    error: type[errors.ValidationError],
) -> None:
    connection = connect()
    closed = QueueClient(connection.cursor(), namespace=namespace)
    connection.close()  # any statement sent would fail with a connection error instead

    with pytest.raises(error):
        closed.configure_queue(Q, **limits)


HAND_WRITTEN = {
    "a rate limit without its period": "p_rate_limit => 5",
    "a rate period without its limit": "p_rate_period => interval '1 second'",
    "concurrency 0": "p_concurrency => 0",
    "group_concurrency past 10000": "p_group_concurrency => 10001",
    "ordered with group_concurrency 2": "p_group_ordered => true, p_group_concurrency => 2",
}


@pytest.mark.parametrize("arguments", HAND_WRITTEN.values(), ids=HAND_WRITTEN.keys())
def test_hand_written_sql_gets_pkq17_for_a_bad_limit(client: QueueClient, arguments: str) -> None:
    with pytest.raises(psycopg.Error) as raised:
        client.cursor.execute(
            f"SELECT postkit_queue.configure_queue(p_namespace => %s, p_queue => %s, {arguments})",
            (client.namespace, Q),
        )
    assert raised.value.sqlstate == "PKQ17", raised.value
    assert client.queue_policy(Q).concurrency is None


def test_a_limit_only_the_database_can_see_is_bad_is_refused_by_it_as_the_same_error(
    client: QueueClient,
) -> None:
    """The SDK cannot know that the queue is ordered already; the SQL can, and says PKQ17."""
    client.configure_queue(Q, group_ordered=True)
    with pytest.raises(errors.InvalidFlowControlError, match="group_ordered"):
        client.configure_queue(Q, group_concurrency=2)
    policy = client.queue_policy(Q)
    assert (policy.group_ordered, policy.group_concurrency) == (True, None)


def test_configure_queue_keeps_the_limits_not_given_and_none_removes_one(
    client: QueueClient,
) -> None:
    policy = client.configure_queue(Q, concurrency=5, rate=(10, 2.5), group_concurrency=2)
    assert (policy.concurrency, policy.rate, policy.group_concurrency) == (5, (10, 2.5), 2)
    assert policy.group_ordered is False

    policy = client.configure_queue(Q, max_attempts=3)
    assert (policy.max_attempts, policy.concurrency, policy.rate) == (3, 5, (10, 2.5))
    assert policy.group_concurrency == 2

    policy = client.configure_queue(Q, group_concurrency=None, group_ordered=True)
    assert (policy.concurrency, policy.rate, policy.group_concurrency) == (5, (10, 2.5), None)
    assert policy.group_ordered is True

    policy = client.configure_queue(Q, concurrency=None, rate=None, group_ordered=False)
    assert (policy.concurrency, policy.rate, policy.group_concurrency) == (None, None, None)
    assert policy.group_ordered is False
    assert client.queue_policy(Q) == policy


def test_a_queue_whose_limits_are_removed_is_claimed_without_taking_turns(
    make_client: MakeClient,
) -> None:
    first, second = make_client(), make_client()
    first.configure_queue(Q, concurrency=1)
    first.configure_queue(Q, concurrency=None)
    push_keyed(first, [None, None])
    commit(first)
    forbid_waiting(second)

    assert first.pull(Q) is not None  # its transaction stays open
    assert second.pull(Q) is not None, "no turn to wait for, no limit to count"
    commit(second)
    commit(first)


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_a_limited_queue_is_claimed_only_under_read_committed(
    make_client: MakeClient, isolation: str
) -> None:
    client = make_client()
    client.configure_queue(Q, concurrency=2)
    client.push(Q, {})
    client.push("plain", {})
    commit(client)
    client.cursor.connection.isolation_level = getattr(
        psycopg.IsolationLevel, isolation.replace(" ", "_")
    )

    with pytest.raises(errors.FlowControlIsolationError):
        client.pull(Q)
    rollback(client)
    assert client.pull("plain") is not None, "a queue without limits is claimed as before"
    commit(client)


# --------------------------------------------------------------------------------------------
# Hostile callers and odd values.
# --------------------------------------------------------------------------------------------


@pytest.fixture
def make_login(database: str) -> Iterator[MakeLogin]:
    yield from login_maker(database)


def test_a_tenant_cannot_read_create_or_lock_another_namespaces_flow_state(
    database: str, make_login: MakeLogin
) -> None:
    owner_dsn = make_login("worker", ("tenant-b",))
    intruder_dsn = make_login("worker", ("tenant-a",))
    with psycopg.connect(database, autocommit=True) as admin:
        enable_tenant_isolation(admin.cursor())
        for namespace in ("tenant-a", "tenant-b"):
            setup = QueueClient(admin.cursor(), namespace=namespace)
            setup.configure_queue(Q, concurrency=1)
            setup.push_batch(Q, [{"secret": namespace}, {"secret": namespace}])
        admin.execute("DELETE FROM postkit_queue.flow_state WHERE namespace = 'tenant-b'")
    monitor = psycopg.connect(database, autocommit=True)
    intruder = QueueClient(psycopg.connect(intruder_dsn).cursor(), namespace="tenant-b")
    owner = QueueClient(psycopg.connect(owner_dsn).cursor(), namespace="tenant-b")
    other_owner = QueueClient(psycopg.connect(owner_dsn).cursor(), namespace="tenant-b")
    holder = QueueClient(psycopg.connect(database).cursor(), namespace="tenant-b")
    forbid_waiting(owner)
    try:
        # The intruder's pull of the other namespace's limited queue finds nothing, and its
        # transaction, left open, holds no turn of that queue: the settings row is hidden from
        # it, so its pull reads the defaults and never comes near flow_state. Its own
        # namespace's turn it does hold.
        assert intruder.pull(Q) is None
        mine = QueueClient(intruder.cursor, namespace="tenant-a").pull(Q)
        assert mine is not None and mine.payload == {"secret": "tenant-a"}

        # The owner's claim waits for nobody (a wait would end in LockNotAvailable), and it
        # makes the row its queue's claims take turns on.
        taken = owner.pull(Q)
        assert taken is not None and taken.payload == {"secret": "tenant-b"}
        assert monitor.execute("SELECT pg_blocking_pids(%s)", (backend_pid(owner),)).fetchone() == (
            [],
        )
        commit(owner)
        rows = monitor.execute(
            "SELECT namespace FROM postkit_queue.flow_state ORDER BY namespace"
        ).fetchall()
        assert rows == [("tenant-a",), ("tenant-b",)]

        # The control: a session that may see tenant-b's queue and holds its turn does block
        # the owner's workers, as pg_blocking_pids shows.
        assert holder.pull(Q) is None  # the only slot runs; the turn stays held
        with ThreadPoolExecutor(max_workers=1) as pool:
            waiting = pool.submit(other_owner.pull, Q)
            signals.wait_until_blocked(
                monitor, backend_pid(other_owner), backend_pid(holder), waiting, BLOCK_TIMEOUT
            )
            commit(holder)
            assert waiting.result(timeout=BLOCK_TIMEOUT) is None
        commit(other_owner)
        commit(intruder)

        for statement in (
            "SELECT * FROM postkit_queue.flow_state",
            "SELECT * FROM postkit_queue.flow_state WHERE namespace = 'tenant-b' FOR UPDATE",
            "INSERT INTO postkit_queue.flow_state (namespace, queue) VALUES ('tenant-b', 'x')",
            "SELECT postkit_queue.claim_limited('tenant-b', 'limited', 1, 1, NULL, NULL, NULL,"
            " false, false)",
            "SELECT postkit_queue.claim_fair('tenant-b', 'limited', 1, now(), NULL, 0, NULL,"
            " false)",
            "SELECT postkit_queue.rate_slot_at('tenant-b', 'limited', 1, '1 s', now())",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                intruder.cursor.execute(statement)
            rollback(intruder)
    finally:
        for client in (monitor, intruder, owner, other_owner, holder):
            (client if isinstance(client, psycopg.Connection) else client.cursor.connection).close()


ODD_KEYS = [
    "user 'o\"brien' %s {0} <b>&amp;",
    "\U0001f389 e\u0301",
    "e\u0301",  # not the same key as the precomposed one below
    "\u00e9",
    " padded ",
    "k" * 128,
    "; DROP TABLE postkit_queue.jobs; --",
]


def test_group_keys_of_odd_characters_each_form_their_own_group(client: QueueClient) -> None:
    client.configure_queue(Q, group_concurrency=1)
    for key in ODD_KEYS:  # twice each, through hand-written SQL
        for _ in range(2):
            client.cursor.execute(
                "SELECT postkit_queue.push(%s, %s, '{}', p_group_key => %s)",
                (client.namespace, Q, key),
            )

    claimed = client.pull_batch(Q, limit=100)
    assert sorted(job.group_key or "" for job in claimed) == sorted(ODD_KEYS)
    assert running_per_key(client) == dict.fromkeys(ODD_KEYS, 1)
    (stats,) = client.stats(Q)
    assert (stats.running, stats.pending) == (len(ODD_KEYS), len(ODD_KEYS))
    assert next_run_at(client) is None


@pytest.mark.parametrize(
    "change",
    [
        "rate_limit = 5, rate_period = interval '200000 years'",
        "rate_limit = 5, rate_period = interval '0'",
        "rate_limit = 5, rate_period = interval '-1 second'",
        "rate_limit = 5, rate_period = interval '1 day 1 second'",
        "rate_limit = 5, rate_period = NULL",
        "group_ordered = true, group_concurrency = 2",
        "concurrency = 0",
    ],
)
def test_the_settings_table_refuses_a_policy_the_api_would_refuse(
    client: QueueClient, change: str
) -> None:
    """Even the owner, writing the row by hand, cannot store a limit that would break a
    reader: a rate period of 200,000 years puts every window past the end of time."""
    client.configure_queue(Q, concurrency=2, rate=(5, 1))
    with pytest.raises(psycopg.errors.CheckViolation):
        client.cursor.execute(
            f"UPDATE postkit_queue.queue_settings SET {change} WHERE namespace = %s AND queue = %s",
            (client.namespace, Q),
        )


def test_readers_take_any_limits_the_settings_table_holds(client: QueueClient) -> None:
    """The extremes the table accepts, written by hand without the row claims take turns on:
    the claim makes that row, and every reader goes on."""
    client.configure_queue(Q, retain_dead=60)
    client.push_batch(Q, [{"n": n} for n in range(3)])
    client.cursor.execute(
        "UPDATE postkit_queue.queue_settings SET concurrency = 100000, rate_limit = 1,"
        " rate_period = interval '1 day', group_concurrency = 1, group_ordered = true"
        " WHERE namespace = %s AND queue = %s",
        (client.namespace, Q),
    )
    assert client.pull(Q) is not None
    assert client.pull(Q) is None
    (stats,) = client.stats(Q)
    assert stats.concurrency == 100_000 and stats.rate_limited_until is not None
    assert next_run_at(client) == stats.rate_limited_until
    policy = client.queue_policy(Q)
    assert (policy.rate, policy.group_concurrency, policy.group_ordered) == (
        (1, 86_400.0),
        1,
        True,
    )
