"""Postkit as a Django app: ``INSTALLED_APPS += ["postkit.contrib.django"]``.

Settings (all optional)::

    POSTKIT = {"NAMESPACE": "my-app", "DATABASE": "default"}

- ``manage.py migrate`` installs the queue schema on the ``DATABASE`` alias (the app's
  migration), and upgrades it after every later ``migrate`` (a ``post_migrate`` hook that runs
  :func:`postkit.queue.install`, which changes nothing when the schema is current); so a newer
  Postkit takes ``manage.py migrate``, or ``manage.py postkit_install``, and nothing else.
- :func:`queue` is a :class:`~postkit.queue.QueueClient` on Django's connection: a push inside
  ``transaction.atomic()`` commits or rolls back with the ORM's writes (a savepoint's too).
- :func:`transaction` is the transaction a transactional handler shares with its ack on
  Django's connection, so the ORM's writes in the handler commit with the ack, exactly once::

      @handlers.register("receipts", transactional=True, transaction=postkit_django.transaction)
      def write_receipt(job, cursor):
          Receipt.objects.create(job_id=job.id)   # rolls back if the claim went stale

- ``manage.py postkit_worker MODULE [options]`` runs ``postkit worker`` on the ``DATABASE``'s
  settings.

Django uses psycopg 3 or psycopg2; Postkit drives either through Django's cursor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from postkit.queue import QueueClient

DEFAULT_NAMESPACE = "default"
DEFAULT_DATABASE = "default"


def settings() -> tuple[str, str]:
    """The ``POSTKIT`` settings: the namespace and the database alias, with their defaults
    (``"default"`` for both).

    Raises:
        django.core.exceptions.ImproperlyConfigured: ``POSTKIT`` is not a dict, has keys this
            app does not know, or names a database alias that ``DATABASES`` lacks or that is
            not PostgreSQL.
    """
    from django.conf import settings as django_settings
    from django.core.exceptions import ImproperlyConfigured

    given: Any = getattr(django_settings, "POSTKIT", {})
    if not isinstance(given, Mapping):
        raise ImproperlyConfigured("POSTKIT must be a dict of NAMESPACE and DATABASE")
    unknown = sorted(set(given) - {"NAMESPACE", "DATABASE"})
    if unknown:
        raise ImproperlyConfigured(
            f"POSTKIT has unknown keys {', '.join(map(repr, unknown))}: "
            "it takes NAMESPACE and DATABASE"
        )
    namespace = given.get("NAMESPACE", DEFAULT_NAMESPACE)
    alias = given.get("DATABASE", DEFAULT_DATABASE)
    if not isinstance(namespace, str) or not isinstance(alias, str):
        raise ImproperlyConfigured("POSTKIT's NAMESPACE and DATABASE must be strings")
    databases = django_settings.DATABASES
    if alias not in databases:
        raise ImproperlyConfigured(f"POSTKIT's DATABASE {alias!r} is not in DATABASES")
    engine = databases[alias].get("ENGINE", "")
    if engine != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            f"POSTKIT's DATABASE {alias!r} uses {engine!r}: Postkit needs "
            "django.db.backends.postgresql"
        )
    return namespace, alias


def queue() -> QueueClient:
    """A client on the current thread's Django connection to the ``DATABASE`` alias, in the
    ``NAMESPACE``. Its pushes run in whatever transaction that connection is in: inside
    ``transaction.atomic()`` they commit or roll back with the ORM's writes (a rolled-back
    savepoint drops its own pushes only); outside one, Django's autocommit commits each."""
    from django.db import connections

    namespace, alias = settings()
    return QueueClient(connections[alias].cursor(), namespace=namespace)


@contextlib.contextmanager
def transaction() -> Iterator[Any]:
    """A transaction on the current thread's Django connection to the ``DATABASE`` alias,
    yielding a cursor in it: the ``transaction=`` of a transactional handler
    (``Handlers.add(queue, handler, transactional=True, transaction=transaction)``), so that
    the handler's ORM writes and the job's ack commit together, or roll back together when
    the claim went stale or the handler raised.

    It is the outermost ``atomic`` block (``durable=True``); a connection that is broken or
    past ``CONN_MAX_AGE`` is replaced first, as Django does between requests.
    """
    from django.db import connections
    from django.db import transaction as django_transaction

    _, alias = settings()
    connection = connections[alias]
    connection.close_if_unusable_or_obsolete()
    with django_transaction.atomic(using=alias, durable=True), connection.cursor() as cursor:
        yield cursor


# Django settings keys of a database's OPTIONS that are Django's own, not libpq's.
_NOT_LIBPQ = frozenset(
    {"isolation_level", "server_side_binding", "pool", "assume_role", "cursor_factory", "context"}
)


def dsn(alias: str | None = None) -> str:
    """A libpq connection string for the database ``alias`` of ``DATABASES`` (default: the
    ``DATABASE`` setting): its NAME, USER, PASSWORD, HOST and PORT, and the OPTIONS that are
    libpq parameters (``sslmode``, ``options``, ``service``...)."""
    from django.conf import settings as django_settings
    from psycopg.conninfo import make_conninfo

    alias = alias or settings()[1]
    database = django_settings.DATABASES[alias]
    given = {
        "dbname": database.get("NAME"),
        "user": database.get("USER"),
        "password": database.get("PASSWORD"),
        "host": database.get("HOST"),
        "port": database.get("PORT"),
    }
    for key, value in (database.get("OPTIONS") or {}).items():
        if key not in _NOT_LIBPQ and isinstance(value, (str, int)):
            given[key] = value
    return make_conninfo("", **{key: str(value) for key, value in given.items() if value})


__all__ = ["dsn", "queue", "settings", "transaction"]
