"""Typed tasks, the producer's side: arguments checked against the function's signature before
any SQL, the payload's shape, push options beside the arguments, and pushes in the caller's
transaction, one at a time or many in one round trip."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import psycopg2
import pytest

from postkit.errors import (
    InvalidArgumentsError,
    InvalidMaxAttemptsError,
    InvalidNameError,
    InvalidRunAtError,
    PermanentError,
    ValidationError,
)
from postkit.queue import Job, QueueClient
from postkit.tasks import App, Task

JobOf = Callable[[int | None], Job]


class NoSQL:
    """A cursor that fails the test if anything is sent through it."""

    def execute(self, *args: Any, **kwargs: Any) -> None:
        pytest.fail(f"SQL was sent: {args[0]!r}")


class CountingCursor:
    """A cursor that counts the statements sent through it."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self.statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self._cursor.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@pytest.fixture
def send_otp(app: App) -> Task[..., dict[str, str]]:
    @app.task(queue="send_otp", max_attempts=5, timeout=30)
    def send_otp(user_id: str, *, channel: str = "whatsapp") -> dict[str, str]:
        return {"sent_to": user_id, "by": channel}

    return send_otp


# ---------------------------------------------------------------------------------------------
# The payload.
# ---------------------------------------------------------------------------------------------


def test_a_push_queues_the_call_as_its_named_arguments(
    send_otp: Task[..., Any], conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    by_name = send_otp.push(conn.cursor(), user_id="42")
    by_position = send_otp.push(conn.cursor(), "42", channel="sms")
    conn.commit()

    assert job_of(by_name).payload == {"args": [], "kwargs": {"user_id": "42"}}
    assert job_of(by_position).payload == {
        "args": [],
        "kwargs": {"user_id": "42", "channel": "sms"},
    }
    assert job_of(by_name).queue == "send_otp"


def spread(a: int, /, b: int, *rest: int, c: int, d: int = 0, **extra: Any) -> dict[str, Any]:
    return {"a": a, "b": b, "rest": rest, "c": c, "d": d, "extra": extra}


@pytest.mark.parametrize(
    ("args", "kwargs", "payload"),
    [
        ((1, 2), {"c": 3}, {"args": [1], "kwargs": {"b": 2, "c": 3}}),
        ((1,), {"b": 2, "c": 3, "e": [4]}, {"args": [1], "kwargs": {"b": 2, "c": 3, "e": [4]}}),
        ((1, 2, 5, 6), {"c": 3, "d": 4}, {"args": [1, 2, 5, 6], "kwargs": {"c": 3, "d": 4}}),
        ((1, 2), {"c": 3, "a": "extra"}, {"args": [1], "kwargs": {"b": 2, "c": 3, "a": "extra"}}),
    ],
    ids=["positional-or-keyword-by-name", "extra-keywords", "var-positional", "name-of-pos-only"],
)
def test_the_payload_round_trips_into_the_same_call(
    app: App, args: tuple[Any, ...], kwargs: dict[str, Any], payload: dict[str, Any]
) -> None:
    task = app.task(queue="spread")(spread)

    encoded = task.payload(*args, **kwargs)
    decoded_args, decoded_kwargs = task.signature.decode(json.loads(json.dumps(encoded)))

    assert encoded == payload
    assert spread(*decoded_args, **decoded_kwargs) == spread(*args, **kwargs)


def test_a_payload_may_leave_out_an_empty_args_or_kwargs(send_otp: Task[..., Any]) -> None:
    assert send_otp.signature.decode({"kwargs": {"user_id": "1"}}) == ([], {"user_id": "1"})
    assert send_otp.signature.decode({"args": ["1"]}) == (["1"], {})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"user_id": "1"}, 'must be a JSON object {"args": [...], "kwargs": {...}}'),
        ([1], 'must be a JSON object {"args": [...], "kwargs": {...}}'),
        ({"args": "1"}, 'must hold "args" as an array and "kwargs" as an object'),
        ({"kwargs": {}}, "does not fit send_otp(user_id, *, channel='whatsapp'): missing a "),
        ({"kwargs": {"user_id": "1", "to": "x"}}, "unexpected keyword argument 'to'"),
        ({"args": ["1", "sms"]}, "too many positional arguments"),
    ],
    ids=["old-style-dict", "array", "args-not-array", "missing", "unknown", "too-many"],
)
def test_a_payload_that_does_not_fit_the_signature_is_a_permanent_error(
    send_otp: Task[..., Any], payload: Any, message: str
) -> None:
    with pytest.raises(PermanentError) as raised:
        send_otp.signature.decode(payload)

    assert message in str(raised.value)


