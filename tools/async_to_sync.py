"""Generate the synchronous modules from their asyncio sources.

The async module is the one we edit; its synchronous twin is derived from its syntax tree, the
way psycopg derives its own: ``async def``, ``async with`` and ``async for`` become their plain
forms, ``await x`` becomes ``x``, and the names of :data:`NAMES` (async classes, methods and
modules) become their synchronous twins wherever they name code: a name, an attribute, a
definition, an import. Docstrings, other strings and comments are data, copied as they are, so
they must hold for both modules. The tree is read with ast_comments, which keeps the comments,
and the generated module is formatted with ruff. The sync code is therefore never a hand-written
copy.

    python tools/async_to_sync.py          # rewrite the generated files
    python tools/async_to_sync.py --check  # exit 1 if any generated file is out of date
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import ast_comments as ast

try:
    from ast import _Precedence
except ImportError:  # Python 3.14 moved the unparser, as ast_comments knows
    from _ast_unparse import _Precedence

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {
    "src/postkit/queue/client_async.py": "src/postkit/queue/client.py",
    "src/postkit/queue/listen_async.py": "src/postkit/queue/listen.py",
    "src/postkit/queue/operations_async.py": "src/postkit/queue/operations.py",
    "src/postkit/queue/calls_async.py": "src/postkit/queue/calls.py",
    "src/postkit/queue/producer_async.py": "src/postkit/queue/producer.py",
    "src/postkit/queue/consumer_async.py": "src/postkit/queue/consumer.py",
    "src/postkit/queue/operator_async.py": "src/postkit/queue/operator.py",
    "src/postkit/queue/dead_letters_async.py": "src/postkit/queue/dead_letters.py",
    "src/postkit/queue/schedules_async.py": "src/postkit/queue/schedules.py",
    "src/postkit/queue/runtime_async.py": "src/postkit/queue/runtime.py",
}
NAMES = {
    "AsyncQueueClient": "QueueClient",
    "AsyncWorkListener": "WorkListener",
    "AsyncResultListener": "ResultListener",
    "AsyncOperations": "Operations",
    "AsyncCalls": "Calls",
    "AsyncProducer": "Producer",
    "AsyncConsumer": "Consumer",
    "AsyncOperator": "Operator",
    "AsyncDeadLetters": "DeadLetters",
    "AsyncSchedules": "Schedules",
    "AsyncRuntime": "Runtime",
    "AsyncConnection": "Connection",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "run_async": "run",
    "client_async": "client",
    "listen_async": "listen",
    "operations_async": "operations",
    "calls_async": "calls",
    "producer_async": "producer",
    "consumer_async": "consumer",
    "operator_async": "operator",
    "dead_letters_async": "dead_letters",
    "schedules_async": "schedules",
    "runtime_async": "runtime",
}
"""Each async name and its synchronous twin. A module name is renamed part by part
(``postkit.queue.client_async`` -> ``postkit.queue.client``)."""


class AsyncToSync(ast.NodeTransformer):
    """Replaces each asynchronous construct by its synchronous form."""

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        plain = ast.FunctionDef(
            name=node.name,
            args=node.args,
            body=node.body,
            decorator_list=node.decorator_list,
            returns=node.returns,
            type_comment=node.type_comment,
        )
        return self._visited(ast.copy_location(plain, node))

    def visit_AsyncFor(self, node: ast.AsyncFor) -> ast.AST:
        plain = ast.For(
            target=node.target,
            iter=node.iter,
            body=node.body,
            orelse=node.orelse,
            type_comment=node.type_comment,
        )
        return self._visited(ast.copy_location(plain, node))

    def visit_AsyncWith(self, node: ast.AsyncWith) -> ast.AST:
        plain = ast.With(items=node.items, body=node.body, type_comment=node.type_comment)
        return self._visited(ast.copy_location(plain, node))

    def visit_Await(self, node: ast.Await) -> ast.AST:
        return self._visited(node.value)

    def _visited(self, node: ast.AST) -> ast.AST:
        self.generic_visit(node)
        return node


class RenameAsyncToSync(ast.NodeTransformer):
    """Renames the names of :data:`NAMES` where they name code, never inside a string."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = NAMES.get(node.id, node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        node.attr = NAMES.get(node.attr, node.attr)
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = NAMES.get(node.name, node.name)
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = NAMES.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.module is not None:
            node.module = _module(node.module)
        for alias in node.names:
            alias.name = NAMES.get(alias.name, alias.name)
        return node

    def visit_Import(self, node: ast.Import) -> ast.AST:
        for alias in node.names:
            alias.name = _module(alias.name)
        return node


