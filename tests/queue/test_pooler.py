"""Postkit through a real PgBouncer in transaction mode, the pooler most deployments put in front
of PostgreSQL: consecutive transactions of one client run on whichever server session is free,
so nothing a client leaves in a session (a prepared statement, a setting, a LISTEN) is its own.

Each test starts a PgBouncer of its own (``pgbouncer`` from Debian's package, which CI
installs) on a free port of 127.0.0.1, pointing at the server under test, with two server
sessions for every client so that clients share them. Without the binary the tests skip.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postkit.queue import Job, QueueClient
from postkit.worker import Handlers, Worker
from postkit.worker.maintenance import Maintenance
from tests.signals import wait_until

Q = "pooled"

PGBOUNCER = shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")

pytestmark = pytest.mark.skipif(
    PGBOUNCER is None,
    reason="the pgbouncer binary is not installed (apt-get install pgbouncer; CI installs it)",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def pooled_dsn(dsn: str) -> Iterator[str]:
    """A DSN for the test database through a PgBouncer in transaction mode, started for this
    test and stopped after it."""
    target = psycopg.conninfo.conninfo_to_dict(dsn)
    host = str(target.get("host") or "/var/run/postgresql")
    server = {
        "host": host,
        "port": target.get("port") or 5432,
        "user": target.get("user") or pwd.getpwuid(os.getuid()).pw_name,
        "password": target.get("password"),
    }
    directory = Path(tempfile.mkdtemp(prefix="postkit-pgbouncer-"))
    directory.chmod(0o755)
    port = free_port()
    config = directory / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        + "* = "
        + " ".join(f"{key}={value}" for key, value in server.items() if value is not None)
        + "\n[pgbouncer]\n"
        + f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        + f"auth_type = any\npool_mode = transaction\nadmin_users = {server['user']}\n"
        + "default_pool_size = 2\nmax_client_conn = 200\n"
    )
    config.chmod(0o644)
    command = [str(PGBOUNCER), str(config)]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root: run it as the owner of the server's socket
        # directory (an embedded server's is private to that user), or as nobody.
        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "nobody"
        command[1:1] = ["-u", owner]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pooled = psycopg.conninfo.make_conninfo(
        "", host="127.0.0.1", port=port, dbname=target["dbname"], user=server["user"]
    )

    def accepts() -> bool:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        try:
            psycopg.connect(pooled, connect_timeout=2, prepare_threshold=None).close()
        except psycopg.OperationalError:
            return False
        return True

    try:
        wait_until(accepts, "PgBouncer to accept a connection")
        yield pooled
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client straight to the server, to check what went through the pooler."""
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def pooled_client(pooled_dsn: str, namespace: str) -> Iterator[QueueClient]:
    """An autocommit client through the pooler, with psycopg's prepared statements off."""
    with psycopg.connect(pooled_dsn, autocommit=True, prepare_threshold=None) as connection:
        yield QueueClient(connection.cursor(), namespace=namespace)


