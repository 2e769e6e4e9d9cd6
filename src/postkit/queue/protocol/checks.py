"""Argument checks: each takes a value of an SDK call and returns it as it is bound, or raises
the :mod:`postkit.errors` exception of the argument it checks.

They check what must be right before a value can be bound at all (its Python type, that a
payload serializes to JSON, that text holds no NUL byte), and every limit the SQL functions
check, from :mod:`postkit.queue.limits`."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from postkit import errors
from postkit.queue import limits
from postkit.queue.records import Job

# The escape json.dumps writes for a NUL character: \u0000 after an even number of backslashes
# (an odd run would make it the literal text "\\u0000", which PostgreSQL stores fine).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def text(what: str, value: object) -> str | None:
    """Free text (a search string): any str without NUL or a lone surrogate, or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise errors.InvalidNameError(f"{what} must be a str, got {type(value).__name__}")
    if "\x00" in value:
        raise errors.InvalidNameError(f"{what} must not contain a NUL character")
    if _SURROGATE.search(value) is not None:
        raise errors.InvalidNameError(
            f"{what} must not contain a lone surrogate, which no text column stores"
        )
    return value


def name(what: str, value: object, *, required: bool) -> str | None:
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


def integer(
    what: str, value: object, error: type[errors.ValidationError], *, bounds: limits.Bounds
) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{what} must be an int, got {type(value).__name__}")
    if value not in bounds:
        raise error(f"{what} must be between {bounds.low} and {bounds.high}, got {value}")
    return value


def required_integer(
    what: str, value: object, error: type[errors.ValidationError], *, bounds: limits.Bounds
) -> int:
    checked = integer(what, value, error, bounds=bounds)
    if checked is None:
        raise error(f"{what} must be an int, got None")
    return checked


def limit(call: str, value: object, what: str = "limit") -> int:
    return required_integer(what, value, errors.InvalidLimitError, bounds=limits.LIMITS[call])


def duration(what: str, value: object) -> int | None:
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


def required_duration(what: str, value: object) -> int:
    microseconds = duration(what, value)
    if microseconds is None:
        raise errors.InvalidDurationError(f"{what} is required")
    return microseconds


def seconds(what: str, value: object) -> float | None:
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


def time(what: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise errors.InvalidDurationError(f"{what} must be a timezone-aware datetime")
    return value


def run_at(value: object, *, delay: object) -> datetime | None:
    """A push's absolute time: a timezone-aware datetime, given instead of a ``delay``. The
    statement turns it into the delay from the queue's clock (queries.sql), which the SQL
    module checks against the longest delay again; this check uses the machine's clock, so a
    run_at within a clock skew of that limit may pass here and be refused there."""
    if value is None:
        return None
    if delay is not None:
        raise errors.InvalidRunAtError("give delay or run_at, not both")
    if not isinstance(value, datetime):
        raise errors.InvalidRunAtError(f"run_at must be a datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise errors.InvalidRunAtError(
            f"run_at must be timezone-aware, got the naive {value.isoformat()}: which clock it "
            "means is unknown (e.g. datetime.now(timezone.utc) + timedelta(hours=1))"
        )
    longest = limits.DURATIONS["delay"].maximum
    if value - datetime.now(timezone.utc) > longest:
        raise errors.InvalidRunAtError(
            f"run_at {value.isoformat()} is more than {longest.days} days ahead"
        )
    return value


# A float json.dumps writes with a positive exponent (1e16 and beyond): its value is integral,
# and PostgreSQL stores it in jsonb as a numeric of scale 0 and writes every digit back without
# a fraction, which reads back as an int. The pattern may also match inside a string; that
# costs only the slower writing below.
_EXPONENT_FLOAT = re.compile(r"[0-9]e\+[0-9]")


def json_text(value: object, separators: tuple[str, str]) -> str:
    """``value`` as JSON text, as json.dumps writes it without ``ensure_ascii`` and without
    NaN, except that a float written with a positive exponent is written in plain digits with
    a fraction of zero (``2.5e+16`` as ``25000000000000000.0``), which jsonb keeps, so that it
    reads back as a float.

    Raises:
        TypeError, ValueError, RecursionError: as json.dumps.
    """
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=separators)
    if _EXPONENT_FLOAT.search(text) is None:
        return text
    return _plain_json(value, separators)


