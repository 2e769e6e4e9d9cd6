"""Query-plan guards for the hot paths: each statement the SQL functions run uses its index.

The statements below are copies of those inside the functions, written with the functions'
own variable names; ``test_the_guarded_statements_are_the_ones_the_functions_run`` checks that
each copy still appears, word for word, in its function's source, so the guards cannot drift
from the code they guard. Each is then PREPAREd with the variables as parameters and
EXPLAINed on a table of a few thousand rows in two namespaces and several queues, analyzed, so
that the planner has real statistics and real alternatives (the primary key, a sequential scan,
a sort). Both the custom plan (the parameters' values known) and the generic plan (what plpgsql
may settle on after five runs of a function) are checked.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.queue import install

NAMESPACES = ("plan-a", "plan-b")
QUEUES = ("emails", "reports", "webhooks", "exports")
JOBS = 2000

# The statement inside postkit_queue.pull, and its variables in parameter order.
PULL = """
    WITH next AS (
        SELECT j.namespace, j.id
        FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace
          AND j.queue = p_queue
          AND j.state = 'pending'
          AND j.run_at <= v_now
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE postkit_queue.jobs j
    SET state         = 'running',
        attempts      = j.attempts + 1,
        worker_id     = p_worker_id,
        claim_token   = gen_random_uuid(),
        claimed_at    = v_now,
        visible_until = v_now + v_timeout
    FROM next
    WHERE j.namespace = next.namespace AND j.id = next.id
    RETURNING j.*
"""
PULL_PARAMS = {
    "p_namespace": "text",
    "p_queue": "text",
    "v_now": "timestamptz",
    "p_limit": "integer",
    "p_worker_id": "text",
    "v_timeout": "interval",
}

# The scan of postkit_queue.tick_timeouts.
TICK = """
        SELECT * FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.state = 'running' AND j.visible_until < v_now
        ORDER BY j.visible_until
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
"""
TICK_PARAMS = {"p_namespace": "text", "v_now": "timestamptz", "p_limit": "integer"}

# The delete of postkit_queue.ack.
ACK = """
    DELETE FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j, p_worker_id, p_claim_token)
