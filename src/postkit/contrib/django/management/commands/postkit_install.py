"""``manage.py postkit_install``: install or upgrade the queue schema on Postkit's database."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Install the queue schema on POSTKIT['DATABASE'], or upgrade it to this Postkit's "
        "version (manage.py migrate does the same)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        from postkit.contrib.django import settings
        from postkit.contrib.django.schema import install_on

        result = install_on(settings()[1])
        if result.applied:
            self.stdout.write(
                f"postkit schema: version {result.previous_version} -> {result.version}"
            )
        else:
            self.stdout.write(f"postkit schema: version {result.version}, current")
