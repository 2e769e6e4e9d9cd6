"""Recurring jobs: cron and interval schedules, each run fired exactly once.

The SDK computes run times (``protocol.cron.next_run_after``, unit-tested at the end with fixed
instants); the database decides which schedules are due and fences each run on its due time.
Time moves only through the session clock offset (``shift_clock``).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from croniter import croniter
from psycopg.pq import TransactionStatus

from postkit import errors
from postkit.queue import QueueClient
from postkit.queue.protocol.cron import check_cron, cron_problem, next_run_after
from postkit.queue.records import BrokenSchedule, Fired, Schedule

Shift = Callable[[QueueClient, float], None]

Q = "reports"
UTC = timezone.utc
PARIS = ZoneInfo("Europe/Paris")
BLOCK_TIMEOUT = 10.0


def db_clock(client: QueueClient) -> datetime:
    client.cursor.execute("SELECT postkit_queue.clock()")
    now: datetime = client.cursor.fetchone()[0]
    return now


def commit(client: QueueClient) -> None:
    client.cursor.connection.commit()


def live_jobs(client: QueueClient, queue: str = Q) -> list[tuple[int, Any]]:
    client.cursor.execute(
        "SELECT id, payload FROM postkit_queue.jobs WHERE namespace = %s AND queue = %s"
        " ORDER BY id",
        (client.namespace, queue),
    )
    return [(row[0], row[1]) for row in client.cursor.fetchall()]


def schedule_named(client: QueueClient, name: str) -> Schedule:
    (found,) = [s for s in client.schedules() if s.name == name]
    return found


def due_now(client: QueueClient, shift_clock: Shift, schedule: Schedule) -> float:
    """Shift the client's clock one second past the schedule's next run; returns the offset."""
    shift_clock(client, 0)
    offset = (schedule.next_run_at - db_clock(client)).total_seconds() + 1
    shift_clock(client, offset)
    return offset


def every_minute(client: QueueClient, name: str = "digest", **kwargs: Any) -> Schedule:
    return client.create_schedule(name, Q, {"digest": name}, every=60, **kwargs)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        yield pool


# --------------------------------------------------------------------------------------------
# Creating schedules.
# --------------------------------------------------------------------------------------------


def test_a_cron_schedule_first_runs_at_the_next_time_its_expression_names(
    queue: QueueClient,
) -> None:
    before = db_clock(queue)
    schedule = queue.create_schedule(
        "sweep", Q, {"sweep": True}, cron="*/5 * * * *", timezone="Europe/Paris"
    )
    after = db_clock(queue)

    assert (schedule.cron, schedule.timezone, schedule.every) == (
        "*/5 * * * *",
        "Europe/Paris",
        None,
    )
    expected = {
        next_run_after(moment, cron="*/5 * * * *", timezone="Europe/Paris", every=None)
        for moment in (before, after)
    }
    assert schedule.next_run_at in expected
    assert schedule.next_run_at.minute % 5 == 0
    assert timedelta(0) < schedule.next_run_at - before <= timedelta(minutes=5)


def test_a_cron_schedule_runs_at_the_wall_clock_time_of_its_time_zone(
    queue: QueueClient,
) -> None:
    before = db_clock(queue)
    schedule = queue.create_schedule("morning", Q, {}, cron="30 9 * * *", timezone="Europe/Paris")

    local = schedule.next_run_at.astimezone(PARIS)
    assert (local.hour, local.minute, local.second) == (9, 30, 0)
    assert timedelta(0) < schedule.next_run_at - before <= timedelta(days=1)


def test_an_interval_schedule_first_runs_one_interval_from_now(queue: QueueClient) -> None:
    before = db_clock(queue)
    schedule = every_minute(queue)
    after = db_clock(queue)

    assert (schedule.every, schedule.cron, schedule.payload) == (
        timedelta(seconds=60),
        None,
        {"digest": "digest"},
    )
    assert before + timedelta(seconds=60) <= schedule.next_run_at <= after + timedelta(seconds=60)
    assert (schedule.paused, schedule.last_run_at, schedule.last_job_id) == (False, None, None)


BAD_SCHEDULES: dict[str, dict[str, Any]] = {
    "cron-garbage": {"cron": "every five minutes"},
    "cron-four-fields": {"cron": "*/5 * * *"},
    "cron-six-fields": {"cron": "0 */5 * * * *"},
    "cron-minute-61": {"cron": "61 * * * *"},
    "cron-not-text": {"cron": 5},
    "unknown-time-zone": {"cron": "0 9 * * *", "timezone": "Mars/Olympus_Mons"},
    "time-zone-not-text": {"cron": "0 9 * * *", "timezone": None},
    "both-cron-and-every": {"cron": "0 9 * * *", "every": 60},
    "neither-cron-nor-every": {},
    "every-under-a-second": {"every": 0.5},
    "every-negative": {"every": -60},
}


@pytest.mark.parametrize("bad", BAD_SCHEDULES.values(), ids=BAD_SCHEDULES.keys())
def test_an_invalid_schedule_is_refused_before_any_sql_is_sent(
    queue: QueueClient, conn: psycopg.Connection, bad: dict[str, Any]
) -> None:
    with pytest.raises(errors.InvalidScheduleError):
        queue.create_schedule("bad", Q, {}, **bad)

    assert conn.info.transaction_status == TransactionStatus.IDLE
    assert queue.schedules() == []


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("61 * * * *", "'61' in the minute field of '61 * * * *' is out of range (0 to 59)"),
        ("0 24 * * *", "'24' in the hour field of '0 24 * * *' is out of range (0 to 23)"),
        ("0 9 0 * *", "'0' in the day of month field of '0 9 0 * *' is out of range (1 to 31)"),
        ("0 9 1 13 *", "'13' in the month field of '0 9 1 13 *' is out of range (1 to 12)"),
        ("0 9 * * 8", "'8' in the day of week field of '0 9 * * 8' is out of range (0 to 7)"),
        ("0 9-30 * * *", "'9-30' in the hour field of '0 9-30 * * *' is out of range (0 to 23)"),
        ("*/0 * * * *", "the step of '*/0' in the minute field of '*/0 * * * *' must be from 1"),
        (
            "0 9 * * someday",
            "'someday' in the day of week field of '0 9 * * someday' is not a cron",
        ),
        ("0 9 * *", "not a 5-field cron expression (minute hour day-of-month month day-of-week)"),
    ],
)
def test_a_bad_cron_expression_is_refused_with_a_message_naming_the_bad_field(
    queue: QueueClient, cron: str, message: str
) -> None:
    with pytest.raises(errors.InvalidScheduleError) as raised:
        queue.create_schedule("bad", Q, {}, cron=cron)

    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("cron", "every", "zone"),
    [
        ("0 9 * * *", "1 minute", "UTC"),
        (None, None, "UTC"),
        ("0 9 * * *", None, "Mars/Olympus_Mons"),
        ("  ", None, "UTC"),
    ],
    ids=["both", "neither", "unknown-time-zone", "blank-cron"],
)
def test_the_sql_module_refuses_an_invalid_schedule_itself(
    conn: psycopg.Connection, namespace: str, cron: str | None, every: str | None, zone: str
) -> None:
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            "SELECT postkit_queue.save_schedule(%s, 's', 'q', '{}', now(), %s, %s, %s::interval)",
            (namespace, cron, zone, every),
        )

    assert raised.value.sqlstate == "PKQ10"


# Expressions the SDK and the SQL module must judge alike: accepted ones, and refused ones
# (among them croniter's own extensions, such as W and R, which Postkit does not schedule).
CRON_ACCEPTED = [
    "*/5 * * * *",
    "0 9 * * MON-FRI",
    "0 0 L * *",
    "0 0 L 2 *",
    "0 0 29 2 *",
    "0 0 30 2 1",
    "0 0 31 2 0-6",
    "0 0 ? * ?",
    "0 0 * * 5#3",
    "0 0 * feb 1#5,sun#2",
    "0/15 1-23/2 1,15 jan-dec/3 7",
    "00 00 01 01 00",
    "\t0 9 * * *\n",
]
CRON_REFUSED = [
    "every five minutes",
    "0 0 30 2 *",
    "0 0 31 4,6,9,11 *",
    "0 0 30,31 feb ?",
    "0 0 1 * 1#2",
    "0 0 * * 1#6",
    "0 0 * * 1,2#2",
    "*/0 * * * *",
    "*/61 * * * *",
    "5-1 * * * *",
    "61 * * * *",
    "0 0 15W * *",
    "R * * * *",
    "0 0 * * 5L",
    "0 0 * * mon-fri-sat",
    "0 0 * jan-foo *",
    "0 9 * * *\u00a0",
    "0 9 * * * *",
    "",
]


@pytest.mark.parametrize("cron", CRON_ACCEPTED + CRON_REFUSED)
def test_the_sql_module_accepts_exactly_the_cron_expressions_the_sdk_accepts(
    conn: psycopg.Connection, namespace: str, cron: str
) -> None:
    try:
        check_cron(cron)
        sdk_accepts = True
    except errors.InvalidScheduleError:
        sdk_accepts = False
    try:
        with conn.transaction():
            conn.execute(
                "SELECT postkit_queue.save_schedule(%s, 's', 'q', '{}', now(), %s)",
                (namespace, cron),
            )
    except psycopg.Error as exc:
        assert exc.sqlstate == "PKQ10", exc
        assert not sdk_accepts, f"SQL refused {cron!r}, which the SDK accepts: {exc}"
    else:
        assert sdk_accepts, f"SQL accepted {cron!r}, which the SDK refuses"
    assert sdk_accepts is (cron in CRON_ACCEPTED)


def random_cron(rng: random.Random) -> str:
    """Mostly in-range values for each field, with the edges and some junk."""
    pools = [
        ["0", "5", "07", "30", "59", "60"],
        ["0", "9", "23", "24"],
        ["1", "15", "28", "29", "30", "31", "32", "0"],
        ["1", "2", "4", "9", "12", "13", "jan", "Feb", "apr", "sep", "nov", "dec", "xyz"],
        ["0", "1", "5", "7", "8", "mon", "FRI", "sun", "sat", "abc"],
    ]
    steps = ["1", "2", "5", "8", "12", "24", "31", "60", "61", "0"]

    def item(index: int) -> str:
        a, b, n = rng.choice(pools[index]), rng.choice(pools[index]), rng.choice(steps)
        forms = ["*", a, a, f"{a}-{b}", f"*/{n}", f"{a}-{b}/{n}", f"{a}/{n}"]
        forms += {2: ["L", "?"], 4: ["?", f"{a}#{rng.randint(0, 6)}"]}.get(index, [])
        return rng.choice(forms)

    def field(index: int) -> str:
        return ",".join(item(index) for _ in range(rng.choice([1, 1, 2])))

    return " ".join(field(index) for index in range(5))


def test_the_sdk_and_the_sql_module_judge_random_cron_expressions_alike(
    conn: psycopg.Connection,
) -> None:
    rng = random.Random(20261201)
    expressions = [random_cron(rng) for _ in range(5000)]
    expressions += [f"0 0 {d} {m} *" for d in ("28", "29", "30", "31") for m in range(1, 13)]

    rows = conn.execute(
        "SELECT e, postkit_queue.cron_problem(e) IS NULL FROM unnest(%s::text[]) AS e",
        (expressions,),
    ).fetchall()

    disagreements = [(e, sql) for e, sql in rows if sql is not (cron_problem(e) is None)]
    assert disagreements == []
    accepted = [e for e, sql in rows if sql]
    assert len(accepted) > 200, "the sample exercises accepted expressions too"
    for cron in accepted:  # every accepted expression is one croniter parses and can fire
        assert croniter.is_valid(cron), cron
        croniter(cron, datetime(2026, 12, 1, tzinfo=UTC)).get_next(datetime)


def test_creating_a_schedule_again_replaces_it(queue: QueueClient) -> None:
    every_minute(queue)

    replaced = queue.create_schedule("digest", "other", {"v": 2}, cron="0 * * * *")

    assert [s.name for s in queue.schedules()] == ["digest"]
    assert (replaced.queue, replaced.payload, replaced.cron, replaced.every) == (
        "other",
        {"v": 2},
        "0 * * * *",
        None,
    )


# --------------------------------------------------------------------------------------------
# Listing, pausing, deleting.
# --------------------------------------------------------------------------------------------


def test_schedules_lists_every_schedule_of_the_namespace_by_name(
    queue: QueueClient, namespace: str
) -> None:
    every_minute(queue, "zeta")
    every_minute(queue, "alpha")
    every_minute(QueueClient(queue.cursor, namespace=f"{namespace}-other"), "elsewhere")

    assert [s.name for s in queue.schedules()] == ["alpha", "zeta"]


def test_pausing_and_resuming_a_schedule(queue: QueueClient) -> None:
    every_minute(queue)

    assert queue.pause_schedule("digest") is True
    assert schedule_named(queue, "digest").paused is True
    assert queue.resume_schedule("digest") is True
    assert schedule_named(queue, "digest").paused is False
    assert queue.pause_schedule("missing") is False
    assert queue.resume_schedule("missing") is False


def test_deleting_a_schedule(queue: QueueClient) -> None:
    every_minute(queue, "kept")
    every_minute(queue, "dropped")

    assert queue.delete_schedule("dropped") is True

    assert [s.name for s in queue.schedules()] == ["kept"]
    assert queue.delete_schedule("dropped") is False


# --------------------------------------------------------------------------------------------
# Ticking.
# --------------------------------------------------------------------------------------------


def test_a_schedule_that_is_not_due_does_not_fire(queue: QueueClient) -> None:
    every_minute(queue)

    assert queue.tick_schedules() == []
    assert live_jobs(queue) == []


def test_a_tick_fires_a_due_schedule_once_and_moves_it_to_its_next_run(
    queue: QueueClient, shift_clock: Shift
) -> None:
    schedule = queue.create_schedule("digest", Q, {"digest": "daily"}, every=60, priority=4)
    due_now(queue, shift_clock, schedule)

    (fired,) = queue.tick_schedules()

    assert fired == Fired(
        "digest", fired.job_id, schedule.next_run_at, schedule.next_run_at + timedelta(seconds=60)
    )
    job = queue.pull(Q)
    assert job is not None
    assert (job.id, job.payload, job.priority) == (fired.job_id, {"digest": "daily"}, 4)
    assert queue.tick_schedules() == []
    moved = schedule_named(queue, "digest")
    assert (moved.next_run_at, moved.last_job_id) == (fired.next_run_at, fired.job_id)
    assert moved.last_run_at is not None and moved.last_run_at >= schedule.next_run_at


def test_a_cron_schedule_fires_and_moves_to_its_next_cron_time(
    queue: QueueClient, shift_clock: Shift
) -> None:
    schedule = queue.create_schedule("sweep", Q, {}, cron="*/5 * * * *", timezone="Europe/Paris")
    due_now(queue, shift_clock, schedule)

    before = db_clock(queue)
    (fired,) = queue.tick_schedules()
    after = db_clock(queue)

    assert fired.due_at == schedule.next_run_at
    assert fired.next_run_at in {
        next_run_after(moment, cron="*/5 * * * *", timezone="Europe/Paris", every=None)
        for moment in (before, after)
    }
    assert fired.next_run_at > after


def test_after_a_long_gap_one_tick_fires_one_run_and_keeps_the_phase(
    queue: QueueClient, shift_clock: Shift
) -> None:
    schedule = every_minute(queue)
    shift_clock(queue, 3 * 3600)  # three hours without a ticker: 180 runs missed

    fired = queue.tick_schedules()
    now = db_clock(queue)

    assert len(fired) == 1
    assert len(live_jobs(queue)) == 1
    following = fired[0].next_run_at
    assert now < following <= now + timedelta(seconds=60)
    assert (following - schedule.next_run_at) % timedelta(seconds=60) == timedelta(0)
    assert queue.tick_schedules() == []


def test_a_paused_schedule_does_not_fire_and_fires_once_when_resumed(
    queue: QueueClient, shift_clock: Shift
) -> None:
    schedule = every_minute(queue)
    queue.pause_schedule("digest")
    shift_clock(queue, 600)

    assert queue.tick_schedules() == []
    assert live_jobs(queue) == []

    queue.resume_schedule("digest")
    (fired,) = queue.tick_schedules()
    assert fired.due_at == schedule.next_run_at
    assert len(live_jobs(queue)) == 1


def test_concurrent_tickers_fire_a_due_schedule_once(
    make_client: Callable[[], QueueClient], shift_clock: Shift, executor: ThreadPoolExecutor
) -> None:
    tickers = 6
    owner = make_client()
    schedule = every_minute(owner)
    commit(owner)
    clients = [make_client() for _ in range(tickers)]
    for client in clients:
        shift_clock(client, 61)
        commit(client)
    start = threading.Barrier(tickers, timeout=BLOCK_TIMEOUT)

    def tick(client: QueueClient) -> list[Fired]:
        start.wait()
        fired = client.tick_schedules()
        commit(client)
        return fired

    results = [f.result(timeout=60) for f in [executor.submit(tick, c) for c in clients]]

    fired = [run for result in results for run in result]
    assert [run.due_at for run in fired] == [schedule.next_run_at]
    assert [job_id for job_id, _ in live_jobs(owner)] == [fired[0].job_id]


def test_a_ticker_skips_a_schedule_another_open_tick_is_firing(
    make_client: Callable[[], QueueClient], shift_clock: Shift
) -> None:
    first, second = make_client(), make_client()
    every_minute(first)
    commit(first)
    for client in (first, second):
        shift_clock(client, 61)
    second.cursor.execute("SET lock_timeout = '2s'")  # waiting would fail, not hang
    commit(second)

    (fired,) = first.tick_schedules()  # transaction left open: the schedule stays locked
    assert second.tick_schedules() == []  # skipped at once
    commit(second)
    commit(first)

    assert second.tick_schedules() == []  # and once committed it is no longer due
    assert [job_id for job_id, _ in live_jobs(second)] == [fired.job_id]


def stored_before_the_validator(client: QueueClient, name: str, cron: str) -> None:
    """Give a saved schedule a cron expression the SQL module refuses today, as one saved
    before it checked them (written to the table directly, as only the owner can)."""
    client.cursor.execute(
        "UPDATE postkit_queue.schedules SET cron = %s, every = NULL"
        " WHERE namespace = %s AND name = %s",
        (cron, client.namespace, name),
    )


@pytest.mark.parametrize("cron", ["every five minutes", "0 0 30 2 *"])
def test_a_schedule_whose_next_run_cannot_be_computed_is_marked_broken_and_the_others_fire(
    queue: QueueClient, shift_clock: Shift, cron: str
) -> None:
    every_minute(queue, "bad")
    stored_before_the_validator(queue, "bad", cron)
    good = every_minute(queue, "good")
    due_now(queue, shift_clock, good)

    outcomes = queue.tick_schedules()

    [fired] = [o for o in outcomes if isinstance(o, Fired)]
    [broken] = [o for o in outcomes if isinstance(o, BrokenSchedule)]
    assert (fired.name, broken.name) == ("good", "bad")
    assert broken.reason.startswith("cannot compute the next run: ")
    bad = schedule_named(queue, "bad")
    assert bad.broken_at is not None and bad.broken_reason == broken.reason
    assert [job for job in live_jobs(queue)] == [(fired.job_id, {"digest": "good"})]


def test_a_broken_schedule_is_skipped_by_later_ticks_until_it_is_saved_again(
    queue: QueueClient, shift_clock: Shift
) -> None:
    every_minute(queue, "bad")
    stored_before_the_validator(queue, "bad", "every five minutes")
    shift_clock(queue, 120)
    [broken] = queue.tick_schedules()
    assert isinstance(broken, BrokenSchedule)

    shift_clock(queue, 240)
    assert queue.tick_schedules() == [], "a broken schedule neither fires nor is reported again"

    repaired = every_minute(queue, "bad")
    assert (repaired.broken_at, repaired.broken_reason) == (None, None)
    due_now(queue, shift_clock, repaired)
    [fired] = queue.tick_schedules()
    assert isinstance(fired, Fired) and fired.name == "bad"


def test_a_schedule_whose_job_its_queue_refuses_is_marked_broken_and_the_others_fire(
    queue: QueueClient, shift_clock: Shift
) -> None:
    big = queue.create_schedule("big", Q, {"blob": os.urandom(2000).hex()}, every=60)
    queue.create_schedule("small", Q, {}, every=60)
    queue.configure_queue(Q, max_payload_bytes=1024)  # after the schedule was saved
    due_now(queue, shift_clock, big)

    outcomes = queue.tick_schedules()

    [fired] = [o for o in outcomes if isinstance(o, Fired)]
    [broken] = [o for o in outcomes if isinstance(o, BrokenSchedule)]
    assert (fired.name, broken.name, broken.due_at) == ("small", "big", big.next_run_at)
    assert broken.reason.startswith("cannot push its job: ")
    assert "max_payload_bytes" in broken.reason
    assert [job_id for job_id, _ in live_jobs(queue)] == [fired.job_id]
    assert schedule_named(queue, "big").broken_reason == broken.reason


def test_the_sql_module_refuses_a_run_time_no_reader_can_use(
    conn: psycopg.Connection, namespace: str
) -> None:
    for next_run_at in ("infinity", "20000-01-01", "0044-03-15 BC", "2300-01-01"):
        with pytest.raises(psycopg.Error) as raised, conn.transaction():
            conn.execute(
                "SELECT postkit_queue.save_schedule(%s, 's', 'q', '{}', %s, NULL, 'UTC',"
                " interval '1 hour')",
                (namespace, next_run_at),
            )
        assert raised.value.sqlstate == "PKQ10", next_run_at
    with pytest.raises(psycopg.Error) as raised, conn.transaction():
        conn.execute(
            "SELECT postkit_queue.save_schedule(%s, 's', 'q', '{}', now(), NULL, 'UTC',"
            " interval '1 month')",
            (namespace,),
        )
    assert raised.value.sqlstate == "PKQ05", "an interval of months has no fixed length"


def test_fire_schedule_with_a_stale_due_time_fires_nothing(
    queue: QueueClient, shift_clock: Shift
) -> None:
    schedule = every_minute(queue)
    due_now(queue, shift_clock, schedule)
    (fired,) = queue.tick_schedules()

    queue.cursor.execute(
        "SELECT postkit_queue.fire_schedule(%s, 'digest', %s, %s)",
        (queue.namespace, schedule.next_run_at, fired.next_run_at),
    )

    assert queue.cursor.fetchone() == (None,)
    assert [job_id for job_id, _ in live_jobs(queue)] == [fired.job_id]
    assert schedule_named(queue, "digest").next_run_at == fired.next_run_at


# --------------------------------------------------------------------------------------------
# protocol.cron.next_run_after, with fixed instants.
# --------------------------------------------------------------------------------------------


def paris(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=PARIS)


def runs(cron: str, zone: str, start: datetime, count: int) -> list[datetime]:
    found, moment = [], start
    for _ in range(count):
        moment = next_run_after(moment, cron=cron, timezone=zone, every=None)
        found.append(moment)
    return found


def test_a_daily_cron_stays_at_its_local_time_across_the_spring_change() -> None:
    # Paris moves from UTC+1 to UTC+2 at 2024-03-31 02:00 local time.
    daily = runs("0 9 * * *", "Europe/Paris", paris(2024, 3, 29, 8, 0), 3)

    assert [run.astimezone(PARIS).hour for run in daily] == [9, 9, 9]
    assert [run.astimezone(UTC).hour for run in daily] == [8, 8, 7]
    assert daily[2] - daily[1] == timedelta(hours=23)


def test_a_daily_cron_stays_at_its_local_time_across_the_autumn_change() -> None:
    # Paris moves from UTC+2 back to UTC+1 at 2024-10-27 03:00 local time.
    daily = runs("0 9 * * *", "Europe/Paris", paris(2024, 10, 26, 8, 0), 2)

    assert [run.astimezone(PARIS).hour for run in daily] == [9, 9]
    assert daily[1] - daily[0] == timedelta(hours=25)


def test_a_five_minute_cron_keeps_five_real_minutes_through_the_repeated_hour() -> None:
    # 02:00-03:00 local happens twice on 2024-10-27; runs still come every five minutes.
    start = datetime(2024, 10, 27, 0, 50, tzinfo=UTC)  # 02:50 summer time
    every_five = runs("*/5 * * * *", "Europe/Paris", start, 24)

    gaps = {b - a for a, b in zip([start, *every_five[:-1]], every_five, strict=True)}
    assert gaps == {timedelta(minutes=5)}
    assert every_five[-1] == datetime(2024, 10, 27, 2, 50, tzinfo=UTC)


def test_a_cron_run_is_strictly_after_the_moment() -> None:
    on_the_dot = datetime(2024, 5, 1, 12, 5, tzinfo=UTC)

    assert next_run_after(
        on_the_dot, cron="*/5 * * * *", timezone="UTC", every=None
    ) == on_the_dot + timedelta(minutes=5)
    assert (
        next_run_after(
            on_the_dot - timedelta(microseconds=1), cron="*/5 * * * *", timezone="UTC", every=None
        )
        == on_the_dot
    )


def test_an_hourly_cron_follows_a_half_hour_time_zone() -> None:
    start = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

    run = next_run_after(start, cron="0 * * * *", timezone="Asia/Kolkata", every=None)

    assert run == datetime(2024, 5, 1, 12, 30, tzinfo=UTC)  # 18:00 in India (UTC+5:30)


def test_an_interval_keeps_its_phase_across_a_gap() -> None:
    due = datetime(2024, 5, 1, 12, 0, 7, tzinfo=UTC)
    minute = timedelta(seconds=60)

    assert next_run_after(
        due + timedelta(hours=3, seconds=5), cron=None, timezone="UTC", every=minute, due_at=due
    ) == due + timedelta(minutes=181)
    assert (
        next_run_after(due + 2 * minute, cron=None, timezone="UTC", every=minute, due_at=due)
        == due + 3 * minute
    )  # a moment on the phase: the next run is strictly after it
    assert next_run_after(due, cron=None, timezone="UTC", every=minute, due_at=due) == due + minute


def test_an_interval_without_a_due_time_runs_one_interval_after_the_moment() -> None:
    moment = datetime(2024, 5, 1, 12, 0, 7, 123456, tzinfo=UTC)

    assert next_run_after(
        moment, cron=None, timezone="UTC", every=timedelta(hours=1)
    ) == moment + timedelta(hours=1)
