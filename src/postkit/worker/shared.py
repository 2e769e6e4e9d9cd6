"""One worker process for several namespaces, sharing its slots between them by weight::

    SharedWorker(dsn, handlers, namespaces={"tenant-a": 3, "tenant-b": 1}, concurrency=16).run()

A namespace keeps an application's (or a tenant's) jobs apart; a fleet of workers may still
serve several. Run a worker per namespace and each has slots of its own, idle while its
namespace is; run a shared worker and the namespaces share one set of ``concurrency`` slots:

- While several namespaces have jobs, each holds its part of the slots by weight: above,
  3 jobs of ``tenant-a`` run for each of ``tenant-b``, whatever the backlogs. A namespace that
  pushes 100,000 jobs does not keep another's 10 waiting.
- A namespace without jobs takes no slot, and the others use its part at once (work
  conserving). When its jobs come, it gets its part back as the others' running jobs end: a
  running job is never taken back.

How: one :class:`~postkit.worker.Worker` per namespace runs on a thread of this process, with
its own listener, pool and maintenance, as if alone; they share a
:class:`~postkit.worker.namespace_shares.NamespaceShares`, which each claim asks for slots
(the algorithm is in its module). Each claim stays in one namespace, as everywhere in
Postkit (Citus places a namespace's rows together). Costs, per namespace: a listening
connection, a pool that opens connections while its jobs run, and ``concurrency`` handler
threads. A shared worker holds no prefetch: a job held waiting for one namespace would be a
slot another namespace's job could run in.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from postkit.worker import defaults
from postkit.worker.handlers import Handlers
from postkit.worker.metrics import require_prometheus_client
from postkit.worker.namespace_shares import NamespaceShares
from postkit.worker.runtime import Worker
from postkit.worker.signals import stop_on_signals
from postkit.worker.stats import WorkerStats
from postkit.worker.threads import start_thread

if TYPE_CHECKING:
    from postkit.worker.prometheus import MetricsEndpoint

logger = logging.getLogger("postkit.worker")


class SharedWorker:
    """Runs handlers for the jobs of several namespaces, sharing ``concurrency`` slots between
    them by weight. See the module docstring."""

    def __init__(
        self,
        dsn: str,
        handlers: Handlers | Mapping[str, Callable[..., Any]],
        *,
        namespaces: Sequence[str] | Mapping[str, int],
        queues: Sequence[str] | Mapping[str, int] | None = None,
        worker_id: str | None = None,
        concurrency: int = defaults.CONCURRENCY,
        visibility_timeout: float | None = None,
        poll_interval: float | None = None,
        tick_interval: float = defaults.TICK_INTERVAL,
        grace_period: float = defaults.GRACE_PERIOD,
        cancel_grace: float = defaults.CANCEL_GRACE,
        handler_timeout: float | None = defaults.HANDLER_TIMEOUT,
        report_interval: float | None = None,
        report: Callable[[str, WorkerStats], None] | None = None,
        vacuum_interval: float | None = defaults.VACUUM_INTERVAL,
        pooler: bool = False,
        metrics_port: int | None = None,
        metrics_host: str = defaults.METRICS_HOST,
        housekeeping: bool = True,
    ) -> None:
        """
        Args:
            namespaces: the namespaces served, or a mapping of each to its weight (1 to 1000,
                else 1): while several have jobs, each holds its part of the slots by weight.
            concurrency: how many jobs run at once, in all namespaces together.
            report_interval, report: call ``report(namespace, stats)`` this often (seconds)
                for each namespace, with the counters of its worker.
            metrics_port, metrics_host: serve every namespace's Prometheus metrics on one
                endpoint while :meth:`run` runs, each series labelled with its namespace
                (``postkit.worker.prometheus``; ``postkit_worker_concurrency`` is the shared
                slots, in each namespace's series).

            The other arguments are :class:`~postkit.worker.Worker`'s, for the worker of each
            namespace (``worker_id`` is the same in each namespace's registry).

        Raises:
            ValueError: no namespace, one listed twice or not a valid name, a weight out of
                bounds (``postkit.errors.InvalidFlowControlError``), or any of
                :class:`~postkit.worker.Worker`'s.
        """
        self.shares = NamespaceShares(concurrency, namespaces)
        self.grace_period = grace_period
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise ValueError("metrics_port must be from 0 to 65535")
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.metrics_address: tuple[str, int] | None = None
        """Where the metrics are served, (host, port), while :meth:`run` serves them."""
        self._endpoint: MetricsEndpoint | None = None
        if metrics_port is not None:
            require_prometheus_client()
            from postkit.worker.prometheus import MetricsEndpoint

            self._endpoint = MetricsEndpoint()
        self.workers = {
            namespace: Worker(
                dsn,
                handlers,
                namespace=namespace,
                queues=queues,
                worker_id=worker_id,
                concurrency=concurrency,
                prefetch=0,
                visibility_timeout=visibility_timeout,
                poll_interval=poll_interval,
                tick_interval=tick_interval,
                grace_period=grace_period,
                cancel_grace=cancel_grace,
                handler_timeout=handler_timeout,
                report_interval=report_interval,
                report=None if report is None else functools.partial(report, namespace),
                vacuum_interval=vacuum_interval,
                pooler=pooler,
                housekeeping=housekeeping,
                namespace_shares=self.shares,
                metrics_endpoint=self._endpoint,
            )
            for namespace in self.shares.weights
        }
        """The worker of each namespace, by namespace: its ``stats`` are that namespace's."""
        self._failures: list[BaseException] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        """Work in every namespace until :meth:`stop` (or SIGTERM/SIGINT, when called from
        the main thread), then shut each down gracefully. Returns after the last shutdown.

        Raises:
            postkit.errors.PostkitError: a call the worker's role may not make in one of the
                namespaces (or a missing schema); every namespace's worker shuts down first.
                With several such errors, the first.
            postkit.errors.MetricsUnavailableError: the metrics address cannot be bound;
                nothing has started.
        """
        stop_on_signals(self.stop, self.grace_period)
        if self._endpoint is not None and self.metrics_port is not None:
            self.metrics_address = self._endpoint.serve(self.metrics_host, self.metrics_port)
            logger.info(
                "serving metrics on http://%s:%d/metrics",
                *self.metrics_address,
                extra={"event": "metrics"},
            )
        try:
            self._run_workers()
        finally:
            if self._endpoint is not None:
                self._endpoint.close()
                self.metrics_address = None
        if self._failures:
            raise self._failures[0]

    def _run_workers(self) -> None:
        threads = [
            start_thread(functools.partial(self._run_one, worker), f"namespace-{namespace}")
            for namespace, worker in self.workers.items()
        ]
        logger.info(
            "shared worker started on %d namespaces: %s",
            len(self.workers),
            ", ".join(f"{name} (weight {weight})" for name, weight in self.shares.weights.items()),
            extra={"event": "shared_started", "namespaces": list(self.workers)},
        )
        for thread in threads:
            # In slices: the main thread runs the signal handlers between them.
            while thread.is_alive():
                thread.join(timeout=0.2)

    def stop(self) -> None:
        """Stop claiming in every namespace and shut down gracefully; :meth:`run` returns
        when done. Safe to call from any thread or a signal handler."""
        for worker in self.workers.values():
            worker.stop()

    def _run_one(self, worker: Worker) -> None:
        """Run ``worker``; its failure stops the others (a shared worker stops as a whole)."""
        try:
            worker.run()
        except BaseException as exc:
            with self._lock:
                self._failures.append(exc)
            self.stop()


__all__ = ["SharedWorker"]
