"""Clients by role: each role's client holds only calls that the grant it names may make.

Read from the source: each method's protocol builders (producer_async.py...), the statements
they build (protocol/), the SQL functions those statements call (queries.sql), and the least
access kind of each function (its ``-- access:`` line: schema.api_access). A method that
reaches past its role's grant fails here, before a user meets PermissionDeniedError.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from postkit.queue import Consumer, Operator, Producer, QueueClient
from postkit.queue.runtime import Runtime
from postkit.queue.schema import api_access

QUEUE = Path(__file__).resolve().parents[2] / "src" / "postkit" / "queue"
KINDS = ["producer", "worker", "operator"]
ROLES = {
    "producer_async.py": "producer",
    "consumer_async.py": "worker",
    "runtime_async.py": "worker",
    "operations_async.py": "operator",
    "dead_letters_async.py": "operator",
    "schedules_async.py": "operator",
}
"""Each role client's source and the access kind its docstring names."""


def functions_of_statements() -> dict[str, set[str]]:
    text = (QUEUE / "queries.sql").read_text(encoding="utf-8")
    statements: dict[str, set[str]] = {}
    for name, body in re.findall(r"^-- name: (\w+)\n(.*?)(?=^-- name: |\Z)", text, re.M | re.S):
        statements[name] = set(re.findall(r"postkit_queue\.(\w+)\(", body))
    return statements


def statements_of_builders() -> dict[str, set[str]]:
    """Each protocol function's statements: the names its ``Call(...)`` may take (a
    conditional name gives both), merged over the modules (a reader may share a builder's
    name)."""
    builders: dict[str, set[str]] = {}
    for path in (QUEUE / "protocol").glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef):
                builders.setdefault(node.name, set()).update(
                    name.value
                    for call in ast.walk(node)
                    if isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == "Call"
                    and call.args
                    for name in ast.walk(call.args[0])
                    if isinstance(name, ast.Constant) and isinstance(name.value, str)
                )
    return builders


def builders_of_methods(path: Path) -> dict[str, set[str]]:
    """Each method's protocol calls: ``protocol.<area>.<builder>(...)``, by builder name."""
    methods: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.AsyncFunctionDef, ast.FunctionDef)):
            methods[node.name] = {
                call.func.attr
                for call in ast.walk(node)
                if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Attribute)
                and isinstance(call.func.value.value, ast.Name)
                and call.func.value.value.id == "protocol"
            }
    return methods


@pytest.mark.parametrize("source", ROLES, ids=ROLES.get)
def test_each_method_of_a_role_client_needs_no_more_than_its_grant(source: str) -> None:
    access, statements, builders = (
        api_access(),
        functions_of_statements(),
        statements_of_builders(),
    )
    grant = KINDS.index(ROLES[source])
    beyond = {}
    for method, called in builders_of_methods(QUEUE / source).items():
        functions = {
            function
            for builder in called
            for statement in builders.get(builder, ())
            for function in statements.get(statement, ())
        }
        needed = {function: access.get(function, "owner only") for function in functions}
        if any(kind not in KINDS or KINDS.index(kind) > grant for kind in needed.values()):
            beyond[method] = needed
    assert beyond == {}, f"{source} reaches past the {ROLES[source]} grant: {beyond}"


def test_every_statement_of_the_sdk_is_built_by_a_protocol_function() -> None:
    """queries.sql holds no statement nothing sends (asynchronous_commit wraps the others)."""
    built = {name for names in statements_of_builders().values() for name in names}
    assert set(functions_of_statements()) - built == {"asynchronous_commit"}
    assert built - set(functions_of_statements()) == set()


def test_the_scan_sees_each_methods_sql_functions() -> None:
    """The test above cannot pass by finding nothing."""
    methods = builders_of_methods(QUEUE / "producer_async.py")
    builders, statements = statements_of_builders(), functions_of_statements()
    push = {f for b in methods["push"] for s in builders[b] for f in statements[s]}
    assert "push" in push
    redrive = builders_of_methods(QUEUE / "dead_letters_async.py")["redrive"]
    assert api_access()[next(f for b in redrive for s in builders[b] for f in statements[s])] == (
        "operator"
    )


def test_the_facade_is_every_role_client_and_nothing_else() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    roles = public(Producer) | public(Consumer) | public(Operator) | public(Runtime)
    assert public(QueueClient) == roles
    assert not public(Producer) & {"pull", "ack", "stats", "redrive"}
    assert not public(Consumer) & {"push", "stats", "redrive", "configure_queue"}
