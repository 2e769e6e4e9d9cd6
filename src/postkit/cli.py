"""The ``postkit`` command line.

Every command that talks to a database takes ``--dsn``; without it, ``POSTKIT_DSN`` or
``DATABASE_URL`` is used, and without those an embedded PostgreSQL is started (see
:mod:`postkit.embedded`). Errors print one line and exit non-zero; they never show a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import psycopg

from postkit import __version__
from postkit.embedded import resolve_dsn
from postkit.errors import PostkitError
from postkit.queue import install as install_queue
from postkit.queue import install_script, latest_version

F = TypeVar("F", bound=Callable[..., Any])

_DSN_HELP = (
    "PostgreSQL connection string. Default: $POSTKIT_DSN, then $DATABASE_URL, then an embedded "
    "PostgreSQL in $POSTKIT_DATA_DIR (started on demand)."
)


def dsn_option(command: F) -> F:
    return click.option("--dsn", metavar="DSN", help=_DSN_HELP)(command)


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")(command)


class _FriendlyGroup(click.Group):
    """Turns Postkit and connection errors into one readable line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (PostkitError, psycopg.OperationalError) as exc:
            raise click.ClickException(str(exc).strip()) from exc


@click.group(cls=_FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="postkit")
def main() -> None:
    """Postkit: a job queue that lives inside PostgreSQL.

    \b
    Quick start:
      postkit demo                 the article's story, end to end
      postkit install              install or upgrade the queue schema
      postkit sql | psql "$DSN"    the same, without Python on the database host
    """


@main.command()
@dsn_option
@json_option
def install(dsn: str | None, as_json: bool) -> None:
    """Install the queue schema (postkit_queue), or upgrade it in place.

    Idempotent: each migration is applied once and recorded in
    postkit_queue.migrations; a second run changes nothing.
    """
    with psycopg.connect(resolve_dsn(dsn)) as connection:
        result = install_queue(connection)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "previous_version": result.previous_version,
                    "version": result.version,
                    "applied": list(result.applied),
                }
            )
        )
    elif result.applied:
        applied = ", ".join(str(version) for version in result.applied)
        click.echo(
            f"postkit_queue upgraded from version {result.previous_version} to "
            f"{result.version} (applied migrations {applied})"
        )
    else:
        click.echo(f"postkit_queue is up to date at version {result.version}")


@main.command()
@click.option(
    "--target-version",
    type=click.IntRange(1, latest_version()),
    default=None,
    help="Stop after this migration (default: the newest).",
)
@click.option(
    "--no-transaction",
    is_flag=True,
    help="Leave out BEGIN/COMMIT, to embed the script in your own migration.",
)
def sql(target_version: int | None, no_transaction: bool) -> None:
    """Print the queue's install script: plain SQL, idempotent, upgrades in place.

    \b
    Example:
      postkit sql | psql -v ON_ERROR_STOP=1 "$DATABASE_URL"
    """
    click.echo(
        install_script(target_version=target_version, transaction=not no_transaction), nl=False
    )


@main.command()
@dsn_option
@json_option
@click.option(
    "--users",
    type=click.IntRange(8, 200),
    default=12,
    show_default=True,
    help="How many users to register.",
)
def demo(dsn: str | None, as_json: bool, users: int) -> None:
    """Tell the article's story end to end: transactional push, three workers, retries with
    backoff, the dead-letter queue, a SIGKILLed worker rescued by tick_timeouts and its stale
    ack refused.

    It uses the namespace "postkit-demo" and the schema "postkit_demo", and clears both first.
    """
    from postkit.demo import render_summary, run_demo

    summary = run_demo(
        resolve_dsn(dsn), users=users, say=(lambda _line: None) if as_json else click.echo
    )
    if as_json:
        click.echo(json.dumps(summary.as_json()))
    else:
        click.echo(render_summary(summary))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
