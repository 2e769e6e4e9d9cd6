"""A grant is the whole of what a role can do.

Every role here is a real non-superuser LOGIN role that connects with its own DSN, as an
application would; the real programs (Worker, `postkit worker`, `postkit tick`, the operator's
commands) run under it, and hand-written SQL tries to get around the functions.
"""

from __future__ import annotations

import asyncio
import logging
import queue as stdlib_queue
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit import errors
from postkit.queue import AsyncWorkListener, QueueClient, ResultListener, WorkListener, install
from postkit.queue.admin import (
    OWNER_QUERIES,
    assign_namespace,
    enable_tenant_isolation,
    grant_access,
    revoke_access,
)
from postkit.queue.protocol import queries
from postkit.queue.schema import _INSTALL_LOCK_KEY
from postkit.worker import SharedWorker, Worker, is_cancelled, report_progress
from postkit.worker.maintenance import Maintenance
from tests import on_citus
from tests.queue.legacy import install_legacy
from tests.roles import MakeLogin, login_maker
from tests.signals import function_calls, poll_until, track_function_calls, wait_for, wait_until

ACCESS_KINDS = ("producer", "worker", "operator")
TICK_FUNCTIONS = ("postkit_queue.tick_timeouts", "postkit_queue.prune")


@pytest.fixture
def make_login(database: str) -> Iterator[MakeLogin]:
    """Create a LOGIN role with one access kind (or none) and return a DSN that connects as it.
    Each role is dropped afterwards, with whatever was granted to it."""
    yield from login_maker(database)


def client(dsn: str, namespace: str) -> QueueClient:
    """An autocommit client connected as the DSN's role."""
    return QueueClient(psycopg.connect(dsn, autocommit=True).cursor(), namespace=namespace)


def role_of(dsn: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(dsn)["user"])


# ---------------------------------------------------------------------------------------------
# Nothing on the tables: every change goes through a function.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("access", ACCESS_KINDS)
def test_no_access_kind_holds_any_privilege_on_a_table_or_sequence(
    database: str, make_login: MakeLogin, access: str
) -> None:
    role = role_of(make_login(access))
    with psycopg.connect(database) as admin:
        held = admin.execute(
            "SELECT c.relname FROM pg_class c"
            " WHERE c.relnamespace = 'postkit_queue'::regnamespace"
            " AND c.relkind IN ('r', 'p', 'S') AND ("
            "   CASE WHEN c.relkind = 'S'"
            "   THEN has_sequence_privilege(%s, c.oid, 'USAGE,SELECT,UPDATE')"
            "   ELSE has_table_privilege(%s, c.oid,"
            "        'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER') END)",
            (role, role),
        ).fetchall()

    assert held == []


