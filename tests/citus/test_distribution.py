"""postkit install --citus: what the distribution step asks of Citus, and its refusal where no
Citus is.

Citus is not installed on CI's servers, so the step's calls are checked against stand-ins for
Citus's three functions and its table of placed tables (pg_dist_partition), created in a
database of the test's own, that record each call and do nothing else: they show what a Citus
coordinator would be asked, not that Citus accepts it (docs/scaling.md, "What was verified
where").
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from postkit.cli import main
from postkit.errors import InvalidAccessError, SchemaMismatchError
from postkit.queue import QueueClient, install
from postkit.queue.admin import (
    assign_namespace,
    distribute_on_citus,
    enable_tenant_isolation,
    grant_access,
)
from tests import on_citus
from tests.conftest import new_database

# On a real Citus cluster the stand-ins would clash with Citus's own objects, and the role
# changes below would reach every node: tests/citus/test_on_a_cluster.py runs there instead.
pytestmark = pytest.mark.skipif(on_citus.ENABLED, reason="stand-ins for Citus, not Citus")

# Citus's table of placed tables, whose presence tells the schema that Citus is installed.
CITUS_CATALOG = """
SET allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (logicalrelid regclass PRIMARY KEY);
RESET allow_system_table_mods;
"""

STAND_INS = (
    CITUS_CATALOG
    + """
CREATE TABLE public.citus_calls (n serial, call text, object text, argument text, colocate text);
CREATE FUNCTION pg_catalog.create_distributed_table(
    table_name regclass, distribution_column text, colocate_with text DEFAULT 'default')
RETURNS void LANGUAGE sql AS $$
    INSERT INTO pg_catalog.pg_dist_partition VALUES (table_name);  -- twice: an error, as Citus
    INSERT INTO public.citus_calls (call, object, argument, colocate)
    VALUES ('create_distributed_table', table_name::text, distribution_column, colocate_with)
$$;
CREATE FUNCTION pg_catalog.create_reference_table(table_name regclass)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO pg_catalog.pg_dist_partition VALUES (table_name);
    INSERT INTO public.citus_calls (call, object)
    VALUES ('create_reference_table', table_name::text)
$$;
CREATE FUNCTION pg_catalog.create_distributed_function(
    function_name regprocedure, distribution_arg_name text DEFAULT NULL,
    colocate_with text DEFAULT 'default')
RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.citus_calls (call, object, argument, colocate)
    VALUES ('create_distributed_function', function_name::text, distribution_arg_name,
            colocate_with)
$$;
"""
)


@pytest.fixture
def coordinator(fresh_database: str) -> Iterator[psycopg.Connection]:
    """A database with the queue installed and Citus's functions stood in for. The step gives
    the queue's owner, a role of the whole server, LOGIN: it goes back to NOLOGIN afterwards,
    or the other databases' installs would refuse it."""
    with psycopg.connect(fresh_database, autocommit=True) as connection:
        install(connection)
        connection.execute(STAND_INS)
        try:
            yield connection
        finally:
            connection.execute("ALTER ROLE postkit_queue_owner NOLOGIN")


def owner_can_log_in(connection: psycopg.Connection) -> bool:
    row = connection.execute(
        "SELECT r.rolcanlogin FROM pg_roles r JOIN pg_namespace n ON n.nspowner = r.oid"
        " WHERE n.nspname = 'postkit_queue'"
    ).fetchone()
    assert row is not None
    return bool(row[0])


def calls(connection: psycopg.Connection, call: str) -> list[tuple[str, str | None, str | None]]:
    rows = connection.execute(
        "SELECT object, argument, colocate FROM public.citus_calls WHERE call = %s ORDER BY n",
        (call,),
    ).fetchall()
    return [(str(name), argument, colocate) for name, argument, colocate in rows]


def test_every_table_with_a_namespace_is_sharded_by_it_beside_jobs(
    coordinator: psycopg.Connection,
) -> None:
    with coordinator.cursor() as cursor:
        distribute_on_citus(cursor)

    sharded = calls(coordinator, "create_distributed_table")
    namespaced = {
        f"postkit_queue.{name}"
        for (name,) in coordinator.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE c.relnamespace = 'postkit_queue'::regnamespace AND c.relkind = 'r' "
            "AND a.attname = 'namespace' AND c.relname <> 'tenants'"
        )
    }
    assert sharded[0] == ("postkit_queue.jobs", "namespace", "default")
    assert {name for name, _, _ in sharded} == namespaced
    assert all(
        (argument, colocate) == ("namespace", "postkit_queue.jobs")
        for _, argument, colocate in sharded[1:]
    )