# ---------------------------------------------------------------------------------------------
# Arguments are checked before any SQL.
# ---------------------------------------------------------------------------------------------


class Opaque:
    pass


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def contains_itself() -> list[Any]:
    looped: list[Any] = []
    looped.append(looped)
    return looped


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (
            (),
            {},
            "send_otp(user_id, *, channel='whatsapp'): missing a required argument: 'user_id'",
        ),
        ((), {"uid": 42}, "unexpected keyword argument 'uid' (did you mean 'user_id'?)"),
        (("1", "sms"), {}, "too many positional arguments"),
        (("1",), {"user_id": "1"}, "multiple values for argument 'user_id'"),
        (("1",), {"channel": datetime(2030, 1, 1)}, "argument channel is a datetime, which JSON"),
        ((("1",),), {}, "argument user_id is a tuple, which JSON cannot carry exactly (it would"),
        (({"1"},), {}, "argument user_id is a set"),
        (([Opaque()],), {}, "argument user_id[0] is a Opaque"),
        (({1: "a"},), {}, "argument user_id has the key 1, a int: JSON object keys are text"),
        (({"a": [math.nan]},), {}, "argument user_id['a'][0] is nan, which JSON cannot carry"),
        ((contains_itself(),), {}, "argument user_id[0] contains itself"),
        (("a\ud800",), {}, "argument user_id holds a lone surrogate"),
        (({"\udfff": 1},), {}, "argument user_id has a key that holds a lone surrogate"),
        ((nested(3000),), {}, "argument user_id is nested too deeply for JSON"),
    ],
    ids=[
        "missing",
        "unknown",
        "too-many",
        "twice",
        "datetime",
        "tuple",
        "set",
        "object",
        "int-key",
        "nan",
        "cycle",
        "lone-surrogate",
        "lone-surrogate-key",
        "nested-3000-deep",
    ],
)
def test_arguments_that_do_not_fit_raise_before_any_sql(
    send_otp: Task[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentsError) as raised:
        send_otp.push(NoSQL(), *args, **kwargs)

    assert message in str(raised.value)
    assert isinstance(raised.value, ValidationError) and isinstance(raised.value, TypeError)


def test_a_rejected_push_leaves_the_callers_transaction_usable(
    send_otp: Task[..., Any], conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    with pytest.raises(InvalidArgumentsError):
        send_otp.push(conn.cursor(), uid="42")
    job_id = send_otp.push(conn.cursor(), "42")
    conn.commit()

    assert job_of(job_id).payload["kwargs"] == {"user_id": "42"}


def test_calling_a_task_runs_its_function_here(send_otp: Task[..., Any]) -> None:
    assert send_otp("7", channel="sms") == {"sent_to": "7", "by": "sms"}
    assert send_otp.__name__ == "send_otp" and send_otp.__wrapped__ is send_otp.function


# ---------------------------------------------------------------------------------------------
# Push options, beside the arguments.
# ---------------------------------------------------------------------------------------------


def test_push_options_sit_beside_arguments_of_the_same_name(
    app: App, conn: psycopg.Connection[Any], client: QueueClient, job_of: JobOf
) -> None:
    @app.task(queue="remind")
    def remind(cursor: str, delay: int, priority: int = 0) -> None: ...

    now = remind.push(conn.cursor(), cursor="c", delay=600, priority=9)
    later = remind.options(delay=600, priority=3).push(conn.cursor(), "c", delay=5)
    conn.commit()

    assert job_of(now).payload == {
        "args": [],
        "kwargs": {"cursor": "c", "delay": 600, "priority": 9},
    }
    assert job_of(now).priority == 0
    assert job_of(later).payload == {"args": [], "kwargs": {"cursor": "c", "delay": 5}}
    assert job_of(later).priority == 3
    seconds = (job_of(later).run_at - client.clock()).total_seconds()  # type: ignore[operator]
    assert 590 < seconds <= 600
    pulled = client.pull("remind")
    assert pulled is not None and pulled.id == now, "the argument called delay delays nothing"


def test_options_set_run_at_priority_max_attempts_and_unique_key(
    send_otp: Task[..., Any], conn: psycopg.Connection[Any], client: QueueClient, job_of: JobOf
) -> None:
    run_at = client.clock() + timedelta(hours=1)
    scheduled = send_otp.options(run_at=run_at, priority=7).options(max_attempts=2)
    first = scheduled.options(unique_key="otp:1").push(conn.cursor(), "1")
    second = scheduled.options(unique_key="otp:1").push(conn.cursor(), "1")
    conn.commit()

    job = job_of(first)
    assert (job.run_at, job.priority, job.max_attempts, job.unique_key) == (
        run_at,
        7,
        2,
        "otp:1",
    )
    assert second is None, "the unique key deduplicates"
    assert send_otp.push_options.run_at is None, "options() leaves the task itself unchanged"


def test_the_tasks_max_attempts_and_priority_are_every_pushs_unless_it_says_otherwise(
    app: App, conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    @app.task(queue="report", max_attempts=5, priority=2)
    def report(n: int) -> None: ...

    plain = report.push(conn.cursor(), 1)
    own = report.options(max_attempts=9, priority=-1).push(conn.cursor(), 2)
    [batched] = report.push_many(conn.cursor(), [{"n": 3}])
    conn.commit()

    assert (job_of(plain).max_attempts, job_of(plain).priority) == (5, 2)
    assert (job_of(own).max_attempts, job_of(own).priority) == (9, -1)
    assert (job_of(batched).max_attempts, job_of(batched).priority) == (5, 2)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"delay": 5, "run_at": datetime(2030, 1, 1, tzinfo=timezone.utc)},
            InvalidRunAtError,
            "not both",
        ),
        ({"run_at": datetime(2030, 1, 1)}, InvalidRunAtError, "naive"),
        ({"max_attempts": 0}, InvalidMaxAttemptsError, "between 1 and 1000"),
        ({"unique_key": " "}, InvalidNameError, "unique_key"),
    ],
    ids=["delay-and-run_at", "naive-run_at", "max_attempts", "blank-unique-key"],
)
def test_a_bad_push_option_raises_when_it_is_set(
    send_otp: Task[..., Any], options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        send_otp.options(**options)


def test_delay_then_run_at_in_two_option_calls_is_refused_too(send_otp: Task[..., Any]) -> None:
    with pytest.raises(InvalidRunAtError, match="not both"):
        send_otp.options(delay=5).options(run_at=datetime(2030, 1, 1, tzinfo=timezone.utc))


def test_unique_by_keys_each_job_by_those_arguments_defaults_included(
    app: App, conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    @app.task(queue="otp", unique_by=("user_id", "channel"))
    def otp(user_id: str, note: str = "", channel: str = "whatsapp") -> None: ...

    first = otp.push(conn.cursor(), "1", note="a")
    same = otp.push(conn.cursor(), user_id="1", channel="whatsapp", note="b")
    other = otp.push(conn.cursor(), "1", channel="sms")
    conn.commit()

    assert job_of(first).unique_key == '["1","whatsapp"]'
    assert same is None
    assert job_of(other).unique_key == '["1","sms"]'


def test_a_unique_key_too_long_for_a_name_is_a_digest(
    app: App, conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    @app.task(queue="long", unique_by=["text"])
    def long(text: str) -> None: ...

    job_id = long.push(conn.cursor(), "x" * 200)
    duplicate = long.push(conn.cursor(), "x" * 200)
    conn.commit()

    key = job_of(job_id).unique_key
    assert key is not None and key.startswith("sha256:") and len(key) == 71
    assert duplicate is None


@pytest.mark.parametrize(
    ("unique_by", "message"),
    [
        (("uid",), "unique_by names 'uid', which is not a named parameter of f(user_id, *rest"),
        (("rest",), "unique_by names 'rest'"),
        ("user_id", "unique_by takes a sequence of parameter names, e.g. ('user_id',), not a str"),
    ],
    ids=["unknown", "var-positional", "str"],
)
def test_unique_by_must_name_parameters_when_the_task_is_declared(
    app: App, unique_by: Any, message: str
) -> None:
    def f(user_id: str, *rest: str) -> None: ...

    with pytest.raises(InvalidArgumentsError) as raised:
        app.task(queue="q", unique_by=unique_by)(f)

    assert message in str(raised.value)
    assert "q" not in app.handlers


def test_a_task_is_refused_a_queue_that_has_one_and_out_of_range_options(app: App) -> None:
    app.task(queue="q")(lambda: None)
    with pytest.raises(ValueError, match="already has a handler"):
        app.task(queue="q")(lambda: None)
    with pytest.raises(InvalidMaxAttemptsError):
        app.task(queue="r", max_attempts=1001)
    with pytest.raises(ValueError, match="timeout must be positive"):
        app.task(queue="r", timeout=0)(lambda: None)


# ---------------------------------------------------------------------------------------------
# In the caller's transaction; many in one round trip.
# ---------------------------------------------------------------------------------------------


def test_a_push_commits_or_rolls_back_with_the_callers_transaction(
    send_otp: Task[..., Any], conn: psycopg.Connection[Any], client: QueueClient, job_of: JobOf
) -> None:
    rolled_back = send_otp.push(conn.cursor(), "1")
    conn.rollback()
    committed = send_otp.push(conn.cursor(), "2")
    assert committed is not None and client.get_job(committed) is None, "not before the commit"
    conn.commit()

    assert rolled_back is not None and client.get_job(rolled_back) is None
    assert job_of(committed).payload["kwargs"] == {"user_id": "2"}


def test_push_many_pushes_every_call_in_one_statement(
    send_otp: Task[..., Any], conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    cursor = CountingCursor(conn.cursor())

    ids = send_otp.options(priority=4).push_many(
        cursor, [{"user_id": "1"}, {"user_id": "2", "channel": "sms"}]
    )
    conn.commit()

    assert cursor.statements == 1
    assert [job_of(job_id).payload["kwargs"] for job_id in ids] == [
        {"user_id": "1"},
        {"user_id": "2", "channel": "sms"},
    ]
    assert {job_of(job_id).priority for job_id in ids} == {4}


def test_push_many_keys_each_call_by_unique_by(
    app: App, conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    @app.task(queue="otp", unique_by=["user_id"])
    def otp(user_id: str) -> None: ...

    ids = otp.push_many(conn.cursor(), [{"user_id": "1"}, {"user_id": "2"}, {"user_id": "1"}])
    conn.commit()

    assert ids[2] is None
    assert [job_of(job_id).unique_key for job_id in ids[:2]] == ['["1"]', '["2"]']


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([{"user_id": "1"}, {"uid": "2"}], "push_many's call 1: send_otp(user_id, *, channel="),
        ([{"user_id": "1"}, ["2"]], "push_many's call 1 is a list: each call is a mapping"),
        ({"user_id": "1"}, "push_many takes a list of calls"),
    ],
    ids=["unknown-argument", "not-a-mapping", "one-mapping"],
)
def test_push_many_checks_every_call_before_any_sql(
    send_otp: Task[..., Any], calls: Any, message: str
) -> None:
    with pytest.raises(InvalidArgumentsError) as raised:
        send_otp.push_many(NoSQL(), calls)

    assert message in str(raised.value)


def test_push_many_refuses_one_unique_key_for_many_jobs(send_otp: Task[..., Any]) -> None:
    with pytest.raises(InvalidArgumentsError, match="unique_by"):
        send_otp.options(unique_key="k").push_many(NoSQL(), [{"user_id": "1"}])


# ---------------------------------------------------------------------------------------------
# Any DB-API cursor, and psycopg's async cursors.
# ---------------------------------------------------------------------------------------------


def test_a_task_pushes_through_a_psycopg2_cursor(
    send_otp: Task[..., Any], dsn: str, job_of: JobOf
) -> None:
    connection = psycopg2.connect(dsn)
    try:
        job_id = send_otp.push(connection.cursor(), "42")
        [batched] = send_otp.push_many(connection.cursor(), [{"user_id": "43"}])
        connection.commit()
    finally:
        connection.close()

    assert job_of(job_id).payload["kwargs"] == {"user_id": "42"}
    assert job_of(batched).payload["kwargs"] == {"user_id": "43"}


def test_a_task_pushes_through_a_psycopg_async_cursor(
    send_otp: Task[..., Any], dsn: str, job_of: JobOf
) -> None:
    async def push() -> list[int | None]:
        async with await psycopg.AsyncConnection.connect(dsn) as connection:
            one = await send_otp.push_async(connection.cursor(), user_id="42")
            many = await send_otp.push_many_async(connection.cursor(), [{"user_id": "43"}])
            with pytest.raises(InvalidArgumentsError):
                await send_otp.push_async(connection.cursor(), uid="44")
            return [one, *many]  # committed as the block ends

    ids = asyncio.run(push())

    assert [job_of(job_id).payload["kwargs"] for job_id in ids] == [
        {"user_id": "42"},
        {"user_id": "43"},
    ]
