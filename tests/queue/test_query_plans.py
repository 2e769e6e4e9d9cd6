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

# The statements inside postkit_queue.pull, with their variables in parameter order: the
# claim's three scans (jobs of a higher priority than the session's resume point, jobs past the
# resume point, jobs from the head of the queue), then the update of the ids they locked.
PULL_SCAN_PARAMS = {
    "p_namespace": "text",
    "p_queue": "text",
    "v_priority": "smallint",
    "v_run_at": "timestamptz",
    "v_now": "timestamptz",
    "v_ids": "bigint[]",
    "v_id": "bigint",
    "p_limit": "integer",
}
PULL_HIGHER = """
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.priority > v_priority AND j.run_at <= v_now
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
"""
PULL_RESUMED = """
                SELECT j.id FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
                  AND j.priority = v_priority AND (j.run_at, j.id) > (v_run_at, v_id)
                  AND j.run_at <= v_now AND j.id <> ALL (v_ids)
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT p_limit - cardinality(v_ids)
                FOR UPDATE SKIP LOCKED
"""
PULL_HEAD = """
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.run_at <= v_now AND j.id <> ALL (v_ids)
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT p_limit - cardinality(v_ids)
            FOR UPDATE SKIP LOCKED
"""
PULL_CLAIM = """
        UPDATE postkit_queue.jobs j
        SET state         = 'running',
            attempts      = j.attempts + 1,
            worker_id     = p_worker_id,
            claim_token   = encode(overlay(v_token PLACING int8send(j.id) FROM 9 FOR 8),
                                   'hex')::uuid,
            claimed_at    = v_now,
            visible_until = v_now + v_timeout
        WHERE j.namespace = p_namespace AND j.id = ANY (v_ids)
        RETURNING j.*
"""
PULL_CLAIM_PARAMS = {
    "p_namespace": "text",
    "v_ids": "bigint[]",
    "v_now": "timestamptz",
    "p_worker_id": "text",
    "v_timeout": "interval",
    "v_token": "bytea",
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
      AND postkit_queue.holds_claim(j.state, j.worker_id, j.claim_token, p_worker_id,
                                    p_claim_token)
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
        backoff_base, backoff_cap, created_at, trace_context, group_key, depends_on, state,
        waiting_on)
    VALUES (
        p_namespace, p_queue, p_payload, p_priority, v_now + coalesce(p_delay, interval '0'),
        coalesce(p_max_attempts, v_policy.max_attempts),
        p_unique_key, p_backoff_base, p_backoff_cap, v_now, p_trace_context, p_group_key,
        nullif(v_depends_on, '{}'),
        (CASE WHEN cardinality(v_parents) > 0 THEN 'waiting' ELSE 'pending' END)
            ::postkit_queue.job_state,
        nullif(cardinality(v_parents), 0))
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
    r"v_policy\.max_attempts": "integer",
    "p_unique_key": "text",
    "p_backoff_base": "interval",
    "p_backoff_cap": "interval",
    "p_trace_context": "jsonb",
    "p_group_key": "text",
    "v_depends_on": "bigint[]",
    "v_parents": "bigint[]",
}

# Flow control (flow.sql). claim_limited's group path locks the ids its loop took; rate_slot_at
# reads a rate-limited queue's claim log, called by next_run_at, whose settings it inherits.
FLOW_LOCK = """
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.id = ANY (v_ids) AND j.state = 'pending'
            FOR UPDATE SKIP LOCKED
"""
FLOW_LOCK_PARAMS = {"p_namespace": "text", "v_ids": "bigint[]"}
RATE_SLOT = """
    SELECT CASE WHEN coalesce(sum(w.claims), 0) < p_rate_limit THEN NULL
                ELSE min(w.at + p_rate_period) FILTER (WHERE w.later < p_rate_limit) END
    INTO v_slot
    FROM (
        SELECT e.at, e.claims,
               coalesce(sum(e.claims) OVER (ORDER BY e.n DESC
                                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                        0) AS later
        FROM unnest(v_at, v_claims) WITH ORDINALITY AS e(at, claims, n)
        WHERE e.at > p_now - p_rate_period
    ) w
"""
RATE_SLOT_PARAMS = {
    "p_rate_limit": "integer",
    "p_rate_period": "interval",
    "v_at": "timestamptz[]",
    "v_claims": "integer[]",
    "p_now": "timestamptz",
}
CLAIM_LIMITED = "claim_limited(text,text,integer,integer,integer,interval,integer,boolean,boolean)"
RATE_SLOT_AT = "rate_slot_at(text,text,integer,interval,timestamptz)"
NEXT_RUN_AT = "next_run_at(text,text[])"

