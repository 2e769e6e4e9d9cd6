"""The layers call one way: contrib -> cli and testing -> tasks -> dashboard and worker ->
queue (the SDK, over sql) and embedded -> errors; the dashboard and the worker, side by side,
never import each other, nor do the cli and the testing plugin. Typed tasks sit above the
worker: an App's handlers are the worker's Handlers, and its pushes the SDK's. The testing
plugin (postkit.testing) drains an App or a Handlers with the worker's outcome rule, so it sits
beside the cli. The framework integrations (postkit.contrib) sit on top: Django's
postkit_worker runs the CLI's command.

Read from the source's import statements, so a module that reaches up a layer or across to
its neighbour fails here before anyone has to find the cycle (docs/architecture.md draws the
layers).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "postkit"

# The layers from the top, each a list of packages side by side; a module may import its own
# package and those of the layers below it, never another package of its own layer.
LAYERS = [
    ["postkit.contrib"],
    ["postkit.cli", "postkit.testing"],
    ["postkit.tasks"],
    ["postkit.dashboard", "postkit.worker"],
    ["postkit.queue", "postkit.embedded"],
    ["postkit.errors"],
]


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


def package(name: str) -> tuple[int, str] | None:
    """The layer (0 at the top) and the package of module ``name``; None outside the layers
    (the package's __init__ and __main__)."""
    return next(
        (
            (index, top)
            for index, tops in enumerate(LAYERS)
            for top in tops
            if name == top or name.startswith(top + ".")
        ),
        None,
    )


def may_import(importer: str, target: str) -> bool:
    """Whether module ``importer`` may import ``target``: its own package, a lower layer, or a
    module outside the layers."""
    own, other = package(importer), package(target)
    if own is None or other is None:
        return True
    return other[1] == own[1] or other[0] > own[0]


def test_no_module_imports_a_layer_above_its_own_or_a_neighbour_in_its_layer() -> None:
    wrong = [
        f"{name} imports {target}"
        for path in sorted(SRC.rglob("*.py"))
        if (name := module_name(path))
        for target in imported(path)
        if not may_import(name, target)
    ]
    assert wrong == []


def test_the_rule_allows_imports_down_and_refuses_them_up_and_across() -> None:
    assert may_import("postkit.cli.worker", "postkit.dashboard.metrics")
    assert may_import("postkit.dashboard.metrics", "postkit.queue.records")
    assert may_import("postkit.worker.metrics", "postkit.errors")
    assert may_import("postkit.queue.limits", "postkit.errors")
    assert not may_import("postkit.errors", "postkit.queue.limits")
    assert not may_import("postkit.embedded", "postkit.queue")
    assert not may_import("postkit.dashboard.metrics", "postkit.worker.metrics")
    assert not may_import("postkit.worker.runtime", "postkit.dashboard")
    assert not may_import("postkit.worker.runtime", "postkit.cli")
    assert not may_import("postkit.queue.client", "postkit.worker")
    assert may_import("postkit.cli.worker", "postkit.tasks")
    assert may_import("postkit.tasks.app", "postkit.worker.handlers")
    assert may_import("postkit.tasks.task", "postkit.queue.client")
    assert not may_import("postkit.worker.runtime", "postkit.tasks")
    assert not may_import("postkit.queue.client", "postkit.tasks.task")
    assert not may_import("postkit.tasks.app", "postkit.cli")
    assert may_import("postkit.contrib.django.management.commands.postkit_worker", "postkit.cli")
    assert not may_import("postkit.cli.worker", "postkit.contrib.django")
    assert not may_import("postkit.worker.runtime", "postkit.contrib")
    assert may_import("postkit.testing", "postkit.tasks.app")
    assert may_import("postkit.testing", "postkit.worker.outcomes")
    assert not may_import("postkit.testing", "postkit.cli.worker")
    assert not may_import("postkit.worker.outcomes", "postkit.testing")


MOST_LINES = 600
"""A module longer than this holds more than one concept: split it (docs/architecture.md)."""


def test_no_module_is_longer_than_a_person_reads_at_once() -> None:
    long = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert long == {}, f"modules over {MOST_LINES} lines: {long}"
