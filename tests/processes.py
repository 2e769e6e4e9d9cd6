"""Worker processes for tests: a real process of its own, whose output the test reads line by
line, and that the test may signal (SIGTERM, SIGKILL) like any supervisor."""

from __future__ import annotations

import os
import queue as stdlib_queue
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest


class WorkerProcess:
    """A worker in a process of its own, whose output the test reads line by line."""

    def __init__(
        self,
        command: list[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ):
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            env=None if env is None else {**os.environ, **env},
        )
        self.output: list[str] = []
        self._lines: stdlib_queue.SimpleQueue[str | None] = stdlib_queue.SimpleQueue()
        self._ended = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def expect(self, prefix: str, timeout: float = 15.0) -> str:
        """Read lines until one starts with ``prefix``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except stdlib_queue.Empty:
                pytest.fail(f"no line {prefix!r} within {timeout:.0f}s; output: {self.output}")
            if line is None:
                self._ended = True
                pytest.fail(f"the worker exited before printing {prefix!r}: {self.output}")
            self.output.append(line)
            if line.startswith(prefix):
                return line

    def lines(self, prefix: str = "") -> list[str]:
        """Every line printed so far (without waiting) that starts with ``prefix``."""
        while not self._ended:
            try:
                line = self._lines.get_nowait()
            except stdlib_queue.Empty:
                break
            if line is None:
                self._ended = True
            else:
                self.output.append(line)
        return [line for line in self.output if line.startswith(prefix)]

    def kill(self) -> None:
        """SIGKILL: the process dies at once, with its claims, connections and handlers."""
        os.kill(self.process.pid, signal.SIGKILL)
        assert self.process.wait(timeout=10) == -signal.SIGKILL

    def wait(self, timeout: float = 15.0) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not exit within {timeout:.0f}s; output: {self.output}")
        while not self._ended and (line := self._lines.get(timeout=5)) is not None:
            self.output.append(line)
        self._ended = True
        return code
