"""examples/django as its README runs it: ``manage.py migrate``, Django's test client making the
README's request (in a process of its own: see django_client.py), and a real ``manage.py
postkit_worker`` process (the README's command) whose handler writes with the ORM in the ack's
transaction; a failed signup pushes nothing."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import psycopg
import pytest

from tests.examples.commands import EXAMPLES, Request, curl, environment, readme, running
from tests.signals import wait_until

EXAMPLE = EXAMPLES / "django"
NAMESPACE = "django-example"
CLIENT = Path(__file__).with_name("django_client.py")


def requests(dsn: str, *sent: Request) -> list[dict[str, Any]]:
    """The responses of Django's test client to ``sent``, in the example's project on ``dsn``."""
    given = [
        {
            "method": request.method,
            "path": request.path,
            "body": request.body,
            "content_type": request.headers.get("Content-Type"),
        }
        for request in sent
    ]
    done = subprocess.run(
        [sys.executable, str(CLIENT), json.dumps(given)],
        cwd=EXAMPLE,
        env=environment(dsn),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def jobs(dsn: str) -> list[Any]:
    """The payloads of the example's jobs, oldest first, pending or running."""
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "SELECT payload FROM postkit_queue.jobs WHERE namespace = %s ORDER BY id", (NAMESPACE,)
        ).fetchall()
    return [payload for (payload,) in rows]


def signups(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(
            "SELECT email, welcome_job, welcomed_at IS NOT NULL FROM signups_signup ORDER BY id"
        ).fetchall()


def test_the_readme_migrates_then_runs_the_worker_and_the_server() -> None:
    commands = readme("django")
    assert commands.install.startswith("pip install ")
    assert commands.run.startswith("python manage.py migrate && ")
    assert "python manage.py runserver" in commands.run
    assert curl(commands.try_it).path == "/signup"


@pytest.mark.slow
def test_a_signup_pushes_its_welcome_a_failed_one_nothing_and_the_worker_records_it(
    fresh_database: str,
) -> None:
    commands = readme("django")
    env = environment(fresh_database)
    migrate = shlex.split(commands.run.partition(" && ")[0])
    assert migrate == ["python", "manage.py", "migrate"]
    migrated = subprocess.run(
        [sys.executable, *migrate[1:]], cwd=EXAMPLE, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    signup = curl(commands.try_it)
    (email,) = parse_qs(signup.body or "")["email"]

    first, again = requests(fresh_database, signup, signup)

    assert first["status"] == 202, first
    # The second request pushed its job before its insert failed: the rollback dropped it.
    assert again == {"status": 409, "json": {"error": f"{email} has already signed up"}}
    job_id = first["json"]["welcome_job"]
    assert jobs(fresh_database) == [{"email": email}]
    assert signups(fresh_database) == [(email, job_id, False)]

    with running(commands.worker(), EXAMPLE, env) as worker:

        def welcomed() -> bool:
            worker.alive()
            return signups(fresh_database) == [(email, job_id, True)]

        wait_until(welcomed, "the worker to record the welcome with the ORM")

    assert f"Welcome to the app, {email}!" in worker.output
    assert jobs(fresh_database) == []  # acked, in the transaction of the ORM's write
    (shown,) = requests(
        fresh_database, Request("GET", f"/users/{first['json']['user_id']}", None, {})
    )
    assert shown["json"]["welcomed_at"] is not None
