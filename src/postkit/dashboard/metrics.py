"""The queues' gauges for the dashboard's ``/metrics``: a prometheus_client collector that
reads the queues' O(1) statistics (``QueueClient.stats``) at each scrape.

=============================================== ===================================
metric                                          labels
=============================================== ===================================
``postkit_queue_jobs``                          namespace, queue, state (pending,
                                                scheduled, waiting, running, dead,
                                                cancelled)
``postkit_queue_oldest_pending_age_seconds``    namespace, queue
``postkit_queue_paused``                        namespace, queue
``postkit_queue_counts_capped``                 namespace, queue
``postkit_queue_max_pending``                   namespace, queue (queues with a limit)
=============================================== ===================================

These are the queues' state, the same for every reader: scrape them from one dashboard, not
from every worker (whose own metrics, ``postkit.worker.prometheus``, count what each one did).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from postkit.queue.records import QueueStats

if TYPE_CHECKING:
    from postkit.dashboard.source import DashboardSource

StatsReader = Callable[[], Iterable[tuple[str, Sequence[QueueStats]]]]
"""Reads the statistics to report: for each namespace, its queues' ``stats()`` rows."""

STATES = ("pending", "scheduled", "waiting", "running", "dead", "cancelled")
"""The states ``postkit_queue_jobs`` counts, each a field of :class:`QueueStats`."""


class QueueCollector(Collector):
    """Yields the queues' gauges (see the module docstring) from what ``read`` returns, at
    each scrape. ``read`` is called once per scrape, on the scraping thread; what it raises
    (the database is down) fails the scrape, so Prometheus marks the target down instead of
    keeping stale values. Registering the collector does not call it.

        shop = QueueClient(cursor, namespace="shop")
        registry.register(QueueCollector(lambda: [("shop", shop.stats())]))
    """

    def __init__(self, read: StatsReader) -> None:
        self.read = read

    def describe(self) -> Iterable[Metric]:
        return list(_Families().all())

    def collect(self) -> Iterator[Metric]:
        families = _Families()
        for namespace, rows in self.read():
            for row in rows:
                labels = [namespace, row.queue]
                for state in STATES:
                    families.jobs.add_metric([*labels, state], getattr(row, state))
                age = row.oldest_ready_age
                families.oldest.add_metric(labels, age.total_seconds() if age else 0.0)
                families.paused.add_metric(labels, float(row.paused))
                families.capped.add_metric(labels, float(row.counts_capped))
                if row.max_pending is not None:
                    families.max_pending.add_metric(labels, row.max_pending)
        yield from families.all()


class _Families:
    """One scrape's gauge families, empty until filled."""

    def __init__(self) -> None:
        self.jobs = GaugeMetricFamily(
            "postkit_queue_jobs",
            "Jobs in the queue by state: pending (ready now), scheduled (waiting for their "
            "run_at), waiting (for their parents), running (claimed), dead (in the dead-letter "
            "queue), cancelled (kept for the queue's retain_dead). Exact up to the "
            "stats cap, then the cap (see postkit_queue_counts_capped).",
            labels=["namespace", "queue", "state"],
        )
        self.oldest = GaugeMetricFamily(
            "postkit_queue_oldest_pending_age_seconds",
            "How long the oldest ready job has waited; 0 when none is ready.",
            labels=["namespace", "queue"],
        )
        self.paused = GaugeMetricFamily(
            "postkit_queue_paused",
            "1 while the queue is paused (its jobs are not handed out), else 0.",
            labels=["namespace", "queue"],
        )
        self.capped = GaugeMetricFamily(
            "postkit_queue_counts_capped",
            "1 when the queue's job counts reached the stats cap and read as the cap, else 0.",
            labels=["namespace", "queue"],
        )

        self.max_pending = GaugeMetricFamily(
            "postkit_queue_max_pending",
            "The queue's backpressure limit (max_pending): a push that would leave more "
            "pending and scheduled jobs is refused. Only queues with a limit have one.",
            labels=["namespace", "queue"],
        )

    def all(self) -> Iterator[Metric]:
        yield from (self.jobs, self.oldest, self.paused, self.capped, self.max_pending)


def render_metrics(source: DashboardSource) -> tuple[bytes, str]:
    """The dashboard's ``/metrics`` body and its content type: the gauges of every namespace
    the dashboard shows, read now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(source.stats_by_namespace))
    return generate_latest(registry), CONTENT_TYPE_LATEST


__all__ = ["STATES", "QueueCollector", "StatsReader", "render_metrics"]