def _plain_json(value: Any, separators: tuple[str, str]) -> str:
    """:func:`json_text`'s slow path, for a value json.dumps wrote (so finite, acyclic)."""
    if isinstance(value, float):
        shown = float.__repr__(value)
        # The shortest digits that read back as the float (its repr's), with zeros after.
        return format(Decimal(shown), "f") + ".0" if "e+" in shown else shown
    if isinstance(value, Mapping):
        items = (
            limits.key_text(key) + separators[1] + _plain_json(item, separators)
            for key, item in value.items()
        )
        return "{" + separators[0].join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + separators[0].join(_plain_json(item, separators) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def payload(value: object) -> str:
    """A payload as the JSON text it is bound as.

    Raises:
        InvalidPayloadError: not JSON-serializable (or nested past the recursion limit), holds
            a NUL character or a lone surrogate (which no text column stores).
    """
    try:
        text = json_text(value, (",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise errors.InvalidPayloadError(f"payload is not JSON-serializable: {exc}") from exc
    # The substring test spares the common payload the regular expression.
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise errors.InvalidPayloadError("payload must not contain a NUL character (\\u0000)")
    # The driver encodes the text as UTF-8 when it sends it; an ASCII text always encodes.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise errors.InvalidPayloadError("payload must not contain lone surrogates") from exc
    return text


@dataclass(frozen=True)
class CheckedResult:
    """A job's result, checked by :func:`result` and written as the JSON text it is sent as.
    An ack given one sends that text as it is, without checking it again: the worker checks
    each handler's return value on the handler's own thread, and keeps what fits."""

    text: str


def result(value: object) -> CheckedResult | None:
    """A job's result (what its handler returned): None for None (no result), else the value as
    JSON text, by the rule of limits.RESULT_BYTES (the SQL module's check_result).

    Raises:
        InvalidResultError: not JSON-serializable (or nested past the recursion limit), holds a
            NUL character or a lone surrogate, or over the size limit.
    """
    if value is None or isinstance(value, CheckedResult):
        return value
    try:
        text = json_text(value, limits.RESULT_SEPARATORS)
    except (TypeError, ValueError, RecursionError) as exc:
        raise errors.InvalidResultError(f"result is not JSON-serializable: {exc}") from exc
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise errors.InvalidResultError("result must not contain a NUL character (\\u0000)")
    try:
        size = limits.result_bytes(value, text)
    except UnicodeEncodeError as exc:
        raise errors.InvalidResultError("result must not contain lone surrogates") from exc
    if size > limits.RESULT_BYTES:
        raise errors.InvalidResultError(
            f"result is {size} bytes as JSON text; the limit is {limits.RESULT_BYTES} (1 MiB)"
        )
    return CheckedResult(text)


def results(values: object, jobs: int) -> str | None:
    """The results of a batch of ``jobs`` acks as one JSON array (an entry per job: its result,
    or null for none), or None when there is none at all."""
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
        raise errors.InvalidResultError("results must be a list of one result (or None) per job")
    if len(values) != jobs:
        raise errors.InvalidResultError(f"{len(values)} results for {jobs} jobs")
    checked = [result(value) for value in values]
    if all(entry is None for entry in checked):
        return None
    return "[" + ", ".join("null" if entry is None else entry.text for entry in checked) + "]"


def trace_context(value: object) -> str | None:
    """A trace context (a W3C propagation carrier: str keys and values) as JSON text, or None.
    The rule of limits.TRACE_CONTEXT_BYTES (the SQL module's check_trace_context)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(entry, str) for key, entry in value.items()
    ):
        raise errors.InvalidTraceContextError("trace_context must be a mapping of str to str")
    if any("\x00" in key or "\x00" in entry for key, entry in value.items()):
        raise errors.InvalidTraceContextError("trace_context must not contain a NUL character")
    try:
        size = limits.trace_context_bytes(value)
    except UnicodeEncodeError as exc:
        raise errors.InvalidTraceContextError(
            "trace_context must not contain lone surrogates"
        ) from exc
    if size > limits.TRACE_CONTEXT_BYTES:
        raise errors.InvalidTraceContextError(
            f"trace_context is {size} bytes as JSON text; the limit is {limits.TRACE_CONTEXT_BYTES}"
        )
    # json.dumps's defaults take its cached encoder; PostgreSQL reads the \u escapes of
    # ensure_ascii as the characters they stand for, so the stored value is the one measured.
    return json.dumps(dict(value))


# The text form the server hands out (gen_random_uuid()::text), accepted as it is; any other
# spelling of a UUID goes through uuid.UUID, which costs more than the rest of an ack's checks.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def claim_token(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and _CANONICAL_UUID.fullmatch(value):
        return value
    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError as exc:
        raise errors.InvalidClaimTokenError(f"claim_token is not a UUID: {value!r}") from exc


def error_text(value: object) -> str | None:
    """An error for the job's history: text, or an exception rendered as 'Type: message'."""
    if value is None:
        return None
    text = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else str(value)
    # PostgreSQL text cannot hold NUL or a lone surrogate (a file name decoded with
    # surrogateescape puts one in an exception's message); an error message must never make a
    # nack fail, so each becomes U+FFFD.
    return _UNSTORABLE.sub("\ufffd", text)


def job_id(value: object) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidJobIdError(
            f"job must be a Job or an int job id, got {type(value).__name__}"
        )
    if value not in limits.JOB_ID:
        raise errors.InvalidJobIdError(f"job id is out of range: {value}")
    return value


def job_ids(value: Sequence[int] | None) -> list[int] | None:
    """A list of job ids (None: no list), each checked as :func:`job_id` checks one."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise errors.InvalidJobIdError(
            f"job_ids must be a list of int job ids, got {type(value).__name__}"
        )
    return [job_id(item) for item in value]


def dead_letter_position(after: object) -> dict[str, Any]:
    """The ``after_failed_at`` and ``after_job_id`` parameters of a dead-letter listing that
    continues after ``after`` (None: from the start): a :class:`DeadLetter`, or a cursor a web
    page sent back, whose values are checked as any caller's are."""
    if after is None:
        return {"after_failed_at": None, "after_job_id": None}
    try:
        failed_at, id_ = after.failed_at, after.job_id  # type: ignore[attr-defined]
    except AttributeError:
        raise errors.InvalidStateError(
            f"after must be a DeadLetter, or have its failed_at and job_id; got "
            f"{type(after).__name__}"
        ) from None
    at = time("after's failed_at", failed_at)
    if at is None:
        raise errors.InvalidDurationError("after's failed_at must be a timezone-aware datetime")
    return {"after_failed_at": at, "after_job_id": job_id(id_)}


def fraction(value: object) -> float:
    """A progress report's fraction: a finite number from 0 to 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.InvalidProgressError(
            f"progress must be a number from 0 to 1, got {type(value).__name__}"
        )
    if not 0 <= value <= 1:  # NaN too
        raise errors.InvalidProgressError(f"progress must be a fraction from 0 to 1, got {value}")
    return float(value)


def progress_note(value: object) -> str | None:
    """A progress report's note: None, or text of at most :data:`limits.PROGRESS_NOTE_CHARS`
    characters that PostgreSQL can store."""
    if value is None:
        return None
    if not isinstance(value, str) or "\x00" in value:
        raise errors.InvalidProgressError("a progress note must be text without NUL characters")
    if len(value) > limits.PROGRESS_NOTE_CHARS:
        raise errors.InvalidProgressError(
            f"a progress note is at most {limits.PROGRESS_NOTE_CHARS} characters, got {len(value)}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.InvalidProgressError(f"a progress note must be valid text: {exc}") from None
    return value


def parents(what: str, value: object) -> list[int] | None:
    """A job's ``depends_on``: None (no parents), or a list of job ids (``Job``s stand for
    their ids), at most :data:`limits.MAX_PARENTS`."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise errors.InvalidDependencyError(
            f"{what} must be a list of job ids, got {type(value).__name__}"
        )
    if len(value) > limits.MAX_PARENTS:
        raise errors.InvalidDependencyError(
            f"a job may depend on at most {limits.MAX_PARENTS} jobs, got {len(value)}"
        )
    ids = []
    for item in value:
        parent = item.id if isinstance(item, Job) else item
        if parent is None or isinstance(parent, bool) or not isinstance(parent, int):
            raise errors.InvalidDependencyError(
                f"{what} must hold job ids (int) or Jobs, got {type(item).__name__}"
            )
        if parent not in limits.JOB_ID:
            raise errors.InvalidDependencyError(f"{what} holds a job id out of range: {parent}")
        ids.append(parent)
    return ids


def claim(call: str, job: object, worker_id: object, token: object) -> dict[str, Any]:
    """The parameters that identify a claim: the job id, the worker and the fence (``token``,
    else the Job's own). A bare job id identifies none: the claim token, or at least the
    worker_id, must come with it."""
    if isinstance(job, Job) and token is None:
        token = job.claim_token
    params = {
        "job_id": job_id(job.id if isinstance(job, Job) else job),
        "worker_id": name("worker_id", worker_id, required=False),
        "claim_token": claim_token(token),
    }
    if params["worker_id"] is None and params["claim_token"] is None:
        raise errors.InvalidClaimTokenError(
            f"{call} needs the claim token pull returned (pass the Job, or claim_token=) or the "
            "worker_id the job was claimed under: a bare job id does not say whose claim it "
            "settles"
        )
    return params


def base(namespace: str, **params: Any) -> dict[str, Any]:
    return {"namespace": name("namespace", namespace, required=True), **params}


def queue_list(queues: object) -> list[str]:
    if isinstance(queues, str) or not hasattr(queues, "__iter__"):
        raise errors.InvalidNameError("queues must be a list of queue names")
    names = [name("queue", queue, required=True) for queue in queues]
    if not names:
        raise errors.InvalidNameError("queues must name at least one queue")
    return [name for name in names if name is not None]


def queue_weights(queues: Sequence[str], weights: object, *, among: str = "listed") -> list[int]:
    """``weights`` (queue name to weight; a queue of ``queues`` without one weighs 1) as one
    weight per entry of ``queues``. ``among`` says what ``queues`` are, in the error that names
    a queue outside them."""
    return _weights("queue", queues, weights, limits.QUEUE_WEIGHT, among=among)


def namespace_weights(namespaces: Sequence[str], weights: object) -> list[int]:
    """``weights`` (namespace to weight, 1 unless given) as one weight per entry of
    ``namespaces``: a shared worker's (``postkit.worker.namespace_shares``)."""
    return _weights("namespace", namespaces, weights, limits.NAMESPACE_WEIGHT, among="served")


def _weights(
    kind: str, names: Sequence[str], weights: object, bounds: limits.Bounds, *, among: str
) -> list[int]:
    if not isinstance(weights, Mapping):
        raise errors.InvalidFlowControlError(
            f"weights must map {kind} names to weights, got {type(weights).__name__}"
        )
    unknown = sorted(str(name) for name in weights if name not in names)
    if unknown:
        raise errors.InvalidFlowControlError(
            f"weights names {kind}(s) not {among}: {', '.join(map(repr, unknown))}"
        )
    checked = {
        name: required_integer(
            f"{kind} {name!r}'s weight", weight, errors.InvalidFlowControlError, bounds=bounds
        )
        for name, weight in weights.items()
    }
    return [checked.get(name, 1) for name in names]


def _array_literal(values: Sequence[int | str | None]) -> str:
    """A PostgreSQL array literal of checked ints and canonical UUID text, which need no
    quoting. A worker's round trip passes two arrays of as many elements as it settles jobs,
    and psycopg's list adapter cost more per element than the rest of the ack's work."""
    return "{" + ",".join("NULL" if value is None else str(value) for value in values) + "}"


def claims(call: str, jobs: Sequence[Job]) -> dict[str, str]:
    """The ``job_ids`` and ``claim_tokens`` parameters of ``call``, each claim checked."""
    if not isinstance(jobs, Sequence):
        raise errors.InvalidJobIdError(
            f"{call} takes a list of Job objects (their claims), got {type(jobs).__name__}"
        )
    others = [type(job).__name__ for job in jobs if not isinstance(job, Job)]
    if others:
        raise errors.InvalidJobIdError(
            f"{call} takes a list of Job objects (their claims), got an item of type {others[0]}"
        )
    claims = [claim(call, job, None, None) for job in jobs]
    return {
        "job_ids": _array_literal([claim["job_id"] for claim in claims]),
        "claim_tokens": _array_literal([claim["claim_token"] for claim in claims]),
    }
