"""The sans-IO core of the SDK: it builds each call's statement and reads its rows.

Nothing here touches a connection. A client turns a :class:`Call` into one ``execute`` and one
``fetchall`` on its cursor, hands the rows back to :meth:`Call.parse`, and passes any driver
error through :func:`translate_error`. The SQL functions own every rule of the state machine;
this module only checks what must be right before a value can be bound at all (its Python type,
that a payload serializes to JSON, that text holds no NUL byte), so that those mistakes raise
before any SQL runs.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar

from postkit import errors
from postkit.queue.job import DeadLetter, Job, NackOutcome, QueuePolicy

T = TypeVar("T")
Rows = list[dict[str, Any]]
Duration = timedelta | float | int
"""A duration: a ``timedelta``, or a number of seconds."""
JobRef = Job | int
"""A job, or its id. A ``Job`` also carries its claim token, the fence."""

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_QUERY_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
# The escape json.dumps writes for a NUL character: \u0000 after an even number of backslashes
# (an odd run would make it the literal text "\\u0000", which PostgreSQL stores fine).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


@cache
def queries() -> dict[str, str]:
    """The named statements of ``queries.sql``."""
    text = resources.files("postkit.queue").joinpath("queries.sql").read_text(encoding="utf-8")
    pieces = _QUERY_HEADER.split(text)[1:]
    return {
        name: body.strip().rstrip(";") for name, body in zip(pieces[::2], pieces[1::2], strict=True)
    }


@dataclass(frozen=True)
class Call(Generic[T]):
    """One SDK call: a named statement, its parameters, and how to read its rows."""

    name: str
    params: Mapping[str, Any]
    parse: Callable[[Rows], T]

    @property
    def sql(self) -> str:
        return queries()[self.name]


# --------------------------------------------------------------------------------------------
# Binding checks. Each raises the exception of the argument it checks.
# --------------------------------------------------------------------------------------------


def _text(what: str, value: object, *, required: bool) -> str | None:
    if value is None:
        if required:
            raise errors.InvalidNameError(f"{what} must not be None")
        return None
    if not isinstance(value, str):
        raise errors.InvalidNameError(f"{what} must be a str, got {type(value).__name__}")
    if "\x00" in value:
        raise errors.InvalidNameError(f"{what} must not contain a NUL character")
    return value


def _integer(
    what: str, value: object, error: type[errors.ValidationError], *, bounds: tuple[int, int]
) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{what} must be an int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        raise error(f"{what} is out of range: {value}")
    return value


def _seconds(what: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.InvalidDurationError(
            f"{what} must be a timedelta or a number of seconds, got {type(value).__name__}"
        )
    if not math.isfinite(value):
        raise errors.InvalidDurationError(f"{what} must be finite, got {value}")
    return float(value)


def _payload(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise errors.InvalidPayloadError(f"payload is not JSON-serializable: {exc}") from exc
    if _JSON_NUL.search(text):
        raise errors.InvalidPayloadError("payload must not contain a NUL character (\\u0000)")
    return text


def _claim_token(value: object) -> str | None:
    if value is None:
        return None
    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError as exc:
        raise errors.InvalidClaimTokenError(f"claim_token is not a UUID: {value!r}") from exc


def _error_text(value: object) -> str | None:
    """An error for the job's history: text, or an exception rendered as 'Type: message'."""
    if value is None:
        return None
    text = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else str(value)
    # PostgreSQL text cannot hold NUL; an error message must never make a nack fail.
    return text.replace("\x00", "\ufffd")


def _claim(job: object, worker_id: object, claim_token: object) -> dict[str, Any]:
    """The parameters that identify a claim: the job id, the worker and the fence."""
    token = claim_token
    if isinstance(job, Job):
        job_id: object = job.id
        if token is None:
            token = job.claim_token
    else:
        job_id = job
    if job_id is None or isinstance(job_id, bool) or not isinstance(job_id, int):
        raise errors.InvalidJobIdError(
            f"job must be a Job or an int job id, got {type(job_id).__name__}"
        )
    if not _INT64[0] <= job_id <= _INT64[1]:
        raise errors.InvalidJobIdError(f"job id is out of range: {job_id}")
    return {
        "job_id": job_id,
        "worker_id": _text("worker_id", worker_id, required=False),
        "claim_token": _claim_token(token),
    }


