"""The sans-IO core of the SDK: it builds each call's statement and reads its rows.

Nothing here touches a connection. A client turns a :class:`Call` into one ``execute`` and one
``fetchall`` on its cursor, hands the rows back to :meth:`Call.parse`, and passes any driver
error through :func:`translate_error`. The SQL functions own every rule of the state machine;
this module checks every argument before anything is sent: what must be right before a value
can be bound at all (its Python type, that a payload serializes to JSON, that text holds no NUL
byte), and every limit the SQL functions check, from :mod:`postkit.queue.limits`. A refusal by
the SQL module aborts the caller's transaction; a refusal here leaves it as it was.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from postkit import errors
from postkit.queue import limits
from postkit.queue.records import (
    BrokenSchedule,
    DeadLetter,
    Fired,
    Job,
    JobState,
    NackOutcome,
    Outcomes,
    Pruned,
    QueuePolicy,
    QueueStats,
    Redriven,
    Schedule,
)

T = TypeVar("T")
Rows = list[dict[str, Any]]
Duration = timedelta | float | int
"""A duration: a ``timedelta``, or a number of seconds."""
JobRef = Job | int
"""A job, or its id. A ``Job`` also carries its claim token, the fence."""

_UTC = timezone.utc
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
    identifiers: Mapping[str, str] | None = None
    """Names the statement holds as ``{key}`` where no parameter may stand (LISTEN's
    channel): each is written into it quoted as an identifier."""

    @property
    def sql(self) -> str:
        statement = queries()[self.name]
        if self.identifiers is None:
            return statement
        return statement.format_map(
            {key: _identifier(name) for key, name in self.identifiers.items()}
        )


def _identifier(name: str) -> str:
    """``name`` quoted as a PostgreSQL identifier, as libpq's PQescapeIdentifier quotes it."""
    if "\x00" in name:
        raise errors.InvalidNameError("an identifier must not contain a NUL character")
    return '"' + name.replace('"', '""') + '"'


# --------------------------------------------------------------------------------------------
# Binding checks. Each raises the exception of the argument it checks.
# --------------------------------------------------------------------------------------------