@pytest.mark.parametrize("access", ACCESS_KINDS)
@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO postkit_queue.jobs (namespace, queue, payload, attempts)"
        " VALUES ('shop', 'emails', '{}', 2147483647)",
        "UPDATE postkit_queue.jobs SET attempts = 2147483647",
        "DELETE FROM postkit_queue.jobs",
        "SELECT payload FROM postkit_queue.jobs",
        "UPDATE postkit_queue.schedules SET cron = '* * * * *'",
        "DELETE FROM postkit_queue.dead_letters",
        "TRUNCATE postkit_queue.jobs",
        "LOCK TABLE postkit_queue.jobs IN ACCESS EXCLUSIVE MODE",
        "LOCK TABLE postkit_queue.migrations IN ACCESS EXCLUSIVE MODE",
    ],
)
def test_hand_written_sql_on_the_tables_is_refused(
    make_login: MakeLogin, access: str, statement: str
) -> None:
    with (
        psycopg.connect(make_login(access)) as connection,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        connection.execute(statement)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_listener_raises_the_sdks_error_for_a_refusal_as_the_clients_do(
    make_login: MakeLogin, kind: str
) -> None:
    """A producer may not wait for work (the channels are a worker's): its listener meets the
    same error policy as every SDK statement, a PermissionDeniedError naming the function."""
    dsn = make_login("producer")
    refused = pytest.raises(
        errors.PermissionDeniedError, match="permission denied for function channel"
    )
    if kind == "sync":
        with psycopg.connect(dsn, autocommit=True) as connection, refused:
            WorkListener(connection, "shop", ["emails"]).listen()
        return

    async def listen() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await AsyncWorkListener(connection, "shop", ["emails"]).listen()

    with refused:
        asyncio.run(listen())


def test_each_access_kind_executes_exactly_the_functions_of_its_kind_and_below(
    database: str, make_login: MakeLogin
) -> None:
    roles = {access: role_of(make_login(access)) for access in ACCESS_KINDS}
    with psycopg.connect(database) as admin:
        rows = admin.execute(
            "SELECT p.oid::regprocedure::text, a.access FROM pg_proc p"
            " LEFT JOIN postkit_queue.api a ON a.name = p.proname"
            " WHERE p.pronamespace = 'postkit_queue'::regnamespace"
        ).fetchall()
        rank = {None: 99, **{access: index for index, access in enumerate(ACCESS_KINDS)}}
        wrong = []
        for function, needed in rows:
            for access, role in roles.items():
                (may,) = admin.execute(
                    "SELECT has_function_privilege(%s, %s, 'EXECUTE')", (role, function)
                ).fetchone()  # type: ignore[misc]
                if may != (rank[needed] <= rank[access]):
                    wrong.append((function, access, may))

    assert wrong == []
    assert len([row for row in rows if row[1] is None]) > 10  # internal helpers exist


def test_every_function_an_sdk_statement_calls_is_in_the_api(database: str) -> None:
    """A function added to queries.sql but not to postkit_queue.api would be refused to every
    role but the owner: the registry and the SDK stay in step. The administration statements
    are the owner's alone, so their functions stay out of the registry."""

    def called(statements: list[str]) -> set[str]:
        return {
            name
            for statement in statements
            for name in re.findall(r"postkit_queue\.([a-z_]+)\s*\(", statement)
        }

    callers = called([sql for name, sql in queries().items() if name not in OWNER_QUERIES])
    owners = called([queries()[name] for name in OWNER_QUERIES])
    with psycopg.connect(database) as admin:
        api = {name for (name,) in admin.execute("SELECT name FROM postkit_queue.api")}

    assert callers - api == set()
    assert owners == set(OWNER_QUERIES)
    assert owners & api == set()


def test_no_function_of_the_schema_is_executable_by_public(database: str) -> None:
    with psycopg.connect(database) as admin:
        public = admin.execute(
            "SELECT p.proname FROM pg_proc p, aclexplode(coalesce(p.proacl,"
            " acldefault('f', p.proowner))) acl"
            " WHERE p.pronamespace = 'postkit_queue'::regnamespace AND acl.grantee = 0"
        ).fetchall()

    assert public == []


def test_the_api_functions_run_as_a_non_superuser_owner_with_a_pinned_search_path(
    database: str,
) -> None:
    with psycopg.connect(database) as admin:
        rows = admin.execute(
            "SELECT p.proname, p.prosecdef, a.name IS NOT NULL, r.rolsuper, r.rolcanlogin,"
            " coalesce(p.proconfig, '{}')"
            " FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner"
            " LEFT JOIN postkit_queue.api a ON a.name = p.proname"
            " WHERE p.pronamespace = 'postkit_queue'::regnamespace"
        ).fetchall()

    assert rows
    assert [name for name, definer, api, *_ in rows if definer != api] == []
    assert {(superuser, login) for *_, superuser, login, _ in rows} == {(False, False)}
    assert [
        name
        for name, _, api, _, _, config in rows
        if api and not any(setting.startswith("search_path=") for setting in config)
    ] == []


# ---------------------------------------------------------------------------------------------
# Each documented layout runs what it is for.
# ---------------------------------------------------------------------------------------------


def test_a_producer_login_pushes_and_follows_its_jobs_but_cannot_pull(
    make_login: MakeLogin, namespace: str
) -> None:
    producer = client(make_login("producer"), namespace)

    job_id = producer.push("emails", {"to": "ada"})
    producer.push_batch("emails", [1, 2])

    assert job_id is not None and producer.get_job(job_id) is not None
    with pytest.raises(errors.PermissionDeniedError, match="grant_access"):
        producer.pull("emails")


def test_a_producer_login_pushes_from_the_command_line_to_a_queue_the_namespace_knows(
    make_login: MakeLogin, namespace: str
) -> None:
    producer_dsn = make_login("producer")
    client(producer_dsn, namespace).push("emails", {})
    command = [sys.executable, "-m", "postkit.cli", "push"]
    options = ["--dsn", producer_dsn, "--namespace", namespace]

    known = subprocess.run(
        [*command, "emails", "{}", *options], capture_output=True, text=True, timeout=60
    )
    typo = subprocess.run(
        [*command, "emials", "{}", *options], capture_output=True, text=True, timeout=60
    )

    assert known.returncode == 0, known.stdout + known.stderr
    assert typo.returncode == 2 and "Did you mean 'emails'?" in typo.stderr, typo.stderr


def test_a_worker_login_runs_a_worker_through_its_ticks(
    make_login: MakeLogin, namespace: str, database: str
) -> None:
    producer = client(make_login("producer"), namespace)
    ids = [producer.push("emails", {"n": n}) for n in range(20)]
    worker_dsn = make_login("worker")
    monitor = psycopg.connect(database, autocommit=True)
    track_function_calls(monitor, role_of(worker_dsn))
    done: list[int] = []
    worker = Worker(
        worker_dsn,
        {"emails": lambda job: done.append(job.id)},
        namespace=namespace,
        tick_interval=0.05,
        poll_interval=0.1,
        grace_period=2.0,
    )
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failure.append(exc)

    def ticks() -> int:
        return min(function_calls(monitor, name) for name in TICK_FUNCTIONS)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: len(done) >= len(ids) or not thread.is_alive(),
            "the worker to run every job",
            20,
        )
        # Several ticks (timeouts, prune) run under the worker's role.
        wait_until(lambda: ticks() >= 3 or not thread.is_alive(), "three ticks of the worker")
    finally:
        worker.stop()
        thread.join(timeout=30)
        monitor.close()

    # The first tick runs as the worker starts: a tick the role may not run ends run() at once.
    assert failure == []
    assert sorted(done) == sorted(ids)


