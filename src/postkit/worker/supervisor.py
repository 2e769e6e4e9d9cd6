"""Run several worker processes, restart the ones that die, stop them all on a signal.

``postkit worker MODULE --processes N`` runs this: N children, each ``postkit worker`` with
``--processes 1`` and a worker id of its own. The supervisor:

- restarts a child that exits while no stop was asked for, after a backoff that doubles with
  each quick death (0.5 s, 1 s, 2 s, ... up to 30 s) and resets once a child has run a while;
- on SIGTERM or SIGINT sends SIGTERM to every child (each finishes its running jobs within its
  grace period, then releases the rest) and returns when all have exited; a second signal is
  passed on too, and makes the children exit at once.

Children run in a session of their own, so a Ctrl-C in a terminal reaches only the supervisor,
which passes it on once. They die with it all the same, whatever kills it (an OOM kill, a
SIGKILL, a signal to its process group alone): each holds the read end of a pipe, the
lifeline, whose write end only the supervisor holds. When the supervisor's process ends, by any
means, the kernel closes that end, and each child stops as on SIGTERM (:func:`follow_supervisor`):
its running jobs finish within the grace period and the rest are released.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from postkit.worker.backoff import Backoff

logger = logging.getLogger("postkit.supervisor")

_POLL = 0.1
"""Seconds between checks on the children."""

LIFELINE = "POSTKIT_SUPERVISOR_FD"
"""The environment variable that gives a child the file descriptor of its lifeline's read end."""


@dataclass
class _Child:
    index: int
    command: list[str]
    restarts: Backoff
    """Counts the child's quick deaths: each one doubles the wait before its restart."""
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float | None = None


class Supervisor:
    """Runs one process per command until a signal, restarting those that die."""

    def __init__(
        self,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str] | None = None,
        min_backoff: float = 0.5,
        max_backoff: float = 30.0,
        healthy_after: float = 10.0,
    ) -> None:
        """
        Args:
            commands: one command line per child.
            env: the children's environment (default: the supervisor's).
            min_backoff, max_backoff: seconds before a restart; doubles with each quick death.
            healthy_after: a child that ran this long before dying is restarted after
                ``min_backoff`` again.
        """
        self.children = [
            _Child(index, list(command), Backoff(min_backoff, max_backoff))
            for index, command in enumerate(commands)
        ]
        self.env = dict(env) if env is not None else None
        self.healthy_after = healthy_after
        self._signals: list[int] = []
        self._lifeline = -1
        self._forwarded = 0
        self._clean = True

    def run(self) -> int:
        """Supervise until a signal stops every child. Returns 0 when every child exited
        cleanly after the stop (exit code 0, or killed by the SIGTERM passed on before it could
        handle it), else 1. Call from the main thread."""
        previous = {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }
        # Both ends are kept from the children, but the read end is passed to each one
        # (pass_fds): the write end stays in this process alone, so it closes when this
        # process ends, however it ends.
        self._lifeline, lifeline_end = os.pipe()
        try:
            for child in self.children:
                self._start(child)
            while not self._stopping or self._running():
                self._forward_signals()
                for child in self.children:
                    self._check(child)
                time.sleep(_POLL)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for child in self.children:  # only if the loop itself failed
                if child.process is not None and child.process.poll() is None:
                    child.process.send_signal(signal.SIGTERM)
            os.close(self._lifeline)
            os.close(lifeline_end)
        return 0 if self._clean else 1

    @property
    def _stopping(self) -> bool:
        return bool(self._signals)

    def _running(self) -> bool:
        return any(child.process is not None for child in self.children)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Only record it: the main loop passes it on within _POLL seconds.
        self._signals.append(signum)

    def _forward_signals(self) -> None:
        while self._forwarded < len(self._signals):
            signum = self._signals[self._forwarded]
            self._forwarded += 1
            logger.warning(
                "%s%s: stopping %d worker process(es)",
                signal.Signals(signum).name,
                " again" if self._forwarded > 1 else "",
                sum(child.process is not None for child in self.children),
                extra={"event": "stopping"},
            )
            for child in self.children:
                if child.process is not None and child.process.poll() is None:
                    child.process.send_signal(signal.SIGTERM)

    def _start(self, child: _Child) -> None:
        child.process = subprocess.Popen(
            child.command,
            env={
                **(self.env if self.env is not None else os.environ),
                LIFELINE: str(self._lifeline),
            },
            start_new_session=True,
            pass_fds=(self._lifeline,),
        )
        child.started = time.monotonic()
        child.restart_at = None
        logger.info(
            "started worker process %d (pid %d)",
            child.index,
            child.process.pid,
            extra=self._fields(child, "process_started"),
        )

    def _check(self, child: _Child) -> None:
        if child.process is None:
            due = child.restart_at is not None and time.monotonic() >= child.restart_at
            if due and not self._stopping:
                self._start(child)
            return
        code = child.process.poll()
        if code is None:
            return
        pid = child.process.pid
        child.process = None
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited ({code})"
        if self._stopping:
            clean = code in (0, -signal.SIGTERM)
            self._clean = self._clean and clean
            logger.log(
                logging.INFO if clean else logging.WARNING,
                "worker process %d (pid %d) %s",
                child.index,
                pid,
                how,
                extra=self._fields(child, "process_exited", pid=pid, exit_code=code),
            )
            return
        if time.monotonic() - child.started >= self.healthy_after:
            child.restarts.reset()
        delay = child.restarts.failure()
        child.restart_at = time.monotonic() + delay
        logger.warning(
            "worker process %d (pid %d) %s; restarting in %.1fs",
            child.index,
            pid,
            how,
            delay,
            extra=self._fields(child, "process_died", pid=pid, exit_code=code, delay=delay),
        )

    def _fields(self, child: _Child, event: str, **more: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {"event": event, "worker_index": child.index}
        if child.process is not None:
            fields["pid"] = child.process.pid
        return {**fields, **more}


def follow_supervisor() -> None:
    """In a child of a :class:`Supervisor`: when the supervisor is gone, send this process
    SIGTERM, which stops a worker gracefully. Nothing is ever written to the lifeline; its read
    returns end-of-file once the supervisor's process has ended. Outside a supervisor (no
    lifeline in the environment), does nothing."""
    descriptor = os.environ.pop(LIFELINE, None)
    if descriptor is None:
        return
    supervisor = os.getppid()

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(int(descriptor), 1):
                pass
        logger.warning(
            "the supervisor (pid %d) is gone: stopping",
            supervisor,
            extra={"event": "supervisor_gone"},
        )
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="postkit-lifeline", daemon=True).start()


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


__all__ = ["LIFELINE", "Supervisor", "follow_supervisor"]
