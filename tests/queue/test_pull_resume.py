"""A session draining a backlog resumes its claims after the last job it claimed, so claims do
not walk the dead index entries of every job claimed before; order is kept, up to one second for
a job whose push committed late."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from postkit.queue import QueueClient


def test_a_higher_priority_job_pushed_while_a_backlog_drains_is_claimed_next(
    queue: QueueClient,
) -> None:
    queue.push_batch("q", list(range(5)))
    assert queue.pull("q") is not None  # the session now resumes after this job

    urgent = queue.push("q", "urgent", priority=10)

    claimed = queue.pull("q")
    assert claimed is not None and claimed.id == urgent


def test_a_job_whose_push_committed_late_is_claimed_once_claims_run_short(
    queue: QueueClient, connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    late_connection = connect()
    late_id = QueueClient(late_connection.cursor(), namespace=namespace).push("q", "late")
    first, second = (queue.push("q", n) for n in range(2))
    queue.cursor.connection.commit()
    claimed = queue.pull("q")
    assert claimed is not None and claimed.id == first
    late_connection.commit()  # behind the session's resume point, in key order

    resumed = queue.pull("q")
    short = queue.pull_batch("q", limit=5)  # one job left past the resume point: from the head

    assert resumed is not None and resumed.id == second
    assert [job.id for job in short] == [late_id]


def test_a_session_claims_from_the_head_again_after_a_second(
    queue: QueueClient,
    connect: Callable[..., psycopg.Connection],
    namespace: str,
    shift_clock: Callable[[QueueClient, float], None],
) -> None:
    late_connection = connect()
    late_id = QueueClient(late_connection.cursor(), namespace=namespace).push("q", "late")
    first = queue.push("q", 0)
    queue.push_batch("q", list(range(1, 5)))
    queue.cursor.connection.commit()
    claimed = queue.pull("q")
    assert claimed is not None and claimed.id == first
    late_connection.commit()

    shift_clock(queue, 1.5)
    after_a_second = queue.pull("q")

    assert after_a_second is not None and after_a_second.id == late_id


def test_a_resumed_claim_starts_its_index_scan_past_the_jobs_claimed_before(
    database: str,
    collect_plans: Callable[[psycopg.Connection], list[str]],
    shift_clock: Callable[[QueueClient, float], None],
) -> None:
    connection = psycopg.connect(database, autocommit=True)
    client = QueueClient(connection.cursor(), namespace="backlog")
    client.push_batch("emails", [1] * 3000)
    for _ in range(20):
        client.pull_batch("emails", limit=100)  # 2,000 dead entries at the head of the index
    plans = collect_plans(connection)
    # A claim from the head, just before: the claim after it resumes within its second, however
    # long the claims above took.
    shift_clock(client, 2)
    client.pull("emails")

    claimed = client.pull_batch("emails", limit=16)

    [resumed] = [plan for plan in plans if "ROW(run_at, id) >" in plan]
    # The scan's own condition: the first after the scan's line (a plan under tenant
    # isolation's policies starts with an InitPlan of its own, with an index condition too).
    lines = resumed.splitlines()
    scan = next(n for n, line in enumerate(lines) if "Index Scan using jobs_pull_idx" in line)
    index_condition = next(line for line in lines[scan:] if "Index Cond" in line)
    assert len(claimed) == 16
    assert "ROW(run_at, id) >" in index_condition, resumed
    connection.close()