def test_a_worker_login_runs_a_round_of_every_maintenance_service(
    make_login: MakeLogin, namespace: str
) -> None:
    """The services `postkit tick` runs: rescue, schedules (a look included) and retention."""
    done = Maintenance.for_tick(make_login("worker"), namespace, interval=5).run_once()

    assert not done.anything


class _Logged(logging.Handler):
    """Sets ``seen`` once the worker logs a record of ``event`` whose message holds
    ``contains``."""

    def __init__(self, event: str, contains: str = "") -> None:
        super().__init__(logging.INFO)
        self.event = event
        self.contains = contains
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == self.event and self.contains in record.getMessage():
            self.seen.set()


def test_a_worker_whose_listener_is_refused_retries_it_and_listens_again_once_allowed(
    database: str, make_login: MakeLogin, namespace: str
) -> None:
    """A refusal of the listener's statements (here EXECUTE on channel, taken from the role) is
    retried as a lost connection is, while the claim loop goes on claiming; once the role may
    again, the listener is back."""
    worker_dsn = make_login("worker")
    role = sql.Identifier(role_of(worker_dsn))
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute(
            sql.SQL("REVOKE EXECUTE ON FUNCTION postkit_queue.channel(text, text) FROM {}").format(
                role
            )
        )
    done: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    refused = _Logged("db_error", "permission denied for function channel")
    back = _Logged("db_back", "listener reconnected")
    logger = logging.getLogger("postkit.worker")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(refused)
    logger.addHandler(back)
    worker = Worker(
        worker_dsn,
        {"emails": lambda job: done.put(job.id)},
        namespace=namespace,
        poll_interval=0.2,
        tick_interval=60.0,
        grace_period=2.0,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(refused.seen, "the listener to log its refusal")
        job_id = client(make_login("producer"), namespace).push("emails", {})
        assert done.get(timeout=15) == job_id

        with psycopg.connect(database, autocommit=True) as admin:
            admin.execute(
                sql.SQL("GRANT EXECUTE ON FUNCTION postkit_queue.channel(text, text) TO {}").format(
                    role
                )
            )
        wait_for(back.seen, "the listener to reconnect once the role may listen")
    finally:
        worker.stop()
        thread.join(timeout=30)
        logger.removeHandler(refused)
        logger.removeHandler(back)
        logger.setLevel(level)
    assert not thread.is_alive()


def test_postkit_worker_and_postkit_tick_run_under_a_worker_login(
    make_login: MakeLogin, namespace: str, tmp_path: Path
) -> None:
    producer = client(make_login("producer"), namespace)
    ids = [producer.push("emails", {"n": n}) for n in range(5)]
    worker_dsn = make_login("worker")
    (tmp_path / "tasks.py").write_text(
        "from postkit.worker import Handlers\n"
        "handlers = Handlers()\n"
        "@handlers.register('emails')\n"
        "def send(job):\n"
        "    pass\n"
    )
    command = [sys.executable, "-m", "postkit.cli"]

    tick = subprocess.run(
        [*command, "tick", "--once", "--dsn", worker_dsn, "--namespace", namespace],
        capture_output=True,
        text=True,
        timeout=60,
    )
    worker = subprocess.Popen(
        [
            *command,
            "worker",
            "tasks",
            "--dsn",
            worker_dsn,
            "--namespace",
            namespace,
            "--poll-interval",
            "0.2",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # The assertions below say what went wrong: the worker died, or a job is left.
        poll_until(
            lambda: (
                worker.poll() is not None
                or all(producer.get_job(job_id) is None for job_id in ids if job_id is not None)
            ),
            30,
        )
        still_running = worker.poll() is None
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=60)

    assert tick.returncode == 0, tick.stdout + tick.stderr
    assert still_running, output
    assert [job_id for job_id in ids if job_id is not None and producer.get_job(job_id)] == []
    assert "permission denied" not in output


def test_an_operator_login_runs_the_operators_commands(
    make_login: MakeLogin, namespace: str
) -> None:
    operator_dsn = make_login("operator")
    client(operator_dsn, namespace).push("emails", {})
    command = [sys.executable, "-m", "postkit.cli"]
    options = ["--dsn", operator_dsn, "--namespace", namespace]

    for arguments in (
        ["stats"],
        ["jobs", "emails"],
        ["dlq", "list"],
        ["queue", "pause", "emails"],
        ["queue", "resume", "emails"],
        ["schedule", "list"],
    ):
        result = subprocess.run(
            [*command, *arguments, *options], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, (arguments, result.stdout + result.stderr)


def test_a_pipeline_runs_under_the_three_logins_and_an_operator_cancels_its_long_job(
    make_login: MakeLogin, namespace: str
) -> None:
    """Jobs that wait for jobs, progress and cancelling a running job, each under the login
    the docs name: a producer pushes a fan-in and follows it, a worker runs it (parents'
    results, progress reports, the cancel's notification on its listener), an operator
    cancels the long job from the command line; none may do the others' part."""
    producer = client(make_login("producer"), namespace)
    operator_dsn = make_login("operator")
    client(operator_dsn, namespace).configure_queue("parts", retain_results=3600)
    parts = [producer.push("parts", {"n": n}) for n in (1, 2, 3)]
    assert all(part is not None for part in parts)
    total = producer.push("total", {}, depends_on=[p for p in parts if p is not None])
    long_id = producer.push("long", {})
    assert long_id is not None
    assert producer.waiting_children(parts[0]) == [total]
    with pytest.raises(errors.PermissionDeniedError):
        producer.cancel(long_id)
    sums: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    told: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()

    def part(job: Any) -> int:
        assert report_progress(0.5, note="halfway")
        return int(job.payload["n"])

    def long(job: Any) -> None:
        while not is_cancelled():
            report_progress(0.1)
            threading.Event().wait(0.05)
        told.put(job.id)

    worker = Worker(
        make_login("worker"),
        {
            "parts": part,
            "total": lambda job: sums.put(sum(job.parent_results.values())),
            "long": long,
        },
        namespace=namespace,
        visibility_timeout=120,  # its heartbeat comes after 40 s: the cancel's notice comes first
        grace_period=2.0,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert sums.get(timeout=20) == 6
        wait_until(lambda: producer.result(long_id).state == "running", "the long job to run")
        options = ["--dsn", operator_dsn, "--namespace", namespace]
        cancelled = subprocess.run(
            [sys.executable, "-m", "postkit.cli", "cancel", str(long_id), "--yes", *options],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert told.get(timeout=20) == long_id
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert producer.result(long_id).state == "cancelled"


def test_a_worker_cannot_pause_or_rewrite_a_schedule(make_login: MakeLogin, namespace: str) -> None:
    operator = client(make_login("operator"), namespace)
    operator.create_schedule("nightly", "reports", {}, every=60)
    worker = client(make_login("worker"), namespace)

    with pytest.raises(errors.PermissionDeniedError):
        worker.pause_schedule("nightly")
    with pytest.raises(errors.PermissionDeniedError):
        worker.create_schedule("nightly", "reports", {}, every=1)


def test_a_role_without_a_grant_cannot_call_anything(make_login: MakeLogin, namespace: str) -> None:
    with pytest.raises(errors.PermissionDeniedError):
        client(make_login(), namespace).push("emails", {})


def test_revoking_access_takes_every_function_back(
    database: str, make_login: MakeLogin, namespace: str
) -> None:
    worker_dsn = make_login("worker")
    with psycopg.connect(database, autocommit=True) as admin:
        assert revoke_access(admin.cursor(), role_of(worker_dsn)) is True

    with pytest.raises(errors.PermissionDeniedError):
        client(worker_dsn, namespace).push("emails", {})


def test_a_superuser_cannot_be_granted_an_access_kind(database: str) -> None:
    with psycopg.connect(database) as admin, pytest.raises(errors.InvalidAccessError):
        grant_access(admin.cursor(), "postgres", "producer")


# ---------------------------------------------------------------------------------------------
# One tenant cannot affect another.
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def isolated(database: str) -> None:
    with psycopg.connect(database) as admin:
        enable_tenant_isolation(admin.cursor())


def test_dropping_one_tenants_role_leaves_every_other_tenant_working(
    database: str, make_login: MakeLogin, isolated: None
) -> None:
    tenant_a = client(make_login("worker", ("tenant-a",)), "tenant-a")
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute("CREATE ROLE pk_doomed_tenant NOLOGIN")
        assign_namespace(admin.cursor(), "tenant-b", "pk_doomed_tenant")
        grant_access(admin.cursor(), "pk_doomed_tenant", "worker")
        admin.execute("DROP OWNED BY pk_doomed_tenant")
        admin.execute("DROP ROLE pk_doomed_tenant")

    assert tenant_a.push("emails", {}) is not None
    assert tenant_a.pull("emails") is not None


def test_a_tenant_cannot_push_pull_or_read_in_another_tenants_namespace(
    make_login: MakeLogin, isolated: None
) -> None:
    owner = client(make_login("operator", ("tenant-b",)), "tenant-b")
    job_id = owner.push("emails", {"secret": "b"})
    intruder_dsn = make_login("operator", ("tenant-a",))
    intruder = client(intruder_dsn, "tenant-b")

    with pytest.raises(errors.PermissionDeniedError):
        intruder.push("emails", {})
    assert intruder.pull("emails") is None
    assert job_id is not None and intruder.get_job(job_id) is None
    assert intruder.stats() == []
    assert owner.pull("emails") is not None


def test_a_tenants_shared_worker_runs_its_namespaces_and_stops_on_another_tenants(
    make_login: MakeLogin, isolated: None
) -> None:
    """A shared worker runs each namespace's worker as the login: over the tenant's own
    namespaces it runs their jobs; given another tenant's namespace too, that namespace's
    refusal stops every namespace's worker, and run() raises it."""
    ids = [client(make_login("producer", ("tenant-a",)), "tenant-a").push("emails", {})]
    ids += [client(make_login("producer", ("tenant-c",)), "tenant-c").push("emails", {})]
    worker_dsn = make_login("worker", ("tenant-a", "tenant-c"))
    done: list[int] = []
    allowed = SharedWorker(
        worker_dsn,
        {"emails": lambda job: done.append(job.id)},
        namespaces=["tenant-a", "tenant-c"],
        grace_period=2.0,
    )
    thread = threading.Thread(target=allowed.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(done) == len(ids), "both of the tenant's namespaces' jobs to run")
    finally:
        allowed.stop()
        thread.join(timeout=30)
    assert sorted(done) == sorted(ids)

    refused = SharedWorker(
        worker_dsn,
        {"emails": lambda job: None},
        namespaces=["tenant-a", "tenant-b"],
        grace_period=2.0,
    )
    with pytest.raises(errors.PermissionDeniedError, match="row-level security"):
        refused.run()


def test_under_isolation_a_freed_slot_wakes_the_tenants_waiting_worker_alone(
    database: str, make_login: MakeLogin, isolated: None
) -> None:
    """A producer login's push wakes its tenant's worker login waiting for the slot, on the
    worker's own channel; another tenant can neither wait on that queue nor end the wait."""
    operator = client(make_login("operator", ("tenant-a",)), "tenant-a")
    operator.configure_queue("emails", concurrency=1)
    producer = client(make_login("producer", ("tenant-a",)), "tenant-a")
    waiter = psycopg.connect(make_login("worker", ("tenant-a",)), autocommit=True)
    intruder = psycopg.connect(make_login("worker", ("tenant-b",)), autocommit=True)
    channel = f"postkit_wake_{waiter.info.backend_pid}"
    waiter.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    wait = "SELECT postkit_queue.wait_for_slot('tenant-a', ARRAY['emails'])"
    assert waiter.execute(wait).fetchone() == (True,)

    # The other tenant sees no such queue, so it waits for nothing, and ends no wait but its own.
    assert intruder.execute(wait).fetchone() == (False,)
    assert intruder.execute("SELECT postkit_queue.stop_waiting('tenant-a')").fetchone() == (0,)
    producer.push("emails", {})

    assert [notify.channel for notify in waiter.notifies(timeout=5, stop_after=1)] == [channel]


def test_a_tenant_cannot_learn_another_tenants_notification_channel(
    database: str, make_login: MakeLogin, isolated: None
) -> None:
    intruder = psycopg.connect(make_login("worker", ("tenant-a",)), autocommit=True)
    with psycopg.connect(database) as admin:
        (channel,) = admin.execute("SELECT postkit_queue.channel('tenant-b', 'emails')").fetchone()  # type: ignore[misc]
        (guessable,) = admin.execute(
            "SELECT 'postkit_' || md5('tenant-b' || chr(31) || 'emails')"
        ).fetchone()  # type: ignore[misc]

    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        intruder.execute("SELECT postkit_queue.channel('tenant-b', 'emails')")
    assert channel != guessable
    assert intruder.execute("SELECT postkit_queue.channel('tenant-a', 'emails')").fetchone()


def test_a_tenant_can_neither_read_nor_wait_for_another_tenants_results(
    database: str, make_login: MakeLogin, isolated: None
) -> None:
    owner = client(make_login("worker", ("tenant-b",)), "tenant-b")
    with psycopg.connect(database, autocommit=True) as admin:
        QueueClient(admin.cursor(), namespace="tenant-b").configure_queue(
            "reports", retain_results=3600
        )
    job_id = owner.push("reports", {})
    job = owner.pull("reports")
    assert job_id is not None and job is not None
    assert owner.ack(job, result={"secret": "b"})
    intruder_dsn = make_login("producer", ("tenant-a",))
    intruder = client(intruder_dsn, "tenant-b")

    assert intruder.result(job_id).state == "unknown"
    with (
        psycopg.connect(intruder_dsn, autocommit=True) as connection,
        pytest.raises(errors.PermissionDeniedError, match="tenant-b"),
    ):
        ResultListener(connection, "tenant-b").wait_for_result(job_id, timeout=0)
    assert client(make_login("producer", ("tenant-b",)), "tenant-b").result(job_id).value == {
        "secret": "b"
    }


def test_a_producer_may_wait_for_the_result_of_a_job_it_pushed(
    database: str, make_login: MakeLogin
) -> None:
    with psycopg.connect(database, autocommit=True) as admin:
        QueueClient(admin.cursor(), namespace="shop").configure_queue(
            "receipts", retain_results=3600
        )
    producer_dsn = make_login("producer")
    producer = client(producer_dsn, "shop")
    worker = client(make_login("worker"), "shop")
    job_id = producer.push("receipts", {"order": 7})
    job = worker.pull("receipts")
    assert job_id is not None and job is not None
    assert worker.ack(job, result={"receipt": "r-7"})

    with ResultListener.connect(producer_dsn, "shop") as listener:
        assert listener.wait_for_result(job_id, timeout=5).value == {"receipt": "r-7"}


def test_a_role_holding_the_install_lock_does_not_block_an_upgrade(
    database: str, make_login: MakeLogin
) -> None:
    holder = psycopg.connect(make_login("producer"), autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (_INSTALL_LOCK_KEY,))
    installer = psycopg.connect(database)
    installer.execute("SET statement_timeout = '20s'")

    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(install, installer).result(timeout=30)

    assert result.applied == ()
    holder.close()
    installer.close()


def test_a_role_created_again_under_a_dropped_tenants_name_inherits_nothing(
    database: str, make_login: MakeLogin, isolated: None
) -> None:
    dsn = make_login("worker", ("tenant-b",))
    client(dsn, "tenant-b").push("emails", {"secret": "b"})
    role = role_of(dsn)
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        grant_access(admin.cursor(), role, "worker")

    assert client(dsn, "tenant-b").pull("emails") is None


# ---------------------------------------------------------------------------------------------
# The install cannot be turned against the installer.
# ---------------------------------------------------------------------------------------------


def test_an_install_refuses_a_schema_someone_else_created_first(fresh_database: str) -> None:
    """A database owner (who may create schemas) prepares postkit_queue, with a migrations table
    of its own, for a superuser to install into."""
    role = f"pk_dbowner_{uuid.uuid4().hex[:8]}"
    database = psycopg.conninfo.conninfo_to_dict(fresh_database)["dbname"]
    with psycopg.connect(fresh_database, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                sql.Identifier(str(database)), sql.Identifier(role)
            )
        )
        admin.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        admin.execute("CREATE SCHEMA postkit_queue")
        admin.execute(
            "CREATE TABLE postkit_queue.migrations (version integer PRIMARY KEY, name text,"
            " checksum text, applied_at timestamptz DEFAULT now())"
        )
        admin.execute("RESET ROLE")
        try:
            with pytest.raises(errors.SchemaMismatchError, match="did not create it"):
                install(admin.cursor())
            (owner,) = admin.execute(
                "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'postkit_queue'"
            ).fetchone()  # type: ignore[misc]
        finally:
            admin.execute(
                sql.SQL("ALTER DATABASE {} OWNER TO postgres").format(sql.Identifier(str(database)))
            )
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))

    assert owner == role


@pytest.mark.skipif(on_citus.ENABLED, reason="on Citus the owner logs in")
def test_an_owner_role_that_can_log_in_is_refused_where_no_citus_needs_it(
    fresh_database: str,
) -> None:
    """Only Citus, which reaches other nodes as the owner, needs the owner to log in
    (distribute_on_citus gives it LOGIN); anywhere else a login owner would own every job."""
    with psycopg.connect(fresh_database, autocommit=True) as connection:
        connection.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = "
            "'postkit_queue_owner') THEN CREATE ROLE postkit_queue_owner NOLOGIN; END IF; END $$"
        )
        (could,) = connection.execute(
            "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'postkit_queue_owner'"
        ).fetchone()  # type: ignore[misc]
        connection.execute("ALTER ROLE postkit_queue_owner LOGIN")
        try:
            with pytest.raises(errors.InvalidAccessError, match="can log in"):
                install(connection)
        finally:
            connection.execute(
                "ALTER ROLE postkit_queue_owner " + ("LOGIN" if could else "NOLOGIN")
            )
        assert connection.execute("SELECT to_regnamespace('postkit_queue')").fetchone() == (None,)


def test_an_install_refuses_a_superuser_session_acting_as_the_database_owner(
    fresh_database: str,
) -> None:
    """A database owner may make its role the database's default, even for superusers: their
    install would then create every object as the database owner."""
    role = f"pk_dbowner_{uuid.uuid4().hex[:8]}"
    database = str(psycopg.conninfo.conninfo_to_dict(fresh_database)["dbname"])
    with psycopg.connect(fresh_database, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                sql.Identifier(database), sql.Identifier(role)
            )
        )
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET role = {}").format(
                sql.Identifier(database), sql.Literal(role)
            )
        )
    try:
        with psycopg.connect(fresh_database) as installer:
            with pytest.raises(errors.SchemaMismatchError, match="acts as role"):
                install(installer)
            installer.rollback()
            (schema,) = installer.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = 'postkit_queue'"
            ).fetchone()  # type: ignore[misc]
    finally:
        # From another database: a session of this one would act as the database owner.
        elsewhere = psycopg.conninfo.make_conninfo(fresh_database, dbname="postgres")
        with psycopg.connect(elsewhere, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} RESET role").format(sql.Identifier(database)))
            admin.execute(
                sql.SQL("ALTER DATABASE {} OWNER TO postgres").format(sql.Identifier(database))
            )
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))

    assert schema == 0


