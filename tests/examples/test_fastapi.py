"""examples/fastapi as its README runs it: FastAPI's test client makes the README's request,
a real ``postkit worker`` process (the README's command) sends the welcome, and the app shows
the job's result; a failed signup pushes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient
from tests.examples.commands import EXAMPLES, curl, environment, imported, readme, running
from tests.signals import wait_until

EXAMPLE = EXAMPLES / "fastapi"
NAMESPACE = "fastapi-example"


def jobs(dsn: str) -> list[Any]:
    """The payloads of the example's jobs, oldest first, pending or running."""
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "SELECT payload FROM postkit_queue.jobs WHERE namespace = %s ORDER BY id", (NAMESPACE,)
        ).fetchall()
    return [payload for (payload,) in rows]


def test_the_readme_has_the_install_the_run_line_and_a_curl() -> None:
    commands = readme("fastapi")
    assert commands.install.startswith("pip install ")
    assert commands.run.startswith("postkit install && ")
    assert "uvicorn app:app" in commands.run
    assert curl(commands.try_it).path == "/signup"


def test_a_signup_pushes_its_welcome_and_the_worker_sends_it(
    installed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    monkeypatch.setenv("POSTKIT_DSN", installed)
    commands = readme("fastapi")
    signup = curl(commands.try_it)
    email = json.loads(signup.body or "")["email"]

    with imported(EXAMPLE, "app") as example, TestClient(example.app) as client:
        response = client.request(
            signup.method, signup.path, content=signup.body, headers=signup.headers
        )
        assert response.status_code == 202, response.text
        user_id, job_id = response.json()["user_id"], response.json()["welcome_job"]
        assert client.get(f"/users/{user_id}").json()["welcome"]["state"] == "pending"
        # The request committed its row and its job together.
        assert jobs(installed) == [{"args": [], "kwargs": {"email": email}}]

        with running(commands.worker(), EXAMPLE, environment(installed)) as worker:

            def sent() -> dict[str, Any] | None:
                worker.alive()
                welcome = client.get(f"/users/{user_id}").json()["welcome"]
                return welcome if welcome["state"] == "completed" else None

            welcome = wait_until(sent, "the worker to send the welcome")
            assert welcome["result"] == {"sent_to": email}

    assert f"Welcome to the app, {email}!" in worker.output
    assert jobs(installed) == []
    with psycopg.connect(installed) as connection:
        result = QueueClient(connection.cursor(), namespace=NAMESPACE).result(job_id)
    assert (result.state, result.attempts) == ("completed", 1)


def test_a_failed_signup_pushes_nothing(installed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    monkeypatch.setenv("POSTKIT_DSN", installed)
    signup = curl(readme("fastapi").try_it)

    with imported(EXAMPLE, "app") as example, TestClient(example.app) as client:
        first = client.post(signup.path, content=signup.body, headers=signup.headers)
        again = client.post(signup.path, content=signup.body, headers=signup.headers)

    assert (first.status_code, again.status_code) == (202, 409)
    assert "has already signed up" in again.json()["detail"]
    # The second request pushed its job before its insert failed: the rollback dropped it.
    assert len(jobs(installed)) == 1
    with psycopg.connect(installed) as connection:
        assert connection.execute("SELECT count(*) FROM fastapi_users").fetchone() == (1,)


def test_the_examples_own_tests_pass_on_the_testing_plugin(server_dsn: str) -> None:
    """The example tests its task as an application would: `pytest` in its directory, on
    postkit.testing's fresh database per test and drain(), with no worker."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q"],
        cwd=EXAMPLE,
        env={**environment(server_dsn), "POSTKIT_TEST_DSN": server_dsn},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
