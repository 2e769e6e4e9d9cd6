"""Installs the queue schema on the ``POSTKIT["DATABASE"]`` alias. Later versions of Postkit
upgrade it after each ``migrate`` (see ``apps.py``); this migration never changes."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install_schema(apps: Any, schema_editor: Any) -> None:
    from postkit.contrib.django import settings
    from postkit.queue import install

    if schema_editor.connection.alias == settings()[1]:
        with schema_editor.connection.cursor() as cursor:
            install(cursor)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(install_schema, migrations.RunPython.noop, elidable=False)]