def test_an_execute_granted_by_hand_does_not_let_a_worker_purge(
    database: str, make_login: MakeLogin, namespace: str
) -> None:
    worker_dsn = make_login("worker")
    worker = client(worker_dsn, namespace)
    worker.push("emails", {})
    job = worker.pull("emails")
    assert job is not None and worker.fail(job, error="boom")
    with psycopg.connect(database, autocommit=True) as admin:
        for function in (
            "purge_dead_letters(text, interval, text)",
            "purge_dead_letters_before(text, timestamptz, text, bigint[], timestamptz)",
            "purge_queue(text, text)",
        ):
            admin.execute(
                sql.SQL("GRANT EXECUTE ON FUNCTION postkit_queue.{} TO {}").format(
                    sql.SQL(function), sql.Identifier(role_of(worker_dsn))
                )
            )

    with pytest.raises(errors.PermissionDeniedError, match="operator"):
        worker.purge_dead_letters(older_than=0)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="operator"):
        worker.cursor.execute(
            "SELECT postkit_queue.purge_dead_letters_before(%s, 'infinity')", (namespace,)
        )
    assert len(worker.dead_letters()) == 1


def test_an_upgrade_never_runs_a_function_planted_in_public(fresh_database: str) -> None:
    old_grant = f"pk_old_grant_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(fresh_database, autocommit=True) as admin:
        install_legacy(admin, 8)
        admin.execute("CREATE TABLE public.hijacks (what text)")
        # A closer match than pg_catalog.format(text, VARIADIC "any") for the migration's calls.
        admin.execute(
            "CREATE FUNCTION public.format(text, name) RETURNS text LANGUAGE sql"
            " AS $$ INSERT INTO public.hijacks VALUES ('format')"
            " RETURNING pg_catalog.format($1, $2) $$"
        )
        admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(old_grant)))
        admin.execute("SELECT postkit_queue.grant_access(%s, 'worker')", (old_grant,))
        admin.execute("SET search_path = public, pg_catalog")
        try:
            install(admin)
            hijacks = admin.execute("SELECT what FROM public.hijacks").fetchall()
            search_path = admin.execute("SHOW search_path").fetchone()
        finally:
            admin.execute("RESET search_path")
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(old_grant)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(old_grant)))

    assert hijacks == []
    assert search_path == ("public, pg_catalog",)


