"""examples/flask as its README runs it: Flask's test client makes the README's request, a
real ``postkit worker`` process (the README's command) sends the welcome and records it in the
ack's transaction; a failed signup pushes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import psycopg
import pytest

from tests.examples.commands import EXAMPLES, curl, environment, imported, readme, running
from tests.signals import wait_until

EXAMPLE = EXAMPLES / "flask"
NAMESPACE = "flask-example"


def jobs(dsn: str) -> list[Any]:
    """The payloads of the example's jobs, oldest first, pending or running."""
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "SELECT payload FROM postkit_queue.jobs WHERE namespace = %s ORDER BY id", (NAMESPACE,)
        ).fetchall()
    return [payload for (payload,) in rows]


@pytest.fixture
def client(installed: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Flask's test client on the example's app, on the installed database; its pool is
    closed after the test."""
    monkeypatch.setenv("POSTKIT_DSN", installed)
    with imported(EXAMPLE, "app") as example:
        app = example.create_app()
        try:
            yield app.test_client()
        finally:
            app.extensions["pool"].close()


def test_the_readme_has_the_install_the_run_line_and_a_curl() -> None:
    commands = readme("flask")
    assert commands.install.startswith("pip install ")
    assert commands.run.startswith("postkit install && ")
    assert "flask --app app run" in commands.run
    assert curl(commands.try_it).path == "/signup"


def test_a_signup_pushes_its_welcome_and_the_worker_sends_it(installed: str, client: Any) -> None:
    commands = readme("flask")
    signup = curl(commands.try_it)
    (email,) = parse_qs(signup.body or "")["email"]

    response = client.open(
        signup.path, method=signup.method, data=signup.body, headers=signup.headers
    )
    assert response.status_code == 202, response.text
    user_id = response.json["user_id"]
    assert client.get(f"/users/{user_id}").json == {"email": email, "welcomed_at": None}
    assert jobs(installed) == [{"email": email}]  # committed with the user's row

    with running(commands.worker(), EXAMPLE, environment(installed)) as worker:

        def welcomed() -> str | None:
            worker.alive()
            return client.get(f"/users/{user_id}").json["welcomed_at"]

        wait_until(welcomed, "the worker to send the welcome and record it")

    assert f"Welcome to the app, {email}!" in worker.output
    assert jobs(installed) == []  # acked: in the transaction that set welcomed_at


def test_a_failed_signup_pushes_nothing(installed: str, client: Any) -> None:
    signup = curl(readme("flask").try_it)
    (email,) = parse_qs(signup.body or "")["email"]

    first = client.post(signup.path, data=signup.body, headers=signup.headers)
    again = client.post(signup.path, data=signup.body, headers=signup.headers)

    assert (first.status_code, again.status_code) == (202, 409)
    assert again.json == {"error": f"{email} has already signed up"}
    # The second request pushed its job before its insert failed: the rollback dropped it.
    assert len(jobs(installed)) == 1
    with psycopg.connect(installed) as connection:
        assert connection.execute("SELECT count(*) FROM flask_users").fetchone() == (1,)
