"""A worker's Prometheus metrics (``Worker(metrics_port=...)``), scraped over HTTP from a
worker running on a thread against the real server, parsed with prometheus_client's parser.

Each count is checked against what the worker did: its own stats, and the jobs pushed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postkit.errors import MetricsUnavailableError, PermanentError, RetryLater
from postkit.queue import Job, QueueClient
from postkit.worker import Handlers, Worker
from tests.scrape import scrape, value, values
from tests.signals import wait_until
from tests.threads import QUIET, worker_threads

Q = "work"
ASYNC_Q = "async_work"
StartWorker = Callable[..., Worker]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker_dsn(dsn: str, namespace: str) -> str:
    """The server under test, under an application_name that marks this test's workers."""
    return psycopg.conninfo.make_conninfo(dsn, application_name=f"pk-{namespace}")


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def start_worker(worker_dsn: str, namespace: str) -> Iterator[StartWorker]:
    """Start workers serving metrics on a free port, each on a thread, and wait until they
    serve; each is stopped and must have shut down after the test. The fallback poll and the
    tick are far longer than any test waits."""

    def start(run: Callable[[Worker], Worker], handlers: Any, **options: Any) -> Worker:
        worker = run(
            Worker(
                worker_dsn, handlers, namespace=namespace, metrics_port=0, **{**QUIET, **options}
            )
        )
        wait_until(lambda: worker.metrics_address, "the worker to serve its metrics")
        return worker

    with worker_threads() as run:
        yield lambda handlers, **options: start(run, handlers, **options)


def url(worker: Worker) -> str:
    assert worker.metrics_address is not None
    host, port = worker.metrics_address
    return f"http://{host}:{port}/metrics"


def wait_until_listening(monitor: psycopg.Connection[Any], worker_dsn: str) -> None:
    """Until the worker's listener waits for a notification (its last statement, before the
    wait, asks when the next job falls due)."""
    application = psycopg.conninfo.conninfo_to_dict(worker_dsn)["application_name"]
    wait_until(
        lambda: monitor.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'"
            " AND query LIKE '%%next_run_at%%'",
            (application,),
        ).fetchone(),
        "the worker to start waiting on its listener",
    )


def test_the_endpoint_counts_each_outcome_by_queue_and_times_each_handler_and_claim(
    start_worker: StartWorker, client: QueueClient, namespace: str
) -> None:
    handlers = Handlers()

    @handlers.register(Q)
    def work(job: Job) -> None:
        if job.payload == "retry":
            raise RetryLater("later", delay=3600)  # not again within the test
        if job.payload == "fail":
            raise PermanentError("never")

    @handlers.register(ASYNC_Q)
    async def async_work(job: Job) -> None:
        await asyncio.sleep(0)

    worker = start_worker(handlers, concurrency=3)
    for payload, count in (("ok", 5), ("retry", 3), ("fail", 2)):
        for _ in range(count):
            client.push(Q, payload)
    for _ in range(2):
        client.push(ASYNC_Q, "ok")
    wait_until(lambda: worker.stats.processed == 12, "the worker to settle every job")

    samples = scrape(url(worker))
    jobs = values(samples, "postkit_jobs_total", "outcome", namespace=namespace, queue=Q)
    assert jobs == {"completed": 5, "retried": 3, "dead_lettered": 2, "stale": 0}
    assert values(samples, "postkit_jobs_total", "outcome", queue=ASYNC_Q) == {
        "completed": 2,
        "retried": 0,
        "dead_lettered": 0,
        "stale": 0,
    }
    durations = "postkit_handler_duration_seconds_count"
    assert value(samples, durations, namespace=namespace, queue=Q) == 10
    assert value(samples, durations, namespace=namespace, queue=ASYNC_Q) == 2
    assert value(samples, "postkit_handler_duration_seconds_sum", queue=Q) > 0
    # Each job was claimed once, by round trips that each asked for jobs (at least one).
    assert value(samples, "postkit_claim_batch_size_sum", namespace=namespace) == 12
    batches = value(samples, "postkit_claim_batch_size_count", namespace=namespace)
    assert batches >= 1
    assert value(samples, "postkit_claim_round_trip_seconds_count", namespace=namespace) >= batches
    assert value(samples, "postkit_claim_round_trip_seconds_sum", namespace=namespace) > 0
    assert values(samples, "postkit_jobs_running", "queue", namespace=namespace) == {
        Q: 0,
        ASYNC_Q: 0,
    }
    assert value(samples, "postkit_worker_concurrency", namespace=namespace) == 3
    assert value(samples, "process_resident_memory_bytes") > 0


def test_the_running_and_claimed_gauges_show_the_jobs_a_worker_holds(
    start_worker: StartWorker, client: QueueClient, namespace: str
) -> None:
    began = threading.Semaphore(0)
    release = threading.Event()

    def slow(job: Job) -> None:
        began.release()
        release.wait(timeout=15)

    worker = start_worker({Q: slow}, concurrency=2, prefetch=2)
    for _ in range(4):
        client.push(Q, {})
    for _ in range(2):  # two handlers run; the two other jobs wait, prefetched
        assert began.acquire(timeout=15), "two handlers never started"
    try:
        samples = wait_until(
            lambda: (
                (found := scrape(url(worker)))
                and value(found, "postkit_jobs_claimed", queue=Q) == 4
                and found
            ),
            "the worker to hold the four jobs",
        )
        assert value(samples, "postkit_jobs_running", namespace=namespace, queue=Q) == 2
    finally:
        release.set()
    wait_until(lambda: worker.stats.completed == 4, "the worker to settle every job")
    samples = scrape(url(worker))
    assert value(samples, "postkit_jobs_running", queue=Q) == 0
    assert value(samples, "postkit_jobs_claimed", queue=Q) == 0