def _base(namespace: str, **params: Any) -> dict[str, Any]:
    return {"namespace": _text("namespace", namespace, required=True), **params}


# --------------------------------------------------------------------------------------------
# Row readers.
# --------------------------------------------------------------------------------------------


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _job(row: dict[str, Any]) -> Job:
    return Job(
        id=row["id"],
        queue=row["queue"],
        payload=_json(row["payload"]),
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        worker_id=row["worker_id"],
        claim_token=row["claim_token"],
        visible_until=row["visible_until"],
        state=row["state"],
        priority=row["priority"],
        run_at=row["run_at"],
        namespace=row["namespace"],
        unique_key=row["unique_key"],
        claimed_at=row["claimed_at"],
        errors=tuple(_json(row["errors"])),
        created_at=row["created_at"],
        failed_at=row.get("failed_at"),
    )


def _dead_letter(row: dict[str, Any]) -> DeadLetter:
    return DeadLetter(
        job_id=row["job_id"],
        queue=row["queue"],
        payload=_json(row["payload"]),
        error=row["error"],
        errors=tuple(_json(row["errors"])),
        reason=row["reason"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        worker_id=row["worker_id"],
        priority=row["priority"],
        unique_key=row["unique_key"],
        namespace=row["namespace"],
        created_at=row["created_at"],
        failed_at=row["failed_at"],
    )


def _scalar(rows: Rows) -> Any:
    return next(iter(rows[0].values()))


def _optional_job(rows: Rows) -> Job | None:
    return _job(rows[0]) if rows else None


# --------------------------------------------------------------------------------------------
# Calls. Each mirrors one SDK method; the client methods document the contract.
# --------------------------------------------------------------------------------------------


def push(
    namespace: str,
    queue: str,
    payload: object,
    *,
    delay: Duration | None,
    priority: int,
    max_attempts: int | None,
    unique_key: str | None,
    backoff_base: Duration | None,
    backoff_cap: Duration | None,
) -> Call[int | None]:
    params = _base(
        namespace,
        queue=_text("queue", queue, required=True),
        payload=_payload(payload),
        delay=_seconds("delay", delay),
        priority=_integer("priority", priority, errors.InvalidPriorityError, bounds=_INT32),
        max_attempts=_integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=_INT32
        ),
        unique_key=_text("unique_key", unique_key, required=False),
        backoff_base=_seconds("backoff_base", backoff_base),
        backoff_cap=_seconds("backoff_cap", backoff_cap),
    )
    if params["priority"] is None:
        raise errors.InvalidPriorityError("priority must be an int, got None")
    return Call("push", params, _scalar)


def pull(
    namespace: str,
    queue: str,
    *,
    worker_id: str | None,
    visibility_timeout: Duration | None,
    limit: int,
) -> Call[list[Job]]:
    params = _base(
        namespace,
        queue=_text("queue", queue, required=True),
        worker_id=_text("worker_id", worker_id, required=False),
        visibility_timeout=_seconds("visibility_timeout", visibility_timeout),
        limit=_integer("limit", limit, errors.InvalidLimitError, bounds=_INT32),
    )
    return Call("pull", params, lambda rows: [_job(row) for row in rows])


def ack(namespace: str, job: JobRef, *, worker_id: str | None, claim_token: object) -> Call[bool]:
    return Call("ack", _base(namespace, **_claim(job, worker_id, claim_token)), _scalar)


def nack(
    namespace: str,
    job: JobRef,
    *,
    error: object,
    worker_id: str | None,
    claim_token: object,
    backoff: Duration | None,
) -> Call[NackOutcome]:
    params = _base(
        namespace,
        **_claim(job, worker_id, claim_token),
        error=_error_text(error),
        backoff=_seconds("backoff", backoff),
    )
    return Call("nack", params, lambda rows: NackOutcome(_scalar(rows)))


def fail(
    namespace: str, job: JobRef, *, error: object, worker_id: str | None, claim_token: object
) -> Call[bool]:
    params = _base(namespace, **_claim(job, worker_id, claim_token), error=_error_text(error))
    return Call("fail", params, _scalar)


def extend_visibility(
    namespace: str,
    job: JobRef,
    *,
    extension: Duration,
    worker_id: str | None,
    claim_token: object,
) -> Call[bool]:
    seconds = _seconds("extension", extension)
    if seconds is None:
        raise errors.InvalidDurationError("extension is required")
    params = _base(namespace, **_claim(job, worker_id, claim_token), extension=seconds)
    return Call("extend_visibility", params, _scalar)