def test_pushes_from_several_clients_through_the_pooler_succeed_with_prepared_statements_off(
    pooled_dsn: str, namespace: str, client: QueueClient
) -> None:
    ids: list[int] = []
    errors: list[BaseException] = []

    def push_forty() -> None:
        try:
            with psycopg.connect(pooled_dsn, autocommit=True, prepare_threshold=None) as conn:
                queue = QueueClient(conn.cursor(), namespace=namespace)
                for number in range(40):
                    job_id = queue.push(Q, {"number": number})
                    assert job_id is not None
                    ids.append(job_id)
        except BaseException as error:
            errors.append(error)

    # Six clients on two server sessions: psycopg's automatic prepared statements (after five
    # runs of a statement) would each be missing on the session the next run lands on.
    threads = [threading.Thread(target=push_forty) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(set(ids)) == 240
    assert sum(row.pending for row in client.stats(Q)) == 240


def test_a_pooler_mode_worker_drains_its_queue_and_says_notifications_are_off(
    pooled_dsn: str,
    namespace: str,
    pooled_client: QueueClient,
    client: QueueClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    done: list[int] = []
    handlers = Handlers()

    @handlers.register(Q)
    def plain(job: Job) -> None:
        done.append(job.id)

    pooled_client.push_batch(Q, [{} for _ in range(100)])
    worker = Worker(pooled_dsn, handlers, namespace=namespace, pooler=True, tick_interval=0.5)
    thread = threading.Thread(target=worker.run, daemon=True)
    with caplog.at_level(logging.INFO, logger="postkit.worker"):
        thread.start()
        try:
            wait_until(lambda: worker.stats.completed == 100, "the worker to drain the queue")
            # Idle now, it still finds a new job: its poll, since no notification can come.
            pooled_client.push(Q, {})
            wait_until(lambda: worker.stats.completed == 101, "the idle worker to find a job")
        finally:
            worker.stop()
            thread.join(timeout=30)
    assert not thread.is_alive()
    assert len(set(done)) == 101
    assert sum(row.pending + row.running for row in client.stats(Q)) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert any(
        message.startswith("pooler mode: notifications are off") and "polls every 1s" in message
        for message in messages
    ), messages
    assert not any("error" in message for message in messages), messages


def test_a_pooler_mode_worker_runs_a_fan_in_after_its_parents_with_their_results(
    pooled_dsn: str, namespace: str, pooled_client: QueueClient, client: QueueClient
) -> None:
    """Pushed through the pooler and run by a worker in pooler mode: the child waits for its
    parents, then reads their results (parent_results, through the pooler too)."""
    sums: list[int] = []
    handlers = Handlers()

    @handlers.register(Q)
    def part(job: Job) -> int:
        return int(job.payload["n"])

    @handlers.register("total")
    def total(job: Job) -> None:
        assert job.parent_results is not None
        sums.append(sum(job.parent_results.values()))

    pooled_client.configure_queue(Q, retain_results=3600)
    parents = pooled_client.push_batch(Q, [{"n": n} for n in range(1, 11)])
    child = pooled_client.push("total", {}, depends_on=[p for p in parents if p is not None])
    assert pooled_client.result(child).state == "waiting"
    worker = Worker(pooled_dsn, handlers, namespace=namespace, pooler=True, concurrency=4)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: worker.stats.completed == 11, "the parents, then the child")
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert sums == [55]
    assert client.get_job(child) is None


def test_a_pooler_mode_worker_leaves_no_session_setting_to_other_clients(
    pooled_dsn: str, namespace: str, pooled_client: QueueClient, table: str
) -> None:
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def record(job: Job, cursor: psycopg.Cursor[Any]) -> None:
        cursor.execute(f"INSERT INTO {table} VALUES (%s)", (job.id,))

    pooled_client.push_batch(Q, [{} for _ in range(50)])
    worker = Worker(pooled_dsn, handlers, namespace=namespace, pooler=True, concurrency=4)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: worker.stats.completed == 50, "the worker to drain the queue")
        # Other clients of the pool, each transaction on whichever of the two server sessions
        # is free: every one of them sees the server's own settings.
        seen = set()
        for _ in range(4):
            with psycopg.connect(pooled_dsn, autocommit=True, prepare_threshold=None) as other:
                for _ in range(5):
                    row = other.execute(
                        "SELECT current_setting('synchronous_commit'),"
                        " current_setting('statement_timeout'), current_setting('search_path')"
                    ).fetchone()
                    seen.add(row)
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert seen == {("on", "0", '"$user", public')}


