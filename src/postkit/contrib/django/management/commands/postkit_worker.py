"""``manage.py postkit_worker MODULE [options]``: ``postkit worker`` on Django's database.

The options are ``postkit worker``'s (``manage.py postkit_worker --help`` lists them); the DSN
is built from ``DATABASES[POSTKIT["DATABASE"]]`` and ``--namespace`` defaults to
``POSTKIT["NAMESPACE"]``. The handlers' module is imported after Django is set up, so it may
use the ORM. ``--processes`` stays 1: a child process would start without Django; run several
``postkit_worker`` commands instead.
"""

from __future__ import annotations

import argparse
import copy
import sys
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError

_OWN = frozenset({"--dsn", "--processes"})


def worker_arguments(arguments: list[str]) -> list[str]:
    """``postkit worker``'s arguments for ``manage.py postkit_worker ARGUMENTS``: those given,
    then the DSN of Django's database.

    Raises:
        CommandError: ``--dsn`` or ``--processes`` is given (the DSN is Django's, and a child
            process would start without Django).
    """
    from postkit.contrib.django import dsn

    given = {argument.split("=", 1)[0] for argument in arguments}
    refused = sorted(given & _OWN)
    if refused:
        raise CommandError(
            f"postkit_worker takes no {', '.join(refused)}: the DSN is DATABASES"
            "[POSTKIT['DATABASE']]'s, and one command runs one process (run several)"
        )
    return [*arguments, "--dsn", dsn()]


def _without_own_options(command: click.Command) -> click.Command:
    """``command`` with the options this command refuses (``--dsn``, ``--processes``) left out
    of its help."""
    shown = copy.copy(command)
    shown.params = [copy.copy(param) for param in command.params]
    for param in shown.params:
        if isinstance(param, click.Option) and _OWN & set(param.opts):
            param.hidden = True
    return shown


class Command(BaseCommand):
    help = "Run `postkit worker MODULE [options]` on Django's database (--help: its options)."

    def run_from_argv(self, argv: list[str]) -> None:
        """The arguments after ``postkit_worker`` go to ``postkit worker`` untouched."""
        try:
            self._run(argv[2:])
        except CommandError as error:
            self.stderr.write(f"CommandError: {error}")
            sys.exit(error.returncode)

    def handle(self, *args: Any, **options: Any) -> None:
        """For ``call_command("postkit_worker", "MODULE", "--queue", "q", ...)``."""
        self._run([str(arg) for arg in args])

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER)

    def _run(self, arguments: list[str]) -> None:
        from postkit.cli.worker import worker
        from postkit.contrib.django import settings

        namespace, _ = settings()
        asked_help = bool({"-h", "--help"} & set(arguments))
        (_without_own_options(worker) if asked_help else worker).main(
            args=["--help"] if asked_help else worker_arguments(arguments),
            prog_name="manage.py postkit_worker",
            # The settings' namespace is --namespace's default (an App's own namespace wins).
            default_map={"namespace": namespace},
        )
