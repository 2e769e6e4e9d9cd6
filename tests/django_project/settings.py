"""A minimal Django project on the database named by POSTKIT_DJANGO_DSN (the tests set it)."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_database = conninfo_to_dict(os.environ["POSTKIT_DJANGO_DSN"])

SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS = ["postkit.contrib.django", "tests.django_project.shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.get("dbname", ""),
        "USER": _database.get("user", ""),
        "PASSWORD": _database.get("password", ""),
        "HOST": _database.get("host", ""),
        "PORT": _database.get("port", ""),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
POSTKIT = {"NAMESPACE": "shop", "DATABASE": "default"}
