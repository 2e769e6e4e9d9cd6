"""The Django test project (tests/django_project) on a database of its own, set up once per
session: Django can be configured only once per process."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.conftest import new_database


@pytest.fixture(scope="session")
def django_dsn(server_dsn: str) -> Iterator[str]:
    """A fresh database on which ``manage.py migrate`` installed the project and the queue
    schema; Django is set up on it."""
    import django
    from django.core.management import call_command
    from django.db import connections

    with new_database(server_dsn) as database:
        os.environ["POSTKIT_DJANGO_DSN"] = database
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.django_project.settings"
        django.setup()
        call_command("migrate", verbosity=0)
        yield database
        connections.close_all()