def test_a_notification_that_wakes_the_worker_is_counted_once(
    start_worker: StartWorker,
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
    worker_dsn: str,
    namespace: str,
) -> None:
    worker = start_worker({Q: lambda job: None})
    wait_until_listening(connect(autocommit=True), worker_dsn)
    assert value(scrape(url(worker)), "postkit_notifications_total", namespace=namespace) == 0

    client.push(Q, {})
    wait_until(lambda: worker.stats.completed == 1, "the pushed job to be acked")

    # The listener's short re-looks after its wake-up request may find the job before the
    # notification is read; the notification is then read, and counted, at its next wait.
    wait_until(
        lambda: value(scrape(url(worker)), "postkit_notifications_total", namespace=namespace) >= 1,
        "the notification to be counted",
    )
    assert value(scrape(url(worker)), "postkit_notifications_total", namespace=namespace) == 1


def test_connections_that_come_back_after_a_loss_are_counted_as_reconnects(
    start_worker: StartWorker,
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
    worker_dsn: str,
    namespace: str,
) -> None:
    worker = start_worker({Q: lambda job: None})
    client.push(Q, {})
    wait_until(lambda: worker.stats.completed == 1, "the first job to be acked")
    admin = connect(autocommit=True)
    wait_until_listening(admin, worker_dsn)
    reconnects = values(scrape(url(worker)), "postkit_reconnects_total", "connection")
    assert reconnects == {"claims": 0, "listener": 0}

    application = psycopg.conninfo.conninfo_to_dict(worker_dsn)["application_name"]
    admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (application,),
    )
    client.push(Q, {})
    wait_until(lambda: worker.stats.completed == 2, "the worker to come back and ack a job", 20)

    def reconnected() -> dict[str, float]:
        return values(
            scrape(url(worker)), "postkit_reconnects_total", "connection", namespace=namespace
        )

    wait_until(
        lambda: all(reconnected().values()), "the claim loop's pool and the listener to reconnect"
    )
    assert reconnected() == {"claims": 1, "listener": 1}


def test_stop_frees_the_metrics_port(start_worker: StartWorker) -> None:
    worker = start_worker({Q: lambda job: None})
    assert worker.metrics_address is not None
    host, port = worker.metrics_address
    worker.stop()
    wait_until(lambda: worker.metrics_address is None, "run() to stop serving")

    with pytest.raises(ConnectionRefusedError), socket.create_connection((host, port), 1):
        pass


def test_a_port_in_use_is_a_clear_error_and_nothing_starts(
    worker_dsn: str, namespace: str, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = Worker(worker_dsn, {Q: lambda job: None}, namespace=namespace, metrics_port=port)

        with pytest.raises(
            MetricsUnavailableError, match=f"cannot serve metrics on 127.0.0.1:{port}"
        ):
            worker.run()

    assert worker.metrics_address is None
    application = psycopg.conninfo.conninfo_to_dict(worker_dsn)["application_name"]
    opened = connect(autocommit=True).execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
    )
    assert opened.fetchone() == (0,), "the worker connected although it could not serve"


def test_metrics_without_prometheus_client_fail_at_once_naming_the_extra(
    worker_dsn: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError

    with pytest.raises(MetricsUnavailableError, match=r"pip install 'postkit-queue\[metrics\]'"):
        Worker(worker_dsn, {Q: lambda job: None}, namespace=namespace, metrics_port=9100)


def test_a_worker_without_metrics_never_imports_prometheus_client(
    worker_dsn: str, namespace: str
) -> None:
    script = textwrap.dedent(
        f"""
        import sys, threading
        import psycopg
        import postkit.cli
        from postkit.queue import QueueClient
        from postkit.worker import Worker

        ran = threading.Event()
        worker = Worker({worker_dsn!r}, {{"work": lambda job: ran.set()}},
                        namespace={namespace!r}, poll_interval=30, tick_interval=60)
        thread = threading.Thread(target=worker.run)
        thread.start()
        with psycopg.connect({worker_dsn!r}) as connection:
            QueueClient(connection.cursor(), namespace={namespace!r}).push("work", {{}})
        assert ran.wait(15), "the job never ran"
        worker.stop()
        thread.join(30)
        assert worker.stats.completed == 1
        print(sorted(name for name in sys.modules if name.startswith("prometheus_client")))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_workflows_steps_are_counted_by_kind(
    start_worker: StartWorker, client: QueueClient
) -> None:
    handlers = Handlers()

    @handlers.register(Q, workflow=True)
    def run(job: Job, ctx: Any) -> None:
        ctx.step("charge", lambda: 1)
        ctx.transaction("record", lambda cursor: 2)

    worker = start_worker(handlers)
    client.push(Q, {})
    wait_until(lambda: worker.stats.completed == 1, "the run to complete")

    samples = scrape(url(worker))
    assert value(samples, "postkit_workflow_steps_total", queue=Q, kind="step") == 1
    assert value(samples, "postkit_workflow_steps_total", queue=Q, kind="transaction") == 1
    assert value(samples, "postkit_workflow_steps_total", queue=Q, kind="sleep") == 0
