"""Loading the module that ``postkit worker MODULE`` names: its Handlers, or its tasks App, and
a readable error when the import fails (the file, the line and the cause, not a traceback
through click)."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from postkit.cli.output import first_line

if TYPE_CHECKING:
    from postkit.tasks import App
    from postkit.worker import Handlers


@dataclass(frozen=True)
class Loaded:
    """What ``postkit worker MODULE`` runs: the Handlers, a name for them (``module:attribute``)
    and, when MODULE defines a tasks App, the App (whose namespace and queue policies the
    worker takes)."""

    handlers: Handlers
    name: str
    app: App | None = None


def load_handlers(spec: str) -> Loaded:
    """Import ``module`` or ``module:attribute`` (the current directory first on sys.path) and
    find its :class:`~postkit.worker.Handlers` or its :class:`~postkit.tasks.App` (whose
    handlers are a Handlers). A module-level Handlers that is an App's own counts as that App.

    Raises:
        click.ClickException: the module cannot be found, or does not define exactly one
            Handlers or App (or the named attribute is neither).
    """
    from postkit.tasks import App
    from postkit.worker import Handlers

    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise click.BadParameter("name a module, e.g. tasks or myapp.tasks", param_hint="MODULE")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise click.ClickException(_import_failure(module_name, exc)) from None
        hint = ""
        if module_name.endswith(".py"):
            hint = f"; name the module, not the file: {module_name[:-3].replace('/', '.')}"
        raise click.ClickException(
            f"cannot import {module_name}: no module named {exc.name!r} in the current "
            f"directory or on sys.path{hint}"
        ) from None
    except Exception as exc:  # the module's own code failed: a SyntaxError, a missing name...
        raise click.ClickException(_import_failure(module_name, exc)) from None
    if attribute:
        if not hasattr(module, attribute):
            raise click.ClickException(f"{module_name} has no attribute {attribute!r}")
        value = getattr(module, attribute)
        if isinstance(value, App):
            loaded = Loaded(value.handlers, spec, value)
        elif isinstance(value, Handlers):
            loaded = Loaded(value, spec)
        else:
            raise click.ClickException(
                f"{spec} is not a Handlers object (from postkit.worker import Handlers) "
                f"or a tasks App (from postkit.tasks import App) but of type "
                f"{type(value).__name__}"
            )
    else:
        # By the Handlers each value runs: an App and its own handlers are one.
        found: dict[int, Loaded] = {}
        for key, value in vars(module).items():
            if isinstance(value, App):
                found[id(value.handlers)] = Loaded(value.handlers, f"{module_name}:{key}", value)
            elif isinstance(value, Handlers):
                found.setdefault(id(value), Loaded(value, f"{module_name}:{key}"))
        if not found:
            raise click.ClickException(
                f"{module_name} defines no Handlers or App; create one with `handlers = "
                "Handlers()` (from postkit.worker import Handlers) and register functions on "
                "it, or with `app = App(namespace=...)` (from postkit.tasks import App) and "
                "decorate them with @app.task"
            )
        if len(found) > 1:
            names = sorted(loaded.name.partition(":")[2] for loaded in found.values())
            kinds = {"App" if loaded.app else "Handlers" for loaded in found.values()}
            what = (
                "Handlers and Apps"
                if len(kinds) > 1
                else ("Apps" if "App" in kinds else "Handlers")
            )
            raise click.ClickException(
                f"{module_name} defines several {what} ({', '.join(names)}); name one, "
                f"e.g. {module_name}:{names[0]}"
            )
        (loaded,) = found.values()
    if not loaded.handlers:
        how = "@app.task(queue='queue_name')" if loaded.app else "@handlers.register('queue_name')"
        raise click.ClickException(f"{loaded.name} registers no handlers; add one with {how}")
    return loaded


def _where(filename: str | None, line: int | None) -> str:
    """``tasks.py, line 3``: a file relative to the current directory when under it."""
    path = filename or "?"
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(path)
        if not relative.startswith(os.pardir):
            path = relative
    return f"{path}, line {line}" if line else path


def _import_failure(module_name: str, exc: Exception) -> str:
    """Why importing the user's module failed, in one line: the module, the file and line, and
    the cause (the exception's type and message), without the traceback through click."""
    if isinstance(exc, SyntaxError):
        where = _where(exc.filename, exc.lineno)
        text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        return f"cannot import {module_name}: {type(exc).__name__}: {exc.msg} ({where}{text})"
    machinery = (__file__, os.path.dirname(importlib.__file__ or "") + os.sep)
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith(("<frozen ", *machinery))
    ]
    where = ""
    if frames:
        where = f" ({_where(frames[0].filename, frames[0].lineno)}"
        if len(frames) > 1:
            where += f", raised in {_where(frames[-1].filename, frames[-1].lineno)}"
        where += ")"
    hint = ""
    if isinstance(exc, ModuleNotFoundError):
        hint = f"; is it installed for this Python ({sys.executable})?"
    cause = first_line(str(exc)) or "(no message)"
    return f"cannot import {module_name}: {type(exc).__name__}: {cause}{where}{hint}"
