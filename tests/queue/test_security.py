"""Least privilege, tenant isolation with row-level security, and hardening.

Roles here are real, non-superuser database roles; the test's superuser session switches to
them with SET ROLE, after which PostgreSQL applies their privileges and policies exactly as it
would to an application connecting as them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from postkit import errors
from postkit.cli import main
from postkit.queue import QueueClient
from postkit.queue.admin import assign_namespace, enable_tenant_isolation, grant_access


@pytest.fixture
def make_role(database: str) -> Iterator[Callable[[], str]]:
    """Create NOLOGIN roles; each is dropped with everything granted to it afterwards."""
    created: list[str] = []

    def _make() -> str:
        role = f"postkit_test_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(database, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        created.append(role)
        return role

    yield _make
    with psycopg.connect(database, autocommit=True) as admin:
        for role in created:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def as_role(database: str, role: str, namespace: str) -> QueueClient:
    """A client whose session acts as ``role`` (autocommit, so each call stands alone)."""
    connection = psycopg.connect(database, autocommit=True)
    connection.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    return QueueClient(connection.cursor(), namespace=namespace)


def admin(database: str, action: Callable[[psycopg.Cursor], None]) -> None:
    with psycopg.connect(database) as connection, connection.cursor() as cursor:
        action(cursor)


@pytest.fixture
def tenants(database: str, make_role: Callable[[], str]) -> tuple[str, str]:
    """Two worker roles, each assigned its own namespace, with isolation on."""
    role_a, role_b = make_role(), make_role()

    def setup(cursor: psycopg.Cursor) -> None:
        for role, namespace in ((role_a, "tenant-a"), (role_b, "tenant-b")):
            grant_access(cursor, role, "worker")
            assign_namespace(cursor, namespace, role)
        enable_tenant_isolation(cursor)

    admin(database, setup)
    return role_a, role_b


def test_a_producer_may_push_but_not_pull(database: str, make_role: Callable[[], str]) -> None:
    role = make_role()
    admin(database, lambda cursor: grant_access(cursor, role, "producer"))
    producer = as_role(database, role, "shop")

    assert producer.push("emails", {"to": "ada"}) is not None
    with pytest.raises(errors.PermissionDeniedError):
        producer.pull("emails")


def test_a_worker_may_pull_and_ack_but_not_redrive_or_purge(
    database: str, make_role: Callable[[], str]
) -> None:
    role = make_role()
    admin(database, lambda cursor: grant_access(cursor, role, "worker"))
    worker = as_role(database, role, "shop")
    worker.push("emails", 1)
    job = worker.pull("emails")
    assert job is not None and worker.fail(job, error="boom")

    with pytest.raises(errors.PermissionDeniedError):
        worker.redrive([job.id])
    with pytest.raises(errors.PermissionDeniedError, match="operator"):
        worker.purge_queue("emails")
    with pytest.raises(errors.PermissionDeniedError, match="operator"):
        worker.cancel(job.id)


def test_an_unknown_role_or_access_kind_is_refused(database: str) -> None:
    with pytest.raises(errors.InvalidAccessError, match="no role"):
        admin(database, lambda cursor: grant_access(cursor, "no_such_role_x", "worker"))
    with pytest.raises(errors.InvalidAccessError, match="producer, worker"):
        admin(database, lambda cursor: grant_access(cursor, "postgres", "root"))  # type: ignore[arg-type]


def test_a_tenant_cannot_pull_another_tenants_jobs(database: str, tenants: tuple[str, str]) -> None:
    role_a, role_b = tenants
    as_role(database, role_b, "tenant-b").push("emails", {"secret": "b"})

    intruder = as_role(database, role_a, "tenant-b")

    assert intruder.pull("emails") is None
    assert as_role(database, role_b, "tenant-b").pull("emails") is not None


def test_a_tenant_cannot_see_or_change_another_tenants_rows_with_hand_written_sql(
    database: str, tenants: tuple[str, str]
) -> None:
    role_a, role_b = tenants
    as_role(database, role_b, "tenant-b").push("emails", {"secret": "b"})
    intruder = as_role(database, role_a, "tenant-a").cursor

    intruder.execute("SELECT count(*) FROM postkit_queue.jobs")
    seen = intruder.fetchone()
    intruder.execute("UPDATE postkit_queue.jobs SET payload = '{}' WHERE namespace = 'tenant-b'")
    updated = intruder.rowcount
    intruder.execute("DELETE FROM postkit_queue.jobs")

    assert seen == (0,) and updated == 0
    job = as_role(database, role_b, "tenant-b").pull("emails")
    assert job is not None and job.payload == {"secret": "b"}


def test_a_tenant_cannot_push_into_another_tenants_namespace(
    database: str, tenants: tuple[str, str]
) -> None:
    role_a, _ = tenants

    with pytest.raises(errors.PermissionDeniedError):
        as_role(database, role_a, "tenant-b").push("emails", 1)


def test_a_tenant_cannot_ack_or_redrive_another_tenants_jobs(
    database: str, tenants: tuple[str, str], make_role: Callable[[], str]
) -> None:
    _, role_b = tenants
    owner_b = as_role(database, role_b, "tenant-b")
    owner_b.push("emails", 1)
    owner_b.push("emails", 2)
    running = owner_b.pull("emails")
    dead = owner_b.pull("emails")
    assert running is not None and dead is not None and owner_b.fail(dead, error="x")
    operator = make_role()

    def promote(cursor: psycopg.Cursor) -> None:
        grant_access(cursor, operator, "operator")
        assign_namespace(cursor, "tenant-a", operator)

    admin(database, promote)
    intruder = as_role(database, operator, "tenant-b")

    assert intruder.ack(running) is False
    assert intruder.redrive([dead.id]) == []
    assert owner_b.get_job(running.id) is not None
    assert owner_b.dead_letters()[0].redriven_job_id is None


def test_objects_planted_in_public_cannot_hijack_a_call(database: str, namespace: str) -> None:
    fixed_token = "00000000-0000-0000-0000-000000000000"
    with psycopg.connect(database, autocommit=True) as attacker:
        attacker.execute(
            f"CREATE FUNCTION public.gen_random_uuid() RETURNS uuid LANGUAGE sql"
            f" AS $$ SELECT '{fixed_token}'::uuid $$"
        )
        attacker.execute(
            "CREATE FUNCTION public.btrim(text) RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$"
        )
        attacker.execute(
            "CREATE FUNCTION public.char_length(text) RETURNS integer LANGUAGE sql"
            " AS $$ SELECT 1 $$"
        )
    victim = psycopg.connect(database, autocommit=True)
    victim.execute("SET search_path = public, pg_catalog")
    queue = QueueClient(victim.cursor(), namespace=namespace)

    queue.push("emails", 1)
    job = queue.pull("emails")

    assert job is not None and job.claim_token != fixed_token
    with pytest.raises(errors.InvalidNameError):
        queue.push(" ", 1)  # btrim was not replaced: a blank name is still blank
    with pytest.raises(errors.InvalidNameError):
        queue.push("q" * 129, 1)  # char_length was not replaced either
    victim.close()


def test_no_function_is_security_definer_and_every_one_pins_its_search_path(
    database: str,
) -> None:
    """Pinned means a SET search_path, or a SQL-standard body (is_name, is_duration), whose
    names are bound when the function is created, so no caller's search_path ever reaches it."""
    with psycopg.connect(database) as connection:
        rows = connection.execute(
            "SELECT p.proname, p.prosecdef, coalesce(p.proconfig, '{}'),"
            " p.prosqlbody IS NOT NULL"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'postkit_queue'"
        ).fetchall()

    assert rows
    assert [name for name, definer, _, _ in rows if definer] == []
    unpinned = [
        name
        for name, _, config, bound_at_creation in rows
        if not bound_at_creation
        and not any(setting.startswith("search_path=") for setting in config)
    ]
    assert unpinned == []
    assert sorted(name for name, _, _, bound_at_creation in rows if bound_at_creation) == [
        "is_duration",
        "is_name",
    ]


def test_postkit_install_grant_and_tenant_isolation_from_the_command_line(
    database: str, make_role: Callable[[], str]
) -> None:
    producer, worker = make_role(), make_role()

    result = CliRunner().invoke(
        main,
        [
            "install",
            "--dsn",
            database,
            "--json",
            "--grant",
            f"{producer}:producer",
            "--grant",
            worker,
            "--assign",
            f"shop={producer}",
            "--assign",
            f"shop={worker}",
            "--tenant-isolation",
        ],
    )

    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["granted"] == [
        {"role": producer, "access": "producer"},
        {"role": worker, "access": "worker"},
    ]
    assert as_role(database, producer, "shop").push("emails", 1) is not None
    with pytest.raises(errors.PermissionDeniedError):
        as_role(database, producer, "other").push("emails", 1)
    assert as_role(database, worker, "shop").pull("emails") is not None


def test_postkit_install_rejects_an_unknown_access_kind(database: str) -> None:
    result = CliRunner().invoke(main, ["install", "--dsn", database, "--grant", "web:admin"])

    assert result.exit_code == 2 and "producer, worker, operator" in result.output
