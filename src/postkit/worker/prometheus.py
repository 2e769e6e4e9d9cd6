"""A worker's metrics for Prometheus: :class:`PrometheusRecorder`, the
:class:`~postkit.worker.metrics.Recorder` of a worker given a ``metrics_port``, and the HTTP
server that serves them. Imported only then: it imports prometheus_client.

=========================================== ========= ======================================
metric                                      type      labels
=========================================== ========= ======================================
``postkit_jobs_total``                      counter   namespace, queue, outcome (completed,
                                                      retried, dead_lettered, stale)
``postkit_handler_duration_seconds``        histogram namespace, queue
``postkit_claim_round_trip_seconds``        histogram namespace
``postkit_claim_batch_size``                histogram namespace
``postkit_notifications_total``             counter   namespace
``postkit_reconnects_total``                counter   namespace, connection (claims,
                                                      listener)
``postkit_jobs_running``                    gauge     namespace, queue
``postkit_jobs_claimed``                    gauge     namespace, queue
``postkit_worker_concurrency``              gauge     namespace
=========================================== ========= ======================================

and prometheus_client's process, platform and garbage-collector metrics. Every label value
is the worker's namespace, one of its queues or one of a fixed set: never a job id or a worker
id (Prometheus adds the target's ``instance``), so a worker's series are bounded by its queues.

A :class:`MetricsEndpoint` holds the metric families and serves them; each worker's
:class:`PrometheusRecorder` writes its namespace's series into one. A worker with a
``metrics_port`` has an endpoint of its own; a shared worker's namespaces share one.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from postkit.errors import MetricsUnavailableError
from postkit.queue import Job, Outcome
from postkit.worker.claims import Claims
from postkit.worker.metrics import Connection, Recorder
from postkit.worker.outcomes import SETTLED_OUTCOMES
from postkit.worker.threads import start_thread
from postkit.worker.workflow import STEP_KINDS

# A handler runs for a millisecond or for an hour (the default handler timeout).
_HANDLER_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0),
)
# A round trip takes a fraction of a millisecond on a quiet local server, seconds when the
# server is overloaded or far away.
_ROUND_TRIP_BUCKETS = (
    *(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
    *(0.25, 0.5, 1.0, 2.5, 5.0),
)
# Up to the worker's capacity (concurrency plus prefetch); 0 is a look that found nothing.
_BATCH_BUCKETS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)
_STOP_POLL = 0.1
"""Seconds between the metrics server's looks at whether it was asked to stop."""


