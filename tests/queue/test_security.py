"""Least privilege, tenant isolation with row-level security, and hardening.

Roles here are real, non-superuser database roles; the test's superuser session switches to
them with SET ROLE, after which PostgreSQL applies their privileges and policies exactly as it
would to an application connecting as them.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from postkit import errors
from postkit.cli import main
from postkit.queue import QueueClient, install
from postkit.queue.admin import assign_namespace, enable_tenant_isolation, grant_access
from postkit.queue.listen import WorkListener
from postkit.queue.protocol import queries
from postkit.worker.maintenance import JobsVacuum


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


def test_a_tenant_cannot_read_or_change_any_row_with_hand_written_sql(
    database: str, tenants: tuple[str, str]
) -> None:
    role_a, role_b = tenants
    as_role(database, role_b, "tenant-b").push("emails", {"secret": "b"})
    intruder = as_role(database, role_a, "tenant-a").cursor

    for statement in (
        "SELECT count(*) FROM postkit_queue.jobs",
        "UPDATE postkit_queue.jobs SET payload = '{}' WHERE namespace = 'tenant-b'",
        "DELETE FROM postkit_queue.jobs",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            intruder.execute(statement)

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


def test_a_namespace_assigned_under_isolation_is_usable_at_once(
    database: str, tenants: tuple[str, str], make_role: Callable[[], str]
) -> None:
    """The policy reads the assignments at each statement: the next call sees a new one."""
    late = make_role()
    admin(database, lambda cursor: grant_access(cursor, late, "worker"))
    with psycopg.connect(database, autocommit=True) as connection:
        job_id = QueueClient(connection.cursor(), namespace="tenant-late").push("emails", 1)
    assert as_role(database, late, "tenant-late").get_job(job_id) is None

    admin(database, lambda cursor: assign_namespace(cursor, "tenant-late", late))
    job = as_role(database, late, "tenant-late").pull("emails")

    assert job is not None and job.id == job_id


def test_namespaces_are_every_one_that_holds_anything_or_is_assigned(
    database: str, make_role: Callable[[], str]
) -> None:
    role = make_role()
    with psycopg.connect(database, autocommit=True) as connection:

        def client(namespace: str) -> QueueClient:
            return QueueClient(connection.cursor(), namespace=namespace)

        client("with-jobs").push("emails", 1)
        dead = client("with-dead-letters")
        dead.push("emails", 1)
        buried = dead.pull("emails")
        assert buried is not None and dead.fail(buried, error="x")
        client("with-settings").configure_queue("emails", max_attempts=3)
        acked = client("with-outcomes")
        acked.push("emails", 1)
        done = acked.pull("emails")
        assert done is not None and acked.ack(done)
        client("with-schedules").create_schedule("nightly", "emails", {}, cron="0 3 * * *")
        client("with-workers").register_worker(
            "w1", host="h", pid=1, queues=[], concurrency=1, version="1", heartbeat_interval=5
        )
        assign_namespace(connection.cursor(), "assigned-only", role)

        found = client("any").namespaces()

    assert found == [
        "assigned-only",
        "with-dead-letters",
        "with-jobs",
        "with-outcomes",
        "with-schedules",
        "with-settings",
        "with-workers",
    ]


def test_a_session_sees_a_namespace_assigned_to_its_role_at_its_next_call(
    database: str, tenants: tuple[str, str]
) -> None:
    """A session whose pulls of the namespace were planned (generically, after five) before the
    assignment pulls its job after it, without reconnecting: the plans read the assignments
    when they run, not when they are made."""
    role_a, _ = tenants
    with psycopg.connect(database, autocommit=True) as connection:
        QueueClient(connection.cursor(), namespace="tenant-b").push("emails", 1)
    worker = as_role(database, role_a, "tenant-b")
    for _ in range(6):
        assert worker.pull("emails") is None

    admin(database, lambda cursor: assign_namespace(cursor, "tenant-b", role_a))

    assert worker.pull("emails") is not None


def test_assigning_a_namespace_waits_for_no_open_transaction_on_the_queue(
    database: str, tenants: tuple[str, str], make_role: Callable[[], str]
) -> None:
    """Under isolation an assignment rewrites no policy, so it takes no lock on the queue's
    tables: a tenant's open transaction neither delays it nor deadlocks with it."""
    busy = psycopg.connect(database)
    QueueClient(busy.cursor(), namespace="tenant-a").push("emails", 1)  # left open
    role = make_role()
    try:
        with psycopg.connect(database, autocommit=True) as connection:
            connection.execute("SET lock_timeout = '2s'")
            assign_namespace(connection.cursor(), "tenant-c", role)
    finally:
        busy.close()


