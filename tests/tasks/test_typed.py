"""mypy --strict checks a task's pushes against its function's signature (a transactional
task's without its cursor, a pydantic model's argument as the model): the venv's mypy, run over
tests/tasks/typed_example.py (this project's configuration, this tree's postkit), accepts the
calls that fit and rejects each that does not with the error code its line names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import postkit

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).with_name("typed_example.py")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*)  \[(?P<code>[\w-]+)\]$")


def expected_errors() -> set[tuple[int, str]]:
    """(line, code) of each line of the example that ends in ``# mypy: CODE``."""
    return {
        (number, match.group(1))
        for number, text in enumerate(EXAMPLE.read_text().splitlines(), 1)
        if (match := re.search(r"# mypy: ([\w-]+)$", text))
    }


def test_mypy_accepts_the_pushes_that_fit_and_rejects_each_that_does_not(tmp_path: Path) -> None:
    env = {**os.environ, "MYPYPATH": str(Path(postkit.__file__).parents[1])}
    result = subprocess.run(
        [
            *(sys.executable, "-m", "mypy"),
            *("--config-file", str(ROOT / "pyproject.toml")),
            *("--cache-dir", str(tmp_path / "cache")),
            "--no-error-summary",
            str(EXAMPLE),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    errors = [match for line in result.stdout.splitlines() if (match := ERROR.match(line))]
    assert all(Path(match["path"]).name == EXAMPLE.name for match in errors), result.stdout
    assert {(int(match["line"]), match["code"]) for match in errors} == expected_errors(), (
        result.stdout + result.stderr
    )
    assert len(expected_errors()) >= 5
    messages = {match["message"] for match in errors}
    assert 'Unexpected keyword argument "uid" for "push" of "BaseTask"' in messages
    assert result.returncode == 1