def _text(what: str, value: object) -> str | None:
    """Free text (a search string): any str without NUL, or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise errors.InvalidNameError(f"{what} must be a str, got {type(value).__name__}")
    if "\x00" in value:
        raise errors.InvalidNameError(f"{what} must not contain a NUL character")
    return value


def _name(what: str, value: object, *, required: bool) -> str | None:
    """A name, by the rule of limits.name_problem (the SQL module's check_name)."""
    if value is None:
        if required:
            raise errors.InvalidNameError(f"{what} must not be None")
        return None
    if not isinstance(value, str):
        raise errors.InvalidNameError(f"{what} must be a str, got {type(value).__name__}")
    problem = limits.name_problem(value)
    if problem is not None:
        raise errors.InvalidNameError(f"{what} {problem}")
    return value


def _integer(
    what: str, value: object, error: type[errors.ValidationError], *, bounds: limits.Bounds
) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{what} must be an int, got {type(value).__name__}")
    if value not in bounds:
        raise error(f"{what} must be between {bounds.low} and {bounds.high}, got {value}")
    return value


def _limit(call: str, value: object, what: str = "limit") -> int:
    limit = _integer(what, value, errors.InvalidLimitError, bounds=limits.LIMITS[call])
    if limit is None:
        raise errors.InvalidLimitError(f"{what} must be an int, got None")
    return limit


def _duration(what: str, value: object) -> int | None:
    """A duration as whole microseconds, checked against ``limits.DURATIONS[what]``. It
    travels as microseconds, so the SQL module checks exactly the value checked here."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        microseconds = value // timedelta(microseconds=1)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.InvalidDurationError(
            f"{what} must be a timedelta or a number of seconds, got {type(value).__name__}"
        )
    elif not math.isfinite(value):
        raise errors.InvalidDurationError(f"{what} must be finite, got {value}")
    elif isinstance(value, int):
        microseconds = value * 1_000_000
    elif not math.isfinite(value * 1e6):
        raise errors.InvalidDurationError(f"{what} of {value} seconds is too long")
    else:
        microseconds = round(value * 1e6)
    problem = limits.duration_problem(what, microseconds)
    if problem is not None:
        raise errors.InvalidDurationError(problem)
    return microseconds


def _required_duration(what: str, value: object) -> int:
    microseconds = _duration(what, value)
    if microseconds is None:
        raise errors.InvalidDurationError(f"{what} is required")
    return microseconds


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


def _time(what: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise errors.InvalidDurationError(f"{what} must be a timezone-aware datetime")
    return value


def _payload(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise errors.InvalidPayloadError(f"payload is not JSON-serializable: {exc}") from exc
    # The substring test spares the common payload the regular expression.
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise errors.InvalidPayloadError("payload must not contain a NUL character (\\u0000)")
    return text


# The text form the server hands out (gen_random_uuid()::text), accepted as it is; any other
# spelling of a UUID goes through uuid.UUID, which costs more than the rest of an ack's checks.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _claim_token(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and _CANONICAL_UUID.fullmatch(value):
        return value
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


def _job_id(value: object) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidJobIdError(
            f"job must be a Job or an int job id, got {type(value).__name__}"
        )
    if value not in limits.JOB_ID:
        raise errors.InvalidJobIdError(f"job id is out of range: {value}")
    return value


def _claim(call: str, job: object, worker_id: object, claim_token: object) -> dict[str, Any]:
    """The parameters that identify a claim: the job id, the worker and the fence. A bare job
    id identifies none: the claim token, or at least the worker_id, must come with it."""
    token = claim_token
    if isinstance(job, Job) and token is None:
        token = job.claim_token
    params = {
        "job_id": _job_id(job.id if isinstance(job, Job) else job),
        "worker_id": _name("worker_id", worker_id, required=False),
        "claim_token": _claim_token(token),
    }
    if params["worker_id"] is None and params["claim_token"] is None:
        raise errors.InvalidClaimTokenError(
            f"{call} needs the claim token pull returned (pass the Job, or claim_token=) or the "
            "worker_id the job was claimed under: a bare job id does not say whose claim it "
            "settles"
        )
    return params


def _base(namespace: str, **params: Any) -> dict[str, Any]:
    return {"namespace": _name("namespace", namespace, required=True), **params}


# --------------------------------------------------------------------------------------------
# Row readers.
# --------------------------------------------------------------------------------------------


# A run of digits long enough to hold a fraction past the largest float (about 1.8e308).
_LONG_DIGITS = re.compile(r"[0-9]{309}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a number of {len(text)} characters does not fit a float")
    return value


def _decode(text: str, what: str) -> tuple[Any, str | None]:
    """A stored JSON value as Python, and None; or None and why Python cannot decode it.

    PostgreSQL accepts JSON that Python's json module refuses: arrays and objects nested
    deeper than the interpreter's recursion limit (RecursionError), and integers of more
    digits than ``sys.get_int_max_str_digits()`` (ValueError). Such a value is valid to the SQL
    API, so reading it must never raise: the reader gets the reason instead, and the record
    stays readable. A fraction past the largest float, which json.loads would turn into
    infinity (no JSON value, so never written back), is refused the same way; only a text
    with 309 digits in a row can hold one, so only such a text pays for the check. The message
    never quotes the value, which may be megabytes long."""
    try:
        if len(text) >= 309 and _LONG_DIGITS.search(text):
            return json.loads(text, parse_float=_finite_float), None
        return json.loads(text), None
    except (RecursionError, ValueError) as exc:
        return None, f"{what} could not be decoded: {type(exc).__name__}: {exc}"


def _errors(text: str) -> tuple[dict[str, Any], ...]:
    # Most claimed jobs have no history yet: no JSON to parse.
    if text == "[]":
        return ()
    history, problem = _decode(text, "error history")
    if problem is not None:
        return ({"error": problem},)
    return tuple(history)


def _job(row: dict[str, Any]) -> Job:
    payload, payload_error = _decode(row["payload"], "payload")
    return Job(
        id=row["id"],
        queue=row["queue"],
        payload=payload,
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
        errors=_errors(row["errors"]),
        created_at=row["created_at"],
        failed_at=row.get("failed_at"),
        payload_error=payload_error,
    )


def _dead_letter(row: dict[str, Any]) -> DeadLetter:
    payload, payload_error = _decode(row["payload"], "payload")
    return DeadLetter(
        job_id=row["job_id"],
        queue=row["queue"],
        payload=payload,
        error=row["error"],
        errors=_errors(row["errors"]),
        reason=row["reason"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        worker_id=row["worker_id"],
        priority=row["priority"],
        unique_key=row["unique_key"],
        namespace=row["namespace"],
        created_at=row["created_at"],
        failed_at=row["failed_at"],
        expires_at=row["expires_at"],
        redriven_job_id=row["redriven_job_id"],
        redriven_at=row["redriven_at"],
        payload_error=payload_error,
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
        queue=_name("queue", queue, required=True),
        payload=_payload(payload),
        delay=_duration("delay", delay),
        priority=_integer(
            "priority", priority, errors.InvalidPriorityError, bounds=limits.PRIORITY
        ),
        max_attempts=_integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=limits.MAX_ATTEMPTS
        ),
        unique_key=_name("unique_key", unique_key, required=False),
        backoff_base=_duration("backoff_base", backoff_base),
        backoff_cap=_duration("backoff_cap", backoff_cap),
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
        queue=_name("queue", queue, required=True),
        worker_id=_name("worker_id", worker_id, required=False),
        visibility_timeout=_duration("visibility_timeout", visibility_timeout),
        limit=_limit("pull", limit),
    )
    return Call("pull", params, lambda rows: [_job(row) for row in rows])


def ack(namespace: str, job: JobRef, *, worker_id: str | None, claim_token: object) -> Call[bool]:
    return Call("ack", _base(namespace, **_claim("ack", job, worker_id, claim_token)), _scalar)


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
        **_claim("nack", job, worker_id, claim_token),
        error=_error_text(error),
        backoff=_duration("backoff", backoff),
    )
    return Call("nack", params, lambda rows: NackOutcome(_scalar(rows)))


def fail(
    namespace: str, job: JobRef, *, error: object, worker_id: str | None, claim_token: object
) -> Call[bool]:
    params = _base(
        namespace, **_claim("fail", job, worker_id, claim_token), error=_error_text(error)
    )
    return Call("fail", params, _scalar)


def extend_visibility(
    namespace: str,
    job: JobRef,
    *,
    extension: Duration,
    worker_id: str | None,
    claim_token: object,
) -> Call[bool]:
    params = _base(
        namespace,
        **_claim("extend_visibility", job, worker_id, claim_token),
        extension=_required_duration("extension", extension),
    )
    return Call("extend_visibility", params, _scalar)


def release(
    namespace: str, job: JobRef, *, worker_id: str | None, claim_token: object
) -> Call[bool]:
    params = _base(namespace, **_claim("release", job, worker_id, claim_token))
    return Call("release", params, _scalar)


def _queue_list(queues: object) -> list[str]:
    if isinstance(queues, str) or not hasattr(queues, "__iter__"):
        raise errors.InvalidNameError("queues must be a list of queue names")
    names = [_name("queue", queue, required=True) for queue in queues]
    if not names:
        raise errors.InvalidNameError("queues must name at least one queue")
    return [name for name in names if name is not None]


@dataclass(frozen=True)
class NextDue:
    """When the earliest pending job falls due, read with the database's clock."""

    seconds: float | None
    """Seconds until it is due (0 or less: due now); None when nothing is pending."""


def _next_due(rows: Rows) -> NextDue:
    due, now = rows[0]["next_run_at"], rows[0]["now"]
    return NextDue(None if due is None else (due - now).total_seconds())


def next_run_at(namespace: str, queues: list[str]) -> Call[NextDue]:
    return Call("next_run_at", _base(namespace, queues=_queue_list(queues)), _next_due)


def next_schedule_at(namespace: str) -> Call[NextDue]:
    """When the namespace's next active schedule falls due (None: it has none)."""
    return Call("next_schedule_at", _base(namespace), _next_due)


def channels(namespace: str, queues: list[str]) -> Call[list[str]]:
    """The LISTEN channels of these queues (the SQL module names them)."""
    params = _base(namespace, queues=_queue_list(queues))
    return Call("channels", params, lambda rows: [row["channel"] for row in rows])


def listen(channel: str) -> Call[None]:
    """LISTEN on ``channel`` (a name :func:`channels` returned, or a listener's wake channel)."""
    return Call("listen", {}, lambda rows: None, identifiers={"channel": channel})


def tick_timeouts(namespace: str, *, limit: int) -> Call[int]:
    params = _base(namespace, limit=_limit("tick_timeouts", limit))
    return Call("tick_timeouts", params, lambda rows: int(_scalar(rows)))


def get_job(namespace: str, job_id: int) -> Call[Job | None]:
    params = _base(namespace, job_id=_job_id(job_id))
    return Call("get_job", params, _optional_job)


def dead_letters(
    namespace: str,
    queue: str | None,
    *,
    limit: int,
    failed_after: datetime | None = None,
    failed_before: datetime | None = None,
    error_contains: str | None = None,
    include_redriven: bool = False,
    after: DeadLetter | None = None,
) -> Call[list[DeadLetter]]:
    params = _base(
        namespace,
        queue=_name("queue", queue, required=False),
        limit=_limit("dead_letters", limit),
        failed_after=_time("failed_after", failed_after),
        failed_before=_time("failed_before", failed_before),
        error_contains=_text("error_contains", error_contains),
        include_redriven=bool(include_redriven),
        after_failed_at=None if after is None else after.failed_at,
        after_job_id=None if after is None else after.job_id,
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
    retain_completed: Duration | None,
    retain_dead: Duration | None,
    max_payload_bytes: int | None,
) -> Call[QueuePolicy]:
    params = _base(
        namespace,
        queue=_name("queue", queue, required=True),
        max_attempts=_integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=limits.MAX_ATTEMPTS
        ),
        visibility_timeout=_duration("visibility_timeout", visibility_timeout),
        backoff_base=_duration("backoff_base", backoff_base),
        backoff_cap=_duration("backoff_cap", backoff_cap),
        retain_completed=_duration("retain_completed", retain_completed),
        retain_dead=_duration("retain_dead", retain_dead),
        max_payload_bytes=_integer(
            "max_payload_bytes",
            max_payload_bytes,
            errors.InvalidPayloadError,
            bounds=limits.MAX_PAYLOAD_BYTES,
        ),
    )
    return Call("configure_queue", params, lambda rows: QueuePolicy(**rows[0]))


