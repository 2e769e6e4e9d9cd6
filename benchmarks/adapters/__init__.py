"""One adapter per library, each with the same small interface (see :class:`Adapter`).

The harness (``benchmarks.workloads``) only talks to this interface: set up the library's schema
in a database of its own, push jobs one at a time or in batches, start N worker processes running
the shared no-op handler (``benchmarks.handlers``), ask how many jobs are left, and tear down.
Adapters are imported on demand, so running Postkit alone needs none of the peers installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import multiprocessing
import os
import signal
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, ClassVar

import psycopg

from benchmarks import pg

LIBRARIES = (
    "postkit",
    "postkit_defaults",
    "pgqueuer",
    "procrastinate",
    "chancy",
    "rq",
    "awa",
    "dbos",
    "oban",
)


@dataclass(frozen=True)
class WorkerConfig:
    """How a library's workers run: ``processes`` OS processes, each with ``concurrency``
    slots, plus library-specific ``options`` (a batch size, an executor...)."""

    processes: int
    concurrency: int
    options: tuple[tuple[str, Any], ...] = ()
    title: str = ""
    """The label, when ``processes x concurrency, options`` does not say it (a command)."""

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)

    @property
    def label(self) -> str:
        if self.title:
            return self.title
        extra = "".join(f", {key}={value}" for key, value in self.options)
        return f"{self.processes} proc x {self.concurrency} conc{extra}"

    def with_processes(self, processes: int) -> WorkerConfig:
        """The same configuration with another number of processes."""
        return WorkerConfig(processes, self.concurrency, self.options)


WorkerMain = Callable[[str, WorkerConfig, "int | None"], None]


class Adapter(ABC):
    """A library under test. Subclasses live in ``benchmarks/adapters/<name>.py``."""

    name: ClassVar[str]
    distribution: ClassVar[str]
    backend: ClassVar[str] = "PostgreSQL"
    configs: ClassVar[tuple[WorkerConfig, ...]]
    """Worker configurations the harness tries; the fastest drain is used for every workload."""
    latency_config: ClassVar[WorkerConfig]
    batch_note: ClassVar[str] = ""
    """How this library enqueues a batch, for the report."""
    tuning_note: ClassVar[str] = ""
    """Why the configurations tried are these: the library's own recommendations, cited."""
    claims_in_batches: ClassVar[bool] = True
    """Whether a worker claims several jobs per statement: its drain is compared with the
    floor's 100-job SKIP LOCKED dequeue, else with the 1-job one."""
    workloads: ClassVar[tuple[str, ...] | None] = None
    """The only workloads this adapter runs (None: every one)."""
    title: ClassVar[str] = ""
    """The name in the report (default: :attr:`name`)."""

    def connections(self, concurrency: int) -> int:
        """The server connections one worker process of ``concurrency`` opens."""
        return concurrency + 2

    def __init__(self, server_dsn: str) -> None:
        self.server_dsn = server_dsn
        self.monitor_transactions = 0
        self.expected_rate: float | None = None
        """The drain rate of the chosen configuration's calibration, once known."""
        self.dsn = pg.with_database(server_dsn, f"bench_{self.name}")

    # -- lifecycle ------------------------------------------------------------------------------

    def setup(self) -> None:
        """A fresh database ``bench_<name>`` with the library's schema, and a producer."""
        self.dsn = pg.recreate_database(self.server_dsn, f"bench_{self.name}")
        self.install()
        self.open()

    def teardown(self) -> None:
        self.close()
        self.close_monitor()
        pg.drop_database(self.server_dsn, f"bench_{self.name}")

    @abstractmethod
    def install(self) -> None:
        """Create the library's schema in :attr:`dsn`."""

    @abstractmethod
    def open(self) -> None:
        """Open the producer's connection."""

    @abstractmethod
    def close(self) -> None: ...

    clear_sql: ClassVar[str] = ""
    """Removes every job (pending, running, finished) of the library's database."""
    progress_sql: ClassVar[str] = ""
    """Counts the jobs not yet claimed by a worker, and those not yet completed."""

    def clear(self) -> None:
        """Remove every job so the next measurement starts empty."""
        self._monitor().execute(self.clear_sql)

    def progress(self) -> tuple[int, int]:
        """Jobs not yet claimed by a worker, and jobs not yet completed (claimed or not)."""
        row = self._monitor().execute(self.progress_sql).fetchone()
        self.monitor_transactions += 1
        assert row is not None
        return int(row[0]), int(row[1])

    def transactions(self) -> int | None:
        """Transactions committed or rolled back in the library's database so far, less the
        harness's own (None when the backend is not PostgreSQL). Read after the workers
        exit: a backend reports its counts at the latest when it ends."""
        monitor = self._monitor()
        monitor.execute("SELECT pg_stat_clear_snapshot()")
        row = monitor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchone()
        self.monitor_transactions += 2
        return None if row is None else int(row[0]) - self.monitor_transactions

    def remaining(self) -> int:
        """Jobs not yet completed."""
        return self.progress()[1]

    def _monitor(self) -> psycopg.Connection[Any]:
        """The harness's own connection to the library's database (autocommit)."""
        monitor: psycopg.Connection[Any] | None = getattr(self, "_monitor_connection", None)
        if monitor is None or monitor.closed:
            monitor = psycopg.connect(self.dsn, autocommit=True)
            self._monitor_connection = monitor
        return monitor

    def close_monitor(self) -> None:
        monitor: psycopg.Connection[Any] | None = getattr(self, "_monitor_connection", None)
        if monitor is not None:
            monitor.close()
            del self._monitor_connection

    def version(self) -> str:
        return importlib.metadata.version(self.distribution)

    def server_pid(self) -> int | None:
        """The postmaster's pid, when the server runs on this machine (its processes' CPU is
        then read from /proc); None for another backend or a remote server."""
        if self.backend != "PostgreSQL":
            return None
        row = self._monitor().execute("SELECT pg_backend_pid()").fetchone()
        self.monitor_transactions += 1
        assert row is not None
        return _parent(int(row[0]))

    def describe_backend(self) -> dict[str, str]:
        """Facts about a non-PostgreSQL backend for the report (PostgreSQL's are shared)."""
        return {}

    def storage(self) -> dict[str, Any]:
        """Table and index bytes of the library's database."""
        return pg.storage(self.dsn)

    # -- producing ------------------------------------------------------------------------------

    @abstractmethod
    def push_one(self, sequence: int) -> None:
        """Push the job ``sequence`` in a transaction of its own, committed on return."""

    def enqueue_single(self, start: int, count: int) -> None:
        for sequence in range(start, start + count):
            self.push_one(sequence)

    @abstractmethod
    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        """Push ``count`` jobs, ``batch`` per transaction, the library's fastest way."""

    def fill(self, start: int, count: int) -> None:
        """Preload a backlog or top it up (not timed): the fastest way the library offers."""
        self.enqueue_batch(start, count, 5000)

    def push_paced(self, count: int, gap: float) -> dict[int, int]:
        """Push ``count`` jobs ``gap`` seconds apart; the ``perf_counter_ns`` of each commit."""
        committed: dict[int, int] = {}
        for sequence in range(count):
            self.push_one(sequence)
            committed[sequence] = time.perf_counter_ns()
            time.sleep(gap)
        return committed

    # -- consuming ------------------------------------------------------------------------------

    def start_workers(self, config: WorkerConfig, probe_port: int | None = None) -> Workers:
        """Start ``config.processes`` worker processes running this library's worker."""
        module = importlib.import_module(type(self).__module__)
        return Workers.start(module.worker_main, self.dsn, config, probe_port)


