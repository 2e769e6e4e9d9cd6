"""Each of Citus's rules for a modification (modification_rules.py) catches a statement that
breaks it, and passes the same statement written the way the SQL module writes it. The
statements are analyzed by the server under test, against the installed queue's tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.citus.modification_rules import Catalog, modification_violations, parse_node_tree
from tests.citus.sql_rules import Function

SHARDED = frozenset({"jobs", "queue_stats", "workers", "dead_letters"})


@pytest.fixture(scope="module")
def analyzer(dsn: str) -> Iterator[tuple[psycopg.Connection[Any], Catalog]]:
    with psycopg.connect(dsn) as connection:
        yield connection, Catalog.read(connection)


def broken(analyzer: tuple[psycopg.Connection[Any], Catalog], body: str) -> list[str]:
    connection, catalog = analyzer
    definition = f"""CREATE OR REPLACE FUNCTION postkit_queue.f(
    p_namespace text, p_delay interval)
 RETURNS void LANGUAGE plpgsql
AS $function$
DECLARE v_now timestamptz; v_job postkit_queue.jobs%ROWTYPE; v_any record;
BEGIN
{body}
END
$function$"""
    function = Function("f", definition, "p_namespace", False)
    return [v.detail for v in modification_violations(connection, catalog, function, SHARDED)]


@pytest.mark.parametrize(
    "statement",
    [
        # timestamptz + interval is STABLE (it reads the time zone): over a column, refused.
        "UPDATE postkit_queue.jobs j SET run_at = j.run_at + p_delay "
        "WHERE j.namespace = p_namespace;",
        "DELETE FROM postkit_queue.workers w WHERE w.namespace = p_namespace "
        "AND w.heartbeat_at < v_now - 3 * w.heartbeat_interval;",
        "UPDATE postkit_queue.jobs j SET worker_id = to_char(j.run_at, 'YYYY') "
        "WHERE j.namespace = p_namespace;",
        # A cast through text calls the argument's output function: timestamp's is STABLE.
        "UPDATE postkit_queue.jobs j SET worker_id = (j.run_at AT TIME ZONE 'UTC')::text "
        "WHERE j.namespace = p_namespace;",
    ],
)
def test_a_stable_function_over_a_column_breaks_the_rule(
    analyzer: tuple[psycopg.Connection[Any], Catalog], statement: str
) -> None:
    assert any("a STABLE function over a column" in d for d in broken(analyzer, statement))


@pytest.mark.parametrize(
    "statement",
    [
        # The same computed from variables alone: Citus evaluates it once, before it routes.
        "UPDATE postkit_queue.jobs j SET run_at = v_now + p_delay "
        "WHERE j.namespace = p_namespace AND j.run_at < v_now - p_delay;",
        # The difference of two timestamps, and integer arithmetic, are IMMUTABLE.
        "DELETE FROM postkit_queue.workers w WHERE w.namespace = p_namespace "
        "AND v_now - w.heartbeat_at > 3 * w.heartbeat_interval;",
        "UPDATE postkit_queue.jobs j SET attempts = j.attempts + 1, run_at = v_job.run_at "
        "WHERE j.namespace = p_namespace AND j.id = v_job.id;",
        "UPDATE postkit_queue.jobs j SET state = 'pending' "
        "WHERE j.namespace = p_namespace AND j.id = v_any.id RETURNING j.id, j.payload;",
    ],
)
def test_the_same_over_variables_or_immutable_operators_passes(
    analyzer: tuple[psycopg.Connection[Any], Catalog], statement: str
) -> None:
    assert broken(analyzer, statement) == []


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE postkit_queue.jobs j SET worker_id = coalesce(j.worker_id, now()::text) "
        "WHERE j.namespace = p_namespace;",
        "UPDATE postkit_queue.jobs j SET priority = CASE WHEN v_now > now() THEN 1 ELSE 0 END "
        "WHERE j.namespace = p_namespace;",
    ],
)
def test_case_or_coalesce_over_a_function_that_is_not_immutable_breaks_the_rule(
    analyzer: tuple[psycopg.Connection[Any], Catalog], statement: str
) -> None:
    assert any("CASE or COALESCE" in d for d in broken(analyzer, statement))


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM postkit_queue.jobs j WHERE j.namespace = p_namespace "
        "RETURNING j.id, now() - j.created_at;",
        # PostgreSQL's contain_mutable_functions, which Citus asks here, looks into subqueries.
        "DELETE FROM postkit_queue.jobs j WHERE j.namespace = p_namespace "
        "RETURNING j.id, (SELECT now());",
    ],
)
def test_a_function_that_is_not_immutable_in_returning_breaks_the_rule(
    analyzer: tuple[psycopg.Connection[Any], Catalog], statement: str
) -> None:
    assert any("RETURNING" in d for d in broken(analyzer, statement))


UPSERT = (
    "INSERT INTO postkit_queue.queue_stats AS s (namespace, queue, minute, slot, completed) "
    "VALUES (p_namespace, 'q', v_now, 0, 1) ON CONFLICT (namespace, queue, minute, slot) "
)


@pytest.mark.parametrize(
    "conflict",
    [
        # Citus asks IMMUTABLE of ON CONFLICT's SET, columns or not (only a bare column
        # passes), of its WHERE, and of the arbiter's WHERE.
        "DO UPDATE SET minute = v_now + p_delay;",
        "DO UPDATE SET completed = s.completed + 1 WHERE s.minute < now();",
    ],
)
def test_a_function_that_is_not_immutable_in_on_conflict_breaks_the_rule(
    analyzer: tuple[psycopg.Connection[Any], Catalog], conflict: str
) -> None:
    assert any("ON CONFLICT" in d for d in broken(analyzer, UPSERT + conflict))


def test_an_on_conflict_update_of_columns_and_immutable_arithmetic_passes(
    analyzer: tuple[psycopg.Connection[Any], Catalog],
) -> None:
    conflict = "DO UPDATE SET completed = s.completed + excluded.completed, minute = v_now;"

    assert broken(analyzer, UPSERT + conflict) == []


def test_a_multiple_assignment_is_reported_as_not_analyzed(
    analyzer: tuple[psycopg.Connection[Any], Catalog],
) -> None:
    statement = (
        "UPDATE postkit_queue.jobs j SET (attempts, priority) = (0, 1) "
        "WHERE j.namespace = p_namespace;"
    )

    assert any("not analyzed" in d for d in broken(analyzer, statement))


def test_a_records_field_of_no_one_type_is_reported_unchecked(
    analyzer: tuple[psycopg.Connection[Any], Catalog],
) -> None:
    statement = (
        "UPDATE postkit_queue.jobs j SET attempts = 0 "
        "WHERE j.namespace = p_namespace AND j.id = v_any.no_such_column;"
    )

    assert any("no one known type" in d for d in broken(analyzer, statement))


def test_a_statement_of_a_table_not_sharded_is_not_checked(
    analyzer: tuple[psycopg.Connection[Any], Catalog],
) -> None:
    statement = "UPDATE postkit_queue.channel_key k SET key = k.key || now()::text;"

    assert broken(analyzer, statement) == []


def test_a_node_tree_reads_as_postgresql_writes_it() -> None:
    tree = parse_node_tree(
        r"({OPEXPR :opno 1327 :opfuncid 1189 :args ({VAR :varno 1} {CONST :constvalue 16 "
        r'[ 64 66 ]}) :name a\ b\}c :colnames ("x" "y")})'
    )

    assert tree == [
        {
            "node": "OPEXPR",
            "opno": ["1327"],
            "opfuncid": ["1189"],
            "args": [
                [
                    {"node": "VAR", "varno": ["1"]},
                    {"node": "CONST", "constvalue": ["16", "[", "64", "66", "]"]},
                ]
            ],
            "name": ["a b}c"],
            "colnames": [['"x"', '"y"']],
        }
    ]
