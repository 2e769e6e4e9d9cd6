"""The worker's threads: daemons, named after their job, so a dump of the process reads well."""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass


def start_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """Run ``target`` on a new daemon thread called ``postkit-NAME``."""
    thread = threading.Thread(target=target, name=f"postkit-{name}", daemon=True)
    thread.start()
    return thread


class SelectableEvent:
    """A :class:`threading.Event` that a thread can also wait for beside a socket: setting it
    makes a pipe readable, so ``wait_with(fd, timeout)`` returns as soon as either is ready."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        # Held to write and to close: a write after close would reach whatever file reuses
        # the descriptor.
        self._pipe_lock = threading.Lock()
        self._closed = False

    def set(self) -> None:
        self._event.set()
        with self._pipe_lock, contextlib.suppress(BlockingIOError):  # full: readable already
            if not self._closed:
                os.write(self._write, b"\0")

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def wait_with(self, fd: int, timeout: float) -> None:
        """Sleep until ``fd`` is readable, this event is set, or ``timeout`` seconds pass."""
        if self._event.is_set():
            return
        select.select([fd, self._read], [], [], max(timeout, 0.0))
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass

    def close(self) -> None:
        """Close the pipe; the event still works, without it. Call it once no thread waits
        with :meth:`wait_with`."""
        with self._pipe_lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)


@dataclass
class ServiceThreads:
    """A worker's service threads, each ended by its shutdown."""

    heartbeat: threading.Thread
    listener: threading.Thread | None
    claim_path: threading.Thread | None
    """The claim path's maintenance, in pooler mode only: else the listener runs it."""
    housekeeping: threading.Thread | None
    reporter: threading.Thread | None


__all__ = ["SelectableEvent", "ServiceThreads", "start_thread"]
