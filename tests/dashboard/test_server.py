"""The dashboard served on a thread of the calling process (``server.running``), as tests,
benchmarks and an embedding application serve it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.dashboard.conftest import ServeDashboard


def _accepted_sockets(port: int) -> list[socket.socket]:
    """This process's TCP sockets connected on local ``port``: the server's side of each
    connection to it (dup'ed; the caller closes them)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            candidate = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue
        try:
            if (
                candidate.type == socket.SOCK_STREAM
                and candidate.family in (socket.AF_INET, socket.AF_INET6)
                and candidate.getsockname()[1] == port
                and candidate.getpeername()
            ):
                found.append(candidate)
                continue
        except OSError:  # a listener has no peer
            pass
        candidate.close()
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd (Linux)")
def test_its_connections_send_each_response_without_waiting_for_an_ack(
    serve_dashboard: ServeDashboard,
) -> None:
    """TCP_NODELAY on the server's side, as uvicorn's own listeners have it: without it every
    response after the first on a keep-alive connection waits out the client's delayed ACK
    (40 ms on Linux), whatever the page costs."""
    with serve_dashboard() as http:
        assert http.get("/api/meta").status_code == 200
        accepted = _accepted_sockets(http.base_url.port or 0)
        try:
            assert accepted
            assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted)
        finally:
            for s in accepted:
                s.close()
