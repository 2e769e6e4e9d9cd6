"""The job states and the outcomes: one enum each in Python (postkit.queue.records) and one enum
type each in SQL (postkit_queue.job_state, postkit_queue.outcome), kept in step here as
tests/test_errors.py keeps the SQLSTATE table in step."""

from __future__ import annotations

import enum

import psycopg
import pytest

from postkit.queue import protocol
from postkit.queue.records import JobState, NackOutcome, Outcome


@pytest.mark.parametrize(
    ("sql_type", "python_enum"), [("job_state", JobState), ("outcome", Outcome)]
)
def test_each_sql_enum_type_has_the_python_enums_values_in_order(
    dsn: str, sql_type: str, python_enum: type[enum.Enum]
) -> None:
    with psycopg.connect(dsn) as connection:
        row = connection.execute(
            f"SELECT pg_catalog.enum_range(NULL::postkit_queue.{sql_type})::text[]"
        ).fetchone()

    assert row is not None
    assert row[0] == [member.value for member in python_enum]


def test_a_nack_returns_outcomes_and_a_listing_takes_the_job_states() -> None:
    assert [member.value for member in NackOutcome] == [
        Outcome.RETRIED.value,
        Outcome.DEAD_LETTERED.value,
        Outcome.STALE.value,
    ]
    assert protocol.operations.JOB_STATES == (
        "pending",
        "scheduled",
        "running",
        "dead",
        "waiting",
        "cancelled",
    )