"""
ACK_PARAMS = {
    "p_namespace": "text",
    "p_job_id": "bigint",
    "p_worker_id": "text",
    "p_claim_token": "uuid",
}

# The insert of postkit_queue.push, whose ON CONFLICT looks the unique_key up.
PUSH = """
    INSERT INTO postkit_queue.jobs AS j (
        namespace, queue, payload, priority, run_at, max_attempts, unique_key,
        backoff_base, backoff_cap, created_at)
    VALUES (
        p_namespace, p_queue, p_payload, p_priority, v_now + coalesce(p_delay, interval '0'),
        coalesce(p_max_attempts,
                 (postkit_queue.queue_policy(p_namespace, p_queue)).max_attempts),
        p_unique_key, p_backoff_base, p_backoff_cap, v_now)
    ON CONFLICT (namespace, queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING j.id
"""
PUSH_PARAMS = {
    "p_namespace": "text",
    "p_queue": "text",
    "p_payload": "jsonb",
    "p_priority": "integer",
    "v_now": "timestamptz",
    "p_delay": "interval",
    "p_max_attempts": "integer",
    "p_unique_key": "text",
    "p_backoff_base": "interval",
    "p_backoff_cap": "interval",
}

GUARDED = {
    "pull(text,text,text,interval,integer)": PULL,
    "tick_timeouts(text,integer)": TICK,
    "ack(text,bigint,text,uuid)": ACK,
    "push(text,text,jsonb,interval,integer,integer,text,interval,interval)": PUSH,
}


def normalized(text: str) -> str:
    without_comments = re.sub(r"--[^\n]*", "", text)
    return " ".join(without_comments.split())


def prepare(
    connection: psycopg.Connection, name: str, statement: str, params: dict[str, str]
) -> None:
    """PREPARE ``statement`` with each plpgsql variable replaced by its parameter."""
    text = statement
    for number, variable in enumerate(params, start=1):
        text = re.sub(rf"\b{variable}\b", f"${number}", text)
    assert not re.search(r"\b[pv]_\w+", text), f"an unmapped variable is left in {text}"
    types = ", ".join(params.values())
    connection.execute(f"PREPARE {name} ({types}) AS {text}")


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)


def explain(connection: psycopg.Connection, mode: str, execute: str) -> list[dict[str, Any]]:
    """The nodes of the plan of ``EXECUTE ...`` under plan_cache_mode ``mode``."""
    connection.execute(f"SET plan_cache_mode = {mode}")
    row = connection.execute(f"EXPLAIN (FORMAT JSON) {execute}").fetchone()
    assert row is not None
    return list(plan_nodes(row[0][0]["Plan"]))


def describe(nodes: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{n['Node Type']} {n.get('Index Name', n.get('Relation Name', ''))}" for n in nodes
    )


def scans(nodes: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(n["Node Type"], n.get("Index Name")) for n in nodes if "Scan" in n["Node Type"]]


@pytest.fixture(scope="module")
def planned(server_dsn: str) -> Iterator[psycopg.Connection]:
    """A database of its own, with a realistic backlog, analyzed, and the statements PREPAREd."""
    name = f"postkit_plans_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with psycopg.connect(
            psycopg.conninfo.make_conninfo(server_dsn, dbname=name), autocommit=True
        ) as connection:
            install(connection)
            # Priorities 0-2, every tenth job delayed an hour, every fourth with a unique key.
            connection.execute(
                """
                SELECT postkit_queue.push(
                    (%(namespaces)s::text[])[1 + g %% 2], (%(queues)s::text[])[1 + (g / 2) %% 4],
                    jsonb_build_object('n', g),
                    CASE WHEN g %% 10 = 0 THEN interval '1 hour' END,
                    g %% 3, NULL, CASE WHEN g %% 4 = 0 THEN 'key-' || g END)
                FROM generate_series(1, %(jobs)s) AS g
                """,
                {"namespaces": list(NAMESPACES), "queues": list(QUEUES), "jobs": JOBS},
            )
            # Some claims of every queue, with deadlines from one to six minutes out.
            for namespace in NAMESPACES:
                for queue in QUEUES:
                    for minutes in range(1, 7):
                        connection.execute(
                            "SELECT count(*) FROM postkit_queue.pull(%s, %s, 'planner', %s, 10)",
                            (namespace, queue, f"{minutes} minutes"),
                        )
            connection.execute("ANALYZE postkit_queue.jobs")
            prepare(connection, "pull_stmt", PULL, PULL_PARAMS)
            prepare(connection, "tick_stmt", TICK, TICK_PARAMS)
            prepare(connection, "ack_stmt", ACK, ACK_PARAMS)
            prepare(connection, "push_stmt", PUSH, PUSH_PARAMS)
            yield connection
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


MODES = ("force_custom_plan", "force_generic_plan")


def test_the_backlog_is_what_the_guards_assume(planned: psycopg.Connection) -> None:
    counts: dict[str, int] = dict(
        planned.execute("SELECT state, count(*) FROM postkit_queue.jobs GROUP BY state").fetchall()
    )
    assert counts == {"running": 480, "pending": JOBS - 480}


@pytest.mark.parametrize("function", sorted(GUARDED))
def test_the_guarded_statements_are_the_ones_the_functions_run(
    planned: psycopg.Connection, function: str
) -> None:
    row = planned.execute(
        "SELECT prosrc FROM pg_proc WHERE oid = %s::regprocedure", (f"postkit_queue.{function}",)
    ).fetchone()
    assert row is not None
    assert normalized(GUARDED[function]) in normalized(row[0]), (
        f"postkit_queue.{function} no longer runs the statement this file guards; "
        "update the copy here and check its plan"
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limit", [1, 10])
def test_pull_walks_the_pull_index_in_order(
    planned: psycopg.Connection, mode: str, limit: int
) -> None:
    nodes = explain(
        planned,
        mode,
        f"EXECUTE pull_stmt('plan-a', 'reports', now(), {limit}, 'w', interval '30 seconds')",
    )

    assert ("Index Scan", "jobs_pull_idx") in scans(nodes), describe(nodes)
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], describe(nodes)
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], describe(nodes)
    # The claimed rows are then updated through the primary key.
    assert ("Index Scan", "jobs_pkey") in scans(nodes), describe(nodes)


@pytest.mark.parametrize("mode", MODES)
def test_tick_timeouts_scans_the_deadline_index(planned: psycopg.Connection, mode: str) -> None:
    nodes = explain(
        planned, mode, "EXECUTE tick_stmt('plan-a', now() + interval '150 seconds', 1000)"
    )

    used = scans(nodes)
    assert any(index == "jobs_deadline_idx" for _, index in used), describe(nodes)
    assert [index for _, index in used if index is not None] == ["jobs_deadline_idx"]
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], describe(nodes)
    if mode == "force_generic_plan":
        # The plan plpgsql keeps reads the expired claims oldest first, straight off the index.
        assert used == [("Index Scan", "jobs_deadline_idx")], describe(nodes)
        assert not [n for n in nodes if n["Node Type"] == "Sort"], describe(nodes)


def test_tick_timeouts_with_a_small_limit_reads_the_index_in_order(
    planned: psycopg.Connection,
) -> None:
    nodes = explain(
        planned,
        "force_custom_plan",
        "EXECUTE tick_stmt('plan-b', now() + interval '150 seconds', 5)",
    )

    assert scans(nodes) == [("Index Scan", "jobs_deadline_idx")], describe(nodes)
    assert not [n for n in nodes if n["Node Type"] == "Sort"], describe(nodes)


@pytest.mark.parametrize("mode", MODES)
def test_ack_deletes_by_primary_key(planned: psycopg.Connection, mode: str) -> None:
    nodes = explain(planned, mode, "EXECUTE ack_stmt('plan-a', 42, 'w', NULL)")

    assert scans(nodes) == [("Index Scan", "jobs_pkey")], describe(nodes)


@pytest.mark.parametrize("mode", MODES)
def test_push_deduplicates_through_the_unique_key_index(
    planned: psycopg.Connection, mode: str
) -> None:
    nodes = explain(
        planned,
        mode,
        "EXECUTE push_stmt('plan-a', 'emails', '{}', 0, now(), NULL, NULL, 'key-4', NULL, NULL)",
    )

    insert = nodes[0]
    assert (insert["Node Type"], insert["Operation"]) == ("ModifyTable", "Insert")
    assert insert["Conflict Resolution"] == "NOTHING"
    assert insert["Conflict Arbiter Indexes"] == ["jobs_unique_key_idx"]
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], describe(nodes)
