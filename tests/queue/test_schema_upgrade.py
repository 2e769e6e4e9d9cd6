"""An upgrade reaches exactly what a fresh install creates, and keeps every job.

The current definition of the schema is sql/schema/; an older install reaches it through the
deltas of sql/migrations/ (and the current functions). These tests install one database fresh
and another from an earlier version's files (tests/queue/legacy.py), with jobs in every state,
upgrade the second, and compare what PostgreSQL's catalogs say about both: functions (with a
hash of each body and their settings), tables and columns, indexes, constraints, types,
policies, ownership and grants. The same holds with roles granted and tenant isolation on
before the upgrade, for a database owner installing as itself, and through psql.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.queue import QueueClient, install
from postkit.queue.schema import (
    install_script,
    latest_version,
    migrations,
    schema_files,
    schema_fingerprint,
)
from tests.conftest import new_database
from tests.queue.legacy import install_legacy, legacy_files, push_in_every_state
from tests.queue.psql import run_psql

# What PostgreSQL says about every object of the schema, one query per kind of object. Object
# identifiers and attribute numbers differ between the two databases; names and definitions
# must not. An ACL is compared as a set: the order of its entries follows the order of the
# grants, which carries no meaning.
CATALOG: dict[str, str] = {
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid),
               l.lanname, md5(p.prosrc), p.proconfig, p.prosecdef, p.provolatile,
               p.proparallel, pg_get_expr(p.proargdefaults, 0), p.proowner::regrole::text,
               array(SELECT a::text FROM unnest(p.proacl) AS a ORDER BY 1)
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.pronamespace = 'postkit_queue'::regnamespace ORDER BY 1, 2""",
    "relations": """
        SELECT c.relname, c.relkind, c.reloptions, c.relowner::regrole::text,
               array(SELECT a::text FROM unnest(c.relacl) AS a ORDER BY 1),
               c.relrowsecurity, c.relforcerowsecurity
        FROM pg_class c WHERE c.relnamespace = 'postkit_queue'::regnamespace ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity,
               rank() OVER (PARTITION BY c.relname ORDER BY a.attnum)
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = 'postkit_queue'::regnamespace AND c.relkind IN ('r', 'p')
          AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 7""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'postkit_queue'
        ORDER BY 1""",
    "constraints": """
        SELECT c.conrelid::regclass::text, c.conname, c.contype, pg_get_constraintdef(c.oid)
        FROM pg_constraint c WHERE c.connamespace = 'postkit_queue'::regnamespace
        ORDER BY 1, 2""",
    "types": """
        SELECT t.typname, t.typowner::regrole::text,
               array(SELECT e.enumlabel FROM pg_enum e WHERE e.enumtypid = t.oid
                     ORDER BY e.enumsortorder)
        FROM pg_type t WHERE t.typnamespace = 'postkit_queue'::regnamespace AND t.typtype = 'e'
        ORDER BY 1""",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
        FROM pg_policies WHERE schemaname = 'postkit_queue' ORDER BY 1, 2""",
    "schema": """
        SELECT n.nspowner::regrole::text,
               array(SELECT a::text FROM unnest(n.nspacl) AS a ORDER BY 1) FROM pg_namespace n
        WHERE n.nspname = 'postkit_queue'""",
    "api": "SELECT name, access FROM postkit_queue.api ORDER BY 1",
    "versions": "SELECT version, name FROM postkit_queue.migrations ORDER BY 1",
}


def catalog(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as connection:
        return {kind: connection.execute(query).fetchall() for kind, query in CATALOG.items()}


@pytest.fixture
def other_database(server_dsn: str) -> Iterator[str]:
    with new_database(server_dsn) as database:
        yield database


@pytest.fixture
def fresh_catalog(other_database: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(other_database) as connection:
        install(connection)
    return catalog(other_database)


@pytest.mark.parametrize("version", [1, 8, 15])
def test_an_upgrade_reaches_the_objects_of_a_fresh_install(
    fresh_database: str, fresh_catalog: dict[str, list[tuple[Any, ...]]], version: int
) -> None:
    with psycopg.connect(fresh_database) as connection:
        install_legacy(connection, version)
        push_in_every_state(connection)
        result = install(connection)
        assert (result.previous_version, result.version) == (version, latest_version())
        assert result.applied == tuple(range(version + 1, latest_version() + 1))

    upgraded = catalog(fresh_database)
    for kind in CATALOG:
        assert upgraded[kind] == fresh_catalog[kind], kind


def test_an_upgrade_from_version_1_keeps_jobs_claims_and_dead_letters(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as connection:
        install_legacy(connection, 1)
        before = push_in_every_state(connection)
        jobs = before["jobs"]
        install(connection)
        connection.commit()

        client = QueueClient(connection.cursor(), namespace="app")
        states = {name: client.get_job(job_id) for name, job_id in jobs.items()}
        assert {name: job.state if job else None for name, job in states.items()} == {
            "running": "running",
            "retried": "pending",
            "dead": "dead",
            "pending": "pending",
            "scheduled": "pending",
        }
        assert [e["error"] for e in states["retried"].errors] == ["flaky"]  # type: ignore[union-attr]
        # The claim taken before the upgrade still settles, with its token and only with it.
        assert client.ack(jobs["running"], claim_token=before["token"]) is True
        assert [d.job_id for d in client.dead_letters(queue="emails")] == [jobs["dead"]]
        assert [r.job_id for r in client.redrive([jobs["dead"]])] == [jobs["dead"]]
        connection.commit()


ACCESS_KINDS = ("producer", "worker", "operator")


@pytest.fixture(scope="module")
def roles(server_dsn: str) -> Iterator[dict[str, str]]:
    """One role per access kind. Roles belong to the server, not to a database: the fresh and
    the upgraded database grant the same ones. Dropped after the databases that name them."""
    suffix = uuid.uuid4().hex[:8]
    names = {access: f"pk_upgrade_{access}_{suffix}" for access in ACCESS_KINDS}
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    yield names
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def database_owner(server_dsn: str) -> Iterator[str]:
    """A LOGIN role without special attributes, which owns the databases it installs into."""
    name = f"pk_upgrade_installer_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def as_installer(database: str, installer: str | None) -> str:
    """The DSN an install of ``database`` runs with: the server's superuser (None), or
    ``installer``, made the database's owner first."""
    if installer is None:
        return database
    name = psycopg.conninfo.conninfo_to_dict(database)["dbname"]
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                sql.Identifier(str(name)), sql.Identifier(installer)
            )
        )
    return psycopg.conninfo.make_conninfo(database, user=installer)