def release(
    namespace: str, job: JobRef, *, worker_id: str | None, claim_token: object
) -> Call[bool]:
    return Call("release", _base(namespace, **_claim(job, worker_id, claim_token)), _scalar)


def _queue_list(queues: object) -> list[str]:
    if isinstance(queues, str) or not hasattr(queues, "__iter__"):
        raise errors.InvalidNameError("queues must be a list of queue names")
    names = [_text("queue", queue, required=True) for queue in queues]
    if not names:
        raise errors.InvalidNameError("queues must name at least one queue")
    return [name for name in names if name is not None]


@dataclass(frozen=True)
class NextDue:
    """When the earliest pending job falls due, read with the database's clock."""

    seconds: float | None
    """Seconds until it is due (0 or less: due now); None when nothing is pending."""


def next_run_at(namespace: str, queues: list[str]) -> Call[NextDue]:
    def parse(rows: Rows) -> NextDue:
        due, now = rows[0]["next_run_at"], rows[0]["now"]
        return NextDue(None if due is None else (due - now).total_seconds())

    return Call("next_run_at", _base(namespace, queues=_queue_list(queues)), parse)


def channels(namespace: str, queues: list[str]) -> Call[list[str]]:
    """The LISTEN channels of these queues (the SQL module names them)."""
    params = _base(namespace, queues=_queue_list(queues))
    return Call("channels", params, lambda rows: [row["channel"] for row in rows])


def tick_timeouts(namespace: str, *, limit: int) -> Call[int]:
    params = _base(
        namespace, limit=_integer("limit", limit, errors.InvalidLimitError, bounds=_INT32)
    )
    return Call("tick_timeouts", params, lambda rows: int(_scalar(rows)))


def get_job(namespace: str, job_id: int) -> Call[Job | None]:
    params = _base(namespace, job_id=_claim(job_id, None, None)["job_id"])
    return Call("get_job", params, _optional_job)


def dead_letters(namespace: str, queue: str | None, *, limit: int) -> Call[list[DeadLetter]]:
    params = _base(
        namespace,
        queue=_text("queue", queue, required=False),
        limit=_integer("limit", limit, errors.InvalidLimitError, bounds=_INT32),
    )
    return Call("dead_letters", params, lambda rows: [_dead_letter(row) for row in rows])


def configure_queue(
    namespace: str,
    queue: str,
    *,
    max_attempts: int | None,
    visibility_timeout: Duration | None,
    backoff_base: Duration | None,
    backoff_cap: Duration | None,
) -> Call[QueuePolicy]:
    params = _base(
        namespace,
        queue=_text("queue", queue, required=True),
        max_attempts=_integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=_INT32
        ),
        visibility_timeout=_seconds("visibility_timeout", visibility_timeout),
        backoff_base=_seconds("backoff_base", backoff_base),
        backoff_cap=_seconds("backoff_cap", backoff_cap),
    )
    return Call("configure_queue", params, lambda rows: QueuePolicy(**rows[0]))


# --------------------------------------------------------------------------------------------
# Errors.
# --------------------------------------------------------------------------------------------


def translate_error(exc: BaseException) -> errors.PostkitError | None:
    """The Postkit exception for a driver error raised by the SQL module, or None for any
    other error (which the client re-raises unchanged).

    Reads the SQLSTATE the way psycopg 3 (``sqlstate``) and psycopg2 (``pgcode``) expose it,
    also through Django's wrapper (the driver error is its ``__cause__``).
    """
    for candidate in (exc, exc.__cause__):
        if candidate is None:
            continue
        sqlstate = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        error_class = errors.SQLSTATE_ERRORS.get(sqlstate or "")
        if error_class is None:
            continue
        diag = getattr(candidate, "diag", None)
        message = getattr(diag, "message_primary", None) or str(candidate)
        if error_class is errors.SchemaNotInstalledError:
            if "postkit_queue" not in message:
                return None
            message = (
                f"{message}. The Postkit queue schema is missing or older than this SDK: "
                "run `postkit install` (or postkit.queue.install(connection))"
            )
        return error_class(message.removeprefix("postkit: "))
    return None
