"""`postkit dashboard` as an operator starts it: a real process that serves until SIGINT."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from tests.signals import wait_until

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_command_serves_the_dashboard_until_interrupted(dsn: str, namespace: str) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("POSTKIT_DSN", "DATABASE_URL")}
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "postkit.cli", "dashboard"),
            *("--dsn", dsn, "--port", str(port), "--namespace", namespace, "--read-only"),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def meta() -> dict[str, object] | None:
            try:
                return dict(httpx.get(f"http://127.0.0.1:{port}/api/meta", timeout=2).json())
            except httpx.TransportError:
                return None

        served = wait_until(meta, "the dashboard answering", timeout=30)
        assert served["namespaces"] == [namespace] and served["read_only"] is True
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
        stderr = process.stderr.read() if process.stderr else ""
    assert f"http://127.0.0.1:{port}/" in stderr
    assert "read-only" in stderr
