"""The installed schema is Citus-ready by construction (docs/scaling.md): checked here on plain
PostgreSQL, in the catalog and by PostgreSQL's parser over every function body."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import psycopg
import pytest
from pglast.parser import parse_sql_json

from tests.citus.modification_rules import Catalog, modification_violations
from tests.citus.sql_rules import (
    Function,
    Schema,
    Violation,
    called_functions,
    planned_generically,
    violations,
)

# Tables with a namespace column that Citus keeps whole on every node (reference tables) instead
# of sharding: the roles' namespace assignments, which the functions that check a caller's
# namespaces read on whichever node runs them.
REFERENCE_TABLES = frozenset({"tenants"})

# Functions that read or write the sharded tables without taking a namespace first: each runs
# on the coordinator alone, across every namespace (docs/scaling.md).
COORDINATOR_ONLY = {
    "namespaces": "lists every namespace: a skip scan of each table, across all shards",
}


@pytest.fixture(scope="module")
def catalog(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn) as connection:
        yield connection


@pytest.fixture(scope="module")
def schema(catalog: psycopg.Connection) -> Schema:
    sharded = catalog.execute(
        "SELECT table_name FROM information_schema.columns "
        "WHERE table_schema = 'postkit_queue' AND column_name = 'namespace'"
    ).fetchall()
    functions = (
        "SELECT n.nspname, p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
    )
    volatile = catalog.execute(f"{functions} WHERE p.provolatile = 'v'").fetchall()
    set_returning = catalog.execute(f"{functions} WHERE p.proretset").fetchall()
    return Schema(
        sharded_tables=frozenset(name for (name,) in sharded) - REFERENCE_TABLES,
        volatile_functions=frozenset((schema, name) for schema, name in volatile),
        set_returning_functions=frozenset((schema, name) for schema, name in set_returning),
    )


@pytest.fixture(scope="module")
def functions(catalog: psycopg.Connection) -> list[tuple[Function, str, str]]:
    """Every function of the schema, with its language and its source, planned as on Citus: a
    function counts as planned generically when it sets force_generic_plan, or runs under a
    caller that does, unless distribute_on_citus gives it a plan mode of its own there."""
    rows = catalog.execute(
        """
        SELECT p.proname, pg_get_functiondef(p.oid), (p.proargnames)[1] = 'p_namespace',
               (SELECT split_part(c, '=', 2) FROM unnest(p.proconfig) AS c
                WHERE c LIKE 'plan_cache_mode=%'),
               l.lanname, p.prosrc
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.pronamespace = 'postkit_queue'::regnamespace
        ORDER BY p.proname
        """
    ).fetchall()
    own_mode = {name: mode for name, _, _, mode, _, _ in rows}
    (placement,) = [source for name, _, _, _, _, source in rows if name == "distribute_on_citus"]
    own_mode.update(
        re.findall(
            r"ALTER FUNCTION postkit_queue\.(\w+)\([^)]*\)\s+SET plan_cache_mode = (\w+)",
            placement,
        )
    )
    calls = {
        name: called_functions(definition)
        for name, definition, _, _, language, _ in rows
        if language == "plpgsql"
    }
    generic = planned_generically(own_mode, calls)
    return [
        (
            Function(name, definition, "p_namespace" if namespaced else None, name in generic),
            language,
            source,
        )
        for name, definition, namespaced, _, language, source in rows
    ]


def test_every_function_body_follows_the_rules(
    functions: list[tuple[Function, str, str]], schema: Schema
) -> None:
    found: list[Violation] = []
    for function, language, _ in functions:
        if language == "plpgsql":
            found.extend(violations(function, schema))
    assert not found, "\n".join(map(str, found))


def _tables_named(sql: str, tables: frozenset[str]) -> set[str]:
    named: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            relation = node.get("RangeVar")
            if isinstance(relation, dict) and relation.get("relname") in tables:
                named.add(relation["relname"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(parse_sql_json(sql)))
    return named


def test_no_sql_language_function_reads_the_queue_tables(
    functions: list[tuple[Function, str, str]], schema: Schema
) -> None:
    """Citus before PostgreSQL 18 cannot plan a SQL-language function's body that reads a
    distributed table; such functions are PL/pgSQL."""
    reading = {
        function.name: tables
        for function, language, source in functions
        if language == "sql" and (tables := _tables_named(source, schema.sharded_tables))
    }
    assert reading == {}


def test_every_function_that_touches_the_queue_tables_takes_the_namespace_first(
    functions: list[tuple[Function, str, str]], schema: Schema
) -> None:
    """Citus delegates a call to the node of its namespace by the function's first argument;
    a function without one runs on the coordinator, and must be known to."""
    unplaced = sorted(
        function.name
        for function, language, source in functions
        if language == "plpgsql"
        and function.namespace_parameter is None
        and function.name not in COORDINATOR_ONLY
        and _tables_named(_body_statements(source), schema.sharded_tables)
    )
    assert unplaced == []
    listed_without_cause = sorted(
        function.name
        for function, _, source in functions
        if function.name in COORDINATOR_ONLY
        and (
            function.namespace_parameter is not None
            or not _tables_named(_body_statements(source), schema.sharded_tables)
        )
    )
    assert listed_without_cause == []


def _body_statements(source: str) -> str:
    """A PL/pgSQL body turned into something the SQL parser reads for table names: every
    relation it names after FROM, JOIN, INTO, UPDATE or USING."""
    names = re.findall(
        r"\b(?:FROM|JOIN|INTO|UPDATE|USING)\s+postkit_queue\.(\w+)", source, re.IGNORECASE
    )
    return "; ".join(f"SELECT FROM postkit_queue.{name}" for name in names) or "SELECT"


def test_every_unique_index_of_a_sharded_table_leads_with_the_namespace(
    catalog: psycopg.Connection,
) -> None:
    """Citus enforces a primary key or a unique index only when it holds the distribution
    column; leading with it also keeps each namespace's rows together in the index."""
    rows = catalog.execute(
        """
        SELECT i.relname FROM pg_index x
        JOIN pg_class c ON c.oid = x.indrelid
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'namespace'
        WHERE c.relnamespace = 'postkit_queue'::regnamespace AND x.indisunique
          AND x.indkey[0] <> a.attnum
        """
    ).fetchall()
    assert rows == []


