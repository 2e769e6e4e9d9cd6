"""docs/sdk.md: the public classes and functions of the Python SDK.

Each with its signature and docstring, then the records the SDK returns (fields and their
attribute docstrings) and the exception hierarchy with each SQLSTATE. Everything is read by
importing postkit from this tree's src/.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import itertools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from docgen import GENERATED
from docgen.markdown import markdown_doc


def _annotation(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, type):
        return value.__name__
    return inspect.formatannotation(value)


def _format_signature(name: str, function: Callable[..., Any], *, method: bool) -> str:
    signature = inspect.signature(function)
    parts: list[str] = []
    star_added = False
    for index, parameter in enumerate(signature.parameters.values()):
        if method and index == 0 and parameter.name in ("self", "cls"):
            continue
        if parameter.kind is parameter.KEYWORD_ONLY and not star_added:
            parts.append("*")
            star_added = True
        if parameter.kind is parameter.VAR_POSITIONAL:
            star_added = True
            text = f"*{parameter.name}"
        elif parameter.kind is parameter.VAR_KEYWORD:
            text = f"**{parameter.name}"
        else:
            text = parameter.name
        if parameter.annotation is not parameter.empty:
            text += f": {_annotation(parameter.annotation)}"
        if parameter.default is not parameter.empty:
            default = repr(parameter.default)
            text += (
                f" = {default}" if parameter.annotation is not parameter.empty else f"={default}"
            )
        parts.append(text)
    returns = ""
    if signature.return_annotation is not signature.empty:
        returns = f" -> {_annotation(signature.return_annotation)}"
    prefix = "async def " if inspect.iscoroutinefunction(function) else "def "
    one_line = f"{prefix}{name}({', '.join(parts)}){returns}"
    if len(one_line) <= 96:
        return one_line
    body = "".join(f"\n    {part}," for part in parts)
    return f"{prefix}{name}({body}\n){returns}"


def _public_members(cls: type) -> list[tuple[str, Any]]:
    """The class's own public members, then those it inherits from Postkit's classes (a
    mixin's), each once."""
    members = []
    seen: set[str] = set()
    postkit_classes = [klass for klass in cls.__mro__ if klass.__module__.startswith("postkit.")]
    for name, value in [item for klass in postkit_classes for item in vars(klass).items()]:
        if (name.startswith("_") and name != "__init__") or name in seen:
            continue
        seen.add(name)
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(value) or isinstance(value, property):
            members.append((name, value))
    return members


def _render_class(
    cls: type,
    *,
    title: str | None = None,
    note: str | None = None,
    skip: Iterable[str] = (),
    module: str | None = None,
) -> list[str]:
    """``module``: where users import ``cls`` from, when not the module defining it."""
    out = ["", f"## {title or cls.__name__}", ""]
    out.append(f"`{module or cls.__module__}.{cls.__name__}`")
    out.append("")
    doc = markdown_doc(inspect.getdoc(cls))
    if doc:
        out += [doc, ""]
    if note:
        out += [note, ""]
    for name, member in _public_members(cls):
        if name in skip:
            continue
        if isinstance(member, property):
            assert member.fget is not None, f"{cls.__name__}.{name} has no getter"
            out += [f"### {cls.__name__}.{name}", "", "```python"]
            out.append(f"{name}: {_annotation(inspect.signature(member.fget).return_annotation)}")
            out += ["```", ""]
            doc = markdown_doc(inspect.getdoc(member))
            out += [doc, ""] if doc else []
            continue
        if name == "__init__":
            signature = _format_signature(cls.__name__, member, method=True)
            signature = signature.removeprefix("def ").removesuffix(" -> None")
            out += [f"### {cls.__name__}(...)", "", "```python", signature, "```", ""]
        else:
            out += [f"### {cls.__name__}.{name}", ""]
            out += ["```python", _format_signature(name, member, method=True), "```", ""]
        # Only a docstring of its own: __init__ would otherwise inherit object's.
        if member.__doc__:
            out += [markdown_doc(inspect.getdoc(member)), ""]
    return out


def _render_function(function: Callable[..., Any], *, module: str) -> list[str]:
    out = ["", f"### {function.__name__}", "", f"`{module}.{function.__name__}`", ""]
    out += ["```python", _format_signature(function.__name__, function, method=False), "```", ""]
    doc = markdown_doc(inspect.getdoc(function))
    return out + ([doc, ""] if doc else [])


def _field_docs(path: Path) -> dict[str, dict[str, str]]:
    """The attribute docstrings (a string right after a field) of each class in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, str] = {}
        body = node.body
        for current, following in itertools.pairwise(body):
            target = None
            if isinstance(current, ast.AnnAssign) and isinstance(current.target, ast.Name):
                target = current.target.id
            elif isinstance(current, ast.Assign) and isinstance(current.targets[0], ast.Name):
                target = current.targets[0].id
            if (
                target
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                fields[target] = " ".join(following.value.value.split())
        docs[node.name] = fields
    return docs


def _render_record(cls: type, field_docs: dict[str, str]) -> list[str]:
    out = ["", f"### {cls.__name__}", "", f"`{cls.__module__}.{cls.__name__}`", ""]
    doc = markdown_doc(inspect.getdoc(cls))
    if doc:
        out += [doc, ""]
    if issubclass(cls, enum.Enum):
        out += ["| Member | Value | |", "|---|---|---|"]
        for member in cls:
            out.append(
                f"| `{member.name}` | `{member.value!r}` | {field_docs.get(member.name, '')} |"
            )
        return out
    assert dataclasses.is_dataclass(cls), f"{cls.__name__} is neither an enum nor a dataclass"
    out += ["| Field | Type | |", "|---|---|---|"]
    for field in dataclasses.fields(cls):
        kind = _annotation(field.type).replace("|", "\\|")
        out.append(f"| `{field.name}` | `{kind}` | {field_docs.get(field.name, '')} |")
    return out


def _render_errors() -> list[str]:
    from postkit import errors

    codes: dict[type, list[str]] = {}
    for code, error in errors.SQLSTATE_ERRORS.items():
        codes.setdefault(error, []).append(code)
    classes = [
        getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)
    ]

    def children(parent: type) -> list[type]:
        return [cls for cls in classes if cls.__bases__[0] is parent]

    out = [
        "",
        "## Errors",
        "",
        "`postkit.errors`: every exception Postkit raises derives from `PostkitError`. Errors",
        "the SQL module raises carry a SQLSTATE (class `PKQ` for Postkit's own); the SDK raises",
        "the exception mapped to it. Driver errors Postkit does not own (a lost connection, a",
        "deadlock) reach the caller as the driver raised them.",
        "",
        "```text",
    ]

    def tree(cls: type, depth: int) -> None:
        extra = [base.__name__ for base in cls.__bases__[1:]]
        also = f" (also {', '.join(extra)})" if extra else ""
        sqlstates = f"  [{', '.join(codes[cls])}]" if cls in codes else ""
        out.append(f"{'    ' * depth}{cls.__name__}{also}{sqlstates}")
        for child in children(cls):
            tree(child, depth + 1)

    tree(errors.PostkitError, 0)
    out += ["```", "", "| Exception | SQLSTATE | Raised when |", "|---|---|---|"]

    def rows(cls: type) -> None:
        doc = " ".join((inspect.getdoc(cls) or "").split()).replace("``", "`")
        sqlstates = ", ".join(f"`{code}`" for code in codes.get(cls, [])) or "-"
        out.append(f"| `{cls.__name__}` | {sqlstates} | {doc} |")
        for child in children(cls):
            rows(child)

    rows(errors.PostkitError)
    return out


def render_sdk() -> str:
    from postkit import embedded, queue, tasks
    from postkit.queue import (
        AsyncQueueClient,
        Consumer,
        Operator,
        Producer,
        QueueClient,
        ResultListener,
        WorkListener,
        admin,
        records,
        schema,
    )
    from postkit.queue.runtime import Runtime
    from postkit.tasks import models, payload
    from postkit.worker import Handlers, SharedWorker, Worker
    from postkit.worker import runtime as worker_module
    from postkit.worker import shared as shared_module

    sync_methods = {name for name, _ in _public_members(QueueClient)}
    async_methods = {name for name, _ in _public_members(AsyncQueueClient)}
    difference = sorted(sync_methods ^ async_methods)
    client_note = (
        "**AsyncQueueClient** (`postkit.queue.AsyncQueueClient`) has the same methods, with the "
        "same arguments and results, as coroutines (`await queue.push(...)`), on a psycopg 3 "
        "async cursor. `client.py` is generated from `client_async.py` by "
        "`tools/async_to_sync.py`, so the two cannot drift."
    )
    if difference:
        client_note += f" Methods only in one of them: {', '.join(difference)}."
    listener_note = (
        "**AsyncWorkListener** (`postkit.queue.AsyncWorkListener`) has the same methods as "
        "coroutines, on a psycopg 3 async connection."
    )
    result_listener_note = (
        "**AsyncResultListener** (`postkit.queue.AsyncResultListener`) has the same methods as "
        "coroutines, on a psycopg 3 async connection."
    )
    out = [
        GENERATED,
        "",
        "# The Python SDK",
        "",
        "The SDK is a thin layer over the SQL functions described in [sql.md](sql.md): each",
        "client call is one statement in the caller's transaction.",
        "",
        "## Contents",
        "",
        "- [Clients by role](#clients-by-role): Producer, Consumer, Operator and Runtime, each",
        "  with what its grant lets it call",
        "- [QueueClient](#queueclient) (and AsyncQueueClient): every role's calls in one",
        "  client",
        "- [WorkListener](#worklistener) (and AsyncWorkListener): wait for work with LISTEN/NOTIFY",
        "- [ResultListener](#resultlistener) (and AsyncResultListener): wait for a job's result",
        "- [Handlers](#handlers), [Worker](#worker) and [SharedWorker](#sharedworker): the",
        "  worker runtime",
        "- [App](#app), [Task](#task) and [TransactionalTask](#transactionaltask): typed tasks",
        "  on top of queues",
        "- [Installing the schema](#installing-the-schema) and [administration](#administration)",
        "- [What the SDK returns](#what-the-sdk-returns): jobs, dead letters, stats, schedules",
        "- [Errors](#errors): the exception hierarchy, with each SQLSTATE",
    ]

    def importable(role: type) -> str:
        exported = "postkit.queue"
        return (
            f"{exported}.{role.__name__}"
            if role.__name__ in queue.__all__
            else (f"{role.__module__}.{role.__name__}")
        )

    out += ["", "## Clients by role", ""]
    for role in (Producer, Consumer, Operator, Runtime):
        shown = [
            f"[`{name}`](#queueclient{name})"
            for name, _ in _public_members(role)
            if name not in ("__init__", "namespace", "cursor")
        ]
        out += [
            f"### {role.__name__}",
            "",
            f"`{importable(role)}(cursor, namespace)`, and `Async{role.__name__}` on an async "
            "cursor. " + markdown_doc(inspect.getdoc(role)),
            "",
            "Its calls, described under QueueClient: " + ", ".join(shown) + ".",
            "",
        ]
    out += _render_class(QueueClient, note=client_note)
    out += _render_class(WorkListener, note=listener_note)
    out += _render_class(ResultListener, note=result_listener_note)
    out += _render_class(Handlers, module="postkit.worker")
    out += _render_class(
        Worker, note=markdown_doc(inspect.getdoc(worker_module)), module="postkit.worker"
    )
    out += _render_class(
        SharedWorker, note=markdown_doc(inspect.getdoc(shared_module)), module="postkit.worker"
    )
    out += _render_class(tasks.App, module="postkit.tasks")
    task_note = "\n\n".join(
        markdown_doc(inspect.getdoc(item)) for item in (tasks.BaseTask, payload, models)
    )
    out += _render_class(tasks.Task, note=task_note, module="postkit.tasks")
    out += _render_class(
        tasks.TransactionalTask,
        skip=[name for name, _ in _public_members(tasks.BaseTask)],
        module="postkit.tasks",
    )
    out += [
        "",
        "## Installing the schema",
        "",
        "`postkit.queue`: installing and upgrading the SQL module, in Python.",
    ]
    for function in (
        schema.install,
        schema.install_async,
        schema.install_script,
        schema.installed_version,
        schema.latest_version,
    ):
        out += _render_function(function, module="postkit.queue")
    out += _render_record(
        schema.InstallResult, _field_docs(Path(schema.__file__)).get("InstallResult", {})
    )
    out += _render_function(embedded.resolve_dsn, module="postkit.embedded")
    out += ["", "## Administration", ""]
    out += [markdown_doc(inspect.getdoc(admin))]
    for name, value in vars(admin).items():
        if (
            inspect.isfunction(value)
            and not name.startswith("_")
            and value.__module__ == admin.__name__
        ):
            out += _render_function(value, module="postkit.queue.admin")
    out += ["", "## What the SDK returns", ""]
    out += [markdown_doc(inspect.getdoc(records))]
    docs: dict[str, dict[str, str]] = {}
    for module in sorted(Path(records.__file__).parent.glob("*.py")):
        docs.update(_field_docs(module))
    for name in (
        "Job",
        "JobCursor",
        "JobResult",
        "DeadLetter",
        "DeadLetterSearch",
        "QueueStats",
        "OutcomeMinute",
        "Redriven",
        "LineageStep",
        "Pruned",
        "Schedule",
        "ScheduleRun",
        "Fired",
        "RunningJob",
        "QueuePolicy",
        "JobState",
        "Outcome",
        "NackOutcome",
    ):
        out += _render_record(getattr(records, name), docs.get(name, {}))
    out += _render_errors()
    return "\n".join(out) + "\n"