PULL = "pull(text,text,text,interval,integer)"
GUARDED = {
    "pull, higher priorities": (PULL, PULL_HIGHER),
    "pull, past the resume point": (PULL, PULL_RESUMED),
    "pull, from the head": (PULL, PULL_HEAD),
    "pull, the claim": (PULL, PULL_CLAIM),
    "tick_timeouts": ("tick_timeouts(text,integer)", TICK),
    "ack": ("ack(text,bigint,text,uuid,jsonb)", ACK),
    "push": (
        "push(text,text,jsonb,interval,integer,integer,text,interval,interval,jsonb,text,bigint[],"
        "interval)",
        PUSH,
    ),
    "claim_limited, locking a group claim's ids": (CLAIM_LIMITED, FLOW_LOCK),
    "rate_slot_at": (RATE_SLOT_AT, RATE_SLOT),
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
            prepare(connection, "pull_higher_stmt", PULL_HIGHER, PULL_SCAN_PARAMS)
            prepare(connection, "pull_resumed_stmt", PULL_RESUMED, PULL_SCAN_PARAMS)
            prepare(connection, "pull_head_stmt", PULL_HEAD, PULL_SCAN_PARAMS)
            prepare(connection, "pull_claim_stmt", PULL_CLAIM, PULL_CLAIM_PARAMS)
            prepare(connection, "tick_stmt", TICK, TICK_PARAMS)
            prepare(connection, "ack_stmt", ACK, ACK_PARAMS)
            prepare(connection, "push_stmt", PUSH, PUSH_PARAMS)
            prepare(connection, "flow_lock_stmt", FLOW_LOCK, FLOW_LOCK_PARAMS)
            prepare(
                connection, "rate_slot_stmt", RATE_SLOT.replace("INTO v_slot", ""), RATE_SLOT_PARAMS
            )
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


@pytest.mark.parametrize("statement", sorted(GUARDED))
def test_the_guarded_statements_are_the_ones_the_functions_run(
    planned: psycopg.Connection, statement: str
) -> None:
    function, text = GUARDED[statement]
    row = planned.execute(
        "SELECT prosrc FROM pg_proc WHERE oid = %s::regprocedure", (f"postkit_queue.{function}",)
    ).fetchone()
    assert row is not None
    assert normalized(text) in normalized(row[0]), (
        f"postkit_queue.{function} no longer runs the statement this file guards ({statement}); "
        "update the copy here and check its plan"
    )


# The parameters of the scans, after p_namespace and p_queue: the resume point (priority 1,
# an hour ago, id 0), now, no ids locked yet, and the id of the resume point.
SCAN_ARGUMENTS = "1::smallint, now() - interval '1 hour', now(), '{}', 0"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limit", [1, 10])
@pytest.mark.parametrize("scan", ["pull_higher_stmt", "pull_resumed_stmt", "pull_head_stmt"])
def test_each_scan_of_pull_walks_the_pull_index_in_order(
    planned: psycopg.Connection, mode: str, limit: int, scan: str
) -> None:
    nodes = explain(
        planned, mode, f"EXECUTE {scan}('plan-a', 'reports', {SCAN_ARGUMENTS}, {limit})"
    )

    assert scans(nodes) == [("Index Scan", "jobs_pull_idx")], describe(nodes)
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], describe(nodes)


@pytest.mark.parametrize("mode", MODES)
def test_a_resumed_scan_starts_at_the_resume_point_instead_of_filtering_up_to_it(
    planned: psycopg.Connection, mode: str
) -> None:
    nodes = explain(
        planned, mode, f"EXECUTE pull_resumed_stmt('plan-a', 'reports', {SCAN_ARGUMENTS}, 10)"
    )

    [scan] = [n for n in nodes if n.get("Index Name") == "jobs_pull_idx"]
    assert "ROW(run_at, id) >" in scan["Index Cond"], scan