QUEUE_SETTINGS = (
    "max_attempts",
    "visibility_timeout",
    "backoff_base",
    "backoff_cap",
    "retain_completed",
    "retain_dead",
    "max_payload_bytes",
)
"""The settings of a queue that configure_queue and update_queue_settings write."""


def update_queue_settings(
    namespace: str,
    queue: str,
    *,
    max_attempts: int | None,
    visibility_timeout: Duration | None,
    backoff_base: Duration | None,
    backoff_cap: Duration | None,
    retain_completed: Duration | None,
    retain_dead: Duration | None,
    max_payload_bytes: int | None,
    reset: Sequence[str],
) -> Call[QueuePolicy]:
    if isinstance(reset, str) or not all(isinstance(name, str) for name in reset):
        raise errors.InvalidNameError("reset must be a list of setting names")
    unknown = [name for name in reset if name not in QUEUE_SETTINGS]
    if unknown:
        raise errors.InvalidNameError(
            f"cannot reset {unknown[0]!r}: the settings are {', '.join(QUEUE_SETTINGS)}"
        )
    call = configure_queue(
        namespace,
        queue,
        max_attempts=max_attempts,
        visibility_timeout=visibility_timeout,
        backoff_base=backoff_base,
        backoff_cap=backoff_cap,
        retain_completed=retain_completed,
        retain_dead=retain_dead,
        max_payload_bytes=max_payload_bytes,
    )
    both = [name for name in reset if call.params[name] is not None]
    if both:
        raise errors.InvalidNameError(f"{both[0]} is both given and reset; choose one")
    # The names are checked against QUEUE_SETTINGS above, so the literal needs no quoting.
    params = {**call.params, "reset": "{" + ",".join(dict.fromkeys(reset)) + "}"}
    return Call("update_queue_settings", params, call.parse)


