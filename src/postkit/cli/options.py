"""The options several ``postkit`` commands share: --dsn, --json, --namespace, --yes,
--create, and integer options bounded as the SQL module bounds them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from postkit.cli.output import QueueWeightType
from postkit.queue import limits

F = TypeVar("F", bound=Callable[..., Any])

_DSN_HELP = (
    "PostgreSQL connection string. Default: $POSTKIT_DSN, then $DATABASE_URL, then an embedded "
    "PostgreSQL, started on demand in $POSTKIT_DATA_DIR or the user's data directory (postkit "
    "db status shows it)."
)


def dsn_option(command: F) -> F:
    return click.option("--dsn", metavar="DSN", help=_DSN_HELP)(command)


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")(command)


_NAMESPACE_HELP = "The application's namespace; a command sees and changes only its own jobs."


def namespace_option(command: F) -> F:
    return click.option(
        "--namespace", default="default", show_default=True, metavar="NAME", help=_NAMESPACE_HELP
    )(command)


def yes_option(command: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(command)


def create_option(command: F) -> F:
    return click.option(
        "--create",
        is_flag=True,
        help="Accept a queue name the namespace has not seen yet (a typo guard otherwise).",
    )(command)


def operation(command: F) -> F:
    """The options every operating command takes: --namespace, --dsn and --json."""
    return namespace_option(dsn_option(json_option(command)))


def bounded(bounds: limits.Bounds) -> click.IntRange:
    """An integer option with the SQL module's own bounds (postkit.queue.limits)."""
    return click.IntRange(bounds.low, bounds.high)


def weight_option(command: F) -> F:
    return click.option(
        "--weight",
        "weights",
        multiple=True,
        type=QueueWeightType(),
        help="A queue's weight (1 to 1000, default 1): its part of every claim while several "
        "queues have jobs. Repeat for several, e.g. --weight reports=3.",
    )(command)