@pytest.mark.parametrize("mode", MODES)
def test_the_claim_updates_the_locked_ids_through_the_primary_key(
    planned: psycopg.Connection, mode: str
) -> None:
    nodes = explain(
        planned,
        mode,
        "EXECUTE pull_claim_stmt('plan-a', '{1,2,3}', now(), 'w', interval '30 seconds', "
        "uuid_send(gen_random_uuid()))",
    )

    assert any(index == "jobs_pkey" for _, index in scans(nodes)), describe(nodes)
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], describe(nodes)


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
        "EXECUTE push_stmt('plan-a', 'emails', '{}', 0, now(), NULL, NULL, 20, 'key-4',"
        " NULL, NULL, NULL, NULL, NULL, NULL)",
    )

    insert = nodes[0]
    assert (insert["Node Type"], insert["Operation"]) == ("ModifyTable", "Insert")
    assert insert["Conflict Resolution"] == "NOTHING"
    assert insert["Conflict Arbiter Indexes"] == ["jobs_unique_key_idx"]
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], describe(nodes)


def apply_settings(connection: psycopg.Connection, function: str) -> None:
    """SET LOCAL the planner settings ``postkit_queue.<function>`` runs its statements with
    (its SET clauses; a function it calls inherits them unless it sets its own)."""
    row = connection.execute(
        "SELECT proconfig FROM pg_proc WHERE oid = %s::regprocedure", (f"postkit_queue.{function}",)
    ).fetchone()
    assert row is not None
    for setting in row[0] or ():
        name, _, value = setting.partition("=")
        if name != "search_path":
            connection.execute(
                sql.SQL("SELECT set_config({}, {}, true)").format(
                    sql.Literal(name), sql.Literal(value)
                )
            )


@pytest.mark.parametrize("mode", MODES)
def test_a_group_claim_locks_its_ids_by_primary_key_probes(
    planned: psycopg.Connection, mode: str
) -> None:
    # Under claim_limited's own settings (sorting off): an ORDER BY id here once made the
    # planner walk the namespace's whole primary-key range, filtering the ids.
    with planned.transaction():
        apply_settings(planned, CLAIM_LIMITED)
        nodes = explain(planned, mode, "EXECUTE flow_lock_stmt('plan-a', '{1,2,3}')")

    # An index scan of the primary key, or a bitmap of it, whose condition holds the ids.
    [probe] = [n for n in nodes if "Index Cond" in n]
    assert probe.get("Index Name") == "jobs_pkey", describe(nodes)
    assert "ANY" in probe["Index Cond"], probe
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], describe(nodes)


@pytest.mark.parametrize("mode", MODES)
def test_the_rate_slot_stays_below_the_jit_threshold_when_next_run_at_asks(
    planned: psycopg.Connection, mode: str
) -> None:
    # next_run_at turns sorting off; rate_slot_at's window sorts a few log entries. Costed as
    # a disabled sort, the query passed jit_above_cost and every waiting worker's wake-up
    # compiled it (150-330 ms on a 2-core machine).
    with planned.transaction():
        apply_settings(planned, NEXT_RUN_AT)
        apply_settings(planned, RATE_SLOT_AT)
        nodes = explain(
            planned,
            mode,
            "EXECUTE rate_slot_stmt(10, interval '1 second', "
            "ARRAY[now(), now()], ARRAY[4, 6], now())",
        )
        row = planned.execute("SELECT current_setting('jit_above_cost')::float8").fetchone()

    assert row is not None
    assert nodes[0]["Total Cost"] < row[0], describe(nodes)


# --------------------------------------------------------------------------------------------
# Operations: the due-schedule scan, the dead-letter listing, retention, and the dead-letter
# counts of queues() and stats(). Same method: copies checked against the functions' source,
# PREPAREd and EXPLAINed on a database with realistic rows in every table.
# --------------------------------------------------------------------------------------------

# The scan of postkit_queue.due_schedules.
DUE_SCHEDULES = """
    SELECT * FROM postkit_queue.schedules s
    WHERE s.namespace = p_namespace AND NOT s.paused AND s.broken_at IS NULL
      AND s.next_run_at <= postkit_queue.clock()
    ORDER BY s.next_run_at
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED
"""
DUE_SCHEDULES_PARAMS = {"p_namespace": "text", "p_limit": "integer"}

