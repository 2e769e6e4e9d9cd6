"""What a worker measures: the seam between the runtime and its metrics.

The runtime reports each measurement to a :class:`Recorder`: the settle of a job
(``outcomes.py``), the end of a handler (``claims.py``), a settle-and-claim round trip, a
notification and a reconnect (``fetcher.py``). This base class records nothing, so a worker
without metrics pays a call of an empty method per measurement (durations are computed inside
the call, from a start time passed in) and never imports prometheus_client: the Prometheus
recorder, ``prometheus.py``, is imported only by a worker given a ``metrics_port``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from postkit.errors import MetricsUnavailableError
from postkit.queue import Job, Outcome

if TYPE_CHECKING:
    from postkit.worker.claims import Claims

Connection = Literal["claims", "listener"]
"""Which of the worker's connections came back: the claim loop's pool, or the listener's own."""

INSTALL_HINT = "pip install 'postkit-queue[metrics]'"


class Recorder:
    """Where the runtime reports what it measures. This one records nothing; see
    ``postkit.worker.prometheus.PrometheusRecorder``. Every method may be called from any of
    the worker's threads."""

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

    def step_recorded(self, queue: str, kind: str) -> None:
        """A workflow run of ``queue`` recorded a step of ``kind`` (one of
        ``postkit.worker.workflow.STEP_KINDS``)."""

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


__all__ = ["INSTALL_HINT", "NO_METRICS", "Connection", "Recorder", "require_prometheus_client"]
