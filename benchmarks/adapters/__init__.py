"""One adapter per library, each with the same small interface (see :class:`Adapter`).

The harness (``benchmarks.workloads``) only talks to this interface: set up the library's schema
in a database of its own, push jobs one at a time or in batches, start N worker processes running
the shared no-op handler (``benchmarks.handlers``), ask how many jobs are left, and tear down.
Adapters are imported on demand, so running Postkit alone needs none of the peers installed.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import multiprocessing
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, ClassVar

import psycopg

from benchmarks import pg

LIBRARIES = ("postkit", "pgqueuer", "procrastinate", "chancy", "rq")


@dataclass(frozen=True)
class WorkerConfig:
    """How a library's workers run: ``processes`` OS processes, each with ``concurrency``
    slots, plus library-specific ``options`` (a batch size, an executor...)."""

    processes: int
    concurrency: int
    options: tuple[tuple[str, Any], ...] = ()

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)

    @property
    def label(self) -> str:
        extra = "".join(f", {key}={value}" for key, value in self.options)
        return f"{self.processes} proc x {self.concurrency} conc{extra}"


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

    def __init__(self, server_dsn: str) -> None:
        self.server_dsn = server_dsn
        self.monitor_transactions = 0
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

    def peak_rss_bytes(self) -> int:
        """The largest peak resident set (VmHWM) among the worker processes, while alive."""
        peak = 0
        for process in self.processes:
            try:
                with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
                    for line in status:
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]) * 1024)
            except OSError:
                continue
        return peak

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


def load(name: str) -> type[Adapter]:
    """The adapter class of ``name`` (one of :data:`LIBRARIES`)."""
    if name not in LIBRARIES:
        raise ValueError(f"unknown library {name!r}; choose from {', '.join(LIBRARIES)}")
    module = importlib.import_module(f"benchmarks.adapters.{name}")
    adapter: type[Adapter] = module.ADAPTER
    return adapter


__all__ = ["LIBRARIES", "Adapter", "AsyncAdapter", "WorkerConfig", "Workers", "load"]
