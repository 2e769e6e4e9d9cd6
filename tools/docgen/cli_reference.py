"""docs/cli.md: every command of ``postkit``, with its --help as the command prints it."""

from __future__ import annotations

import click

from docgen import GENERATED


def _commands(command: click.Command, path: str) -> list[tuple[str, click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            sub = command.commands[name]
            if not sub.hidden:
                found += _commands(sub, f"{path} {name}")
    return found


def render_cli() -> str:
    from postkit.cli import main

    out = [
        GENERATED,
        "",
        "# The command line",
        "",
        "Every `postkit` command, with its `--help` as it prints it (`postkit COMMAND --help`).",
        "Without `--dsn`, `POSTKIT_DSN` or `DATABASE_URL`, a command starts the embedded",
        "PostgreSQL (the `embedded` extra).",
    ]
    for path, command in _commands(main, "postkit"):
        with click.Context(
            command, info_name=path, terminal_width=100, max_content_width=100
        ) as context:
            text = command.get_help(context)
        out += ["", f"## {path}", "", "```text", text.rstrip(), "```"]
    return "\n".join(out) + "\n"