# The listing of postkit_queue.dead_letters.
DEAD_LETTERS = """
    SELECT * FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace
      AND (p_queue IS NULL OR d.queue = p_queue)
      AND (p_failed_after IS NULL OR d.failed_at >= p_failed_after)
      AND (p_failed_before IS NULL OR d.failed_at < p_failed_before)
      AND (p_error_contains IS NULL
           OR strpos(lower(coalesce(d.error, '')), lower(p_error_contains)) > 0)
      AND (p_include_redriven OR d.redriven_job_id IS NULL)
      AND (p_after_failed_at IS NULL
           OR (d.failed_at, d.job_id) < (p_after_failed_at, coalesce(p_after_job_id, 0)))
    ORDER BY d.failed_at DESC, d.job_id DESC
    LIMIT p_limit
"""
DEAD_LETTERS_PARAMS = {
    "p_namespace": "text",
    "p_queue": "text",
    "p_failed_after": "timestamptz",
    "p_failed_before": "timestamptz",
    "p_error_contains": "text",
    "p_include_redriven": "boolean",
    "p_after_failed_at": "timestamptz",
    "p_after_job_id": "bigint",
    "p_limit": "integer",
}

# The first batch of postkit_queue.prune: archived jobs whose retention ran out, read and
# locked before they are deleted by id.
PRUNE_COMPLETED = """
        SELECT e.job_id FROM postkit_queue.completed_jobs e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED
"""
PRUNE_COMPLETED_PARAMS = {"p_namespace": "text", "v_now": "timestamptz", "p_limit": "integer"}

# The third batch of postkit_queue.prune: job results whose retention ran out.
PRUNE_RESULTS = """
        SELECT e.job_id FROM postkit_queue.job_results e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED
"""

# The dead-letter count of postkit_queue.stats, which must stop at the cap.
STATS_DEAD = """
            SELECT 1 FROM postkit_queue.dead_letters d
            WHERE d.namespace = p_namespace AND d.queue = v_queue
              AND d.redriven_job_id IS NULL
            LIMIT p_cap
"""
STATS_DEAD_PARAMS = {"p_namespace": "text", "v_queue": "text", "p_cap": "integer"}

OPERATIONS_GUARDED = {
    "due_schedules": ("due_schedules(text,integer)", DUE_SCHEDULES),
    "dead_letters": (
        "dead_letters(text,text,integer,timestamptz,timestamptz,text,boolean,timestamptz,bigint)",
        DEAD_LETTERS,
    ),
    "prune, archived jobs": ("prune(text,integer)", PRUNE_COMPLETED),
    "prune, job results": ("prune(text,integer)", PRUNE_RESULTS),
    "stats": ("stats(text,text,integer,text,integer)", STATS_DEAD),
}

DEAD_PER_NAMESPACE = 3000
ARCHIVED_PER_NAMESPACE = 3000
RESULTS_PER_NAMESPACE = 3000
SCHEDULES_PER_NAMESPACE = 1000


