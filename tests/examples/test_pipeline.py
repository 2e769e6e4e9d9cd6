"""examples/pipeline as its README runs it: ``python pipeline.py`` runs a fan-out and its fan-in
(which reads the counts' results), and cancels a running export that reports its progress; the
README's ``postkit jobs`` then lists the export as cancelled."""

from __future__ import annotations

import json
import re
import shlex
import sys

import pytest
from click.testing import CliRunner

from postkit.cli import main
from tests.examples.commands import EXAMPLES, Process, environment, readme
from tests.signals import wait_until

EXAMPLE = EXAMPLES / "pipeline"


def test_the_pipeline_fans_in_and_cancels_its_running_export(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = readme("pipeline")
    assert commands.install.startswith("pip install ")
    program, *arguments = shlex.split(commands.run)
    assert program == "python"

    script = Process([sys.executable, *arguments], EXAMPLE, environment(fresh_database))
    wait_until(lambda: script.popen.poll() is not None, "the script to finish", timeout=60)

    assert script.popen.returncode == 0, script.output
    assert "total: 9 words in 3 documents" in script.output
    assert "the fan-in returned 9" in script.output
    assert re.search(r"export at [0-9.]+% \(page \d+ of 100000\): cancelling it", script.output)
    assert re.search(r"export stopped after \d+ of 100000 pages", script.output)
    (export_id,) = re.findall(r"export (\d+): cancelled", script.output)

    monkeypatch.setenv("POSTKIT_DSN", fresh_database)
    listed = CliRunner().invoke(main, [*shlex.split(commands.try_it)[1:], "--json"])
    assert listed.exit_code == 0, listed.output
    assert [job["id"] for job in json.loads(listed.output)["jobs"]] == [int(export_id)]
