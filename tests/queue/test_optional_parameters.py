"""One statement per call, with optional parameters: a line of queries.sql that ends with
``-- when NAME is given`` is sent only when the call gives NAME, so a call that uses nothing
newer runs on a database whose SQL module predates it (the upgrade's first step installs the
package, the second the schema: docs/upgrading.md)."""

from __future__ import annotations

import psycopg
import pytest

from postkit.queue import QueueClient, protocol
from postkit.queue.protocol.call import optional_parameters, queries
from postkit.queue.records import Job
from tests.queue.legacy import install_legacy, legacy_files

PUSH = {
    "delay": None,
    "run_at": None,
    "priority": 0,
    "max_attempts": None,
    "unique_key": None,
    "backoff_base": None,
    "backoff_cap": None,
}


def test_push_without_trace_context_or_group_key_sends_neither() -> None:
    call = protocol.lifecycle.push("app", "emails", {}, **PUSH, trace_context=None, group_key=None)

    assert "p_trace_context" not in call.sql
    assert "p_group_key" not in call.sql
    assert "is given" not in call.sql


def test_each_optional_parameter_given_is_passed_by_name_and_only_it() -> None:
    call = protocol.lifecycle.push(
        "app", "emails", {}, **PUSH, trace_context=None, group_key="acme"
    )

    assert "p_group_key => %(group_key)s" in call.sql
    assert "p_trace_context" not in call.sql


def test_every_optional_line_names_a_parameter_passed_by_name() -> None:
    """Only a parameter passed by name may be left out: a positional one would shift the
    ones after it."""
    for name, statement in queries().items():
        for parameter in optional_parameters(name):
            line = next(line for line in statement.splitlines() if f"when {parameter} is" in line)
            assert f"=> %({parameter})s" in line, (name, line)


def test_a_push_with_every_optional_parameter_records_them(
    queue: QueueClient, namespace: str
) -> None:
    call = protocol.lifecycle.push(
        namespace, "emails", {}, **PUSH, trace_context={"traceparent": "x"}, group_key="acme"
    )
    queue.cursor.execute(call.sql, call.params)
    (job_id,) = queue.cursor.fetchone() or (None,)

    job = queue.get_job(job_id)
    assert job is not None
    assert job.group_key == "acme"
    assert job.trace_context == {"traceparent": "x"}


def test_a_plain_push_runs_on_the_oldest_module_the_repository_keeps(
    fresh_database: str,
) -> None:
    """Version 15, the last whose whole SQL the repository keeps, predates trace contexts
    (18) and group keys (21): a producer that uses neither still pushes there while the
    upgrade is to come."""
    with psycopg.connect(fresh_database) as connection:
        install_legacy(connection, len(legacy_files()))
        cursor = connection.cursor()
        call = protocol.lifecycle.push("app", "emails", {"to": "ann"}, **PUSH, trace_context=None)
        cursor.execute(call.sql, call.params)
        (job_id,) = cursor.fetchone() or (None,)
        cursor.execute("SELECT payload FROM postkit_queue.jobs WHERE id = %s", (job_id,))
        assert cursor.fetchone() == ({"to": "ann"},)


def test_an_ack_without_a_result_sends_none() -> None:
    job = Job.__new__(Job)
    object.__setattr__(job, "id", 1)
    object.__setattr__(job, "claim_token", "00000000-0000-0000-0000-000000000001")

    assert (
        "p_result"
        not in protocol.lifecycle.ack("app", job, worker_id="w", claim_token=None, result=None).sql
    )
    assert (
        "p_result =>"
        in protocol.lifecycle.ack("app", job, worker_id="w", claim_token=None, result=1).sql
    )


@pytest.mark.parametrize("results", [None, ["done"]])
def test_ack_many_sends_results_only_when_given(results: list[str] | None) -> None:
    job = Job.__new__(Job)
    object.__setattr__(job, "id", 1)
    object.__setattr__(job, "claim_token", "00000000-0000-0000-0000-000000000001")
    call = protocol.lifecycle.ack_many("app", [job], results)

    assert ("p_results" in call.sql) is (results is not None)


def test_every_statement_ends_with_its_own_sql_so_that_a_call_can_be_wrapped() -> None:
    """A comment written above a ``-- name:`` line belongs to the statement before it, after
    its semicolon: a call committed asynchronously, which wraps its statement in parentheses,
    would send that semicolon inside them."""
    for name, body in queries().items():
        code = "\n".join(line.partition("--")[0] for line in body.splitlines())
        assert ";" not in code, name
        assert not body.splitlines()[-1].lstrip().startswith("--"), name
