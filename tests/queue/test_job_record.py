"""A job record made from its fields, as the reader of every claim makes it
(``Job.from_fields``), is the job its constructor makes."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

import pytest

from postkit.queue.protocol import readers
from postkit.queue.records import Job


def test_a_job_made_from_its_fields_equals_the_one_its_constructor_makes() -> None:
    now = datetime.now(timezone.utc)
    fields: dict[str, Any] = {
        "id": 7,
        "queue": "q",
        "payload": {"n": 1},
        "attempts": 1,
        "max_attempts": 20,
        "worker_id": "w",
        "claim_token": "t",
        "visible_until": now,
        "state": "running",
        "priority": 0,
        "run_at": now,
        "namespace": "ns",
        "unique_key": None,
        "claimed_at": now,
        "errors": (),
        "created_at": now,
        "depends_on": (3, 4),
    }

    made = Job.from_fields(fields)

    assert made == Job(**fields)
    assert made.parent_results is None and made.group_key is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.id = 8  # type: ignore[misc]


def test_the_claim_reader_gives_every_field_of_a_job() -> None:
    """Job.from_fields does not check that every field without a default is there: the reader
    of claims must give them all."""
    required = {f.name for f in dataclasses.fields(Job) if f.default is dataclasses.MISSING}
    now = datetime.now(timezone.utc)
    row = {
        "namespace": "ns", "id": 1, "queue": "q", "state": "running", "payload": "{}",
        "priority": 0, "run_at": now, "attempts": 1, "max_attempts": 20, "unique_key": None,
        "worker_id": "w", "claim_token": "t", "claimed_at": now, "visible_until": now,
        "errors": "[]", "created_at": now, "trace_context": None, "group_key": None,
        "depends_on": None,
    }  # fmt: skip

    job = readers.job(row)

    assert required <= set(vars(job))
    assert job == Job(**{name: getattr(job, name) for name in vars(job)})
