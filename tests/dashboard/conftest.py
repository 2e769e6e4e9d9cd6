"""Fixtures for the dashboard's tests: a real dashboard server on a thread, over the test
database, and an HTTP client for it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

from postkit.dashboard import DashboardSettings
from postkit.dashboard.server import running

ServeDashboard = Callable[..., contextlib.AbstractContextManager[httpx.Client]]


@pytest.fixture
def serve_dashboard(dsn: str) -> Iterator[ServeDashboard]:
    """Start a dashboard (settings as keyword arguments, the test database's DSN unless
    given) and yield an HTTP client for it; the server stops when the block ends."""

    @contextlib.contextmanager
    def _serve(**options: Any) -> Iterator[httpx.Client]:
        options.setdefault("dsn", dsn)
        options.setdefault("port", 0)
        settings = DashboardSettings(**options)
        with running(settings) as base_url, httpx.Client(base_url=base_url, timeout=10) as http:
            http.headers["x-postkit-csrf"] = settings.csrf_token
            yield http

    yield _serve


@pytest.fixture
def dashboard(serve_dashboard: ServeDashboard, namespace: str) -> Iterator[httpx.Client]:
    """A dashboard that shows every namespace, and may act, as the test database's owner."""
    with serve_dashboard() as http:
        yield http