def test_the_tables_without_a_namespace_and_the_tenants_become_reference_tables(
    coordinator: psycopg.Connection,
) -> None:
    with coordinator.cursor() as cursor:
        distribute_on_citus(cursor)

    referenced = {name for name, _, _ in calls(coordinator, "create_reference_table")}
    assert "postkit_queue.tenants" in referenced
    assert "postkit_queue.migrations" in referenced
    assert "postkit_queue.jobs" not in referenced


# The calls that make jobs ready for others, and the operator's calls that cancel jobs (whose
# waiters are told): they run on the coordinator, where the listeners of their notifications
# are (tests/citus/test_schema_follows_the_rules.py checks the list).
ON_THE_COORDINATOR = {
    "cancel",
    "cancel_queue",
    "cancel_tree",
    "cancel_run",
    "send_event",
    "purge_queue",
    "purge_queue_before",
    "push",
    "push_batch",
    "redrive",
    "set_paused",
    "pause_queue",
    "resume_queue",
    "configure_queue",
    "write_queue_settings",
    "fire_schedule",
    "fire_schedule_run",
    # A waiting worker's listener records its own backend (pg_backend_pid), the coordinator's.
    "wait_for_slot",
    "stop_waiting",
}


def test_each_function_taking_a_namespace_is_delegated_by_it_and_every_helper_is_created(
    coordinator: psycopg.Connection,
) -> None:
    """All but the calls that make jobs ready, which run on the coordinator."""
    with coordinator.cursor() as cursor:
        distribute_on_citus(cursor)

    registered = {
        name: (argument, colocate)
        for name, argument, colocate in calls(coordinator, "create_distributed_function")
    }
    functions = coordinator.execute(
        "SELECT p.oid::regprocedure::text, coalesce((p.proargnames)[1] = 'p_namespace', false) "
        "AND p.proname <> ALL (%s) "
        "FROM pg_proc p WHERE p.pronamespace = 'postkit_queue'::regnamespace "
        "AND p.proname <> 'distribute_on_citus'",
        (sorted(ON_THE_COORDINATOR),),
    ).fetchall()
    assert set(registered) == {name for name, _ in functions}
    for name, delegated in functions:
        expected = ("p_namespace", "postkit_queue.jobs") if delegated else (None, "default")
        assert registered[name] == expected, name
    assert registered["postkit_queue.pull(text,text,text,interval,integer)"][0] == "p_namespace"
    pushes = [name for name in registered if name.startswith("postkit_queue.push(")]
    assert pushes and all(registered[name][0] is None for name in pushes)


def test_the_owner_logs_in_since_citus_reaches_the_other_nodes_as_the_current_user(
    coordinator: psycopg.Connection,
) -> None:
    assert not owner_can_log_in(coordinator)
    distribute_on_citus(coordinator.cursor())
    assert owner_can_log_in(coordinator)


def test_a_first_install_where_citus_is_takes_the_owner_that_logs_in(
    coordinator: psycopg.Connection, server_dsn: str
) -> None:
    """Another database of the same server, with Citus (its catalog stood in for), installed
    after the owner was given LOGIN."""
    distribute_on_citus(coordinator.cursor())
    with new_database(server_dsn) as other, psycopg.connect(other, autocommit=True) as second:
        second.execute(CITUS_CATALOG)
        install(second)
        assert owner_can_log_in(second)


def test_push_batch_is_planned_for_each_call_on_citus_and_once_per_session_elsewhere(
    coordinator: psycopg.Connection,
) -> None:
    def plan_mode() -> object:
        row = coordinator.execute(
            "SELECT p.proconfig FROM pg_proc p WHERE p.oid = 'postkit_queue.push_batch'::regproc"
        ).fetchone()
        assert row is not None
        return [setting for setting in row[0] if setting.startswith("plan_cache_mode")]

    assert plan_mode() == ["plan_cache_mode=force_generic_plan"]
    with coordinator.cursor() as cursor:
        distribute_on_citus(cursor)
    assert plan_mode() == ["plan_cache_mode=force_custom_plan"]


def _notified_after_a_push(coordinator: psycopg.Connection, dsn: str) -> bool:
    channel = coordinator.execute("SELECT postkit_queue.channel('shop', 'emails')").fetchone()
    assert channel is not None
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel[0])))
        listener.execute("SELECT postkit_queue.request_wakeup('shop', ARRAY['emails'])")
        QueueClient(coordinator.cursor(), namespace="shop").push("emails", {})
        notified = any(True for _ in listener.notifies(timeout=0.5, stop_after=1))
        # A node that cannot notify leaves the request to one that can.
        [(requested,)] = listener.execute(
            "SELECT requested_at IS NOT NULL FROM postkit_queue.wakeups"
            " WHERE namespace = 'shop' AND queue = 'emails'"
        ).fetchall()
        assert requested is not notified
        return notified