def test_every_namespace_column_is_not_null(catalog: psycopg.Connection) -> None:
    rows = catalog.execute(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = 'postkit_queue' "
        "AND column_name = 'namespace' AND is_nullable = 'YES'"
    ).fetchall()
    assert rows == []


def test_every_identity_column_is_bigint(catalog: psycopg.Connection) -> None:
    """Citus gives each node its own range of a bigint sequence; a smaller type runs out."""
    rows = catalog.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'postkit_queue' AND is_identity = 'YES' AND data_type <> 'bigint'"
    ).fetchall()
    assert rows == []


# Delegated calls that may raise a wake-up: a worker's loop, which gains most from running
# whole on the namespace's node. Delegated alone (outside a transaction block), their wake-ups
# reach no listener, which finds the job at its fallback poll, or the result at its next read
# (docs/scaling.md). Every other function that may notify runs on the coordinator on Citus.
WAKE_UPS_LEFT_TO_THE_POLL = {
    "ack": "a kept result, a freed flow slot, a child made pending",
    "ack_batch": "as ack, for a batch",
    "ack_many": "as ack, for a batch",
    "fail": "a dead letter's result, a freed flow slot",
    "nack": "a retry due at once, a freed flow slot",
    "park": "a run due earlier than the workers' next look",
    "wait_event": "as park",
    "release": "the released job",
    "tick_timeouts": "a rescued job, a freed flow slot",
}


def test_every_call_that_may_notify_runs_on_the_coordinator_or_is_a_workers_call(
    functions: list[tuple[Function, str, str]], catalog: psycopg.Connection
) -> None:
    """Only the API's functions are called alone, and so delegated; a helper runs inside the
    body that calls it."""
    calls = {
        function.name: (
            called_functions(function.definition)
            if language == "plpgsql"
            else set(re.findall(r"postkit_queue\.(\w+)\(", source))
        )
        for function, language, source in functions
    }
    notifying = {"send_notification"}
    while grown := {name for name, callees in calls.items() if callees & notifying} - notifying:
        notifying |= grown
    (placement,) = [
        source for function, _, source in functions if function.name == "distribute_on_citus"
    ]
    listed = re.search(r"p\.proname <> ALL \(ARRAY\[(.*?)\]\)", placement, re.DOTALL)
    assert listed is not None
    on_the_coordinator = set(re.findall(r"'(\w+)'", listed.group(1)))
    api = {name for (name,) in catalog.execute("SELECT name FROM postkit_queue.api")}
    delegated = {function.name for function, _, _ in functions if function.namespace_parameter}
    delegated = (delegated & api) - on_the_coordinator
    assert sorted(notifying & delegated) == sorted(WAKE_UPS_LEFT_TO_THE_POLL)
    assert on_the_coordinator - RECORD_THE_CALLERS_BACKEND <= notifying, "listed without cause"
    for function, _, source in functions:
        if function.name in RECORD_THE_CALLERS_BACKEND:
            assert "pg_backend_pid()" in source, function.name


# The calls that record the calling backend, a waiting worker's listener (pg_backend_pid): on
# Citus they run on the coordinator, where the listener's backend is, as the notifying ones do.
RECORD_THE_CALLERS_BACKEND = {"wait_for_slot", "stop_waiting"}


def test_no_modification_holds_what_citus_refuses_in_one(
    functions: list[tuple[Function, str, str]], catalog: psycopg.Connection, schema: Schema
) -> None:
    """A STABLE function over a column, a CASE or COALESCE over one that is not IMMUTABLE, or
    one that is not IMMUTABLE in RETURNING (modification_rules.py)."""
    analyzed = Catalog.read(catalog)
    found: list[Violation] = []
    for function, language, _ in functions:
        if language == "plpgsql":
            found.extend(
                modification_violations(catalog, analyzed, function, schema.sharded_tables)
            )
    assert not found, "\n".join(map(str, found))
