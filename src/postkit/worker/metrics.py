"""What a worker measures, for Prometheus.

The runtime reports each measurement to a :class:`Recorder`: the settle of a job
(``outcomes.py``), the end of a handler (``claims.py``), a settle-and-claim round trip, a
notification and a reconnect (``fetcher.py``). The base class records nothing, so a worker
without metrics pays a call of an empty method per measurement (durations are computed inside
the call, from a start time passed in) and never imports prometheus_client.
:class:`PrometheusRecorder` keeps them in a registry of its own and serves it over HTTP:

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
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal

from postkit.errors import MetricsUnavailableError
from postkit.queue import Job, Outcome
from postkit.worker.outcomes import SETTLED_OUTCOMES

if TYPE_CHECKING:
    import threading
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

    from postkit.worker.claims import Claims

Connection = Literal["claims", "listener"]
"""Which of the worker's connections came back: the claim loop's pool, or the listener's own."""

INSTALL_HINT = "pip install 'postkit[metrics]'"

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


class Recorder:
    """Where the runtime reports what it measures. This one records nothing; see
    :class:`PrometheusRecorder`. Every method may be called from any of the worker's threads."""

    def settled(self, queue: str, outcome: Outcome) -> None:
        """A job of ``queue`` was settled with ``outcome`` (one of the worker's outcomes:
        completed, retried, dead_lettered or stale)."""

    def acked(self, acks: Sequence[tuple[Job, float]], acked: set[int]) -> None:
        """A batched ack completed the jobs of ``acks`` whose ids are in ``acked``; the others
        are reported through :meth:`settled` as stale."""

    def handler_ended(self, queue: str, started: float) -> None:
        """A handler of ``queue``, started at ``started`` (time.monotonic()), returned or
        raised just now."""

    def round_trip(self, started: float, claimed: int | None) -> None:
        """A settle-and-claim call, sent at ``started`` (time.monotonic()), returned just now
        with ``claimed`` jobs (None: it only acknowledged, asking for none)."""

    def notified(self) -> None:
        """The listener received a notification."""

    def reconnected(self, connection: Connection) -> None:
        """``connection`` answered again after a failure."""

    def watch(self, claims: Claims) -> None:
        """Read the worker's running and claimed jobs from ``claims`` when measured."""


NO_METRICS = Recorder()
"""The recorder of a worker without metrics."""


def require_prometheus_client() -> None:
    """Raise unless prometheus_client can be imported.

    Raises:
        MetricsUnavailableError: it is not installed; the message says how to install it.
    """
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise MetricsUnavailableError(
            f"metrics need prometheus_client, which is not installed: {INSTALL_HINT}"
        ) from None


class PrometheusRecorder(Recorder):
    """Keeps a worker's measurements as Prometheus metrics (see the module docstring) in a
    registry of its own: two workers in one process never share a series, and each serves
    exactly its own."""

    def __init__(self, namespace: str, queues: Sequence[str], *, concurrency: int) -> None:
        """
        Raises:
            MetricsUnavailableError: prometheus_client is not installed.
        """
        require_prometheus_client()
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            GCCollector,
            Histogram,
            PlatformCollector,
            ProcessCollector,
        )

        self.namespace = namespace
        self.queues = list(queues)
        self.registry = CollectorRegistry()
        for standard in (ProcessCollector, PlatformCollector, GCCollector):
            standard(registry=self.registry)
        jobs = Counter(
            "postkit_jobs",
            "Jobs settled by this worker, by outcome.",
            ["namespace", "queue", "outcome"],
            registry=self.registry,
        )
        durations = Histogram(
            "postkit_handler_duration_seconds",
            "How long handlers ran, until they returned or raised.",
            ["namespace", "queue"],
            buckets=_HANDLER_BUCKETS,
            registry=self.registry,
        )
        # Every series exists from the start, at zero: a rate over a series that appears only
        # with its first event misses that event.
        self._jobs = {
            (queue, outcome): jobs.labels(namespace, queue, outcome.value)
            for queue in self.queues
            for outcome in SETTLED_OUTCOMES
        }
        self._durations = {queue: durations.labels(namespace, queue) for queue in self.queues}
        self._round_trips = Histogram(
            "postkit_claim_round_trip_seconds",
            "How long each settle-and-claim call took: the batched ack and the claim in one "
            "statement, and a pull of each further queue tried.",
            ["namespace"],
            buckets=_ROUND_TRIP_BUCKETS,
            registry=self.registry,
        ).labels(namespace)
        self._batches = Histogram(
            "postkit_claim_batch_size",
            "Jobs claimed per settle-and-claim call that asked for jobs.",
            ["namespace"],
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        ).labels(namespace)
        self._notifications = Counter(
            "postkit_notifications",
            "Notifications (LISTEN/NOTIFY) that woke the worker's listener.",
            ["namespace"],
            registry=self.registry,
        ).labels(namespace)
        reconnects = Counter(
            "postkit_reconnects",
            "Times a connection of the worker answered again after a failure: the claim "
            "loop's pool (claims) or the listener's own connection (listener).",
            ["namespace", "connection"],
            registry=self.registry,
        )
        self._reconnects = {
            connection: reconnects.labels(namespace, connection)
            for connection in ("claims", "listener")
        }
        Gauge(
            "postkit_worker_concurrency",
            "How many handlers the worker runs at once, at most.",
            ["namespace"],
            registry=self.registry,
        ).labels(namespace).set(concurrency)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

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

    def notified(self) -> None:
        self._notifications.inc()

    def reconnected(self, connection: Connection) -> None:
        self._reconnects[connection].inc()

    def watch(self, claims: Claims) -> None:
        self.registry.register(_ClaimsCollector(self.namespace, self.queues, claims))

    # ---------------------------------------------------------------------------------------
    # Serving.
    # ---------------------------------------------------------------------------------------

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serve the registry at ``http://host:port/metrics`` (any path serves it) on a daemon
        thread, until :meth:`close`; port 0 takes a free one. Returns the address bound.

        Raises:
            MetricsUnavailableError: the address cannot be bound (in use, not this host's).
        """
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsUnavailableError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        return host, int(self._server.server_port)

    def close(self) -> None:
        """Stop serving and free the port (within half a second: the server's poll)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None


class _ClaimsCollector:
    """The worker's running and claimed jobs per queue, read from its claims at each scrape,
    so that the claim path never updates a gauge."""

    def __init__(self, namespace: str, queues: Sequence[str], claims: Claims) -> None:
        self.namespace = namespace
        self.queues = list(queues)
        self.claims = claims

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        claims = self.claims
        with claims.lock:
            claimed = Tally(job.queue for job in claims.in_flight.values())
            running = Tally(
                claims.in_flight[job_id].queue
                for job_id in claims.started
                if job_id in claims.in_flight
            )
        yield from self._families(running, claimed)

    def _families(
        self, running: Tally[str] | None = None, claimed: Tally[str] | None = None
    ) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        for name, help_text, counts in (
            ("postkit_jobs_running", "Jobs whose handler runs in this worker.", running),
            (
                "postkit_jobs_claimed",
                "Jobs this worker holds claimed: running, or waiting for a handler (prefetched).",
                claimed,
            ),
        ):
            family = GaugeMetricFamily(name, help_text, labels=["namespace", "queue"])
            if counts is not None:
                for queue in self.queues:
                    family.add_metric([self.namespace, queue], counts[queue])
            yield family


__all__ = [
    "INSTALL_HINT",
    "NO_METRICS",
    "Connection",
    "PrometheusRecorder",
    "Recorder",
    "require_prometheus_client",
]
