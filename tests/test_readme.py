"""The README's Python blocks run as written, in order, against a fresh database."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_has_the_articles_snippets() -> None:
    code = "\n".join(python_blocks())

    for call in (
        "push(",
        "pull(",
        "ack(",
        "nack(",
        "fail(",
        "extend_visibility(",
        "tick_timeouts(",
        "dead_letters(",
    ):
        assert call in code


def test_readme_python_blocks_run_as_written(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POSTKIT_DSN", fresh_database)
    scope: dict[str, object] = {}

    for block in python_blocks():
        exec(compile(block, str(README), "exec"), scope)

    assert "OTP sent to user 1" in capsys.readouterr().out
    for name in ("connection", "worker_connection"):
        scope[name].close()  # type: ignore[attr-defined]
