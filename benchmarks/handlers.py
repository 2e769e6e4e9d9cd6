"""The job every library runs: a no-op, with an optional latency probe.

Each adapter's handler unpacks its library's job into the sequence number it was pushed with and
calls :func:`handle`. Normally that does nothing. In the latency workload (W2) the worker process
is started with a probe port, and :func:`handle` then sends ``"<sequence> <perf_counter_ns>"``
as one UDP datagram to the benchmark on 127.0.0.1, the moment the handler starts. On Linux
``perf_counter_ns`` reads CLOCK_MONOTONIC, one clock for every process of the machine, so the
benchmark can subtract the push's commit time from it.
"""

from __future__ import annotations

import socket
import time
from typing import Any

_probe: socket.socket | None = None
_address: tuple[str, int] = ("127.0.0.1", 0)


def configure(probe_port: int | None) -> None:
    """Call once in each worker process before its library starts working."""
    global _probe, _address
    if probe_port:
        _probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _address = ("127.0.0.1", probe_port)


def handle(sequence: int) -> None:
    """The handler body every library runs."""
    if _probe is not None:
        _probe.sendto(f"{sequence} {time.perf_counter_ns()}".encode(), _address)


def noop(n: int, **_: Any) -> None:
    """A plain function job, for libraries that import their jobs by path (RQ, Chancy)."""
    handle(n)


async def async_noop(n: int, **_: Any) -> None:
    """The same, as a coroutine, for asyncio executors."""
    handle(n)
