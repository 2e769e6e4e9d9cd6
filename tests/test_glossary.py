"""One word for each idea: docs/concepts.md is the glossary, and what users read uses its words.

The tables of the glossary give, for each state, outcome and verb, the words Postkit does not use
for it. These tests read them and look for those words where a user meets Postkit's vocabulary:
the public names of the Python packages (and their enums' values), the metric labels, the
worker's log lines, and everything the CLI and the dashboard print.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import click
import psycopg
import pytest

from postkit.cli import main
from postkit.queue import JobState, NackOutcome, Outcome
from postkit.worker.outcomes import SETTLED_OUTCOMES
from postkit.worker.stats import WorkerStats

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "concepts.md"
SOURCE = ROOT / "src" / "postkit"
PUBLIC_MODULES = [
    "postkit",
    "postkit.errors",
    "postkit.queue",
    "postkit.queue.protocol",
    "postkit.worker",
    "postkit.tasks",
    "postkit.testing",
]
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


def glossary_tables() -> dict[str, dict[str, set[str]]]:
    """Each table of the glossary with a 'Not' column: its title row's first cell (State,
    Outcome, Verb) -> the words of its first column -> the words not to use for it."""
    tables: dict[str, dict[str, set[str]]] = {}
    header: list[str] | None = None
    for line in GLOSSARY.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(line) <= set("|-: ") or "Not" not in header:
            continue
        words = set(re.findall(r"`([a-z_]+)`", cells[0]))
        refused = {word.strip() for word in cells[header.index("Not")].split(",") if word.strip()}
        for word in words:
            tables.setdefault(header[0], {})[word] = refused
    return tables


TABLES = glossary_tables()
REFUSED = {word for table in TABLES.values() for words in table.values() for word in words}
WORD = re.compile(r"[A-Za-z]+")


def refused_in(text: str) -> set[str]:
    """The refused words in ``text``, matched whole (a name's snake_case or CamelCase parts)."""
    parts = set()
    for token in WORD.findall(text):
        for part in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", token):
            parts.add(part.lower())
    return parts & REFUSED


def test_the_glossary_names_the_states_outcomes_and_verbs_and_refuses_some_words() -> None:
    assert {"pending", "scheduled", "running", "completed", "dead"} <= set(TABLES["State"])
    assert set(TABLES["Outcome"]) == {outcome.value for outcome in Outcome}
    assert {"push", "pull", "ack", "nack", "fail", "redrive"} <= set(TABLES["Verb"])
    assert {"acked", "reclaimed", "done"} <= REFUSED
    assert not REFUSED & {word for table in TABLES.values() for word in table}


def test_the_enums_use_the_glossarys_states_and_outcomes() -> None:
    assert {state.value for state in JobState} <= set(TABLES["State"])
    assert {outcome.value for outcome in NackOutcome} <= set(TABLES["Outcome"])
    assert {outcome.value for outcome in SETTLED_OUTCOMES} <= set(TABLES["Outcome"])


def test_the_sql_types_use_the_glossarys_states_and_outcomes(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT t.typname, e.enumlabel FROM pg_catalog.pg_enum e"
        " JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace"
        " WHERE n.nspname = 'postkit_queue'"
    ).fetchall()
    labels = {(row[0], row[1]) for row in rows}
    assert {label for name, label in labels if name == "job_state"} <= set(TABLES["State"])
    assert {label for name, label in labels if name == "outcome"} == set(TABLES["Outcome"])


def public_names() -> Iterator[tuple[str, str]]:
    """(where, name) for each public name of the public modules, their classes' public
    members, and their enums' values."""
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            yield module_name, name
            value = getattr(module, name)
            if inspect.isclass(value) and value.__module__.startswith("postkit"):
                for member in vars(value):
                    if not member.startswith("_"):
                        yield f"{module_name}.{name}", member
                if issubclass(value, enum.Enum):
                    for item in value:
                        yield f"{module_name}.{name}", str(item.value)
    for field in vars(WorkerStats()):
        yield "WorkerStats", field


def test_no_public_name_uses_a_refused_word() -> None:
    found = [(where, name) for where, name in public_names() if refused_in(name)]
    assert not found, f"names the glossary refuses (docs/concepts.md): {found}"


def log_lines() -> Iterator[tuple[str, str]]:
    """(file:line, text) of each literal message given to a logger in the source."""
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LOG_METHODS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "logger"
            ):
                for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                    for constant in ast.walk(argument):
                        if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                            yield f"{path.relative_to(ROOT)}:{node.lineno}", constant.value


def test_the_log_lines_use_the_glossarys_words() -> None:
    lines = list(log_lines())
    assert len(lines) > 50, "the scan finds the worker's log lines"
    found = [(where, text) for where, text in lines if refused_in(text)]
    assert not found, f"log lines with a word the glossary refuses: {found}"


def commands(group: click.Command, path: str = "postkit") -> Iterator[tuple[str, click.Command]]:
    yield path, group
    if isinstance(group, click.Group):
        for name, command in group.commands.items():
            yield from commands(command, f"{path} {name}")


def test_every_commands_help_uses_the_glossarys_words() -> None:
    found = []
    for path, command in commands(main):
        with click.Context(command, info_name=path) as context:
            text = command.get_help(context)
        if refused_in(text):
            found.append((path, sorted(refused_in(text))))
    assert not found, f"--help with a word the glossary refuses: {found}"


@pytest.mark.parametrize("package", ["cli", "dashboard"])
def test_what_the_cli_and_the_dashboard_print_uses_the_glossarys_words(package: str) -> None:
    """Every string literal of their code, and the dashboard's page and script."""
    found = []
    for path in sorted((SOURCE / package).rglob("*")):
        if "vendor" in path.parts or path.suffix not in (".py", ".js", ".html"):
            continue
        if path.suffix == ".py":
            texts = [
                node.value
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
            ]
        else:
            # The script's and the page's texts, without the code a template literal holds.
            code = re.sub(r"\$\{[^}]*\}", "", path.read_text())
            texts = re.findall(r"(?:\"[^\"\n]*\"|'[^'\n]*'|`[^`]*`|>[^<>]+<)", code)
        found += [(str(path.relative_to(ROOT)), text) for text in texts if refused_in(text)]
    assert not found, f"output with a word the glossary refuses: {found}"