@pytest.fixture(scope="module")
def operated(planned: psycopg.Connection) -> psycopg.Connection:
    """The planned database, with dead letters, archived jobs and schedules in both namespaces,
    analyzed, and the operations' statements PREPAREd. The jobs the guards above rely on are
    left as they were."""
    # Dead letters over the last 30 days, one in ten redriven: most in three queues, one in a
    # hundred in 'exports'.
    planned.execute(
        """
        INSERT INTO postkit_queue.dead_letters (
            namespace, job_id, queue, payload, priority, attempts, max_attempts, reason, error,
            errors, created_at, failed_at, expires_at, redriven_job_id, redriven_at)
        SELECT n, 1000000 + g,
               CASE WHEN g %% 100 = 0 THEN 'exports' ELSE (%(queues)s::text[])[1 + g %% 3] END,
               '{}', 0, 3, 3, 'failed',
               'error ' || g, '[]', now() - interval '31 days',
               now() - g * interval '10 minutes', now() - g * interval '10 minutes'
                                                   + interval '30 days',
               CASE WHEN g %% 10 = 0 THEN g END, CASE WHEN g %% 10 = 0 THEN now() END
        FROM unnest(%(namespaces)s::text[]) AS n, generate_series(1, %(count)s) AS g
        """,
        {"namespaces": list(NAMESPACES), "queues": list(QUEUES), "count": DEAD_PER_NAMESPACE},
    )
    # Archived jobs completed over the last day, kept a day: the oldest tenth has expired.
    planned.execute(
        """
        INSERT INTO postkit_queue.completed_jobs (
            namespace, job_id, queue, payload, priority, attempts, worker_id, errors,
            created_at, completed_at, expires_at)
        SELECT n, 2000000 + g, (%(queues)s::text[])[1 + g %% 4], '{}', 0, 1, 'w', '[]',
               now() - interval '2 days',
               now() - g * (interval '1 day' / %(count)s) * 1.1,
               now() - g * (interval '1 day' / %(count)s) * 1.1 + interval '1 day'
        FROM unnest(%(namespaces)s::text[]) AS n, generate_series(1, %(count)s) AS g
        """,
        {"namespaces": list(NAMESPACES), "queues": list(QUEUES), "count": ARCHIVED_PER_NAMESPACE},
    )
    # Job results of jobs completed over the last day, kept a day: the oldest tenth expired.
    planned.execute(
        """
        INSERT INTO postkit_queue.job_results (
            namespace, job_id, queue, result, attempts, completed_at, expires_at)
        SELECT n, 3000000 + g, (%(queues)s::text[])[1 + g %% 4], '{"total": 1}', 1,
               now() - g * (interval '1 day' / %(count)s) * 1.1,
               now() - g * (interval '1 day' / %(count)s) * 1.1 + interval '1 day'
        FROM unnest(%(namespaces)s::text[]) AS n, generate_series(1, %(count)s) AS g
        """,
        {"namespaces": list(NAMESPACES), "queues": list(QUEUES), "count": RESULTS_PER_NAMESPACE},
    )
    # Schedules spread over the next day (a few already due), one in ten paused.
    planned.execute(
        """
        INSERT INTO postkit_queue.schedules (
            namespace, name, queue, payload, every, paused, next_run_at, created_at, updated_at)
        SELECT n, 'schedule-' || g, 'emails', '{}', interval '1 day', g %% 10 = 0,
               now() + (g - 20) * (interval '1 day' / %(count)s), now(), now()
        FROM unnest(%(namespaces)s::text[]) AS n, generate_series(1, %(count)s) AS g
        """,
        {"namespaces": list(NAMESPACES), "count": SCHEDULES_PER_NAMESPACE},
    )
    planned.execute(
        "ANALYZE postkit_queue.dead_letters, postkit_queue.completed_jobs,"
        " postkit_queue.job_results, postkit_queue.schedules"
    )
    prepare(planned, "due_schedules_stmt", DUE_SCHEDULES, DUE_SCHEDULES_PARAMS)
    prepare(planned, "dead_letters_stmt", DEAD_LETTERS, DEAD_LETTERS_PARAMS)
    prepare(planned, "prune_completed_stmt", PRUNE_COMPLETED, PRUNE_COMPLETED_PARAMS)
    prepare(planned, "prune_results_stmt", PRUNE_RESULTS, PRUNE_COMPLETED_PARAMS)
    prepare(planned, "stats_dead_stmt", STATS_DEAD, STATS_DEAD_PARAMS)
    return planned


@pytest.mark.parametrize("statement", sorted(OPERATIONS_GUARDED))
def test_the_guarded_operations_statements_are_the_ones_the_functions_run(
    operated: psycopg.Connection, statement: str
) -> None:
    function, guarded = OPERATIONS_GUARDED[statement]
    row = operated.execute(
        "SELECT prosrc FROM pg_proc WHERE oid = %s::regprocedure", (f"postkit_queue.{function}",)
    ).fetchone()
    assert row is not None
    assert normalized(guarded) in normalized(row[0]), (
        f"postkit_queue.{function} no longer runs the statement this file guards; "
        "update the copy here and check its plan"
    )


@pytest.mark.parametrize("mode", MODES)
def test_due_schedules_scans_the_due_index(operated: psycopg.Connection, mode: str) -> None:
    nodes = explain(operated, mode, "EXECUTE due_schedules_stmt('plan-a', 100)")

    assert ("Index Scan", "schedules_due_idx") in scans(nodes), describe(nodes)
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], describe(nodes)
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], describe(nodes)