# ---------------------------------------------------------------------------------------------
# The clock seam is for tests.
# ---------------------------------------------------------------------------------------------


def test_a_non_superuser_session_cannot_move_the_queues_clock(
    make_login: MakeLogin, namespace: str
) -> None:
    worker = client(make_login("worker"), namespace)
    worker.cursor.execute("SET postkit_queue.clock_offset = '-infinity'")

    with pytest.raises(errors.PermissionDeniedError, match="test setting"):
        worker.push("emails", {})
    worker.cursor.execute("RESET postkit_queue.clock_offset")
    assert worker.pull("emails") is None


def test_a_clock_offset_over_a_century_is_refused_before_anything_is_stored(
    queue: QueueClient,
) -> None:
    queue.cursor.execute("SET postkit_queue.clock_offset = '9000 years'")

    with pytest.raises(errors.InvalidDurationError, match="100 years"):
        queue.push("emails", {})


def test_an_infinite_clock_offset_is_refused_before_anything_is_stored(
    queue: QueueClient, conn: psycopg.Connection[Any]
) -> None:
    if conn.info.server_version < 170000:
        pytest.skip("intervals are finite before PostgreSQL 17")
    queue.cursor.execute("SET postkit_queue.clock_offset = '-infinity'")

    with pytest.raises(errors.InvalidDurationError, match="finite"):
        queue.push("emails", {})