def _module(dotted: str) -> str:
    return ".".join(NAMES.get(part, part) for part in dotted.split("."))


class BlanksInserter(ast.NodeTransformer):
    """Keeps a blank line where the source has one between two statements: the tree does not
    record them, and ruff then normalizes their number."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if isinstance(statements, list) and statements:
                setattr(node, field, _with_blanks(statements))
        return super().generic_visit(node)


def _with_blanks(statements: list[Any]) -> list[Any]:
    spaced = [statements[0]]
    for before, after in itertools.pairwise(statements):
        if after.lineno - before.end_lineno > 1:
            line = before.end_lineno + 1
            spaced.append(
                ast.Comment(
                    value="",
                    inline=False,
                    lineno=line,
                    end_lineno=line,
                    col_offset=0,
                    end_col_offset=0,
                )
            )
        spaced.append(after)
    return spaced


class Unparser(ast._Unparser):
    """ast_comments' unparser (the standard one, plus comments), writing what it would spell
    differently from the source as the source does, where ruff format would leave it so:

    - a string statement (an attribute's docstring) as a docstring, not one escaped line;
    - a number as its source text (``10_000``, not ``10000``);
    - the operands of ``and``/``or`` and a returned tuple without parentheses they do not
      need (the standard unparser adds them from the third operand on, and around a tuple).
    """

    def __init__(self, source: str = "", **options: Any) -> None:
        # The unparser makes instances of its own class for f-strings' inner expressions,
        # without the source: their numbers keep the standard spelling.
        super().__init__(**options)
        self._original = source

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            self._write_docstring(node.value)
        else:
            super().visit_Expr(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        text = ast.get_source_segment(self._original, node) if self._original else None
        is_number = isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
        if is_number and text is not None:
            self.write(text)
        else:
            super().visit_Constant(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        operator = self.boolops[node.op.__class__.__name__]
        precedence = self.boolop_precedence[operator]
        with self.require_parens(precedence, node):
            self.set_precedence(precedence.next(), *node.values)
            self.interleave(lambda: self.write(f" {operator} "), self.traverse, node.values)

    def visit_Return(self, node: ast.Return) -> None:
        if isinstance(node.value, ast.Tuple) and node.value.elts:
            self.set_precedence(_Precedence.TUPLE, node.value)
        super().visit_Return(node)


def generate(source: Path) -> str:
    """The synchronous module generated from the async module ``source``, formatted."""
    text = source.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(source))
    for transformer in (BlanksInserter(), RenameAsyncToSync(), AsyncToSync()):
        tree = transformer.visit(tree)
    header = (
        f"# Generated from {source.name} by tools/async_to_sync.py: edit that file, not this one.\n"
    )
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", source.name, "-"],
        input=header + Unparser(text).visit(tree) + "\n",
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return formatted.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args()
    stale = []
    for source, target in PAIRS.items():
        generated = generate(ROOT / source)
        path = ROOT / target
        if path.exists() and path.read_text(encoding="utf-8") == generated:
            continue
        stale.append(target)
        if not args.check:
            path.write_text(generated, encoding="utf-8")
    if args.check and stale:
        print("out of date (run python tools/async_to_sync.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