DEAD_LETTER_LISTINGS = {
    "newest": "EXECUTE dead_letters_stmt('plan-a', NULL, NULL, NULL, NULL, false, NULL, NULL, 100)",
    "of-a-queue": (
        "EXECUTE dead_letters_stmt('plan-a', 'reports', NULL, NULL, NULL, false, NULL, NULL, 100)"
    ),
    "next-page": (
        "EXECUTE dead_letters_stmt('plan-b', NULL, NULL, NULL, NULL, false,"
        " now() - interval '5 days', 1001000, 100)"
    ),
    "failed-between": (
        "EXECUTE dead_letters_stmt('plan-a', NULL, now() - interval '10 days',"
        " now() - interval '9 days', 'error', true, NULL, NULL, 100)"
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("listing", sorted(DEAD_LETTER_LISTINGS))
def test_the_dead_letter_listing_walks_the_failed_at_index(
    operated: psycopg.Connection, mode: str, listing: str
) -> None:
    nodes = explain(operated, mode, DEAD_LETTER_LISTINGS[listing])

    used = scans(nodes)
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], describe(nodes)
    if listing == "failed-between" and mode == "force_custom_plan":
        # A known, narrow range of failure times: the planner may fetch it through a bitmap of
        # the same index and sort those few rows instead.
        assert any(index == "dead_letters_failed_at_idx" for _, index in used), describe(nodes)
        return
    assert ("Index Scan", "dead_letters_failed_at_idx") in used, describe(nodes)
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], describe(nodes)


PRUNE_BATCHES = {
    "archived jobs": ("prune_completed_stmt", "completed_jobs_expires_at_idx"),
    "job results": ("prune_results_stmt", "job_results_expires_at_idx"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_of", sorted(PRUNE_BATCHES))
def test_prune_takes_each_batch_from_its_expiry_index(
    operated: psycopg.Connection, mode: str, batch_of: str
) -> None:
    statement, index_name = PRUNE_BATCHES[batch_of]
    nodes = explain(operated, mode, f"EXECUTE {statement}('plan-a', now(), 1000)")

    # The batch is the LIMIT's subtree; the DELETE then finds those rows by id.
    (limit,) = [n for n in nodes if n["Node Type"] == "Limit"]
    batch = scans(list(plan_nodes(limit)))
    assert batch, describe(nodes)
    assert {index for _, index in batch} <= {index_name, None}, describe(nodes)
    assert ("Index Scan", index_name) in batch or (
        "Bitmap Index Scan",
        index_name,
    ) in batch, describe(nodes)
    assert not [n for n in plan_nodes(limit) if n["Node Type"] == "Seq Scan"], describe(nodes)


def test_the_stats_dead_count_reads_a_small_queues_dead_letters_from_its_index(
    operated: psycopg.Connection,
) -> None:
    # Custom plans only: the generic plan may prefer a sequential scan that stops at the cap,
    # but plpgsql keeps custom plans for this count (test_stats.py measures the rows a stats
    # call reads, over repeated calls, with a large queue beside a small one).
    nodes = explain(
        operated, "force_custom_plan", "EXECUTE stats_dead_stmt('plan-a', 'exports', 100)"
    )

    assert scans(nodes) == [("Index Only Scan", "dead_letters_queue_idx")], describe(nodes)


@pytest.mark.parametrize("mode", MODES)
def test_queues_finds_the_queues_with_dead_letters_by_probing_the_index(
    operated: psycopg.Connection, mode: str
) -> None:
    row = operated.execute(
        "SELECT prosrc FROM pg_proc WHERE oid = 'postkit_queue.queues(text)'::regprocedure"
    ).fetchone()
    assert row is not None
    # The one statement of its body: what follows RETURN QUERY, up to its semicolon.
    statement = row[0].split("RETURN QUERY", 1)[1].rsplit(";", 1)[0]
    prepare(operated, "queues_stmt", statement, {"p_namespace": "text"})
    try:
        nodes = explain(operated, mode, "EXECUTE queues_stmt('plan-a')")
    finally:
        operated.execute("DEALLOCATE queues_stmt")

    on_dead_letters = [
        (n["Node Type"], n.get("Index Name"))
        for n in nodes
        if n.get("Relation Name") == "dead_letters"
    ]
    assert on_dead_letters, describe(nodes)
    assert set(on_dead_letters) == {("Index Only Scan", "dead_letters_queue_idx")}, describe(nodes)