def outcomes_since(namespace: str, since: datetime) -> Call[list[Outcomes]]:
    moment = _time("since", since)
    if moment is None:
        raise errors.InvalidDurationError("since is required")
    params = _base(namespace, since=moment)
    return Call("outcomes_since", params, lambda rows: [Outcomes(**row) for row in rows])


def queues(namespace: str) -> Call[list[str]]:
    return Call("queues", _base(namespace), lambda rows: [str(row["queue"]) for row in rows])


def known_queues(namespace: str) -> Call[list[str]]:
    return Call("known_queues", _base(namespace), lambda rows: [str(row["queue"]) for row in rows])


def register_queues(namespace: str, queues: Sequence[str]) -> Call[int]:
    params = _base(namespace, queues=_queue_list(queues))
    return Call("register_queues", params, lambda rows: int(_scalar(rows)))


def clock() -> Call[datetime]:
    """The queue's clock (the database's, plus any test offset)."""
    return Call("clock", {}, _scalar)


def pull_any(
    namespace: str,
    queues: list[str],
    *,
    worker_id: str | None,
    visibility_timeout: Duration | None,
    limit: int,
) -> Call[list[Job]]:
    params = _base(
        namespace,
        queues=_queue_list(queues),
        worker_id=_name("worker_id", worker_id, required=False),
        visibility_timeout=_duration("visibility_timeout", visibility_timeout),
        limit=_limit("pull_any", limit),
    )
    return Call("pull_any", params, lambda rows: [_job(row) for row in rows])


def push_batch(
    namespace: str,
    queue: str,
    payloads: Sequence[object],
    *,
    delay: Duration | None,
    priority: int,
    max_attempts: int | None,
    unique_keys: Sequence[str | None] | None,
) -> Call[list[int | None]]:
    if isinstance(payloads, (str, bytes)) or not isinstance(payloads, Sequence):
        raise errors.InvalidPayloadError("payloads must be a list of JSON-serializable values")
    if len(payloads) > limits.BATCH_PAYLOADS:
        raise errors.InvalidLimitError(
            f"at most {limits.BATCH_PAYLOADS} payloads per batch, got {len(payloads)}"
        )
    keys = None
    if unique_keys is not None:
        if isinstance(unique_keys, (str, bytes)) or not isinstance(unique_keys, Sequence):
            raise errors.InvalidNameError("unique_keys must be a list of str or None")
        keys = [_name("unique_key", key, required=False) for key in unique_keys]
        if len(keys) != len(payloads):
            raise errors.InvalidNameError(f"{len(keys)} unique keys for {len(payloads)} payloads")
    params = _base(
        namespace,
        queue=_name("queue", queue, required=True),
        payloads=_payload(list(payloads)),
        delay=_duration("delay", delay),
        priority=_integer(
            "priority", priority, errors.InvalidPriorityError, bounds=limits.PRIORITY
        ),
        max_attempts=_integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=limits.MAX_ATTEMPTS
        ),
        unique_keys=keys,
    )
    return Call("push_batch", params, lambda rows: [row["id"] for row in rows])


def ack_batch(namespace: str, jobs: Sequence[Job], *, worker_id: str | None) -> Call[bool]:
    params = _base(
        namespace,
        **_claims("ack_batch", jobs),
        worker_id=_name("worker_id", worker_id, required=False),
    )
    return Call("ack_batch", params, _scalar)