REGISTRATION: dict[str, Any] = {
    "host": "h",
    "pid": 1,
    "queues": ["q"],
    "concurrency": 1,
    "version": "v",
    "heartbeat_interval": 5,
}


def test_workers_register_themselves_and_only_operators_read_the_registry(
    make_login: MakeLogin, namespace: str
) -> None:
    producer = client(make_login("producer"), namespace)
    worker = client(make_login("worker"), namespace)
    operator = client(make_login("operator"), namespace)

    with pytest.raises(errors.PermissionDeniedError):
        producer.register_worker("p1", **REGISTRATION)
    worker.register_worker("w1", **REGISTRATION)
    assert worker.worker_heartbeat("w1") is True
    with pytest.raises(errors.PermissionDeniedError):
        worker.workers()
    assert [w.worker_id for w in operator.workers()] == ["w1"]
    assert worker.deregister_worker("w1") is True
    assert operator.workers() == []


def test_under_isolation_a_tenant_neither_sees_nor_touches_another_tenants_workers(
    make_login: MakeLogin, isolated: None
) -> None:
    ours = client(make_login("worker", namespaces=("ours",)), "ours")
    theirs_worker = client(make_login("worker", namespaces=("theirs",)), "theirs")
    theirs_operator = client(make_login("operator", namespaces=("theirs",)), "theirs")
    ours.register_worker("w1", **REGISTRATION)

    sneaky = QueueClient(theirs_worker.cursor, namespace="ours")
    with pytest.raises(errors.PermissionDeniedError):
        sneaky.register_worker("w2", **REGISTRATION)
    assert sneaky.worker_heartbeat("w1") is False
    assert sneaky.deregister_worker("w1") is False
    assert QueueClient(theirs_operator.cursor, namespace="ours").workers() == []
