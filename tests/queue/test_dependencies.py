"""Jobs that wait for jobs (dependencies.sql): a child is waiting until every parent has
completed, becomes pending in the transaction of the last parent's ack, and is cancelled, with
its reason, when a parent is dead-lettered, cancelled or purged."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import QueueClient
from postkit.queue.records import Job
from tests.queue.conftest import WaitUntilBlocked, commit

Q = "steps"
OTHER = "others"


def pushed(client: QueueClient, queue: str = Q, **kwargs: Any) -> int:
    job_id = client.push(queue, {"n": 0}, **kwargs)
    assert job_id is not None
    return job_id


def claimed(client: QueueClient, job_id: int, queue: str = Q) -> Job:
    """Claim the queue's ready jobs until ``job_id`` comes; the others are released."""
    others = []
    try:
        while (job := client.pull(queue, worker_id="w")) is not None:
            if job.id == job_id:
                return job
            others.append(job)
        raise AssertionError(f"job {job_id} is not ready in {queue}")
    finally:
        for other in others:
            client.release(other)


def completed(client: QueueClient, job_id: int, queue: str = Q) -> None:
    assert client.ack(claimed(client, job_id, queue))


def state(client: QueueClient, job_id: int) -> str:
    return client.result(job_id).state


@pytest.fixture
def kept(queue: QueueClient) -> QueueClient:
    """The client, with both queues keeping results for a day."""
    for name in (Q, OTHER):
        queue.configure_queue(name, retain_results=86400)
    return queue


def test_a_child_waits_until_its_last_parent_completes(queue: QueueClient) -> None:
    first, second = pushed(queue), pushed(queue, queue=OTHER)
    child = pushed(queue, depends_on=[first, second])

    assert state(queue, child) == "waiting"
    completed(queue, first)
    assert state(queue, child) == "waiting"
    completed(queue, second, OTHER)

    assert state(queue, child) == "pending"
    job = queue.get_job(child)
    assert job is not None and (job.depends_on, job.waiting_on) == ((first, second), None)


def test_a_jobs_waiting_children_are_listed_until_it_completes(queue: QueueClient) -> None:
    parent, other = pushed(queue), pushed(queue)
    children = [pushed(queue, queue=OTHER, depends_on=[parent, other]) for _ in range(3)]

    assert queue.waiting_children(parent) == children
    assert queue.waiting_children(parent, limit=2) == children[:2]
    completed(queue, parent)
    assert queue.waiting_children(parent) == []
    assert queue.waiting_children(other) == children  # still waiting for this one


def test_a_waiting_job_is_never_claimed_nor_counted_as_ready(queue: QueueClient) -> None:
    queue.configure_queue(Q, max_attempts=5)
    parent = pushed(queue, queue=OTHER)
    child = pushed(queue, depends_on=[parent])

    assert queue.pull(Q) is None
    (stats,) = [row for row in queue.stats() if row.queue == Q]
    assert (stats.pending, stats.scheduled, stats.running) == (0, 0, 0)
    assert [job.id for job in queue.jobs(Q, "waiting")] == [child]


def test_a_parent_listed_twice_is_waited_for_once(queue: QueueClient) -> None:
    parent = pushed(queue, queue=OTHER)
    child = pushed(queue, depends_on=[parent, parent])

    waiting = queue.get_job(child)
    assert waiting is not None and (waiting.depends_on, waiting.waiting_on) == ((parent,), 1)
    completed(queue, parent, OTHER)
    assert state(queue, child) == "pending"


def test_a_parent_completed_with_its_record_kept_is_satisfied_already(kept: QueueClient) -> None:
    parent = pushed(kept)
    completed(kept, parent)

    child = pushed(kept, depends_on=[parent])

    assert state(kept, child) == "pending"


@pytest.mark.parametrize("fate", ["unknown", "dead-lettered", "cancelled", "completed unkept"])
def test_a_parent_that_can_never_complete_is_refused_and_the_transaction_goes_on(
    queue: QueueClient, fate: str
) -> None:
    parent = pushed(queue)
    if fate == "unknown":
        parent = parent + 1000
    elif fate == "dead-lettered":
        assert queue.fail(claimed(queue, parent), error="boom")
    elif fate == "cancelled":
        assert queue.cancel(parent)
    else:
        completed(queue, parent)

    with pytest.raises(errors.InvalidDependencyError, match=f"job {parent}"):
        queue.push(Q, {"n": 1}, depends_on=[parent])

    assert pushed(queue, queue=OTHER) > 0  # the transaction is still usable
    assert queue.jobs(Q, "waiting") == []


