"""The layers call one way: cli -> worker -> queue (the SDK) -> sql.

Read from the source's import statements, so a module that reaches up a layer fails here
before anyone has to find the cycle (docs/architecture.md draws the layers).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "postkit"

# The layers from the top; a module may import its own layer and the ones below it.
LAYERS = ["postkit.cli", "postkit.worker", "postkit.queue"]

# postkit.queue.worker names the runtime's classes under the SDK package (the README mentions
# that path); nothing in postkit imports it.
ALIASES = {"postkit.queue.worker"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {name for name in names if name.startswith("postkit")}


def layer(name: str) -> int | None:
    return next(
        (index for index, top in enumerate(LAYERS) if name == top or name.startswith(top + ".")),
        None,
    )


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = []
    for path in sorted(SRC.rglob("*.py")):
        name = module_name(path)
        own = layer(name)
        if own is None or name in ALIASES:
            continue
        for target in imported(path):
            above = layer(target)
            if target in ALIASES or (above is not None and above < own):
                upward.append(f"{name} imports {target}")
    assert upward == []


def test_nothing_in_postkit_imports_the_documented_alias() -> None:
    users = [
        module_name(path)
        for path in sorted(SRC.rglob("*.py"))
        if module_name(path) not in ALIASES and imported(path) & ALIASES
    ]
    assert users == []