def _array_literal(values: Sequence[int | str | None]) -> str:
    """A PostgreSQL array literal of checked ints and canonical UUID text, which need no
    quoting. A worker's round trip passes two arrays of as many elements as it settles jobs,
    and psycopg's list adapter cost more per element than the rest of the ack's work."""
    return "{" + ",".join("NULL" if value is None else str(value) for value in values) + "}"


def _claims(call: str, jobs: Sequence[Job]) -> dict[str, str]:
    """The ``job_ids`` and ``claim_tokens`` parameters of ``call``, each claim checked."""
    if isinstance(jobs, Job) or not all(isinstance(job, Job) for job in jobs):
        raise errors.InvalidJobIdError(f"{call} takes a list of Job objects (their claims)")
    claims = [_claim(call, job, None, None) for job in jobs]
    return {
        "job_ids": _array_literal([claim["job_id"] for claim in claims]),
        "claim_tokens": _array_literal([claim["claim_token"] for claim in claims]),
    }


def ack_many(namespace: str, jobs: Sequence[Job]) -> Call[list[int]]:
    return Call(
        "ack_many", _base(namespace, **_claims("ack_many", jobs)), lambda rows: list(_scalar(rows))
    )


def ack_and_pull(
    namespace: str,
    queue: str,
    acks: Sequence[Job],
    *,
    worker_id: str | None,
    visibility_timeout: Duration | None,
    limit: int,
) -> Call[tuple[list[int], list[Job]]]:
    params = _base(
        namespace,
        **_claims("ack_and_pull", acks),
        queue=_name("queue", queue, required=True),
        worker_id=_name("worker_id", worker_id, required=False),
        visibility_timeout=_duration("visibility_timeout", visibility_timeout),
        limit=_limit("pull", limit),
    )

    def parse(rows: Rows) -> tuple[list[int], list[Job]]:
        acked = list(rows[0]["acked"]) if rows else []
        return acked, [_job(row) for row in rows if row["id"] is not None]

    return Call("ack_and_pull", params, parse)


def _stats(row: dict[str, Any]) -> QueueStats:
    return QueueStats(**row)


def stats(namespace: str, queue: str | None, *, cap: int) -> Call[list[QueueStats]]:
    params = _base(
        namespace,
        queue=_name("queue", queue, required=False),
        cap=_limit("stats", cap, "cap"),
    )
    return Call("stats", params, lambda rows: [_stats(row) for row in rows])


JOB_STATES = tuple(state.value for state in JobState)
"""The states a listing of jobs takes."""


def jobs(namespace: str, queue: str, state: str, *, limit: int, after_id: int) -> Call[list[Job]]:
    if state not in JOB_STATES:
        raise errors.InvalidStateError(f"state must be one of {', '.join(JOB_STATES)}")
    params = _base(
        namespace,
        queue=_name("queue", queue, required=True),
        state=state,
        limit=_limit("jobs", limit),
        after_id=_job_id(after_id),
    )
    return Call("jobs", params, lambda rows: [_job(row) for row in rows])


def redrive(
    namespace: str,
    *,
    job_ids: Sequence[int] | None,
    queue: str | None,
    failed_after: datetime | None,
    failed_before: datetime | None,
    error_contains: str | None,
    to_queue: str | None,
    limit: int,
    dry_run: bool,
) -> Call[list[Redriven]]:
    if isinstance(job_ids, (str, bytes)):
        raise errors.InvalidJobIdError("job_ids must be a list of int job ids")
    ids = None if job_ids is None else [_job_id(job_id) for job_id in job_ids]
    params = _base(
        namespace,
        job_ids=ids,
        queue=_name("queue", queue, required=False),
        failed_after=_time("failed_after", failed_after),
        failed_before=_time("failed_before", failed_before),
        error_contains=_text("error_contains", error_contains),
        to_queue=_name("to_queue", to_queue, required=False),
        limit=_limit("redrive", limit),
        dry_run=bool(dry_run),
    )
    return Call("redrive", params, lambda rows: [Redriven(**row) for row in rows])


def purge_dead_letters(
    namespace: str,
    *,
    older_than: Duration | None,
    failed_before: datetime | None = None,
    queue: str | None,
) -> Call[int]:
    if (older_than is None) == (failed_before is None):
        raise errors.InvalidDurationError("give exactly one of older_than and failed_before")
    queue_name = _name("queue", queue, required=False)
    if failed_before is not None:
        params = _base(
            namespace, failed_before=_time("failed_before", failed_before), queue=queue_name
        )
        return Call("purge_dead_letters_before", params, lambda rows: int(_scalar(rows)))
    params = _base(
        namespace, older_than=_required_duration("older_than", older_than), queue=queue_name
    )
    return Call("purge_dead_letters", params, lambda rows: int(_scalar(rows)))


def cancel(namespace: str, job_id: int) -> Call[bool]:
    return Call("cancel", _base(namespace, job_id=_job_id(job_id)), _scalar)


def set_queue_paused(namespace: str, queue: str, *, paused: bool) -> Call[bool]:
    params = _base(namespace, queue=_name("queue", queue, required=True))
    return Call("pause_queue" if paused else "resume_queue", params, _scalar)


