"""The Django app's configuration: after every ``migrate`` the queue schema is brought up to
this Postkit's version."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PostkitConfig(AppConfig):
    name = "postkit.contrib.django"
    label = "postkit"
    verbose_name = "Postkit"

    def ready(self) -> None:
        post_migrate.connect(_upgrade_schema, sender=self)


def _upgrade_schema(sender: AppConfig, using: str, plan: Any = None, **_: Any) -> None:
    """After ``migrate`` on the ``DATABASE`` alias, once the app's migration is applied:
    install this Postkit's schema (nothing changes when it is current)."""
    from django.db.migrations.recorder import MigrationRecorder

    from postkit.contrib.django import settings
    from postkit.contrib.django.schema import install_on

    if using != settings()[1]:
        return
    applied = MigrationRecorder(_connection(using)).applied_migrations()
    if (sender.label, "0001_install") in applied:
        install_on(using)


def _connection(using: str) -> Any:
    from django.db import connections

    return connections[using]
