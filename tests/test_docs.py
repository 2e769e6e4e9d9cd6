"""docs/sql.md and docs/sdk.md are generated from the source by tools/gen_docs.py; they must be
in step with it (run `python tools/gen_docs.py` after changing a SQL function, a docstring or
an exception)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_generated_reference_docs_are_in_step() -> None:
    result = subprocess.run(
        [sys.executable, "tools/gen_docs.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_sql_reference_covers_every_function_of_the_schema() -> None:
    sql = "\n".join(
        path.read_text(encoding="utf-8")
        for path in sorted((ROOT / "src/postkit/queue/sql/schema").glob("*.sql"))
    )
    names = set(re.findall(r"CREATE (?:OR REPLACE )?FUNCTION postkit_queue\.(\w+)", sql))
    doc = (ROOT / "docs/sql.md").read_text(encoding="utf-8")

    documented = set(re.findall(r"^### postkit_queue\.(\w+)$", doc, re.M))
    internal = set(re.findall(r"^- `(\w+)\(", doc.split("## Internal helpers")[1], re.M))
    assert documented | internal == names
    assert not documented & internal
    assert {"push", "pull", "ack", "nack", "fail", "redrive", "tick_timeouts"} <= documented


def test_the_sdk_reference_covers_every_public_client_method() -> None:
    from postkit.queue import QueueClient

    doc = (ROOT / "docs/sdk.md").read_text(encoding="utf-8")
    methods = [name for name in dir(QueueClient) if not name.startswith("_")]

    assert methods
    for name in methods:
        assert f"### QueueClient.{name}\n" in doc
    assert "AsyncQueueClient" in doc and "## Errors" in doc and "PKQ01" in doc