def purge_queue(
    namespace: str, queue: str, *, created_before: datetime | None = None, dry_run: bool = False
) -> Call[int]:
    if not isinstance(dry_run, bool):
        raise errors.InvalidStateError(f"dry_run must be a bool, got {type(dry_run).__name__}")
    queue_name = _name("queue", queue, required=True)
    if created_before is None:
        if dry_run:
            raise errors.InvalidDurationError("a dry run needs created_before")
        return Call(
            "purge_queue", _base(namespace, queue=queue_name), lambda rows: int(_scalar(rows))
        )
    params = _base(
        namespace,
        queue=queue_name,
        created_before=_time("created_before", created_before),
        dry_run=dry_run,
    )
    return Call("purge_queue_before", params, lambda rows: int(_scalar(rows)))


def prune(namespace: str, *, limit: int) -> Call[Pruned]:
    params = _base(namespace, limit=_limit("prune", limit))
    return Call("prune", params, lambda rows: Pruned(**rows[0]))


# --------------------------------------------------------------------------------------------
# Schedules. The SQL module owns which runs are due and fires each exactly once; cron
# expressions are parsed here, with croniter.
# --------------------------------------------------------------------------------------------


def _schedule(row: dict[str, Any]) -> Schedule:
    fields = {key: value for key, value in row.items() if key != "now"}
    fields["payload"], fields["payload_error"] = _decode(row["payload"], "payload")
    return Schedule(**fields)


def _zone(timezone: object) -> ZoneInfo:
    if not isinstance(timezone, str):
        raise errors.InvalidScheduleError("timezone must be a time zone name such as 'UTC'")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise errors.InvalidScheduleError(f"unknown time zone {timezone!r}") from exc


def next_run_after(
    moment: datetime,
    *,
    cron: str | None,
    timezone: str,
    every: timedelta | None,
    due_at: datetime | None = None,
) -> datetime:
    """The first run of a schedule strictly after ``moment``.

    A cron schedule runs at the times its expression names, in ``timezone`` (so "0 9 * * *"
    stays at 9 am across daylight-saving changes). An interval schedule keeps its phase: runs
    fall at ``due_at + k * every``. Runs between ``due_at`` and ``moment`` are skipped: that is
    the catch-up policy, one run for a gap of any length.
    """
    if every is not None:
        start = due_at or moment
        steps = max(0, int((moment - start) / every)) + 1
        return start + steps * every
    if cron is None:
        raise errors.InvalidScheduleError("a schedule needs a cron expression or an interval")
    local = moment.astimezone(_zone(timezone))
    return croniter(cron, local).get_next(datetime).astimezone(_UTC)  # type: ignore[no-any-return]


# The cron grammar Postkit schedules, the same as postkit_queue.cron_problem's in SQL (migration
# 9); a test runs both over the same expressions.
_CRON_TEXT = re.compile(r"[ -~\t\n\r\v\f]*", re.ASCII)
_CRON_WHITESPACE = " \t\n\r\v\f"
_CRON_SEPARATOR = re.compile(r"[ \t\n\r\v\f]+", re.ASCII)
_CRON_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
_CRON_LOW = (0, 0, 1, 1, 0)
_CRON_HIGH = (59, 23, 31, 12, 7)
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_CRON_NAMES: dict[int, dict[str, int]] = {
    3: {name: number for number, name in enumerate(_MONTH_NAMES, start=1)},
    4: {name: number for number, name in enumerate(_WEEKDAY_NAMES)},
}
_CRON_ITEM = re.compile(
    r"(\*|([0-9]{1,4}|[a-z]{3})(-([0-9]{1,4}|[a-z]{3}))?)(/([0-9]{1,4}))?", re.ASCII
)
_CRON_NTH = re.compile(r"([0-9]{1,4}|[a-z]{3})#([0-9]{1,4})", re.ASCII)
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _cron_value(token: str, field: int) -> int | None:
    if token.isdigit():
        return int(token)
    return _CRON_NAMES.get(field, {}).get(token)