def test_a_job_of_another_namespace_is_unknown(
    queue: QueueClient, make_client: Callable[..., QueueClient]
) -> None:
    stranger = QueueClient(queue.cursor, namespace=queue.namespace + "-other")
    theirs = pushed(stranger)

    with pytest.raises(errors.InvalidDependencyError, match="unknown in this namespace"):
        queue.push(Q, {}, depends_on=[theirs])


@pytest.mark.parametrize("parents", [["1"], [True], [None], [1.0], "12", [2**63]])
def test_depends_on_must_be_job_ids(queue: QueueClient, parents: Any) -> None:
    with pytest.raises(errors.InvalidDependencyError):
        queue.push(Q, {}, depends_on=parents)


@pytest.mark.parametrize("parent", [-1, 2**63 - 1, -(2**63)])
def test_push_and_push_batch_take_every_bigint_as_a_job_id(queue: QueueClient, parent: int) -> None:
    """One that no job has is unknown to both, not malformed."""
    statements = [
        ("SELECT postkit_queue.push(%s, %s, '{}', p_depends_on => ARRAY[%s]::bigint[])", parent),
        (
            "SELECT * FROM postkit_queue.push_batch(%s, %s, '[{}]', p_depends_on => %s::jsonb)",
            f"[[{parent}]]",
        ),
    ]
    for statement, depends_on in statements:
        with pytest.raises(psycopg.Error) as raised, queue.cursor.connection.transaction():
            queue.cursor.execute(statement, (queue.namespace, Q, depends_on))
        assert raised.value.sqlstate == "PKQ19"
        assert "is unknown" in str(raised.value)


@pytest.mark.parametrize("entry", ["[1.5]", '["1"]', "[18446744073709551616]", "[true]", "{}"])
def test_push_batch_refuses_a_depends_on_entry_that_is_not_job_ids(
    queue: QueueClient, entry: str
) -> None:
    with pytest.raises(psycopg.Error) as raised:
        queue.cursor.execute(
            "SELECT * FROM postkit_queue.push_batch(%s, %s, '[{}]', p_depends_on => %s::jsonb)",
            (queue.namespace, Q, f"[{entry}]"),
        )
    assert raised.value.sqlstate == "PKQ19"
    assert "must be a list of job ids" in str(raised.value)


def test_ten_thousand_and_one_parents_are_refused(queue: QueueClient) -> None:
    with pytest.raises(errors.InvalidDependencyError, match="at most 10000"):
        queue.push(Q, {}, depends_on=list(range(1, 10_002)))


def test_the_sql_function_refuses_what_the_sdk_would_have(queue: QueueClient) -> None:
    """A client in another language gets the same refusal from push itself (PKQ19)."""
    with pytest.raises(psycopg.Error) as raised:
        queue.cursor.execute(
            "SELECT postkit_queue.push(%s, %s, '{}', p_depends_on => %s)",
            (queue.namespace, Q, [999_999]),
        )
    assert raised.value.sqlstate == "PKQ19"


def test_a_dead_lettered_parent_cancels_its_descendants_with_the_reason(
    queue: QueueClient,
) -> None:
    parent = pushed(queue, queue=OTHER)
    child = pushed(queue, depends_on=[parent])
    grandchild = pushed(queue, depends_on=[child])
    bystander = pushed(queue, depends_on=[pushed(queue, queue=OTHER)])

    assert queue.fail(claimed(queue, parent, OTHER), error="boom")

    assert (queue.result(child).state, queue.result(child).reason) == (
        "cancelled",
        f"parent {parent} was dead-lettered",
    )
    assert queue.result(grandchild).reason == f"parent {child} was cancelled"
    assert state(queue, bystander) == "waiting"
    assert [job.id for job in queue.jobs(Q, "cancelled")] == [child, grandchild]


def test_a_parent_out_of_attempts_cancels_its_children(queue: QueueClient) -> None:
    parent = pushed(queue, queue=OTHER, max_attempts=1)
    child = pushed(queue, depends_on=[parent])

    outcome = queue.nack_outcome(claimed(queue, parent, OTHER), error="boom")

    assert outcome == "dead_lettered"

    assert queue.result(child).reason == f"parent {parent} was dead-lettered"


def test_an_operator_cancel_cancels_the_descendants(queue: QueueClient) -> None:
    parent = pushed(queue, queue=OTHER, delay=60)
    child = pushed(queue, depends_on=[parent])

    assert queue.cancel(parent)

    assert (queue.result(parent).state, queue.result(parent).reason) == ("cancelled", "cancelled")
    assert queue.result(child).reason == f"parent {parent} was cancelled"


