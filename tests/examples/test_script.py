"""examples/script as its README runs it: ``python hello.py`` pushes its job and works it, the
README's ``postkit push`` adds another, which the running script works too, and Ctrl-C stops
it; both jobs are acked, none is left or dead."""

from __future__ import annotations

import json
import shlex
import signal
import sys

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.queue import QueueClient
from tests.examples.commands import EXAMPLES, Process, environment, readme
from tests.signals import wait_until

EXAMPLE = EXAMPLES / "script"
NAMESPACE = "script-example"


def test_the_script_works_its_job_and_the_one_the_readme_pushes(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = readme("script")
    assert commands.install.startswith("pip install ")
    program, *arguments = shlex.split(commands.run)
    assert program == "python"
    script = Process([sys.executable, *arguments], EXAMPLE, environment(fresh_database))
    try:
        wait_until(lambda: script.alive() and "Hello, Ada!" in script.output, "Ada's greeting")
        # The README's third command, from another terminal: the same DSN, from the environment.
        monkeypatch.setenv("POSTKIT_DSN", fresh_database)
        pushed = CliRunner().invoke(main, [*shlex.split(commands.try_it)[1:], "--json"])
        assert pushed.exit_code == 0, pushed.output
        name = json.loads(shlex.split(commands.try_it)[3])["name"]
        wait_until(
            lambda: script.alive() and f"Hello, {name}!" in script.output, f"{name}'s greeting"
        )
    finally:
        code = script.stop(signal.SIGINT)  # Ctrl-C

    assert code == 0, script.output
    with psycopg.connect(fresh_database) as connection:
        queue = QueueClient(connection.cursor(), namespace=NAMESPACE)
        (stats,) = queue.stats()
    assert (stats.queue, stats.completed_last_hour) == ("greet", 2)
    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)
