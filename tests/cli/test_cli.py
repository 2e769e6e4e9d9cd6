"""The command line: `postkit install`, `postkit sql` and `postkit demo`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.queue import QueueClient, latest_version


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_help_lists_the_commands_with_an_example() -> None:
    code, output = run("--help")

    assert code == 0
    for command in ("install", "sql", "demo"):
        assert command in output
    assert "postkit sql | psql" in output


def test_python_dash_m_postkit_is_the_postkit_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "postkit", "sql"], capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout == run("sql")[1]


@pytest.mark.parametrize("command", ["install", "sql", "demo"])
def test_every_command_has_help(command: str) -> None:
    code, output = run(command, "--help")

    assert code == 0
    assert "Usage: main" in output or "Usage: postkit" in output
    assert len(output.splitlines()) > 5


def test_sql_prints_one_transactional_script_with_every_migration() -> None:
    code, output = run("sql")

    assert code == 0
    assert output.count("BEGIN;") == 1 and output.rstrip().endswith("COMMIT;")
    assert "CREATE TABLE postkit_queue.jobs" in output
    assert f"-- Migration {latest_version()}:" in output


def test_install_json_reports_what_it_applied_then_nothing_the_second_time(
    fresh_database: str,
) -> None:
    first = json.loads(run("install", "--dsn", fresh_database, "--json")[1])
    second = json.loads(run("install", "--dsn", fresh_database, "--json")[1])

    assert first == {
        "previous_version": 0,
        "version": latest_version(),
        "applied": list(range(1, latest_version() + 1)),
        "revoked": [],
        "granted": [],
        "assigned": [],
        "tenant_isolation": False,
        "citus": [],
    }
    assert second["applied"] == [] and second["version"] == latest_version()


def test_install_says_installed_on_a_fresh_database_then_up_to_date(fresh_database: str) -> None:
    first = run("install", "--dsn", fresh_database)[1]
    second = run("install", "--dsn", fresh_database)[1]

    assert first.startswith(f"postkit_queue installed at version {latest_version()} (migrations 1,")
    assert second == f"postkit_queue is up to date at version {latest_version()}\n"


def test_unreachable_database_gives_one_line_and_exit_code_1_without_traceback() -> None:
    code, output = run("install", "--dsn", "postgresql://nobody@127.0.0.1:1/none")

    assert code == 1
    assert output.startswith("Error: ")
    assert "Traceback" not in output


def test_demo_tells_the_whole_story(dsn: str) -> None:
    code, output = run("demo", "--dsn", dsn, "--json")

    assert code == 0, output
    summary = json.loads(output)
    assert summary["registrations_rolled_back"] == 1
    assert summary["completed"] + len(summary["dead_lettered"]) == summary["users_registered"]
    assert sorted(d["reason"] for d in summary["dead_lettered"]) == [
        "attempts_exhausted",
        "failed",
    ]
    assert summary["retried"] >= 3
    assert summary["rescued"] == 1 and summary["stale_ack_refused"] is True
    assert summary["otp_codes_stored"] == summary["completed"]
    assert summary["provider_sends"] == summary["completed"] + 1
    assert len(summary["users_messaged_twice"]) == 1


def test_demo_runs_on_the_embedded_server_when_no_dsn_is_given() -> None:
    # A directory of its own, not under pytest's tmp_path (as conftest's embedded servers):
    # pytest keeps its base directories private to the user that runs it, and another session
    # may prune them, while the embedded server runs as a user of its own.
    directory = Path(tempfile.mkdtemp(prefix="postkit-demo-test-"))
    env = {k: v for k, v in os.environ.items() if k not in ("POSTKIT_DSN", "DATABASE_URL")}
    env["POSTKIT_DATA_DIR"] = str(directory / "pgdata")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "postkit.cli", "demo"],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )

        assert result.returncode == 0, result.stderr
        assert "Summary" in result.stdout and "stale ack refused" in result.stdout
        assert (directory / "pgdata" / "PG_VERSION").exists()
    finally:
        # The demo's embedded server stopped when the demo, its last user, exited.
        shutil.rmtree(directory, ignore_errors=True)


def test_demo_starts_clean_after_an_operator_paused_its_queue(dsn: str) -> None:
    with psycopg.connect(dsn) as connection:
        QueueClient(connection.cursor(), namespace="postkit-demo").pause_queue("send_otp")

    code, output = run("demo", "--dsn", dsn, "--json")

    assert code == 0, output
    assert json.loads(output)["completed"] > 0