def test_cancelling_a_waiting_child_leaves_its_parent_alone(queue: QueueClient) -> None:
    parent = pushed(queue, queue=OTHER)
    child = pushed(queue, depends_on=[parent])

    assert queue.cancel(child)
    completed(queue, parent, OTHER)

    assert state(queue, child) == "cancelled"


def test_a_purged_parent_cancels_its_children(queue: QueueClient) -> None:
    parent = pushed(queue, queue=OTHER)
    child = pushed(queue, depends_on=[parent])

    assert queue.purge_queue(OTHER) == 1

    assert queue.result(child).reason == f"parent {parent} was purged"


def test_a_redriven_parent_that_completes_does_not_bring_back_its_children(
    queue: QueueClient,
) -> None:
    parent = pushed(queue, queue=OTHER)
    child = pushed(queue, depends_on=[parent])
    assert queue.fail(claimed(queue, parent, OTHER), error="boom")

    (redriven,) = queue.redrive(job_ids=[parent])
    assert redriven.new_job_id is not None
    completed(queue, redriven.new_job_id, OTHER)

    assert state(queue, child) == "cancelled"


def test_a_child_reads_its_parents_results_in_the_order_it_named_them(
    kept: QueueClient,
) -> None:
    first, second, third = pushed(kept), pushed(kept), pushed(kept, queue=OTHER)
    child = pushed(kept, queue=OTHER, depends_on=[second, first, third])
    assert kept.ack(claimed(kept, first), result={"sum": 1})
    assert kept.ack(claimed(kept, second), result=[2])

    assert list(kept.parent_results(child).items()) == [
        (second, [2]),
        (first, {"sum": 1}),
        (third, None),
    ]


def test_push_batch_gives_each_job_its_own_parents(queue: QueueClient) -> None:
    parent = pushed(queue, queue=OTHER)

    waiting, free = queue.push_batch(Q, [{"n": 1}, {"n": 2}], depends_on=[[parent], None])

    assert (state(queue, waiting), state(queue, free)) == ("waiting", "pending")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidDependencyError, match="2 depends_on entries for 1"):
        queue.push_batch(Q, [{}], depends_on=[[parent], None])


def test_an_ack_in_a_batch_releases_children_as_a_single_ack_does(queue: QueueClient) -> None:
    parents = [pushed(queue, queue=OTHER) for _ in range(3)]
    child = pushed(queue, depends_on=parents)
    jobs = queue.pull_batch(OTHER, limit=3, worker_id="w")

    assert sorted(queue.ack_many(jobs)) == sorted(parents)

    assert state(queue, child) == "pending"


def test_a_childs_push_and_its_parents_ack_are_ordered_by_the_parents_row_lock(
    make_client: Callable[..., QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    """The ack that comes while the child's push is open waits for it, then finds the edge:
    the child is not left waiting for a parent that has gone."""
    producer, worker = make_client(), make_client()
    parent = pushed(producer, queue=OTHER)
    commit(producer)
    job = claimed(worker, parent, OTHER)
    commit(worker)

    child = pushed(producer, depends_on=[parent])
    ack = executor.submit(lambda: worker.ack(job))
    wait_until_blocked(worker, producer, ack)
    commit(producer)

    assert ack.result(timeout=10)
    commit(worker)
    assert state(producer, child) == "pending"


def test_a_child_pushed_while_its_parents_ack_is_open_waits_for_it(
    make_client: Callable[..., QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    """The other order: the push waits for the ack, then reads the completion it committed."""
    producer, worker = make_client(), make_client()
    for name in (Q, OTHER):
        producer.configure_queue(name, retain_results=3600)
    parent = pushed(producer, queue=OTHER)
    commit(producer)
    assert worker.ack(claimed(worker, parent, OTHER))

    push = executor.submit(lambda: pushed(producer, depends_on=[parent]))
    wait_until_blocked(producer, worker, push)
    commit(worker)

    child = push.result(timeout=10)
    commit(producer)
    assert state(producer, child) == "pending"


def test_two_parents_completing_at_once_release_the_child_once(
    make_client: Callable[..., QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    producer, first, second = make_client(), make_client(), make_client()
    parents = [pushed(producer, queue=OTHER) for _ in range(2)]
    child = pushed(producer, depends_on=parents)
    commit(producer)
    jobs = [claimed(first, parents[0], OTHER), claimed(second, parents[1], OTHER)]
    commit(first)
    commit(second)

    assert first.ack(jobs[0])
    ack = executor.submit(lambda: second.ack(jobs[1]))
    wait_until_blocked(second, first, ack)
    commit(first)
    assert ack.result(timeout=10)
    commit(second)

    job = producer.get_job(child)
    assert job is not None and (job.state, job.waiting_on) == ("pending", None)
    assert producer.pull(Q) is not None