def grant_and_isolate(connection: psycopg.Connection, roles: dict[str, str]) -> None:
    """Each role granted its access kind, tenant isolation on, and the worker assigned the
    namespace of push_in_every_state's jobs, through the functions every version since 5 has."""
    for access, role in roles.items():
        connection.execute("SELECT postkit_queue.grant_access(%s, %s)", (role, access))
    connection.execute("SELECT postkit_queue.enable_tenant_isolation()")
    connection.execute("SELECT postkit_queue.assign_namespace('app', %s)", (roles["worker"],))
    connection.execute(
        "SELECT postkit_queue.assign_namespace('elsewhere', %s)", (roles["operator"],)
    )
    connection.commit()


@pytest.mark.parametrize(
    ("version", "installer", "via"),
    [
        # Version 5's grant_access granted table privileges, which version 9 takes back.
        (5, "superuser", "install"),
        (15, "superuser", "install"),
        (5, "database owner", "install"),
        (15, "database owner", "psql"),
        (8, "superuser", "psql"),
    ],
)
def test_an_upgrade_keeps_grants_and_tenant_isolation_and_reaches_a_fresh_install_with_them(
    fresh_database: str,
    other_database: str,
    roles: dict[str, str],
    database_owner: str,
    version: int,
    installer: str,
    via: str,
) -> None:
    login = database_owner if installer == "database owner" else None
    fresh_dsn = as_installer(other_database, login)
    with psycopg.connect(fresh_dsn) as connection:
        install(connection)
        grant_and_isolate(connection, roles)
    upgraded_dsn = as_installer(fresh_database, login)
    with psycopg.connect(upgraded_dsn) as connection:
        install_legacy(connection, version)
        before = push_in_every_state(connection)
        grant_and_isolate(connection, roles)
    if via == "psql":
        run_psql(upgraded_dsn, install_script())
    else:
        with psycopg.connect(upgraded_dsn) as connection:
            install(connection)

    upgraded, fresh = catalog(upgraded_dsn), catalog(fresh_dsn)
    for kind in CATALOG:
        assert upgraded[kind] == fresh[kind], kind
    # The worker still settles the claim taken before the upgrade, in its namespace; the
    # operator, assigned another namespace, does not see the job.
    with psycopg.connect(fresh_database, autocommit=True) as connection:
        connection.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(roles["operator"])))
        operator = QueueClient(connection.cursor(), namespace="app")
        assert operator.get_job(before["jobs"]["pending"]) is None
        connection.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(roles["worker"])))
        worker = QueueClient(connection.cursor(), namespace="app")
        assert worker.ack(before["jobs"]["running"], claim_token=before["token"]) is True


def test_every_function_is_defined_once_in_the_schema_and_never_in_a_migration() -> None:
    create = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+postkit_queue\.(\w+)", re.I)
    defined = [name for _, sql in schema_files() for name in create.findall(sql)]
    assert len(defined) == len(set(defined)) > 70
    assert {m.version: create.findall(m.sql) for m in migrations() if create.search(m.sql)} == {}


def test_every_version_since_1_has_its_historical_file() -> None:
    assert [int(path.name[:3]) for path in legacy_files()] == list(range(1, 16))


def test_a_change_to_the_schema_comes_with_a_new_version() -> None:
    """The newest delta names the fingerprint of the schema it ends at. Editing sql/schema/
    without adding a version would leave databases at that version with the old functions:
    add a migration whose last line names the new fingerprint."""
    newest = migrations()[-1]
    assert newest.sql.rstrip().splitlines()[-1] == f"-- schema: {schema_fingerprint()}"
