"""examples/workflow as its README runs it: ``python signup.py`` runs two signups, one
confirmed by an event while its run waits and one reminded when its wait times out; the
README's ``postkit workflow show`` then lists the first run's steps."""

from __future__ import annotations

import json
import re
import shlex
import sys

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from tests.examples.commands import EXAMPLES, Process, environment, readme
from tests.signals import wait_until

EXAMPLE = EXAMPLES / "workflow"


def test_the_signups_are_confirmed_or_reminded_and_each_account_is_made_once(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = readme("workflow")
    assert commands.install.startswith("pip install ")
    program, *arguments = shlex.split(commands.run)
    assert program == "python"

    script = Process([sys.executable, *arguments], EXAMPLE, environment(fresh_database))
    wait_until(lambda: script.popen.poll() is not None, "the script to finish", timeout=60)

    assert script.popen.returncode == 0, script.output
    assert "to ada@example.com: welcome! your account is" in script.output
    assert "to grace@example.com: please confirm your e-mail address" in script.output
    assert "to ada@example.com: please confirm" not in script.output
    assert re.search(
        r"run 1: confirmed at the link; steps account, welcome, wait_for, event", script.output
    )
    assert re.search(
        r"run 2: reminded; steps account, welcome, wait_for, event, reminder", script.output
    )
    with psycopg.connect(fresh_database) as connection:
        accounts = connection.execute("SELECT email FROM accounts ORDER BY email").fetchall()
    assert accounts == [("ada@example.com",), ("grace@example.com",)]

    monkeypatch.setenv("POSTKIT_DSN", fresh_database)
    shown = CliRunner().invoke(main, [*shlex.split(commands.try_it)[1:], "--json"])
    assert shown.exit_code == 0, shown.output
    assert [step["name"] for step in json.loads(shown.output)["steps"]] == [
        "account",
        "welcome",
        "wait_for",
        "event",
    ]