class MetricsEndpoint:
    """Postkit's metric families (see the module docstring) in a registry of their own, and
    the HTTP server that serves them: one worker's, or every namespace's of a shared worker.
    Each :class:`PrometheusRecorder` recording into it writes the series of its namespace."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        for standard in (ProcessCollector, PlatformCollector, GCCollector):
            standard(registry=self.registry)
        self.jobs = Counter(
            "postkit_jobs",
            "Jobs settled by this worker, by outcome.",
            ["namespace", "queue", "outcome"],
            registry=self.registry,
        )
        self.durations = Histogram(
            "postkit_handler_duration_seconds",
            "How long handlers ran, until they returned or raised.",
            ["namespace", "queue"],
            buckets=_HANDLER_BUCKETS,
            registry=self.registry,
        )
        self.round_trips = Histogram(
            "postkit_claim_round_trip_seconds",
            "How long each settle-and-claim call took: the batched ack and the claim in one "
            "statement, and a pull of each further queue tried.",
            ["namespace"],
            buckets=_ROUND_TRIP_BUCKETS,
            registry=self.registry,
        )
        self.batches = Histogram(
            "postkit_claim_batch_size",
            "Jobs claimed per settle-and-claim call that asked for jobs.",
            ["namespace"],
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.steps = Counter(
            "postkit_workflow_steps",
            "Steps of workflow runs this worker recorded, by kind: step (at least once), "
            "transaction (exactly once), sleep, wait (a wait for an event, its deadline and "
            "its outcome), map (its jobs pushed, and their results).",
            ["namespace", "queue", "kind"],
            registry=self.registry,
        )
        self.notifications = Counter(
            "postkit_notifications",
            "Notifications (LISTEN/NOTIFY) that woke the worker's listener.",
            ["namespace"],
            registry=self.registry,
        )
        self.reconnects = Counter(
            "postkit_reconnects",
            "Times a connection of the worker answered again after a failure: the claim "
            "loop's pool (claims) or the listener's own connection (listener).",
            ["namespace", "connection"],
            registry=self.registry,
        )
        self.concurrency = Gauge(
            "postkit_worker_concurrency",
            "How many handlers the worker runs at once, at most.",
            ["namespace"],
            registry=self.registry,
        )
        self.claims = _ClaimsCollector()
        self.registry.register(self.claims)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serve the registry at ``http://host:port/metrics`` (any path serves it) on a daemon
        thread, until :meth:`close`; port 0 takes a free one. Returns the address bound.

        The exposition is prometheus_client's WSGI app; the server is the standard library's,
        as in prometheus_client's own ``start_http_server``, but it looks whether it was asked
        to stop every tenth of a second rather than every half, so as not to hold up the
        worker's stop.

        Raises:
            MetricsUnavailableError: the address cannot be bound (in use, not this host's).
        """
        try:
            server = make_server(
                host,
                port,
                make_wsgi_app(self.registry),
                _server_class(host, port),
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            raise MetricsUnavailableError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        self._server = server
        self._thread = start_thread(
            functools.partial(server.serve_forever, poll_interval=_STOP_POLL), "metrics"
        )
        return host, int(server.server_port)

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None


class PrometheusRecorder(Recorder):
    """Keeps the measurements of a worker of one namespace as Prometheus metrics (see the
    module docstring), in an endpoint of its own unless given one: two workers in one process
    never share a series."""

    def __init__(
        self,
        namespace: str,
        queues: Sequence[str],
        *,
        concurrency: int,
        endpoint: MetricsEndpoint | None = None,
    ) -> None:
        self.namespace = namespace
        self.queues = list(queues)
        self.endpoint = endpoint or MetricsEndpoint()
        metrics = self.endpoint
        # Every series exists from the start, at zero: a rate over a series that appears only
        # with its first event misses that event.
        self._jobs = {
            (queue, outcome): metrics.jobs.labels(namespace, queue, outcome.value)
            for queue in self.queues
            for outcome in SETTLED_OUTCOMES
        }
        self._durations = {
            queue: metrics.durations.labels(namespace, queue) for queue in self.queues
        }
        self._round_trips = metrics.round_trips.labels(namespace)
        self._batches = metrics.batches.labels(namespace)
        self._steps = {
            (queue, kind): metrics.steps.labels(namespace, queue, kind)
            for queue in self.queues
            for kind in STEP_KINDS
        }
        self._notifications = metrics.notifications.labels(namespace)
        self._reconnects = {
            connection: metrics.reconnects.labels(namespace, connection)
            for connection in ("claims", "listener")
        }
        metrics.concurrency.labels(namespace).set(concurrency)

    def settled(self, queue: str, outcome: Outcome) -> None:
        self._jobs[queue, outcome].inc()

    def acked(self, acks: Sequence[tuple[Job, float]], acked: set[int]) -> None:
        for queue, count in Tally(job.queue for job, _ in acks if job.id in acked).items():
            self._jobs[queue, Outcome.COMPLETED].inc(count)

    def handler_ended(self, queue: str, started: float) -> None:
        self._durations[queue].observe(time.monotonic() - started)

    def round_trip(self, started: float, claimed: int | None) -> None:
        self._round_trips.observe(time.monotonic() - started)
        if claimed is not None:
            self._batches.observe(claimed)

    def step_recorded(self, queue: str, kind: str) -> None:
        self._steps[queue, kind].inc()

    def notified(self) -> None:
        self._notifications.inc()

    def reconnected(self, connection: Connection) -> None:
        self._reconnects[connection].inc()

    def watch(self, claims: Claims) -> None:
        self.endpoint.claims.watch(self.namespace, self.queues, claims)


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per scrape, so that a slow scraper never holds up another."""

    daemon_threads = True


def _server_class(host: str, port: int) -> type[_Server]:
    """The server class for ``host``'s address family (IPv4 or IPv6).

    Raises:
        OSError: ``host`` does not resolve.
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return type("_Server", (_Server,), {"address_family": family[0][0]})


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape, every few seconds, is not worth a line of the worker's output."""


_CLAIM_GAUGES = (
    ("postkit_jobs_running", "Jobs whose handler runs in this worker."),
    (
        "postkit_jobs_claimed",
        "Jobs this worker holds claimed: running, or waiting for a handler (prefetched).",
    ),
)
"""The gauges read from the claims, in the order of ``Claims.counts_by_queue``."""


class _ClaimsCollector:
    """The running and claimed jobs per queue of every namespace watched, read from each
    worker's claims at each scrape, so that the claim path never updates a gauge."""

    def __init__(self) -> None:
        self._watched: list[tuple[str, list[str], Claims]] = []

    def watch(self, namespace: str, queues: Sequence[str], claims: Claims) -> None:
        self._watched.append((namespace, list(queues), claims))

    def describe(self) -> Iterable[Metric]:
        return [self._family(name, text, []) for name, text in _CLAIM_GAUGES]

    def collect(self) -> Iterator[Metric]:
        counted = [
            (namespace, queues, claims.counts_by_queue())
            for namespace, queues, claims in self._watched
        ]
        for position, (name, text) in enumerate(_CLAIM_GAUGES):
            yield self._family(
                name,
                text,
                [(namespace, queues, counts[position]) for namespace, queues, counts in counted],
            )

    @staticmethod
    def _family(
        name: str, text: str, counted: list[tuple[str, list[str], Tally[str]]]
    ) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, text, labels=["namespace", "queue"])
        for namespace, queues, counts in counted:
            for queue in queues:
                family.add_metric([namespace, queue], counts[queue])
        return family


__all__ = ["MetricsEndpoint", "PrometheusRecorder"]