class AsyncAdapter(Adapter):
    """An adapter whose library is asyncio-first: the producer runs on one event loop."""

    _loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        self._loop = asyncio.new_event_loop()  # asyncio.Runner is Python 3.11+
        self.run(self.aopen())

    def close(self) -> None:
        if self._loop is not None:
            self.run(self.aclose())
            self._loop.close()
            self._loop = None

    def run(self, coroutine: Any) -> Any:
        assert self._loop is not None
        return self._loop.run_until_complete(coroutine)

    @abstractmethod
    async def aopen(self) -> None: ...

    @abstractmethod
    async def aclose(self) -> None: ...

    @abstractmethod
    async def apush_one(self, sequence: int) -> None: ...

    def push_one(self, sequence: int) -> None:
        self.run(self.apush_one(sequence))

    def enqueue_single(self, start: int, count: int) -> None:
        async def loop() -> None:
            for sequence in range(start, start + count):
                await self.apush_one(sequence)

        self.run(loop())

    def push_paced(self, count: int, gap: float) -> dict[int, int]:
        async def loop() -> dict[int, int]:
            committed: dict[int, int] = {}
            for sequence in range(count):
                await self.apush_one(sequence)
                committed[sequence] = time.perf_counter_ns()
                await asyncio.sleep(gap)
            return committed

        result: dict[int, int] = self.run(loop())
        return result


