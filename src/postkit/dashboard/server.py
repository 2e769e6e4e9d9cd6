"""Serving the dashboard with uvicorn: in the foreground (``postkit dashboard``), or on a thread
of the calling process (tests, benchmarks, an application that embeds it)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn

from postkit.dashboard.app import create_app
from postkit.dashboard.settings import DashboardSettings


def serve(settings: DashboardSettings) -> None:
    """Serve until interrupted (SIGINT or SIGTERM), on ``settings.host`` and ``port``."""
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning")


@contextlib.contextmanager
def running(settings: DashboardSettings, *, start_timeout: float = 10.0) -> Iterator[str]:
    """Serve on a thread while the block runs and yield the base URL (``http://host:port``).
    Port 0 picks a free port. Stops the server, and its pool, when the block ends."""
    # IPPROTO_TCP, as the sockets of uvicorn's own listeners have: asyncio sets TCP_NODELAY
    # only on accepted sockets of that protocol, and without it each response after the first
    # on a keep-alive connection waits out the client's delayed ACK (40 ms on Linux).
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((settings.host, settings.port))
    port = listener.getsockname()[1]
    config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name="postkit-dashboard", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + start_timeout
    while thread.is_alive() and not server.started and time.monotonic() < deadline:
        time.sleep(0.01)  # uvicorn signals its start only through this attribute
    if not server.started:
        server.should_exit = True
        listener.close()
        raise RuntimeError("the dashboard did not start")
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(start_timeout)
        listener.close()
