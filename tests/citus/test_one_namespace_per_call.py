"""The suite's check that a call touches only its own namespace (tests/one_namespace_per_call.py)
fails a statement that reaches another namespace, and lets the SDK's calls through."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from postkit.queue import QueueClient, install
from tests import one_namespace_per_call
from tests.one_namespace_per_call import marked


@pytest.fixture
def policed(fresh_database: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(fresh_database, autocommit=True) as connection:
        install(connection)
        one_namespace_per_call.install_policies(connection)
        yield connection


def test_a_write_to_another_namespace_fails(policed: psycopg.Connection) -> None:
    push = "SELECT postkit_queue.push('billing', 'emails', '{}'::jsonb)"

    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        policed.execute(marked(push, "shop"))


def test_a_read_of_another_namespace_finds_nothing(policed: psycopg.Connection) -> None:
    QueueClient(policed.cursor(), namespace="billing").push("emails", {})

    listed = policed.execute(marked("SELECT * FROM postkit_queue.namespaces()", "shop"))

    assert listed.fetchall() == []


def test_a_statement_not_marked_reaches_every_namespace(policed: psycopg.Connection) -> None:
    QueueClient(policed.cursor(), namespace="billing").push("emails", {})

    listed = policed.execute("SELECT * FROM postkit_queue.namespaces()")

    assert listed.fetchall() == [("billing",)]


def test_a_namespace_that_looks_like_the_end_of_the_comment_is_marked_whole(
    policed: psycopg.Connection,
) -> None:
    odd = "shop */ x"
    pushed = policed.execute(
        marked("SELECT postkit_queue.push(%s, 'emails', '{}'::jsonb)", odd), (odd,)
    )

    assert pushed.fetchone() is not None


@pytest.mark.skipif(
    not one_namespace_per_call.ENABLED, reason="the SDK is wrapped only under the check"
)
def test_each_sdk_call_is_marked_with_its_namespace(
    fresh_database: str, policed: psycopg.Connection
) -> None:
    QueueClient(policed.cursor(), namespace="shop").push("emails", {"n": 1})

    with psycopg.connect(fresh_database) as other:
        row = other.execute(
            "SELECT query FROM pg_stat_activity WHERE pid = %s", (policed.info.backend_pid,)
        ).fetchone()

    assert row is not None
    assert row[0].startswith(marked("", "shop"))
