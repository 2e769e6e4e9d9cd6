"""`postkit db` and the embedded server's life: found by its data directory, stopped by its
last user (a user killed with SIGKILL included), by SIGTERM, or on demand; and where it keeps
its data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from postkit.embedded import ROOT_DATA_DIR, default_data_dir, server_status
from tests.signals import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory of its own, outside pytest's private base directory (the server runs
    as a user of its own under root); its server is stopped afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="postkit-db-test-"))
    yield directory / "pgdata"
    postkit("db", "stop", data_dir=directory / "pgdata")
    shutil.rmtree(directory, ignore_errors=True)


def postkit(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("POSTKIT_DSN", "DATABASE_URL")}
    env["POSTKIT_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "postkit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_db_dsn_keeps_a_server_running_that_db_status_shows_and_db_stop_stops(
    data_dir: Path,
) -> None:
    assert "not running" in postkit("db", "status", data_dir=data_dir).stdout

    dsn = postkit("db", "dsn", data_dir=data_dir).stdout.strip()
    with psycopg.connect(dsn) as connection:
        assert connection.execute("SELECT 1").fetchone() == (1,)
    status = json.loads(postkit("db", "status", "--json", data_dir=data_dir).stdout)
    stopped = postkit("db", "stop", data_dir=data_dir)

    assert status["running"] is True and status["dsn"] == dsn and status["holders"] == []
    assert status["data_dir"] == str(data_dir.resolve())
    assert stopped.returncode == 0 and "stopped the embedded PostgreSQL" in stopped.stdout
    assert not server_status(data_dir).running
    assert "no embedded PostgreSQL runs" in postkit("db", "stop", data_dir=data_dir).stdout


def test_a_user_killed_with_sigkill_does_not_keep_the_server_running_after_the_last_exits(
    data_dir: Path,
) -> None:
    """Its pid stays in the server's list of users; the next command drops it, and stops the
    server as it exits, the last live user."""
    assert postkit("install", data_dir=data_dir).returncode == 0
    killed = subprocess.Popen(
        [sys.executable, "-m", "postkit", "stats", "--watch"],
        env={
            **{k: v for k, v in os.environ.items() if k not in ("POSTKIT_DSN", "DATABASE_URL")},
            "POSTKIT_DATA_DIR": str(data_dir),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: killed.pid in server_status(data_dir).holders, "stats to start", 60)
    finally:
        killed.kill()
        killed.wait()

    assert postkit("stats", data_dir=data_dir).returncode == 0

    assert not server_status(data_dir).running


def test_sigterm_to_the_dashboard_stops_the_server_it_started(data_dir: Path) -> None:
    pytest.importorskip("uvicorn")
    env = {k: v for k, v in os.environ.items() if k not in ("POSTKIT_DSN", "DATABASE_URL")}
    env["POSTKIT_DATA_DIR"] = str(data_dir)
    dashboard = subprocess.Popen(
        [sys.executable, "-m", "postkit", "dashboard", "--port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: dashboard.pid in server_status(data_dir).holders, "the dashboard", 60)
        dashboard.send_signal(signal.SIGTERM)
        dashboard.wait(timeout=30)
    finally:
        if dashboard.poll() is None:
            dashboard.kill()

    assert not server_status(data_dir).running
    assert server_status(data_dir).holders == ()


def test_the_data_directory_is_the_users_and_root_keeps_it_where_the_server_user_reaches(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("POSTKIT_DATA_DIR", raising=False)
    open_dir = Path(tempfile.mkdtemp(prefix="postkit-xdg-"))
    os.chmod(open_dir, 0o755)
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    try:
        monkeypatch.setenv("XDG_DATA_HOME", str(open_dir))
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        assert default_data_dir() == open_dir / "postkit" / "pgdata"
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        assert default_data_dir() == open_dir / "postkit" / "pgdata"

        monkeypatch.setenv("XDG_DATA_HOME", str(private / "share"))
        assert default_data_dir() == ROOT_DATA_DIR
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        assert default_data_dir() == private / "share" / "postkit" / "pgdata"
    finally:
        shutil.rmtree(open_dir, ignore_errors=True)