def test_concurrent_assignments_all_take_effect_without_a_deadlock(
    database: str, tenants: tuple[str, str], make_role: Callable[[], str]
) -> None:
    role = make_role()
    barrier = threading.Barrier(3)
    failures: list[BaseException] = []

    def assign(worker: int) -> None:
        with psycopg.connect(database, autocommit=True) as connection:
            barrier.wait()
            for i in range(10):
                try:
                    assign_namespace(connection.cursor(), f"race-{worker}-{i}", role)
                except BaseException as exc:  # collected for the assertion below
                    failures.append(exc)

    threads = [threading.Thread(target=assign, args=(worker,)) for worker in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    admin(database, lambda cursor: grant_access(cursor, role, "operator"))
    assert as_role(database, role, "race-0-0").namespaces() == sorted(
        f"race-{worker}-{i}" for worker in range(3) for i in range(10)
    )


def test_an_assignment_under_repeatable_read_takes_effect_when_it_commits(
    database: str, tenants: tuple[str, str], make_role: Callable[[], str]
) -> None:
    role = make_role()
    admin(database, lambda cursor: grant_access(cursor, role, "operator"))
    with psycopg.connect(database) as connection:
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assign_namespace(connection.cursor(), "tenant-rr", role)

    assert as_role(database, role, "tenant-rr").namespaces() == ["tenant-rr"]


def test_an_install_forgets_a_dropped_roles_assignments(
    database: str, tenants: tuple[str, str]
) -> None:
    """A role created again under the dropped one's name, or given its OID after a restore,
    inherits none of its namespaces."""
    role_a, _ = tenants
    with psycopg.connect(database, autocommit=True) as connection:
        oid = connection.execute("SELECT %s::regrole::oid", (role_a,)).fetchone()
        assert oid is not None
        connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role_a)))
        connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role_a)))
        connection.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role_a)))
        install(connection)
        kept = connection.execute(
            "SELECT count(*) FROM postkit_queue.tenants WHERE role_oid = %s", oid
        ).fetchone()

    assert kept == (0,)


# Every definition the catalog holds as a node tree, printed as SQL.
DEPARSED_CATALOG = {
    "function": "SELECT pg_get_functiondef(oid) FROM pg_proc WHERE prokind IN ('f', 'p')",
    "view": "SELECT pg_get_viewdef(oid) FROM pg_class WHERE relkind IN ('v', 'm')",
    "default": "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef",
    "constraint": "SELECT pg_get_constraintdef(oid) FROM pg_constraint",
    "index": "SELECT pg_get_indexdef(indexrelid) FROM pg_index",
    "trigger": "SELECT pg_get_triggerdef(oid) FROM pg_trigger",
    "policy": "SELECT concat(qual, ' ', with_check) FROM pg_policies",
}


