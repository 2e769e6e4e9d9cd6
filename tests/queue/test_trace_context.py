"""A job's trace context: what a push records from the current OpenTelemetry span, what the SQL
module accepts as one, and where it goes with the job (dead letters, the completed archive,
redrive). The worker's side, the spans that link to it, is in tests/worker/test_tracing.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import trace

from postkit import errors
from postkit.queue import QueueClient, limits, protocol

Q = "emails"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client of the test's namespace."""
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def tracer(spans: Any) -> trace.Tracer:
    return trace.get_tracer("tests")


def traceparent_of(span: trace.Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def stored(client: QueueClient, job_id: int) -> Any:
    """The job's trace_context as the jobs table holds it (None: SQL NULL)."""
    client.cursor.execute(
        "SELECT trace_context FROM postkit_queue.jobs WHERE namespace = %s AND id = %s",
        (client.namespace, job_id),
    )
    return client.cursor.fetchone()[0]


def test_a_push_inside_a_span_records_the_spans_trace_context(
    client: QueueClient, tracer: trace.Tracer
) -> None:
    with tracer.start_as_current_span("request") as span:
        job_id = client.push(Q, {"n": 1})
    assert job_id is not None

    job = client.get_job(job_id)

    assert job is not None
    assert job.trace_context == {"traceparent": traceparent_of(span)}
    assert stored(client, job_id) == {"traceparent": traceparent_of(span)}


def test_a_push_outside_any_span_stores_null(client: QueueClient, tracer: trace.Tracer) -> None:
    job_id = client.push(Q, {"n": 1})
    assert job_id is not None

    job = client.get_job(job_id)

    assert job is not None
    assert job.trace_context is None
    assert stored(client, job_id) is None


def test_every_job_of_a_batch_records_the_spans_trace_context(
    client: QueueClient, tracer: trace.Tracer
) -> None:
    with tracer.start_as_current_span("request") as span:
        ids = client.push_batch(Q, [1, 2, 3], unique_keys=["a", None, "c"])
    untraced = client.push_batch(Q, [4])

    assert [stored(client, job_id) for job_id in ids] == [{"traceparent": traceparent_of(span)}] * 3
    assert [stored(client, job_id) for job_id in untraced] == [None]


def test_a_pulled_job_carries_its_trace_context(client: QueueClient, tracer: trace.Tracer) -> None:
    with tracer.start_as_current_span("request") as span:
        client.push(Q, {"n": 1})

    job = client.pull(Q, worker_id="w")

    assert job is not None
    assert job.trace_context == {"traceparent": traceparent_of(span)}


def test_a_tracestate_too_big_for_a_job_is_dropped_and_the_push_goes_through(
    client: QueueClient, tracer: trace.Tracer
) -> None:
    # 32 entries of 36 characters: a valid W3C tracestate of 1,183 characters.
    state = trace.TraceState([(f"vendor{n:02d}", "x" * 26) for n in range(32)])
    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            0x0AF7651916CD43DD8448EB211C80319C,
            0xB7AD6B7169203331,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            trace_state=state,
        )
    )
    small = trace.NonRecordingSpan(
        trace.SpanContext(
            0x0AF7651916CD43DD8448EB211C80319C,
            0xB7AD6B7169203331,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            trace_state=trace.TraceState([("vendor", "value")]),
        )
    )

    with trace.use_span(parent):
        big_id = client.push(Q, {"n": 1})
    with trace.use_span(small):
        small_id = client.push(Q, {"n": 2})

    assert big_id is not None and small_id is not None
    assert stored(client, big_id) == {"traceparent": TRACEPARENT}
    assert stored(client, small_id) == {"traceparent": TRACEPARENT, "tracestate": "vendor=value"}


@pytest.mark.parametrize(
    "context",
    [
        pytest.param("[]", id="an array"),
        pytest.param('["traceparent"]', id="an array of strings"),
        pytest.param('"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"', id="a string"),
        pytest.param("null", id="JSON null"),
        pytest.param('{"traceparent": 1}', id="a number value"),
        pytest.param('{"traceparent": null}', id="a null value"),
        pytest.param('{"traceparent": {"id": "x"}}', id="an object value"),
        pytest.param('{"traceparent": ["x"]}', id="an array value"),
        pytest.param(json.dumps({"traceparent": "x" * 1100}), id="over 1 KiB"),
        pytest.param(
            json.dumps({f"k{n}": "v" for n in range(200)}), id="over 1 KiB in many entries"
        ),
    ],
)
def test_push_refuses_a_trace_context_that_is_not_a_small_object_of_strings(
    conn: psycopg.Connection, namespace: str, context: str
) -> None:
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            "SELECT postkit_queue.push(%s, %s, '{}', p_trace_context => %s::jsonb)",
            (namespace, Q, context),
        )

    assert raised.value.sqlstate == "PKQ15"
    assert isinstance(errors.translate_error(raised.value), errors.InvalidTraceContextError)


