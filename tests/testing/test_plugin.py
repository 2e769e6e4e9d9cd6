"""The plugin as a user's suite loads it: a real ``pytest -p postkit.testing`` run, in a
process of its own, on a small test file of the kind an application writes. Its fixtures give
each test a database of its own, cloned from a template and dropped afterwards."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import postkit

SRC = Path(postkit.__file__).resolve().parents[1]

USER_TESTS = """
import psycopg
import pytest

from postkit import tasks
from postkit.errors import PermanentError
from postkit.testing import assert_pushed, drain

app = tasks.App(namespace="shop")


@app.task(queue="receipts", max_attempts=3)
def send_receipt(order_id: int) -> str:
    if order_id < 0:
        raise PermanentError("no such order")
    return f"receipt {order_id}"


@pytest.fixture
def postkit_namespace():
    return "shop"


def test_an_order_pushes_its_receipt(postkit_client):
    send_receipt.push(postkit_client.cursor, order_id=1)
    assert_pushed(postkit_client, "receipts", {"args": [], "kwargs": {"order_id": 1}}, count=1)


def test_drain_sends_it(postkit_client):
    job_id = send_receipt.push(postkit_client.cursor, order_id=2)
    assert drain(postkit_client, app)[job_id].result == "receipt 2"


def test_a_bad_order_is_dead(postkit_client):
    job_id = send_receipt.push(postkit_client.cursor, order_id=-1)
    assert drain(postkit_client, app)[job_id].state == "dead"


def test_the_database_starts_empty_whatever_the_last_test_left(postkit_client):
    send_receipt.push(postkit_client.cursor, order_id=3)
    postkit_client.cursor.connection.commit()
    assert len(postkit_client.jobs("receipts")) == 1


@pytest.mark.parametrize("n", range(20))
def test_a_fresh_database(postkit_database, n):
    with psycopg.connect(postkit_database) as connection:
        assert connection.execute("SELECT count(*) FROM postkit_queue.jobs").fetchone() == (0,)
"""

RECORDER = """
import json
import os

import psycopg


def pytest_runtest_logreport(report):
    if report.when == "setup":
        with open(os.environ["SETUP_TIMES"], "a") as out:
            out.write(json.dumps([report.nodeid, report.duration]) + "\\n")


def pytest_fixture_post_finalizer(fixturedef, request):
    if fixturedef.argname == "postkit_database" and fixturedef.cached_result:
        dsn = fixturedef.cached_result[0]
        with open(os.environ["DATABASES"], "a") as out:
            out.write(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"] + "\\n")
"""


def test_a_users_suite_runs_with_the_plugin_on_a_fresh_database_per_test_then_drops_them(
    server_dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "test_shop.py").write_text(USER_TESTS, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(RECORDER, encoding="utf-8")
    setup_times, databases = tmp_path / "setup.jsonl", tmp_path / "databases.txt"
    env = {
        **os.environ,
        "POSTKIT_TEST_DSN": server_dsn,
        "PYTHONPATH": str(SRC),
        "SETUP_TIMES": str(setup_times),
        "DATABASES": str(databases),
    }

    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "postkit.testing", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "24 passed" in run.stdout
    times = [json.loads(line)[1] for line in setup_times.read_text().splitlines()]
    print(
        f"\npostkit_database setup: first {times[0] * 1000:.0f} ms (template install included); "
        f"after it median {statistics.median(times[1:]) * 1000:.1f} ms, "
        f"max {max(times[1:]) * 1000:.1f} ms over {len(times) - 1} tests"
    )
    names = databases.read_text().split()
    assert len(set(names)) == 24
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        left = admin.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s) OR datname LIKE "
            "'postkit_template_%%' AND datname NOT IN (SELECT datname FROM pg_stat_activity)",
            (names,),
        ).fetchall()
    assert left == []


SMALL_SUITE = """
import psycopg


def test_a_database(postkit_database):
    with psycopg.connect(postkit_database) as connection:
        info = connection.info
        print("SERVER", info.host, info.port)
        assert connection.execute("SELECT count(*) FROM postkit_queue.jobs").fetchone() == (0,)
"""


def run_small_suite(tmp_path: Path, *options: str, env: dict[str, str]) -> str:
    (tmp_path / "test_small.py").write_text(SMALL_SUITE, encoding="utf-8")
    pytest_run = [sys.executable, "-m", "pytest", "-p", "postkit.testing", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*pytest_run, "-q", "-s", *options],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_the_dsn_option_names_the_server_over_the_environment(
    server_dsn: str, tmp_path: Path
) -> None:
    unreachable = "postgresql://nobody@127.0.0.1:1/none"
    env = {**os.environ, "POSTKIT_TEST_DSN": unreachable}

    output = run_small_suite(tmp_path, f"--postkit-dsn={server_dsn}", env=env)

    assert "1 passed" in output


@pytest.mark.slow
def test_without_a_named_server_the_fixtures_start_an_embedded_one(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "POSTKIT_TEST_DSN"}

    output = run_small_suite(tmp_path, env=env)

    assert "1 passed" in output
    (server,) = [line for line in output.splitlines() if line.startswith("SERVER")]
    assert server.split()[1].startswith("/")  # the embedded server's Unix socket directory


def test_the_plugin_is_not_loaded_unless_asked_for(tmp_path: Path) -> None:
    (tmp_path / "test_nothing.py").write_text(
        "def test_no_fixture(request):\n"
        "    assert 'postkit_database' not in request.fixturenames\n"
        "    assert request.config.pluginmanager.get_plugin('postkit.testing') is None\n",
        encoding="utf-8",
    )

    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert run.returncode == 0, run.stdout + run.stderr