def test_a_tenant_learns_no_other_tenants_namespace_from_any_catalog(
    database: str, make_role: Callable[[], str]
) -> None:
    """Every relation of pg_catalog and information_schema the tenant's login may read, row by
    row: no text in them names a namespace assigned to another role (pg_proc's bodies and
    pg_policy's expressions are readable by every role)."""
    secret = f"secret-{uuid.uuid4().hex[:8]}"
    tenant, other = make_role(), make_role()
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(tenant)))
        cursor = connection.cursor()
        grant_access(cursor, tenant, "operator")
        grant_access(cursor, other, "operator")
        assign_namespace(cursor, "tenant-own", tenant)
        assign_namespace(cursor, secret, other)
        enable_tenant_isolation(cursor)
        QueueClient(cursor, namespace=secret).push("emails", {"for": "other"})
    login = psycopg.conninfo.make_conninfo(database, user=tenant)
    found: list[str] = []
    with psycopg.connect(login, autocommit=True) as connection:
        relations = connection.execute(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname IN ('pg_catalog', 'information_schema')"
            "   AND c.relkind IN ('r', 'v', 'm')"
            "   AND has_table_privilege(c.oid, 'SELECT')"
        ).fetchall()
        assert len(relations) > 100
        for (relation,) in relations:
            try:
                rows = connection.execute(
                    sql.SQL("SELECT t::text FROM {} t WHERE strpos(t::text, %s) > 0").format(
                        sql.SQL(relation)
                    ),
                    (secret,),
                ).fetchall()
            except psycopg.errors.InsufficientPrivilege:
                continue  # a view over a table the login may not read (pg_user_mappings)
            found += [f"{relation}: {row[0][:200]}" for row in rows]
        # Catalogs keep function bodies, defaults and checks as node trees, whose constants
        # are binary: the functions that print them as SQL read them as any role may.
        for kind, query in DEPARSED_CATALOG.items():
            rows = connection.execute(
                f"SELECT d FROM ({query}) t(d) WHERE strpos(d, %s) > 0", (secret,)
            ).fetchall()
            found += [f"{kind}: {row[0][:200]}" for row in rows]
        own = QueueClient(connection.cursor(), namespace="tenant-own").namespaces()

    assert own == ["tenant-own"]
    assert found == []


