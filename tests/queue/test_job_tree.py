"""A job's tree (dependencies.sql: job_tree, cancel_tree): the job and what descends from it
through depends_on, walked generation by generation, on past the completed jobs that released
their children; and cancelling the live part of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from postkit import errors
from postkit.queue import QueueClient
from tests.queue.test_dependencies import OTHER, Q, claimed, completed, pushed


def tree(client: QueueClient, root: int, **kwargs: Any) -> list[tuple[int, int, str]]:
    """(job id, depth, state) of each job of the tree, in the order job_tree lists them."""
    return [(job.job_id, job.depth, job.state) for job in client.job_tree(root, **kwargs)]


def test_the_tree_lists_the_root_then_each_generation_with_its_parents(
    queue: QueueClient,
) -> None:
    root = pushed(queue)
    child = pushed(queue, queue=OTHER, depends_on=[root])
    grandchild = pushed(queue, depends_on=[child], delay=600)

    jobs = queue.job_tree(root)

    assert [(job.job_id, job.depth, job.queue, job.state, job.depends_on) for job in jobs] == [
        (root, 0, Q, "pending", ()),
        (child, 1, OTHER, "waiting", (root,)),
        (grandchild, 2, Q, "waiting", (child,)),
    ]


def test_the_tree_goes_on_through_a_completed_job_that_had_children(
    queue: QueueClient,
) -> None:
    # The queue keeps neither results nor completed jobs: only job_ancestry remembers that
    # the middle job's children descend from the root.
    root = pushed(queue)
    middle = pushed(queue, depends_on=[root])
    leaf = pushed(queue, depends_on=[root])
    grandchild = pushed(queue, depends_on=[middle])
    completed(queue, root)
    completed(queue, middle)
    completed(queue, leaf)

    assert tree(queue, root) == [
        (root, 0, "unknown"),
        (middle, 1, "completed"),
        (grandchild, 2, "pending"),
    ]


def test_a_job_still_waiting_for_a_parent_outside_the_tree_is_in_it(queue: QueueClient) -> None:
    root, outsider = pushed(queue), pushed(queue)
    middle = pushed(queue, depends_on=[root])
    child = pushed(queue, depends_on=[middle, outsider])
    completed(queue, root)
    completed(queue, middle)

    assert tree(queue, root) == [
        (root, 0, "unknown"),
        (middle, 1, "completed"),
        (child, 2, "waiting"),
    ]
    assert queue.waiting_children(middle) == []  # it waits for the outsider only now
    assert queue.waiting_children(outsider) == [child]
    assert queue.cancel_tree(root) == 1
    assert queue.result(outsider).state == "pending"


def edges(client: QueueClient) -> list[tuple[int, int]]:
    client.cursor.execute(
        "SELECT parent_id, child_id FROM postkit_queue.job_dependencies WHERE namespace = %s"
        " ORDER BY 1, 2",
        (client.namespace,),
    )
    return [tuple(row) for row in client.cursor.fetchall()]  # type: ignore[misc]


def test_a_waiting_jobs_edges_stay_until_it_is_released_or_cancelled(
    queue: QueueClient,
) -> None:
    first, second, third = pushed(queue), pushed(queue), pushed(queue)
    released = pushed(queue, depends_on=[first, second])
    cancelled = pushed(queue, depends_on=[first, third])
    completed(queue, first)

    assert edges(queue) == [
        (first, released),
        (first, cancelled),
        (second, released),
        (third, cancelled),
    ]
    assert queue.cancel(cancelled)
    assert edges(queue) == [(first, released), (second, released)]
    completed(queue, second)
    assert edges(queue) == []


def test_a_job_two_paths_reach_is_listed_once_at_the_nearer_depth(queue: QueueClient) -> None:
    root = pushed(queue)
    middle = pushed(queue, depends_on=[root])
    join = pushed(queue, depends_on=[root, middle])

    assert tree(queue, root) == [(root, 0, "pending"), (middle, 1, "waiting"), (join, 1, "waiting")]


def test_the_tree_of_an_unknown_job_is_empty_and_stops_at_its_limit(queue: QueueClient) -> None:
    root = pushed(queue)
    children = [pushed(queue, depends_on=[root]) for _ in range(3)]

    assert queue.job_tree(root + 1000) == []
    assert tree(queue, root, limit=3) == [
        (root, 0, "pending"),
        (children[0], 1, "waiting"),
        (children[1], 1, "waiting"),
    ]
    with pytest.raises(errors.InvalidLimitError):
        queue.job_tree(root, limit=0)


def test_cancel_tree_cancels_the_live_jobs_beneath_the_root_and_nothing_else(
    queue: QueueClient,
) -> None:
    root, other_root = pushed(queue), pushed(queue)
    middle = pushed(queue, depends_on=[root])
    running = pushed(queue, queue=OTHER, depends_on=[middle])
    waiting = pushed(queue, depends_on=[running, other_root])
    outside = pushed(queue, depends_on=[other_root])
    completed(queue, root)
    completed(queue, middle)
    claim = claimed(queue, running, OTHER)

    assert queue.cancel_tree(root) == 2  # the running job, and the job that waits for it

    assert queue.result(running).state == "cancelled"
    assert queue.result(waiting).reason == f"parent {running} was cancelled"
    assert queue.ack(claim) is False
    assert [queue.result(job_id).state for job_id in (other_root, outside)] == [
        "pending",
        "waiting",
    ]
    assert queue.cancel_tree(root) == 0


def test_cancel_tree_cancels_a_live_root_with_its_descendants(queue: QueueClient) -> None:
    root = pushed(queue)
    children = [pushed(queue, depends_on=[root]) for _ in range(2)]

    assert queue.cancel_tree(root) == 3
    assert {queue.result(job_id).state for job_id in [root, *children]} == {"cancelled"}


def test_cancel_tree_stops_at_its_limit_and_the_next_call_goes_on(queue: QueueClient) -> None:
    root = pushed(queue)
    children = [pushed(queue, depends_on=[root]) for _ in range(3)]
    completed(queue, root)

    assert queue.cancel_tree(root, limit=2) == 2
    assert queue.cancel_tree(root, limit=2) == 1
    assert {queue.result(job_id).state for job_id in children} == {"cancelled"}


def test_a_tree_is_seen_and_cancelled_only_from_its_own_namespace(queue: QueueClient) -> None:
    root = pushed(queue)
    child = pushed(queue, depends_on=[root])
    stranger = QueueClient(queue.cursor, namespace=f"{queue.namespace}-other")

    assert stranger.job_tree(root) == []
    assert stranger.cancel_tree(root) == 0
    assert queue.result(child).state == "waiting"


def test_prune_deletes_the_ancestry_whose_retention_ran_out(
    queue: QueueClient, shift_clock: Callable[[QueueClient, float], None]
) -> None:
    queue.configure_queue(Q, retain_dead=3600)
    root = pushed(queue)
    middle = pushed(queue, depends_on=[root])
    grandchild = pushed(queue, depends_on=[middle])
    completed(queue, root)
    completed(queue, middle)

    assert queue.prune().ancestry == 0
    shift_clock(queue, 3601)
    assert queue.prune().ancestry == 1
    assert tree(queue, root) == [] and queue.result(grandchild).state == "pending"
