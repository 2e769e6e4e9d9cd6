"""A minimal project: Postkit's Django app and the signups app, on one PostgreSQL database:
the one ``POSTKIT_DSN`` or ``DATABASE_URL`` names, else Postkit's embedded PostgreSQL (as for
the ``postkit`` command)."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from postkit.embedded import resolve_dsn

_database = conninfo_to_dict(resolve_dsn())

SECRET_KEY = "an example's key: make your own"
DEBUG = True
INSTALLED_APPS = ["postkit.contrib.django", "signups"]
# No sessions, no cookies, no CSRF: a JSON API for curl.
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "project.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.pop("dbname", ""),
        "USER": _database.pop("user", ""),
        "PASSWORD": _database.pop("password", ""),
        "HOST": _database.pop("host", ""),
        "PORT": _database.pop("port", ""),
        "OPTIONS": _database,  # the DSN's other parameters (sslmode...), as libpq takes them
    }
}
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
POSTKIT = {"NAMESPACE": "django-example", "DATABASE": "default"}
