"""Django's test client on examples/django, in a process of its own (Django can be set up once
per process, and the suite's own Django project has this one): run from the example's directory
with the requests as JSON, ``[{"method": ..., "path": ..., "body": ..., "content_type": ...}]``,
it prints each response as JSON, ``{"status": ..., "json": ...}``, one line each."""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()  # as Django's test runner does: the client's host is allowed
    client = Client()
    for request in json.loads(sys.argv[1]):
        response = client.generic(
            request["method"],
            request["path"],
            request.get("body") or "",
            content_type=request.get("content_type") or "application/octet-stream",
        )
        print(json.dumps({"status": response.status_code, "json": response.json()}), flush=True)