def test_a_superuser_demoted_stops_seeing_every_namespace_in_its_open_session(
    database: str, tenants: tuple[str, str]
) -> None:
    role = f"postkit_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER").format(sql.Identifier(role)))
        job_id = QueueClient(connection.cursor(), namespace="tenant-b").push("emails", 1)
    try:
        session = psycopg.connect(
            psycopg.conninfo.make_conninfo(database, user=role), autocommit=True
        )
        client = QueueClient(session.cursor(), namespace="tenant-b")
        assert client.get_job(job_id) is not None
        with psycopg.connect(database, autocommit=True) as connection:
            connection.execute(sql.SQL("ALTER ROLE {} NOSUPERUSER").format(sql.Identifier(role)))
            grant_access(connection.cursor(), role, "worker")

        assert client.get_job(job_id) is None
        session.close()
    finally:
        with psycopg.connect(database, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_under_isolation_an_operator_sees_only_its_assigned_namespaces(
    database: str, tenants: tuple[str, str], make_role: Callable[[], str]
) -> None:
    _, role_b = tenants
    as_role(database, role_b, "tenant-b").push("emails", 1)
    operator = make_role()

    def promote(cursor: psycopg.Cursor) -> None:
        grant_access(cursor, operator, "operator")
        assign_namespace(cursor, "tenant-a", operator)
        assign_namespace(cursor, "tenant-c", operator)

    admin(database, promote)

    assert as_role(database, operator, "tenant-a").namespaces() == ["tenant-a", "tenant-c"]


def test_under_isolation_an_operator_sees_the_group_keys_of_its_own_namespaces_only(
    database: str, tenants: tuple[str, str], make_role: Callable[[], str]
) -> None:
    role_a, role_b = tenants
    as_role(database, role_a, "tenant-a").push("reports", 1, group_key="acme")
    as_role(database, role_b, "tenant-b").push("reports", 1, group_key="globex")
    operator = make_role()

    def promote(cursor: psycopg.Cursor) -> None:
        grant_access(cursor, operator, "operator")
        assign_namespace(cursor, "tenant-a", operator)

    admin(database, promote)

    assert [
        g.group_key for g in as_role(database, operator, "tenant-a").group_stats("reports")
    ] == ["acme"]
    assert as_role(database, operator, "tenant-b").group_stats("reports") == []
    with pytest.raises(errors.PermissionDeniedError):
        as_role(database, role_a, "tenant-a").group_stats("reports")


def test_listing_namespaces_takes_operator_access(database: str, tenants: tuple[str, str]) -> None:
    role_a, _ = tenants

    with pytest.raises(errors.PermissionDeniedError):
        as_role(database, role_a, "tenant-a").namespaces()


# Objects any user could plant in public (PostgreSQL 14 and older let everyone create there),
# each a better or equal match than the built-in it shadows for the argument types the SDK's
# statements and the functions use. Each one that runs writes a row to public.hijacks.
PLANTED = [
    "CREATE TABLE public.hijacks (what text)",
    "CREATE FUNCTION public.hijack(what text) RETURNS boolean LANGUAGE sql"
    " AS $$ INSERT INTO public.hijacks VALUES (what) RETURNING true $$",
    *(
        f"CREATE FUNCTION public.unnest({kind}[]) RETURNS SETOF {kind} LANGUAGE sql"
        f" AS $$ SELECT x FROM pg_catalog.unnest($1) x WHERE public.hijack('unnest {kind}') $$"
        for kind in ("text", "bigint", "uuid", "jsonb")
    ),
    "CREATE FUNCTION public.gen_random_uuid() RETURNS uuid LANGUAGE sql"
    " AS $$ SELECT '00000000-0000-0000-0000-000000000000'::uuid WHERE public.hijack('uuid') $$",
    "CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql"
    " AS $$ SELECT pg_catalog.now() WHERE public.hijack('now') $$",
    "CREATE FUNCTION public.btrim(text) RETURNS text LANGUAGE sql"
    " AS $$ SELECT 'x' WHERE public.hijack('btrim') $$",
    "CREATE FUNCTION public.char_length(text) RETURNS integer LANGUAGE sql"
    " AS $$ SELECT 1 WHERE public.hijack('char_length') $$",
    "CREATE FUNCTION public.count(bigint) RETURNS bigint LANGUAGE sql"
    " AS $$ SELECT 1::bigint WHERE public.hijack('count') $$",
    "CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE sql"
    " AS $$ SELECT pg_catalog.current_setting($1) WHERE public.hijack('current_setting') $$",
    "CREATE FUNCTION public.make_interval(secs double precision) RETURNS interval"
    " LANGUAGE sql AS $$ SELECT interval '1 hour' WHERE public.hijack('make_interval') $$",
    # Domains named like the built-in types the statements cast to.
    *(
        f"CREATE DOMAIN public.{kind} AS pg_catalog.{kind} CHECK (public.hijack('{kind}'))"
        for kind in ("text", "jsonb", "uuid", "float8", "timestamptz")
    ),
    # Operators with the exact argument types of the built-ins: with public first in the
    # search_path they win the tie.
    "CREATE FUNCTION public.eq(bigint, integer) RETURNS boolean LANGUAGE sql"
    " AS $$ SELECT public.hijack('=') $$",
    "CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = public.eq)",
    "CREATE FUNCTION public.times(double precision, interval) RETURNS interval LANGUAGE sql"
    " AS $$ SELECT $2 WHERE public.hijack('*') $$",
    "CREATE OPERATOR public.* (LEFTARG = double precision, RIGHTARG = interval,"
    " FUNCTION = public.times)",
    "CREATE FUNCTION public.ge(integer, integer) RETURNS boolean LANGUAGE sql"
    " AS $$ SELECT public.hijack('>=') $$",
    "CREATE OPERATOR public.>= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.ge)",
]


def test_objects_planted_in_public_cannot_hijack_an_sdk_statement_or_a_function(
    database: str, namespace: str
) -> None:
    with psycopg.connect(database, autocommit=True) as attacker:
        for statement in PLANTED:
            attacker.execute(statement)
    victim_dsn = psycopg.conninfo.make_conninfo(
        database, options="-c search_path=public,pg_catalog"
    )
    victim = psycopg.connect(victim_dsn, autocommit=True)
    queue = QueueClient(victim.cursor(), namespace=namespace)

    # Every kind of statement the SDK sends, and through them the functions they call.
    queue.configure_queue("emails", visibility_timeout=60, backoff_base=1)
    queue.push("emails", {"n": 1}, delay=0.5, priority=1)
    queue.push_batch("emails", [{"n": 2}, {"n": 3}], unique_keys=["a", "b"])
    queue.push_batch("emails", [{"n": 4}, {"n": 5}, {"n": 6}])
    first, second, third, fourth = queue.pull_batch("emails", limit=4, worker_id="w")
    assert first.claim_token != "00000000-0000-0000-0000-000000000000"
    queue.extend_visibility(first, extension=30)
    queue.ack(first)
    queue.nack(second, error="later", backoff=1)
    queue.fail(third, error="never")
    queue.release(fourth)
    _, claimed = queue.ack_and_pull("emails", [], worker_id="w", limit=1)
    queue.ack_and_pull("emails", claimed, worker_id="w", limit=1)
    queue.ack_many(queue.pull_batch("emails", limit=1))
    queue.tick_timeouts()
    queue.get_job(second.id)
    queue.dead_letters("emails")
    queue.redrive([third.id])
    queue.stats()
    queue.jobs("emails")
    queue.create_schedule("tick", "emails", {}, every=60)
    queue.schedules()
    queue.tick_schedules()
    queue.prune()
    queue.purge_dead_letters(older_than=3600)
    with WorkListener.connect(victim_dsn, namespace, ["emails"]) as listener:
        listener.wait_for_work(timeout=0.01)
    JobsVacuum(threshold=0).vacuum_if_due(victim)
    with pytest.raises(errors.InvalidNameError):
        queue.push(" ", 1)  # btrim was not replaced: a blank name is still blank
    with pytest.raises(errors.InvalidNameError):
        queue.push("q" * 129, 1)  # char_length was not replaced either

    hijacks = victim.execute("SELECT what FROM public.hijacks").fetchall()
    victim.close()
    assert hijacks == []


# Words before "(" that the grammar binds to pg_catalog, or that are not function calls (FROM
# before a subquery).
NOT_CALLS = {
    "coalesce",
    "extract",
    "from",
    "in",
    "any",
    "exists",
    "operator",
    "select",
    "then",
    "vacuum",
}


def test_every_sdk_statement_schema_qualifies_its_functions_types_and_operators() -> None:
    """The static guard behind the planted-objects test: a statement added later that calls
    an unqualified function or casts to an unqualified type fails here, before any attack."""
    unqualified = []
    for name, statement in queries().items():
        code = re.sub(r"--[^\n]*|'[^']*'", "", statement)
        for match in re.finditer(r"(?<![\w.])(?<!AS )([a-z_][a-z0-9_]*)\s*\(", code, re.IGNORECASE):
            if match.group(1).lower() not in NOT_CALLS:
                unqualified.append((name, match.group(1)))
        for match in re.finditer(r"::(?!pg_catalog\.|integer|bigint|boolean|interval)(\w+)", code):
            unqualified.append((name, f"::{match.group(1)}"))
        for operator in re.findall(r"\s(=|<>|<=|>=|<|>|\*|\+|-|\|\|)\s", code):
            unqualified.append((name, operator))

    assert unqualified == []


def test_every_function_pins_its_search_path(database: str) -> None:
    """Pinned means a SET search_path, or a SQL-standard body (is_name, is_duration,
    longest_effect, is_result, is_trace_context, and the policy's defaults push folds in),
    whose names are bound when the function is created, so no caller's search_path ever
    reaches it."""
    with psycopg.connect(database) as connection:
        rows = connection.execute(
            "SELECT p.proname, coalesce(p.proconfig, '{}'), p.prosqlbody IS NOT NULL"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'postkit_queue'"
        ).fetchall()

    assert rows
    unpinned = [
        name
        for name, config, bound_at_creation in rows
        if not bound_at_creation
        and not any(setting.startswith("search_path=") for setting in config)
    ]
    assert unpinned == []
    assert sorted(name for name, _, bound_at_creation in rows if bound_at_creation) == [
        "default_max_attempts",
        "default_max_payload_bytes",
        "is_duration",
        "is_name",
        "is_result",
        "is_trace_context",
        "longest_effect",
        "max_fair_visits",
        "max_parents",
        "max_steps",
        "parent_refusal",
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


def test_postkit_install_revoke_takes_a_roles_access_back(
    database: str, make_role: Callable[[], str]
) -> None:
    role = make_role()
    admin(database, lambda cursor: grant_access(cursor, role, "worker"))

    result = CliRunner().invoke(main, ["install", "--dsn", database, "--revoke", role])

    assert result.exit_code == 0, result.output
    assert f"revoked every Postkit privilege from {role}" in result.output
    with pytest.raises(errors.PermissionDeniedError):
        as_role(database, role, "shop").push("emails", 1)


def test_postkit_install_rejects_an_unknown_access_kind(database: str) -> None:
    result = CliRunner().invoke(main, ["install", "--dsn", database, "--grant", "web:admin"])

    assert result.exit_code == 2 and "producer, worker, operator" in result.output