@pytest.mark.parametrize(
    ("contexts", "message"),
    [
        pytest.param(
            '[{"traceparent": "x"}, {"traceparent": 1}]', "trace_contexts[2]", id="a bad entry"
        ),
        pytest.param('[{"traceparent": "x"}]', "array of 1 for 2 payloads", id="too few"),
        pytest.param('{"traceparent": "x"}', "object for 2 payloads", id="not an array"),
    ],
)
def test_push_batch_refuses_trace_contexts_that_are_not_one_per_payload(
    conn: psycopg.Connection, namespace: str, contexts: str, message: str
) -> None:
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            "SELECT * FROM postkit_queue.push_batch(%s, %s, '[1, 2]', p_trace_contexts => %s)",
            (namespace, Q, contexts),
        )

    assert raised.value.sqlstate == "PKQ15"
    assert message in str(raised.value)


def test_push_batch_gives_each_payload_its_own_trace_context(
    conn: psycopg.Connection, namespace: str
) -> None:
    ids = conn.execute(
        "SELECT id FROM postkit_queue.push_batch(%s, %s, '[1, 2, 3]', p_trace_contexts => %s)"
        " ORDER BY ordinality",
        (namespace, Q, '[{"traceparent": "a"}, null, {"traceparent": "c"}]'),
    ).fetchall()

    rows = conn.execute(
        "SELECT trace_context FROM postkit_queue.jobs WHERE namespace = %s AND id = ANY (%s)"
        " ORDER BY id",
        (namespace, [job_id for (job_id,) in ids]),
    ).fetchall()

    assert rows == [({"traceparent": "a"},), (None,), ({"traceparent": "c"},)]


@pytest.mark.parametrize(
    "context",
    [
        pytest.param({"traceparent": 1}, id="a number value"),
        pytest.param(["traceparent", TRACEPARENT], id="a list"),
        pytest.param({"traceparent": "\x00"}, id="a NUL"),
        pytest.param({"traceparent": "\ud800"}, id="a lone surrogate"),
        pytest.param({"traceparent": "x" * limits.TRACE_CONTEXT_BYTES}, id="over 1 KiB"),
    ],
)
def test_the_sdk_refuses_a_bad_trace_context_before_sending_anything(context: Any) -> None:
    with pytest.raises(errors.InvalidTraceContextError):
        protocol.lifecycle.push(
            "ns",
            Q,
            {},
            delay=None,
            run_at=None,
            priority=0,
            max_attempts=None,
            unique_key=None,
            backoff_base=None,
            backoff_cap=None,
            trace_context=context,
        )


@pytest.fixture
def owner(connect: Callable[..., psycopg.Connection[Any]]) -> psycopg.Connection[Any]:
    """The schema's owner (the test server's superuser), which writes the tables directly."""
    return connect(autocommit=True)


@pytest.mark.parametrize(
    "garbage",
    ['["traceparent"]', '"x"', '{"traceparent": 5}', '{"traceparent": {"a": "b"}}'],
)
def test_a_stored_context_that_is_not_an_object_of_strings_reads_as_none(
    client: QueueClient, owner: psycopg.Connection[Any], garbage: str
) -> None:
    job_id = client.push(Q, {"n": 1})
    owner.execute(
        "UPDATE postkit_queue.jobs SET trace_context = %s::jsonb WHERE namespace = %s AND id = %s",
        (garbage, client.namespace, job_id),
    )
    assert stored(client, job_id) == json.loads(garbage)

    job = client.get_job(job_id)
    pulled = client.pull(Q, worker_id="w")

    assert job is not None and job.trace_context is None
    assert pulled is not None and pulled.trace_context is None


@pytest.fixture
def traced_job(client: QueueClient, tracer: trace.Tracer) -> Iterator[tuple[int, dict[str, str]]]:
    with tracer.start_as_current_span("request") as span:
        job_id = client.push(Q, {"n": 1}, max_attempts=1)
    assert job_id is not None
    yield job_id, {"traceparent": traceparent_of(span)}


def test_a_dead_letter_and_its_redriven_job_keep_the_trace_context(
    client: QueueClient, traced_job: tuple[int, dict[str, str]]
) -> None:
    job_id, context = traced_job
    job = client.pull(Q, worker_id="w")
    assert job is not None
    client.fail(job, error="boom")

    [dead] = client.dead_letters(Q)
    [redriven] = client.redrive(job_ids=[job_id])
    assert redriven.new_job_id is not None
    new_job = client.get_job(redriven.new_job_id)
    dead_job = client.get_job(job_id)

    assert dead.trace_context == context
    assert dead_job is not None and dead_job.trace_context == context
    assert new_job is not None and new_job.trace_context == context


def test_a_completed_job_archived_by_its_queue_keeps_the_trace_context(
    client: QueueClient, traced_job: tuple[int, dict[str, str]]
) -> None:
    job_id, context = traced_job
    client.configure_queue(Q, retain_completed=3600)
    job = client.pull(Q, worker_id="w")
    assert job is not None
    assert client.ack(job)

    client.cursor.execute(
        "SELECT trace_context FROM postkit_queue.completed_jobs"
        " WHERE namespace = %s AND job_id = %s",
        (client.namespace, job_id),
    )

    assert client.cursor.fetchone() == (context,)


def test_the_job_listing_shows_the_trace_context(
    client: QueueClient, traced_job: tuple[int, dict[str, str]]
) -> None:
    _, context = traced_job

    [job] = client.jobs(Q, "pending")

    assert job.trace_context == context
