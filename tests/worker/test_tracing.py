"""The worker runs each handler in an OpenTelemetry span linked to the span that pushed the job,
so a trace crosses the queue; and without OpenTelemetry it does no tracing work at all.

The tracer provider is the session's (tests/conftest.py, ``spans``): a real SDK provider whose
finished spans an in-memory exporter keeps. A span ends once its handler returned and, for a
failure, once the job was settled: the tests wait for the finished span.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from psycopg import sql

from postkit.errors import PermanentError
from postkit.queue import Job, QueueClient
from postkit.worker import Handlers, Worker
from tests.signals import wait_until
from tests.threads import QUIET, worker_threads

Q = "traced"
StartWorker = Callable[..., Worker]
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def start_worker(dsn: str, namespace: str) -> Iterator[StartWorker]:
    """Start workers on threads (woken by notifications: polls and ticks far apart); each is
    stopped and must have shut down after the test."""
    with worker_threads() as run:
        yield lambda handlers, **options: run(
            Worker(dsn, handlers, namespace=namespace, **{**QUIET, **options})
        )


@pytest.fixture
def tracer(spans: Any) -> trace.Tracer:
    return trace.get_tracer("tests")


def push_traced(
    client: QueueClient, tracer: trace.Tracer, **options: Any
) -> tuple[int, trace.SpanContext]:
    """Push a job inside a span of its own: the job's id, and that span's context."""
    with tracer.start_as_current_span("request") as span:
        job_id = client.push(Q, {"n": 1}, **options)
    assert job_id is not None
    return job_id, span.get_span_context()


def handler_span(spans: Any, job_id: int) -> ReadableSpan:
    """The finished span of the (first) run of job ``job_id``."""

    def find() -> ReadableSpan | None:
        return next(
            (
                span
                for span in spans.get_finished_spans()
                if span.attributes.get("messaging.message.id") == str(job_id)
            ),
            None,
        )

    return wait_until(find, f"the span of job {job_id} to end")


def assert_linked(span: ReadableSpan, pushed: trace.SpanContext) -> None:
    [link] = span.links
    assert (link.context.trace_id, link.context.span_id) == (pushed.trace_id, pushed.span_id)
    assert span.context.trace_id != pushed.trace_id, "a link, not a child of the push"
    assert span.parent is None


def test_a_handler_runs_in_a_consumer_span_linked_to_the_push(
    start_worker: StartWorker, client: QueueClient, tracer: trace.Tracer, spans: Any
) -> None:
    start_worker({Q: lambda job: None})
    job_id, pushed = push_traced(client, tracer)

    span = handler_span(spans, job_id)

    assert span.name == f"process {Q}"
    assert span.kind is trace.SpanKind.CONSUMER
    assert_linked(span, pushed)
    assert dict(span.attributes or {}) == {
        "messaging.system": "postkit",
        "messaging.destination.name": Q,
        "messaging.message.id": str(job_id),
        "messaging.operation.type": "process",
        "postkit.namespace": client.namespace,
        "postkit.attempt": 1,
        "postkit.outcome": "completed",
    }
    assert span.status.status_code is trace.StatusCode.UNSET
    assert span.instrumentation_scope is not None and span.instrumentation_scope.name == "postkit"


def test_a_retried_job_has_an_error_span_with_the_exception_and_outcome_retried(
    start_worker: StartWorker, client: QueueClient, tracer: trace.Tracer, spans: Any
) -> None:
    def explode(job: Job) -> None:
        raise ValueError("boom")

    start_worker({Q: explode})
    job_id, pushed = push_traced(client, tracer, max_attempts=5, backoff_base=3600)

    span = handler_span(spans, job_id)

    assert_linked(span, pushed)
    assert span.attributes is not None and span.attributes["postkit.outcome"] == "retried"
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.status.description == "ValueError: boom"
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "boom"


@pytest.mark.parametrize(
    ("error", "max_attempts"),
    [(PermanentError("invalid address"), 20), (ValueError("boom"), 1)],
    ids=["permanent-error", "last-attempt"],
)
def test_a_dead_lettered_job_has_an_error_span_with_outcome_dead_lettered(
    start_worker: StartWorker,
    client: QueueClient,
    tracer: trace.Tracer,
    spans: Any,
    error: Exception,
    max_attempts: int,
) -> None:
    def reject(job: Job) -> None:
        raise error

    start_worker({Q: reject})
    job_id, pushed = push_traced(client, tracer, max_attempts=max_attempts)

    span = handler_span(spans, job_id)

    assert_linked(span, pushed)
    assert span.attributes is not None and span.attributes["postkit.outcome"] == "dead_lettered"
    assert span.status.status_code is trace.StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


def test_an_async_handler_runs_in_the_span_and_its_failure_reaches_it(
    start_worker: StartWorker, client: QueueClient, tracer: trace.Tracer, spans: Any
) -> None:
    async def handle(job: Job) -> None:
        await asyncio.sleep(0)
        if job.payload["n"] == 2:
            raise ValueError("async boom")
        with trace.get_tracer("tests").start_as_current_span("inside"):
            pass

    start_worker({Q: handle})
    ok, pushed_ok = push_traced(client, tracer)
    with tracer.start_as_current_span("request") as request:
        bad = client.push(Q, {"n": 2}, max_attempts=5, backoff_base=3600)
    assert bad is not None

    ok_span, bad_span = handler_span(spans, ok), handler_span(spans, bad)

    assert_linked(ok_span, pushed_ok)
    assert ok_span.attributes is not None and ok_span.attributes["postkit.outcome"] == "completed"
    [inside] = [span for span in spans.get_finished_spans() if span.name == "inside"]
    assert inside.parent is not None and inside.parent.span_id == ok_span.context.span_id
    assert_linked(bad_span, request.get_span_context())
    assert bad_span.attributes is not None and bad_span.attributes["postkit.outcome"] == "retried"
    assert bad_span.status.description == "ValueError: async boom"


def test_the_handlers_own_spans_are_children_of_its_span(
    start_worker: StartWorker, client: QueueClient, tracer: trace.Tracer, spans: Any
) -> None:
    def handle(job: Job) -> None:
        with trace.get_tracer("tests").start_as_current_span("send email"):
            pass

    start_worker({Q: handle})
    job_id, _ = push_traced(client, tracer)

    span = handler_span(spans, job_id)
    [child] = [s for s in spans.get_finished_spans() if s.name == "send email"]

    assert child.parent is not None
    assert (child.parent.trace_id, child.parent.span_id) == (
        span.context.trace_id,
        span.context.span_id,
    )


@pytest.fixture
def table(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> Iterator[str]:
    admin = connect(autocommit=True)
    name = f"tracing_test_{namespace.replace('-', '_')}"
    admin.execute(sql.SQL("CREATE TABLE {} (job_id bigint)").format(sql.Identifier(name)))
    yield name
    admin.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))


@pytest.mark.parametrize("fails", [False, True], ids=["acked", "failing"])
def test_a_transactional_handler_runs_in_the_span_with_its_outcome(
    start_worker: StartWorker,
    client: QueueClient,
    tracer: trace.Tracer,
    spans: Any,
    table: str,
    fails: bool,
) -> None:
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def record(job: Job, cursor: psycopg.Cursor[Any]) -> None:
        cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(sql.Identifier(table)), (1,))
        if fails:
            raise RuntimeError("after the write")

    start_worker(handlers)
    job_id, pushed = push_traced(client, tracer, backoff_base=3600)

    span = handler_span(spans, job_id)

    assert_linked(span, pushed)
    assert span.attributes is not None
    assert span.attributes["postkit.outcome"] == ("retried" if fails else "completed")
    assert span.status.status_code is (trace.StatusCode.ERROR if fails else trace.StatusCode.UNSET)


def test_a_handler_past_its_timeout_ends_its_span_in_error_without_an_outcome(
    start_worker: StartWorker, client: QueueClient, tracer: trace.Tracer, spans: Any
) -> None:
    release = threading.Event()
    handlers = Handlers()

    @handlers.register(Q, timeout=0.5)
    def stuck(job: Job) -> None:
        release.wait(timeout=30)

    start_worker(handlers, concurrency=1, prefetch=0)
    job_id, pushed = push_traced(client, tracer, backoff_base=3600)
    wait_until(
        lambda: (job := client.get_job(job_id)) is not None and job.errors,
        "the stuck handler's job to be nacked",
    )
    release.set()

    span = handler_span(spans, job_id)

    assert_linked(span, pushed)
    assert span.attributes is not None and "postkit.outcome" not in span.attributes
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.status.description is not None and "past its timeout" in span.status.description


def test_a_job_pushed_outside_any_trace_runs_in_a_span_without_links(
    start_worker: StartWorker, client: QueueClient, spans: Any
) -> None:
    start_worker({Q: lambda job: None})
    job_id = client.push(Q, {"n": 1})
    assert job_id is not None

    span = handler_span(spans, job_id)

    assert span.links == ()
    assert span.attributes is not None and span.attributes["postkit.outcome"] == "completed"


@pytest.mark.parametrize(
    "garbage",
    [
        '{"traceparent": "not a traceparent", "tracestate": "=,==,"}',
        '{"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}',
        '{"traceparent": 5}',
        '["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]',
    ],
    ids=["unparseable", "all-zero-ids", "number", "array"],
)
def test_a_job_whose_stored_context_is_garbage_still_runs(
    start_worker: StartWorker,
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
    spans: Any,
    garbage: str,
) -> None:
    job_id = client.push(Q, {"n": 1})
    # Written past the SQL API, by the schema's owner (the test server's superuser).
    connect(autocommit=True).execute(
        "UPDATE postkit_queue.jobs SET trace_context = %s::jsonb WHERE namespace = %s AND id = %s",
        (garbage, client.namespace, job_id),
    )
    ran = threading.Event()
    worker = start_worker({Q: lambda job: ran.set()})

    span = handler_span(spans, job_id)

    assert ran.is_set()
    assert span.links == ()
    assert span.attributes is not None and span.attributes["postkit.outcome"] == "completed"
    wait_until(lambda: worker.stats.completed == 1, "the job to be acked")


WITHOUT_OPENTELEMETRY = textwrap.dedent(
    """
    import sys
    import threading

    import psycopg

    from postkit.queue import QueueClient
    from postkit.worker import Worker

    dsn, namespace = sys.argv[1], sys.argv[2]
    with psycopg.connect(dsn, autocommit=True) as connection:
        QueueClient(connection.cursor(), namespace=namespace).push("plain", {"n": 1})
    ran = threading.Event()
    worker = Worker(dsn, {"plain": lambda job: ran.set()}, namespace=namespace,
                    poll_interval=30, tick_interval=60)
    thread = threading.Thread(target=worker.run)
    thread.start()
    ran.wait(30)
    worker.stop()
    thread.join(30)
    print("ran" if ran.is_set() else "did not run")
    print(sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry"))
    """
)


def test_a_worker_without_opentelemetry_in_use_never_imports_it(dsn: str, namespace: str) -> None:
    """OpenTelemetry is installed here, so this proves that pushing and running a job import
    none of it: the tracing costs a dictionary lookup per push and per job."""
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENTELEMETRY, dsn, namespace],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["ran", "[]"], result.stderr
