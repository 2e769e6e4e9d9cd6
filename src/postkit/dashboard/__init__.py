"""The web dashboard: ``postkit dashboard``, or :func:`create_app` under any ASGI server.

Needs the ``dashboard`` extra (``pip install 'postkit-queue[dashboard]'``: Starlette and uvicorn).
``settings`` says what it shows and to whom, ``security`` guards every request, ``source``
reads and acts through the SDK, ``app`` maps the API onto them, ``metrics`` serves Prometheus,
and ``static/`` holds the page.
"""

from postkit.dashboard.app import create_app
from postkit.dashboard.settings import DashboardSettings

__all__ = ["DashboardSettings", "create_app"]
