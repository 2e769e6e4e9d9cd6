"""``postkit dashboard``: the web dashboard (:mod:`postkit.dashboard`), served by uvicorn."""

from __future__ import annotations

import click

from postkit.cli.console import require_schema
from postkit.cli.options import dsn_option
from postkit.cli.output import mask_password
from postkit.embedded import choose_dsn, default_data_dir, resolve_dsn
from postkit.errors import ConfigurationError

_EXTRA_HINT = "the dashboard needs its extra: pip install 'postkit-queue[dashboard]'"


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything but loopback requires --token.",
)
@click.option(
    "--port",
    default=8181,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free port).",
)
@dsn_option
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="NAME",
    help="A namespace to show (repeatable). Default: every namespace the DSN's role may see.",
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Show everything, change nothing: pause, purge, cancel, retry and redrive are refused.",
)
@click.option(
    "--token",
    envvar="POSTKIT_DASHBOARD_TOKEN",
    metavar="TOKEN",
    help="Require this token (16+ characters, no white space at its ends) from every visitor: "
    "type it once into the form at /login in a browser, or send 'Authorization: Bearer "
    "TOKEN'. Default: "
    "$POSTKIT_DASHBOARD_TOKEN.",
)
@click.option(
    "--refresh",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.5, 3600),
    help="Seconds between the pages' live updates.",
)
def dashboard(
    host: str,
    port: int,
    dsn: str | None,
    namespaces: tuple[str, ...],
    read_only: bool,
    token: str | None,
    refresh: float,
) -> None:
    """Serve the web dashboard: queues with live counts and rates, jobs, dead letters,
    schedules and workers, with pause, purge, cancel, retry and redrive.

    It listens on 127.0.0.1 unless told otherwise, and refuses another address without a
    token. Every read and action runs as the DSN's database role, so the role's grants decide
    what the dashboard may see and do (an operator role for actions; `postkit grant`).
    /metrics serves the queues' gauges to Prometheus (needs the metrics extra).

    \b
    Examples:
      postkit dashboard                          # http://127.0.0.1:8181
      postkit dashboard --namespace my-app --read-only
      POSTKIT_DASHBOARD_TOKEN=... postkit dashboard --host 0.0.0.0
    """
    try:
        from postkit.dashboard import DashboardSettings
        from postkit.dashboard.server import serve
    except ImportError as exc:
        raise click.ClickException(f"{_EXTRA_HINT} ({exc.msg})") from exc

    embedded = choose_dsn(dsn).dsn is None
    resolved = resolve_dsn(dsn)
    if embedded:
        _install_embedded(resolved)
    else:
        require_schema(resolved)
    try:
        settings = DashboardSettings(
            dsn=resolved,
            namespaces=namespaces,
            read_only=read_only,
            token=token,
            host=host,
            port=port,
            refresh_seconds=refresh,
        )
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    shown_host = f"[{host}]" if ":" in host else host
    click.echo(
        f"Postkit dashboard on http://{shown_host}:{port}/ "
        f"({'read-only, ' if read_only else ''}database {mask_password(resolved)})",
        err=True,
    )
    if token:
        click.echo(f"Log in once at http://{shown_host}:{port}/login with the token.", err=True)
    if embedded:
        click.echo(
            f"No DSN given: showing the embedded PostgreSQL in {default_data_dir()}. For data "
            "to look at, run "
            "`postkit demo` in another terminal.",
            err=True,
        )
    serve(settings)


def _install_embedded(dsn: str) -> None:
    """The embedded server is the CLI's own: it gets the schema, so the pages have something
    to read."""
    import psycopg

    from postkit.queue import install

    with psycopg.connect(dsn) as connection:
        install(connection)
