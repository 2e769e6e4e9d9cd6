"""Installing the queue schema through a Django connection."""

from __future__ import annotations

from postkit.queue import InstallResult, install


def install_on(alias: str) -> InstallResult:
    """Install or upgrade the queue schema on the Django database ``alias``, in one
    transaction (``atomic``) on Django's connection: :func:`postkit.queue.install` through
    Django's cursor, which works on psycopg 3 and psycopg2 alike."""
    from django.db import connections, transaction

    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        return install(cursor)
