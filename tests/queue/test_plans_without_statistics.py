"""The hot paths keep their plans when the planner knows nothing about a namespace.

A namespace created after the last ANALYZE, or a burst of jobs faster than autovacuum, looks
empty to the planner. The claim must still walk the pull index in order instead of sorting
every pending row of the namespace on every pull. These tests capture the plans PostgreSQL
really runs inside the functions, with auto_explain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from postkit.queue import QueueClient, install


@pytest.fixture
def explained(
    fresh_database: str, collect_plans: Callable[[psycopg.Connection], list[str]]
) -> Iterator[tuple[psycopg.Connection, list[str]]]:
    """A superuser session whose nested statements' plans are collected as notices."""
    with psycopg.connect(fresh_database, autocommit=True) as connection:
        install(connection)
        # Statistics that know only another namespace: the one under test looks empty.
        QueueClient(connection.cursor(), namespace="known").push_batch("emails", [1] * 500)
        connection.execute("ANALYZE postkit_queue.jobs")
        QueueClient(connection.cursor(), namespace="fresh").push_batch("emails", [1] * 5000)
        yield connection, collect_plans(connection)


def plan_of(plans: list[str], statement_start: str) -> str:
    matching = [plan for plan in plans if statement_start in plan]
    assert matching, f"no plan for a statement starting {statement_start!r}"
    return matching[-1]


def test_pull_walks_the_pull_index_for_a_namespace_without_statistics(
    explained: tuple[psycopg.Connection, list[str]],
) -> None:
    connection, plans = explained

    claimed = QueueClient(connection.cursor(), namespace="fresh").pull_batch("emails", limit=16)

    head = plan_of(plans, "AND j.run_at <= v_now AND j.id <> ALL (v_ids)")
    claim = plan_of(plans, "UPDATE postkit_queue.jobs j")
    assert len(claimed) == 16
    assert "jobs_pull_idx" in head and "Sort" not in head, head
    assert "Seq Scan" not in head, head
    assert "jobs_pkey" in claim and "Seq Scan" not in claim, claim


def test_ack_many_deletes_by_primary_key_for_a_namespace_without_statistics(
    explained: tuple[psycopg.Connection, list[str]],
) -> None:
    connection, plans = explained
    client = QueueClient(connection.cursor(), namespace="fresh")
    claimed = client.pull_batch("emails", limit=16)

    acked = client.ack_many(claimed)

    plan = plan_of(plans, "DELETE FROM postkit_queue.jobs j")
    assert sorted(acked) == sorted(job.id for job in claimed)
    assert "jobs_pkey" in plan and "Seq Scan" not in plan, plan


def test_next_run_at_probes_the_pull_index_instead_of_scanning_the_backlog(
    explained: tuple[psycopg.Connection, list[str]],
) -> None:
    connection, plans = explained

    row = connection.execute(
        "SELECT postkit_queue.next_run_at('fresh', ARRAY['emails', 'sms'])"
    ).fetchone()

    assert row is not None and row[0] is not None
    for probe in ("SELECT j.priority", "SELECT j.run_at"):
        plan = plan_of(plans, probe)
        assert "jobs_pull_idx" in plan and "Seq Scan" not in plan and "Bitmap" not in plan, plan
    settings = plan_of(plans, "SELECT s.paused")
    assert "queue_settings_pkey" in settings, "paused queues are found by primary key"
