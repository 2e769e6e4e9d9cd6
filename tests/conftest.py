"""Shared fixtures: a real PostgreSQL for every test, never a mock.

The server is the one ``POSTKIT_TEST_DSN`` names, or else an embedded PostgreSQL that this test
session starts in a temporary directory and stops at the end. The queue schema is installed
once per session; each test works in a namespace of its own, so tests never see each other's
jobs. Tests that need a database of their own (installs, upgrades) get one from
``fresh_database``; tests that crash the server get a server of their own from
``own_server``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.embedded import EmbeddedServer
from postkit.queue import QueueClient, install
from tests import on_citus, one_namespace_per_call

# Under POSTKIT_TEST_ONE_NAMESPACE_PER_CALL=1, each SDK call names its namespace to the server.
one_namespace_per_call.wrap_the_executor()


@contextlib.contextmanager
def embedded_server() -> Iterator[EmbeddedServer]:
    """A new embedded server, stopped and deleted afterwards. Its directory is not under
    pytest's tmp_path: pytest prunes old base directories, which would pull the data directory
    from under a server still in use by a concurrent test session."""
    directory = Path(tempfile.mkdtemp(prefix="postkit-test-"))
    server = EmbeddedServer(directory / "pgdata", stop_at_exit=False)
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """A DSN for the server under test: POSTKIT_TEST_DSN, else a fresh embedded server."""
    named = os.environ.get("POSTKIT_TEST_DSN")
    if named:
        yield named
        return
    with embedded_server() as server:
        yield server.dsn


@contextlib.contextmanager
def new_database(server_dsn: str) -> Iterator[str]:
    """A new, empty database on the server, dropped afterwards (with any connections left)."""
    name = f"postkit_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        on_citus.create_on_workers(server_dsn, name)
        yield psycopg.conninfo.make_conninfo(server_dsn, dbname=name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        on_citus.drop_on_workers(server_dsn, name)


@pytest.fixture(scope="session")
def dsn(server_dsn: str) -> Iterator[str]:
    """A database of this test session's own on the server under test, with the queue schema
    installed. Its own, so that whatever an earlier run left in the server's databases cannot
    change the outcome."""
    with new_database(server_dsn) as database:
        with psycopg.connect(database) as connection:
            install(connection)
        on_citus.distribute(database)
        one_namespace_per_call.apply_policies(database)
        yield database


@pytest.fixture
def connect(dsn: str) -> Iterator[Callable[..., psycopg.Connection]]:
    """Open extra connections to the server under test; all are closed after the test."""
    opened: list[psycopg.Connection] = []

    def _connect(**kwargs: object) -> psycopg.Connection:
        connection = psycopg.connect(dsn, **kwargs)  # type: ignore[arg-type]
        opened.append(connection)
        return connection

    yield _connect
    for connection in opened:
        connection.close()


@pytest.fixture
def conn(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    """A connection in a transaction of its own (psycopg's default: not autocommit)."""
    return connect()


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def queue(conn: psycopg.Connection, namespace: str) -> QueueClient:
    """A client on ``conn`` in this test's namespace."""
    return QueueClient(conn.cursor(), namespace=namespace)


@pytest.fixture
def make_client(
    connect: Callable[..., psycopg.Connection], namespace: str
) -> Callable[..., QueueClient]:
    """Clients on connections of their own, as separate workers would have; keyword arguments
    go to the connection (``autocommit=True``: each call commits on its own)."""
    return lambda **kwargs: QueueClient(connect(**kwargs).cursor(), namespace=namespace)


@pytest.fixture
def shift_clock() -> Callable[[QueueClient, float], None]:
    """Move the queue's clock of one client's session forward by some seconds, to exercise
    deadlines and delays without sleeping (the SQL module reads time only through
    postkit_queue.clock(), which adds the session's postkit_queue.clock_offset)."""

    def _shift(client: QueueClient, seconds: float) -> None:
        client.cursor.execute(
            "SELECT set_config('postkit_queue.clock_offset', %s, false)", (f"{seconds} seconds",)
        )

    return _shift


@pytest.fixture
def fresh_database(server_dsn: str) -> Iterator[str]:
    """A DSN for a new, empty database on the server under test, dropped afterwards."""
    with new_database(server_dsn) as database:
        yield database


@pytest.fixture
def own_server() -> Iterator[EmbeddedServer]:
    """An embedded server for this test alone, for tests that crash or restart it."""
    with embedded_server() as server:
        yield server


@pytest.fixture(scope="session")
def span_exporter() -> Any:
    """OpenTelemetry's SDK as an application configures it: a TracerProvider, set as the
    global one, whose spans an InMemorySpanExporter keeps. The global provider can be set once
    per process, so this test session sets it once; :func:`spans` clears it for each test.
    Imported here, for the tests that ask: every other test runs without OpenTelemetry."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another global tracer provider was set"
    return exporter


@pytest.fixture
def spans(span_exporter: Any) -> Iterator[Any]:
    """The InMemorySpanExporter of the session's tracer provider, empty at the test's start."""
    span_exporter.clear()
    yield span_exporter
    span_exporter.clear()
