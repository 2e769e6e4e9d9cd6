"""What the examples' tests share: each example's README commands, read as its user reads them,
and the processes they start.

Every README under ``examples/`` has one console block of three commands: the install, the
run line (which starts the example's worker, and its app if it has one), and a try line.
A test takes the worker's command and the request from that block, so the README cannot drift
from what the tests run.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class Readme:
    """The three commands of an example's README."""

    install: str
    run: str
    try_it: str

    def worker(self) -> list[str]:
        """The run line's worker command (``postkit worker ...`` or ``python manage.py
        postkit_worker ...``) as an argv for this interpreter."""
        found = re.search(r"(postkit worker|python manage\.py postkit_worker)[^&|;)]*", self.run)
        assert found, f"no worker command in {self.run!r}"
        program, *arguments = shlex.split(found.group(0))
        if program == "postkit":
            return [sys.executable, "-m", "postkit.cli", *arguments]
        return [sys.executable, *arguments]


def readme(example: str) -> Readme:
    """The commands of ``examples/<example>/README.md``: its one console block of three."""
    text = (EXAMPLES / example / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```console\n(.*?)```", text, re.DOTALL)
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 3, f"the README of {example} has {len(lines)} commands, not 3"
    return Readme(*lines)


@dataclass(frozen=True)
class Request:
    """The HTTP request a curl command sends: its method, path, body and headers."""

    method: str
    path: str
    body: str | None
    headers: dict[str, str]


def curl(command: str) -> Request:
    """The request of a ``curl`` command line that uses ``-X``, ``-H`` and ``-d`` (curl's
    default content type for ``-d`` included)."""
    program, *arguments = shlex.split(command)
    assert program == "curl", command
    method, body, url = None, None, None
    headers: dict[str, str] = {}
    words = iter(arguments)
    for word in words:
        if word == "-X":
            method = next(words)
        elif word == "-H":
            name, _, value = next(words).partition(":")
            headers[name.strip()] = value.strip()
        elif word == "-d":
            body = next(words)
        else:
            assert not word.startswith("-"), f"{word} is not an option the tests read"
            url = word
    assert url is not None, command
    if body is not None:
        headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
    return Request(
        method or ("POST" if body is not None else "GET"), urlsplit(f"//{url}").path, body, headers
    )


def environment(dsn: str) -> dict[str, str]:
    """The environment of an example's processes: this checkout's postkit first on the path,
    and the database named by ``POSTKIT_DSN``, as a user would set it, with none of the
    suite's own settings."""
    path = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1"}
    env["POSTKIT_DSN"] = dsn
    # Nothing of the suite's own settings: its Django project sets DJANGO_SETTINGS_MODULE.
    for name in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "POSTKIT_DJANGO_DSN"):
        env.pop(name, None)
    return env


class Process:
    """A command of an example, running in the example's directory; its output (stdout and
    stderr) is read as it comes, for :attr:`output`."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.command = command
        self.popen = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self._lines)

    def alive(self) -> bool:
        """True while the process runs; the test fails with its output once it has exited."""
        assert self.popen.poll() is None, f"{self.command} exited:\n{self.output}"
        return True

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send ``signum`` (SIGTERM: how a worker is stopped) and wait; the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signum)
        try:
            code = self.popen.wait(timeout=30)
        finally:
            if self.popen.poll() is None:
                self.popen.kill()
        self._reader.join(timeout=5)
        return code


@contextlib.contextmanager
def running(command: list[str], cwd: Path, env: dict[str, str]) -> Iterator[Process]:
    """Run ``command`` for the block; stopped with SIGTERM after it, it must exit with 0."""
    process = Process(command, cwd, env)
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, f"{command} exited with {code}:\n{process.output}"


@contextlib.contextmanager
def imported(directory: Path, name: str) -> Iterator[ModuleType]:
    """Module ``name`` of an example, imported as its own command imports it (from the
    example's directory, which holds its other modules); the example's modules are forgotten
    after the block, so examples with modules of the same name do not meet."""
    sys.path.insert(0, str(directory))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(directory))
        for key, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(f"{directory}{os.sep}"):
                del sys.modules[key]