def cron_problem(cron: object) -> str | None:
    """Why ``cron`` is not a cron expression Postkit schedules, or None when it is.

    Five fields separated by ASCII whitespace: minute (0-59), hour (0-23), day of month
    (1-31), month (1-12 or jan-dec), day of week (0-7 or sun-sat; 7 is Sunday). A field is a
    comma-separated list of items: ``*``, a value, a range ``a-b`` (a <= b), each with an
    optional step ``/n`` (1 <= n <= the field's span), or ``a/n`` (from a to the field's end).
    The day of month also takes ``L`` (its last day) and ``?``; the day of week ``?`` and
    ``v#n`` (the n-th weekday v of the month, n from 1 to 5; a list of those, not mixed with
    other items). Letters are case-insensitive.
    Refused besides: an expression that never fires (with the day of week unrestricted, days
    of month none of its months has, such as "0 0 30 2 *"), and an n-th weekday together with
    a restricted day of month. The SQL module's ``cron_problem`` accepts exactly the same.
    """
    if not isinstance(cron, str):
        return f"a cron expression is text, got {type(cron).__name__}"
    if not _CRON_TEXT.fullmatch(cron):
        return f"the cron expression {cron!r} holds a character other than printable ASCII"
    fields = _CRON_SEPARATOR.split(cron.strip(_CRON_WHITESPACE))
    if len(fields) != 5:
        return (
            f"not a 5-field cron expression (minute hour day-of-month month day-of-week): {cron!r}"
        )
    unrestricted = [False] * 5
    days: list[int] = []
    months: list[int] = []
    last_day = nth = plain_weekday = False
    for index, text in enumerate(fields):
        field = text.lower()
        what = _CRON_FIELDS[index]
        if field == "*" or (field == "?" and index in (2, 4)):
            unrestricted[index] = True
            continue
        for item in field.split(","):
            if index == 2 and item == "l":
                last_day = True
                continue
            nth_match = _CRON_NTH.fullmatch(item) if index == 4 else None
            if nth_match is not None:
                weekday = _cron_value(nth_match[1], 4)
                if weekday is None or weekday > 7 or not 1 <= int(nth_match[2]) <= 5:
                    return (
                        f"{item!r} in the day-of-week field of {cron!r} is not weekday#n "
                        "(n from 1 to 5)"
                    )
                nth = True
                continue
            plain_weekday = plain_weekday or index == 4
            match = _CRON_ITEM.fullmatch(item)
            if match is None:
                return f"{item!r} in the {what} field of {cron!r} is not a cron item"
            low: int | None
            high: int | None
            if match[1] == "*":
                low, high = _CRON_LOW[index], _CRON_HIGH[index]
            else:
                low = _cron_value(match[2], index)
                if match[4] is not None:
                    high = _cron_value(match[4], index)
                else:
                    high = _CRON_HIGH[index] if match[6] is not None else low
            if low is None or high is None or low < _CRON_LOW[index] or high > _CRON_HIGH[index]:
                return (
                    f"{item!r} in the {what} field of {cron!r} is out of range "
                    f"({_CRON_LOW[index]} to {_CRON_HIGH[index]})"
                )
            if low > high:
                return f"the range {item!r} in the {what} field of {cron!r} runs backwards"
            step = 1 if match[6] is None else int(match[6])
            span = _CRON_HIGH[index] - _CRON_LOW[index] + 1
            if not 1 <= step <= span:
                return (
                    f"the step of {item!r} in the {what} field of {cron!r} must be from 1 to {span}"
                )
            if index == 2:
                days.extend(range(low, high + 1, step))
            elif index == 3:
                months.extend(range(low, high + 1, step))
    if nth and plain_weekday:
        return f"{cron!r} mixes n-th weekdays (#) with other days of the week: give one kind"
    if nth and not unrestricted[2]:
        return (
            f"{cron!r} names both days of the month and an n-th weekday (#), which may never "
            "coincide: give one of them"
        )
    # With both day fields restricted, cron runs on either (the union), and every weekday comes
    # in every month; with the day of week unrestricted, the days of month alone decide.
    if (
        unrestricted[4]
        and not (unrestricted[2] or last_day or unrestricted[3])
        and not any(day <= _MONTH_DAYS[month - 1] for day in days for month in months)
    ):
        return f"{cron!r} never fires: none of its months has those days"
    return None


def check_cron(cron: str) -> str:
    """``cron``, if Postkit schedules it (see :func:`cron_problem`) and croniter agrees."""
    problem = cron_problem(cron)
    if problem is None and not croniter.is_valid(cron):
        problem = f"croniter cannot parse the cron expression {cron!r}"
    if problem is not None:
        raise errors.InvalidScheduleError(problem)
    return cron


@dataclass(frozen=True)
class NewSchedule:
    """A schedule checked and ready to save, but for its first run time: that is computed
    from the database's clock (see :func:`save_schedule`)."""

    params: Mapping[str, Any]
    cron: str | None
    timezone: str
    every: timedelta | None


def new_schedule(
    namespace: str,
    name: str,
    queue: str,
    payload: object,
    *,
    cron: str | None,
    timezone: str,
    every: Duration | None,
    priority: int,
    max_attempts: int | None,
) -> NewSchedule:
    """Every check of a schedule that needs no database, so that a bad one raises before any
    SQL runs (even the read of the clock its first run is computed from)."""
    if (cron is None) == (every is None):
        raise errors.InvalidScheduleError("give exactly one of cron= and every=")
    seconds = _seconds("every", every)
    interval = None if seconds is None else timedelta(seconds=seconds)
    if interval is not None and interval < timedelta(seconds=1):
        raise errors.InvalidScheduleError("a schedule runs at most every second")
    if interval is not None and interval > limits.EVERY_MAX:
        raise errors.InvalidDurationError(
            f"every of {interval} is too long; the limit is {limits.EVERY_MAX}"
        )
    _zone(timezone)
    if cron is not None:
        check_cron(cron)
    params = _base(
        namespace,
        name=_name("schedule name", name, required=True),
        queue=_name("queue", queue, required=True),
        payload=_payload(payload),
        cron=cron,
        timezone=timezone,
        every=seconds,
        priority=_integer(
            "priority", priority, errors.InvalidPriorityError, bounds=limits.PRIORITY
        ),
        max_attempts=_integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=limits.MAX_ATTEMPTS
        ),
    )
    return NewSchedule(params, cron, timezone, interval)


