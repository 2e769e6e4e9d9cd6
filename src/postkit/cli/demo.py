"""``postkit demo``: the story of :mod:`postkit.cli.demo_story`, told on the command line."""

from __future__ import annotations

import json

import click

from postkit.cli.options import dsn_option, json_option
from postkit.embedded import choose_dsn, default_data_dir, resolve_dsn


@click.command()
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
    """Tell the OTP story end to end: transactional push, three workers, retries with
    backoff, the dead-letter queue, a SIGKILLed worker rescued by tick_timeouts and its stale
    ack refused.

    It uses the namespace "postkit-demo" and the schema "postkit_demo", and clears both first.
    """
    # Imported here: the story's worker runtime and process pool are no cost to other commands.
    from postkit.cli.demo_story import render_summary, run_demo

    if choose_dsn(dsn).dsn is None and not as_json:
        click.echo(
            f"No DSN given: the demo runs on the embedded PostgreSQL in {default_data_dir()} "
            "(postkit db status shows it).",
            err=True,
        )
    summary = run_demo(
        resolve_dsn(dsn), users=users, say=(lambda _line: None) if as_json else click.echo
    )
    if as_json:
        click.echo(json.dumps(summary.as_json()))
    else:
        click.echo(render_summary(summary))