@pytest.mark.parametrize(("group", "notifies"), [(0, True), (3, False)])
def test_on_citus_only_the_coordinator_notifies(
    coordinator: psycopg.Connection, fresh_database: str, group: int, notifies: bool
) -> None:
    """A delegated push runs on the worker node that owns its namespace (group 3 here), where
    no listener is and a NOTIFY would fail a two-phase commit; the coordinator is group 0."""
    coordinator.execute("SET allow_system_table_mods = on")
    coordinator.execute("CREATE TABLE pg_catalog.pg_dist_local_group (groupid integer)")
    coordinator.execute("RESET allow_system_table_mods")
    # Citus grants its metadata tables' reads to PUBLIC.
    coordinator.execute("GRANT SELECT ON pg_catalog.pg_dist_local_group TO PUBLIC")
    coordinator.execute("INSERT INTO pg_catalog.pg_dist_local_group VALUES (%s)", (group,))
    assert _notified_after_a_push(coordinator, fresh_database)
    with coordinator.cursor() as cursor:
        distribute_on_citus(cursor)

    assert _notified_after_a_push(coordinator, fresh_database) is notifies


def test_a_second_run_after_an_upgrade_leaves_placed_tables_and_registers_every_function(
    coordinator: psycopg.Connection,
) -> None:
    with coordinator.cursor() as cursor:
        distribute_on_citus(cursor)
        placed = len(calls(coordinator, "create_distributed_table"))
        registered = len(calls(coordinator, "create_distributed_function"))
        second = distribute_on_citus(cursor)

    assert len(calls(coordinator, "create_distributed_table")) == placed
    assert {placement for name, placement in second if "(" not in name} == {"already placed"}
    assert len(calls(coordinator, "create_distributed_function")) == 2 * registered


@pytest.mark.parametrize("record", ["grant", "assignment", "isolation"])
def test_the_step_refuses_a_queue_whose_roles_are_recorded_by_oid(
    coordinator: psycopg.Connection, record: str
) -> None:
    """Each node gives a role its own OID: a grant or an assignment recorded on the coordinator
    would name another role, or none, on the node that checks it."""
    with coordinator.cursor() as cursor:
        if record == "grant":
            grant_access(cursor, "pg_monitor", "producer")
        elif record == "assignment":
            assign_namespace(cursor, "shop", "pg_monitor")
        else:
            enable_tenant_isolation(cursor)
        with pytest.raises(SchemaMismatchError, match="record roles by OID"):
            distribute_on_citus(cursor)

    assert calls(coordinator, "create_distributed_table") == []


def test_a_queue_placed_on_citus_takes_no_grant_no_assignment_and_no_isolation(
    coordinator: psycopg.Connection,
) -> None:
    with coordinator.cursor() as cursor:
        distribute_on_citus(cursor)
        with pytest.raises(InvalidAccessError, match="placed on Citus"):
            grant_access(cursor, "pg_monitor", "producer")
        with pytest.raises(InvalidAccessError, match="placed on Citus"):
            assign_namespace(cursor, "shop", "pg_monitor")
        with pytest.raises(InvalidAccessError, match="placed on Citus"):
            enable_tenant_isolation(cursor)

    assert coordinator.execute("SELECT count(*) FROM postkit_queue.grants").fetchone() == (0,)


def test_on_plain_postgresql_the_step_refuses_and_distributes_nothing(
    fresh_database: str,
) -> None:
    with psycopg.connect(fresh_database) as connection:
        install(connection)
        with (
            pytest.raises(SchemaMismatchError, match="Citus coordinator"),
            connection.cursor() as cursor,
        ):
            distribute_on_citus(cursor)


def test_install_citus_on_plain_postgresql_says_why_in_one_line(fresh_database: str) -> None:
    result = CliRunner().invoke(main, ["install", "--dsn", fresh_database, "--citus"])

    assert result.exit_code == 1
    assert "runs on a Citus coordinator" in result.output
    assert "Traceback" not in result.output


def test_where_citus_is_an_owner_that_logs_in_with_a_password_is_refused(
    coordinator: psycopg.Connection, server_dsn: str
) -> None:
    """A password someone knows would let them in as the owner of every job."""
    distribute_on_citus(coordinator.cursor())
    coordinator.execute("ALTER ROLE postkit_queue_owner PASSWORD 'known'")
    try:
        with new_database(server_dsn) as other, psycopg.connect(other, autocommit=True) as second:
            second.execute(CITUS_CATALOG)
            with pytest.raises(InvalidAccessError, match="with a password"):
                install(second)
    finally:
        coordinator.execute("ALTER ROLE postkit_queue_owner PASSWORD NULL")