def save_schedule(schedule: NewSchedule, *, now: datetime) -> Call[Schedule]:
    try:
        first = next_run_after(
            now, cron=schedule.cron, timezone=schedule.timezone, every=schedule.every
        )
    except Exception as exc:
        raise errors.InvalidScheduleError(
            f"cannot compute the schedule's first run: {exc}"
        ) from exc
    params = {**schedule.params, "next_run_at": first}
    return Call("save_schedule", params, lambda rows: _schedule(rows[0]))


def schedules(namespace: str) -> Call[list[Schedule]]:
    return Call("schedules", _base(namespace), lambda rows: [_schedule(row) for row in rows])


def set_schedule_paused(namespace: str, name: str, *, paused: bool) -> Call[bool]:
    params = _base(namespace, name=_name("schedule name", name, required=True), paused=paused)
    return Call("set_schedule_paused", params, _scalar)


def delete_schedule(namespace: str, name: str) -> Call[bool]:
    params = _base(namespace, name=_name("schedule name", name, required=True))
    return Call("delete_schedule", params, _scalar)


@dataclass(frozen=True)
class DueRun:
    """A due schedule, locked for this transaction, with the run to fire and the next one; or,
    when the next one cannot be computed, why (``next_run_at`` is then None)."""

    schedule: Schedule
    next_run_at: datetime | None
    problem: str | None = None


def _due_run(row: dict[str, Any]) -> DueRun:
    schedule = _schedule(row)
    try:
        following = next_run_after(
            row["now"],
            cron=schedule.cron,
            timezone=schedule.timezone,
            every=schedule.every,
            due_at=schedule.next_run_at,
        )
    # Whatever croniter or zoneinfo raise over a stored expression or zone (a bad expression,
    # one that never fires, a zone this Python lacks, a date past year 9999): one schedule's
    # trouble, never the tick's.
    except Exception as exc:
        reason = (
            str(exc) if isinstance(exc, errors.PostkitError) else f"{type(exc).__name__}: {exc}"
        )
        return DueRun(schedule, None, f"cannot compute the next run: {reason}")
    return DueRun(schedule, following)


def due_schedules(namespace: str, *, limit: int) -> Call[list[DueRun]]:
    def parse(rows: Rows) -> list[DueRun]:
        return [_due_run(row) for row in rows]

    params = _base(namespace, limit=_limit("due_schedules", limit))
    return Call("due_schedules", params, parse)


def fire_schedule(namespace: str, run: DueRun) -> Call[Fired | BrokenSchedule | None]:
    if run.next_run_at is None:
        raise errors.InvalidScheduleError(f"schedule {run.schedule.name!r}: {run.problem}")
    next_run_at = run.next_run_at
    params = _base(
        namespace,
        name=run.schedule.name,
        due_at=run.schedule.next_run_at,
        next_run_at=run.next_run_at,
    )

    def parse(rows: Rows) -> Fired | BrokenSchedule | None:
        if not rows:
            return None  # fenced out: fired or changed since it was read
        job_id, reason = rows[0]["job_id"], rows[0]["broken_reason"]
        if job_id is None:
            return BrokenSchedule(run.schedule.name, run.schedule.next_run_at, reason)
        return Fired(run.schedule.name, job_id, run.schedule.next_run_at, next_run_at)

    return Call("fire_schedule", params, parse)


def mark_schedule_broken(namespace: str, run: DueRun) -> Call[BrokenSchedule | None]:
    reason = _error_text(run.problem or "cannot compute the next run")
    params = _base(
        namespace, name=run.schedule.name, due_at=run.schedule.next_run_at, reason=reason
    )

    def parse(rows: Rows) -> BrokenSchedule | None:
        if not _scalar(rows):
            return None
        return BrokenSchedule(run.schedule.name, run.schedule.next_run_at, reason or "")

    return Call("mark_schedule_broken", params, parse)


# --------------------------------------------------------------------------------------------
# Maintenance: the worker's vacuum service (vacuum.py).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VacuumState:
    """Whether the session's role may vacuum ``postkit_queue.jobs``, and its dead rows now."""

    may_vacuum: bool
    dead_rows: int


def vacuum_state() -> Call[VacuumState]:
    return Call(
        "vacuum_state",
        {},
        lambda rows: VacuumState(bool(rows[0]["may_vacuum"]), int(rows[0]["dead_rows"])),
    )


def vacuum_lock() -> Call[bool]:
    """Try to become the one session vacuuming the jobs table; False when another is."""
    return Call("vacuum_lock", {}, _scalar)


def vacuum_jobs() -> Call[None]:
    """VACUUM the jobs table (a utility statement: autocommit only, no rows)."""
    return Call("vacuum_jobs", {}, lambda rows: None)


def vacuum_unlock() -> Call[bool]:
    return Call("vacuum_unlock", {}, _scalar)
