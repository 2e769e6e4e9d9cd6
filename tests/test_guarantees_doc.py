"""docs/guarantees.md names the test behind each promise: every name must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = re.compile(r"`((?:[\w]+/)*test_\w+\.py)(?:::(test_\w+))?`")


def test_every_test_named_in_the_guarantees_exists() -> None:
    references = REFERENCE.findall((ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8"))
    missing = []
    for path, name in references:
        source = ROOT / "tests" / path
        if not source.exists():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\(", source.read_text("utf-8"), re.M):
            missing.append(f"{path}::{name}")

    assert len(references) >= 20
    assert missing == []
