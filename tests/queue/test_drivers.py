"""The client works on any DB-API cursor, and every driver returns the same Python types."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

import psycopg
import psycopg2
import psycopg2.extras
import pytest
from psycopg.rows import dict_row, namedtuple_row

from postkit.queue import QueueClient

Q = "emails"
PAYLOAD = {
    "int": 42,
    "big_int": 2**53 + 1,
    "float": 1.5,
    "negative": -3,
    "true": True,
    "false": False,
    "null": None,
    "text": "名前🚀 'quoted' \\ back",
    "list": [1, "a", None, [2.25]],
    "nested": {"a": {"b": []}},
    "empty": {},
}

CursorFactory = Callable[[], Any]


@pytest.fixture
def psycopg2_connect(dsn: str) -> Iterator[Callable[[], Any]]:
    opened: list[Any] = []

    def _connect() -> Any:
        connection = psycopg2.connect(dsn)
        opened.append(connection)
        return connection

    yield _connect
    for connection in opened:
        connection.close()


@pytest.fixture(
    params=[
        "psycopg-tuple_row",
        "psycopg-dict_row",
        "psycopg-namedtuple_row",
        "psycopg2",
        "psycopg2-RealDictCursor",
    ]
)
def cursor_factory(
    request: pytest.FixtureRequest,
    connect: Callable[..., psycopg.Connection],
    psycopg2_connect: Callable[[], Any],
) -> CursorFactory:
    """New cursors of one driver and row shape, each on a connection of its own."""
    factories: dict[str, CursorFactory] = {
        "psycopg-tuple_row": lambda: connect().cursor(),
        "psycopg-dict_row": lambda: connect().cursor(row_factory=dict_row),
        "psycopg-namedtuple_row": lambda: connect().cursor(row_factory=namedtuple_row),
        "psycopg2": lambda: psycopg2_connect().cursor(),
        "psycopg2-RealDictCursor": lambda: psycopg2_connect().cursor(
            cursor_factory=psycopg2.extras.RealDictCursor
        ),
    }
    return factories[request.param]


def shape(value: Any) -> Any:
    """The Python types of a value, all the way down."""
    if isinstance(value, Mapping):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [shape(item) for item in value]
    if isinstance(value, datetime):
        return "datetime", value.utcoffset() is not None
    return type(value).__name__


VARYING = {"id", "job_id", "namespace", "claim_token", "run_at", "claimed_at", "visible_until"}
VARYING |= {"created_at", "failed_at", "at", "expires_at"}


def portable(value: Any) -> Any:
    """A value without what differs from run to run (ids, tokens, times, the namespace)."""
    if isinstance(value, Mapping):
        return {key: portable(item) for key, item in value.items() if key not in VARYING}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    return value


def lifecycle(client: QueueClient) -> dict[str, Any]:
    """Every kind of value the client returns, from one job's life."""
    job_id = client.push(Q, PAYLOAD, priority=2, unique_key="otp:42", max_attempts=3)
    first = client.pull(Q, worker_id="worker-1")
    assert first is not None
    retried = client.nack_outcome(first, error="smtp timeout", backoff=0)
    pending = client.get_job(first.id)
    second = client.pull(Q, worker_id="worker-2")
    assert second is not None
    extended = client.extend_visibility(second, extension=60)
    failed = client.fail(second, error=ValueError("no such mailbox"))
    assert job_id is not None
    return {
        "job_id": job_id,
        "pulled": first,
        "nack": retried,
        "pending": pending,
        "extend": extended,
        "fail": failed,
        "dead_job": client.get_job(job_id),
        "dead_letters": client.dead_letters(Q),
        "tick": client.tick_timeouts(),
        "policy": client.configure_queue(Q, max_attempts=5, backoff_base=1.5),
        "empty_pull": client.pull(Q),
    }


def test_push_pull_ack_round_trip(cursor_factory: CursorFactory, namespace: str) -> None:
    client = QueueClient(cursor_factory(), namespace=namespace)

    job_id = client.push(Q, PAYLOAD)
    job = client.pull(Q, worker_id="worker-1")

    assert job is not None
    assert (job.id, job.payload, job.attempts, job.worker_id) == (job_id, PAYLOAD, 1, "worker-1")
    assert client.ack(job) is True
    assert client.get_job(job.id) is None


def test_a_push_commits_with_the_callers_transaction(
    cursor_factory: CursorFactory, namespace: str
) -> None:
    producer = QueueClient(cursor_factory(), namespace=namespace)
    worker = QueueClient(cursor_factory(), namespace=namespace)
    producer.push(Q, PAYLOAD)
    assert worker.pull(Q) is None

    producer.cursor.connection.commit()

    assert worker.pull(Q) is not None


def test_every_driver_returns_what_psycopg_returns_with_the_same_types(
    cursor_factory: CursorFactory, connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    reference = lifecycle(QueueClient(connect().cursor(), namespace=f"{namespace}-reference"))

    returned = lifecycle(QueueClient(cursor_factory(), namespace=namespace))

    assert portable(returned) == portable(reference)
    assert shape(returned) == shape(reference)


def test_the_lifecycle_returns_what_the_sdk_promises(
    connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    returned = lifecycle(QueueClient(connect().cursor(), namespace=namespace))

    [letter] = returned["dead_letters"]
    assert type(returned["job_id"]) is int and returned["pulled"].payload == PAYLOAD
    assert [e["error"] for e in letter.errors] == ["smtp timeout", "ValueError: no such mailbox"]
    assert (letter.payload, letter.reason, letter.attempts) == (PAYLOAD, "failed", 2)
    assert type(returned["pulled"].claim_token) is str
    assert (returned["extend"], returned["fail"], returned["tick"]) == (True, True, 0)
    assert (returned["policy"].max_attempts, returned["policy"].backoff_base) == (5, 1.5)


@pytest.mark.parametrize(
    "payload",
    [None, 0, -1.25, "text", [], [1, [2]], True],
    ids=["null", "zero", "float", "string", "empty-list", "nested-list", "true"],
)
def test_any_json_payload_comes_back_as_the_same_value_and_type(
    cursor_factory: CursorFactory, namespace: str, payload: Any
) -> None:
    client = QueueClient(cursor_factory(), namespace=namespace)
    client.push(Q, payload)

    job = client.pull(Q)

    assert job is not None
    assert (job.payload, shape(job.payload)) == (payload, shape(payload))