def test_postkit_worker_with_pooler_drains_through_pgbouncer_and_exits_0_on_sigterm(
    pooled_dsn: str, namespace: str, pooled_client: QueueClient, tmp_path: Path
) -> None:
    (tmp_path / "tasks.py").write_text(
        "from postkit.worker import Handlers\n"
        "handlers = Handlers()\n"
        "handlers.add('pooled', lambda job: None)\n"
    )
    output = tmp_path / "worker.log"
    with output.open("w") as log:
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "postkit.cli", "worker", "tasks", "--pooler", "-v"),
                *("--namespace", namespace, "--dsn", pooled_dsn, "--processes", "2"),
            ],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    try:
        wait_until(
            lambda: output.read_text().count("pooler mode: notifications are off") == 2,
            "the two worker processes to say they poll",
        )
        pooled_client.push_batch(Q, [{} for _ in range(30)])
        wait_until(
            lambda: output.read_text().count("completed job") == 30,
            "the pooler-mode workers to ack every job",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    text = output.read_text()
    assert code == 0, text
    assert text.count("pooler mode: notifications are off") == 2, text
    assert "Traceback" not in text and "error" not in text, text


@pytest.fixture
def table(connect: Callable[..., psycopg.Connection[Any]]) -> Iterator[str]:
    name = f"pooled_writes_{os.getpid()}_{time.monotonic_ns()}"
    admin = connect(autocommit=True)
    admin.execute(f"CREATE TABLE {name} (job_id bigint PRIMARY KEY)")
    yield name
    admin.execute(f"DROP TABLE {name}")


def test_a_ticker_through_the_pooler_stops_within_seconds_while_the_pooler_holds_statements(
    pooled_dsn: str, namespace: str, client: QueueClient
) -> None:
    maintenance = Maintenance.for_tick(pooled_dsn, namespace, interval=60)
    stop = threading.Event()
    ticker = threading.Thread(target=maintenance.run_forever, args=(stop,), daemon=True)
    ticker.start()
    wait_until(client.workers, "the ticker to register")
    console = psycopg.conninfo.make_conninfo(pooled_dsn, dbname="pgbouncer")
    database = psycopg.conninfo.conninfo_to_dict(pooled_dsn)["dbname"]

    # PAUSE holds every statement as PgBouncer does while its server is down, and it ignores
    # a cancel request for a client that waits so.
    with psycopg.connect(console, autocommit=True, prepare_threshold=None) as admin:
        admin.execute(f"PAUSE {database}")
        try:
            stop.set()
            ticker.join(20)
            alive = ticker.is_alive()
        finally:
            admin.execute(f"RESUME {database}")
    assert not alive, "the ticker's stop waited on the pooler"


def test_a_ticker_through_the_pooler_stops_within_seconds_while_the_pooler_holds_its_round(
    pooled_dsn: str,
) -> None:
    console = psycopg.conninfo.make_conninfo(pooled_dsn, dbname="pgbouncer")
    database = psycopg.conninfo.conninfo_to_dict(pooled_dsn)["dbname"]
    maintenance = Maintenance.for_tick(pooled_dsn, "pooler-held-round", interval=60)
    stop = threading.Event()
    ticker = threading.Thread(target=maintenance.run_forever, args=(stop,), daemon=True)

    with psycopg.connect(console, autocommit=True, prepare_threshold=None) as admin:
        admin.execute(f"PAUSE {database}")
        try:
            # The ticker's first round starts while the pooler holds every statement: the
            # statement the stop finds is the round's, where a cancel request is ignored.
            ticker.start()

            def round_held() -> bool:
                rows = admin.execute("SHOW POOLS").fetchall()
                return any(row[0] == database and row[3] > 0 for row in rows)  # cl_waiting

            wait_until(round_held, "the ticker's round to wait on the pooler")
            stop.set()
            ticker.join(20)
            alive = ticker.is_alive()
        finally:
            admin.execute(f"RESUME {database}")
    assert not alive, "the ticker's stop waited on the round the pooler held"


def test_a_pooler_mode_worker_stops_within_seconds_while_the_pooler_holds_statements(
    pooled_dsn: str, namespace: str, client: QueueClient
) -> None:
    """A worker whose pooler lost its server (PAUSE holds every statement, and ignores a
    cancel request for a client that waits so) still stops when asked: an orchestrator's
    stop must not wait for the database to come back."""
    handlers = Handlers()

    @handlers.register(Q)
    def plain(job: Job) -> None:
        pass

    worker = Worker(
        pooled_dsn, handlers, namespace=namespace, pooler=True, tick_interval=0.5, grace_period=1
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    console = psycopg.conninfo.make_conninfo(pooled_dsn, dbname="pgbouncer")
    database = psycopg.conninfo.conninfo_to_dict(pooled_dsn)["dbname"]
    try:
        wait_until(client.workers, "the worker to register")
        with psycopg.connect(console, autocommit=True, prepare_threshold=None) as admin:
            admin.execute(f"PAUSE {database}")
            try:

                def held() -> bool:
                    rows = admin.execute("SHOW POOLS").fetchall()
                    return any(row[0] == database and row[3] > 0 for row in rows)  # cl_waiting

                # Its poll (every second in pooler mode) waits on the pooler now.
                wait_until(held, "the worker's poll to wait on the pooler")
                worker.stop()
                thread.join(30)
                alive = thread.is_alive()
            finally:
                admin.execute(f"RESUME {database}")
    finally:
        worker.stop()
        thread.join(30)
    assert not alive, "the worker's stop waited on the pooler"