@dataclass
class Workers:
    """Worker processes of one library, started with the ``spawn`` method (a fresh
    interpreter each: no inherited connections, and their GILs are their own)."""

    processes: list[BaseProcess] = field(default_factory=list)
    started_at: float = 0.0

    @classmethod
    def start(
        cls, target: WorkerMain, dsn: str, config: WorkerConfig, probe_port: int | None
    ) -> Workers:
        context = multiprocessing.get_context("spawn")
        workers = cls(started_at=time.perf_counter())
        for _ in range(config.processes):
            # Not daemonic: some libraries (Chancy's process executor) start children of their
            # own. stop() ends every process this starts, by pid.
            process = context.Process(target=target, args=(dsn, config, probe_port))
            process.start()
            workers.processes.append(process)
        return workers

    def alive(self) -> bool:
        return all(process.is_alive() for process in self.processes)

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes if process.pid is not None]

    def peak_rss_bytes(self) -> int:
        """The largest peak resident set (VmHWM) among the worker processes, while alive."""
        return max((_status_bytes(pid, "VmHWM:") for pid in self.pids()), default=0)

    def rss_bytes(self) -> int:
        """The largest resident set (VmRSS) among the worker processes now."""
        return max((_status_bytes(pid, "VmRSS:") for pid in self.pids()), default=0)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a graceful stop for every library here), then SIGKILL after ``timeout``."""
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            process.join(max(0.1, deadline - time.monotonic()))
            if process.is_alive() and process.pid is not None:
                process.kill()
                process.join(5)
        self.processes.clear()


class CommandWorkers(Workers):
    """Workers run by a command line, as a user starts them (``postkit worker ...``): one
    process, which may supervise children of its own; those are the worker processes."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: str) -> None:
        super().__init__(started_at=time.perf_counter())
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self.command = command
        self.popen = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=self._log
        )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def pids(self) -> list[int]:
        """The command's process and every process under it."""
        found, pending = [], [self.popen.pid]
        while pending:
            pid = pending.pop()
            found.append(pid)
            pending += children(pid)
        return found

    def log_tail(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM to the command (a supervisor passes it on), SIGKILL to every process under
        it past ``timeout``."""
        every = self.pids()
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)
        for pid in every[1:]:  # children the command left behind, if any
            if _command_line(pid)[:3] == self.command[:3]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        self._log.close()


def _command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return [part.decode(errors="replace") for part in cmdline.read().split(b"\0")]
    except OSError:
        return []


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as children:
                found += [int(child) for child in children.read().split()]
    except OSError:
        pass
    return found


def _status_bytes(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` size (``VmHWM:``, ``VmRSS:``) in bytes; 0 if the process is
    gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _parent(pid: int) -> int | None:
    """The parent of the process ``pid``, if it runs on this machine."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("PPid:"):
                    return int(line.split()[1]) or None
    except OSError:
        pass
    return None


def load(name: str) -> type[Adapter]:
    """The adapter class of ``name`` (one of :data:`LIBRARIES`)."""
    if name not in LIBRARIES:
        raise ValueError(f"unknown library {name!r}; choose from {', '.join(LIBRARIES)}")
    module = importlib.import_module(f"benchmarks.adapters.{name}")
    adapter: type[Adapter] = module.ADAPTER
    return adapter


__all__ = [
    "LIBRARIES",
    "Adapter",
    "AsyncAdapter",
    "CommandWorkers",
    "WorkerConfig",
    "Workers",
    "children",
    "load",
]
