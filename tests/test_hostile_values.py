"""Every value the SQL API accepts is one its Python readers can read.

A producer or an operator in another language stores values through the SQL functions alone:
payloads PostgreSQL accepts and Python's json module refuses, numbers past a float, names and
errors full of control and bidirectional characters, schedules on the rarest cron expressions
in far-off time zones. Each reader then runs over all of them, and none may crash: the SDK
(every call that returns stored values), the worker runtime and the CLI (every command that
shows them, as tables and as JSON). A value Python cannot decode is reported for that record
alone; everything else goes on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.queue import Job, QueueClient
from postkit.queue.records import Fired
from postkit.worker import Worker
from tests.signals import wait_until

# Payloads as JSON text, valid to PostgreSQL's jsonb.
UNDECODABLE = {
    "nested 3,000 deep": "[" * 3000 + "]" * 3000,  # Python: RecursionError
    "a 5,000-digit integer": '{"n": ' + "7" * 5000 + "}",  # Python: ValueError
    "a short exponent": '{"n": 1e5000}',  # PostgreSQL writes out its 5,001 digits
    "a fraction past a float": '{"n": ' + "9" * 400 + ".5}",  # json.loads: infinity
}
DECODABLE = {
    "nested 600 deep": "[" * 600 + "]" * 600,  # decodes; walking it recursively would not
    "a number past a float": '{"n": 1e400}',  # a 401-digit integer, as PostgreSQL writes it
    "a number below a float": '{"n": -1e-400}',
    "a 1,000-digit fraction": '{"n": 0.' + "3" * 1000 + "}",
    "empty and duplicate keys": '{"": 1, "a": 1, "a": 2}',
    "control and bidirectional text": json.dumps(
        {"text": "\u202egnp.exe\u001b[31m\r\n\u2028\ufeff\U0001f389\x7f\\"}
    ),
    "200,000 characters": json.dumps("x" * 200_000),
    "null": "null",
}
PAYLOADS = {**UNDECODABLE, **DECODABLE}

# Names the SQL module accepts (non-blank, at most 128 characters).
# Names the SQL API accepts (it refuses control and format characters in names since migration
# 13): quotes, format placeholders, markup, an emoji, a combining accent, at full length.
QUEUE = "hostile 'q' \"x\" %s {0} <b>&amp; \U0001f389 e\u0301"
WORKER = "worker 'w' \"%s\" $HOME `id` -" + "w" * 100
GROUP_KEYS = ["--json", " acme corp ", "$(id) 'k' \"%s\" {0} \U0001f389", "k" * 128]
"""Group keys the SQL accepts: an option's spelling, spaces, quotes, shell, the longest name;
one pending job each, in GROUPED."""
GROUPED = QUEUE + " grouped"
ERRORS = ["Traceback (most recent call last):\n" * 2000, "\u001b[2J\u202e\r" + "e" * 50_000]

# Schedules the SQL module accepts: the rarest expressions, the far time zones, the longest
# interval.
SCHEDULES: list[dict[str, Any]] = [
    {"cron": "0 0 * 2 5#5", "timezone": "Pacific/Kiritimati"},  # the fifth Friday of February
    {"cron": "0 0 29 2 *", "timezone": "America/St_Johns"},  # every leap year, at UTC-3:30
    {"cron": "59 23 L 12 ?", "timezone": "Pacific/Pago_Pago"},
    {"every": "3650 days", "timezone": "UTC"},
]


def schedule_payload(number: int) -> str:
    """The name of the payload the schedule ``number`` pushes."""
    return list(PAYLOADS)[number % len(PAYLOADS)]


@dataclass
class Stored:
    """What the SQL calls stored, by what it is."""

    namespace: str
    pending: dict[str, int] = field(default_factory=dict)
    scheduled: dict[str, int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    dead: dict[str, int] = field(default_factory=dict)
    decoded: dict[str, Any] = field(default_factory=dict)
    """Each decodable payload as json.loads reads PostgreSQL's text of it."""


def sql(connection: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    return connection.execute(query, args).fetchall()


def push(connection: psycopg.Connection[Any], namespace: str, text: str, delay: str | None) -> int:
    [(job_id,)] = sql(
        connection,
        "SELECT postkit_queue.push(%s, %s, %s::jsonb, %s::interval)",
        namespace,
        QUEUE,
        text,
        delay,
    )
    return int(job_id)


@pytest.fixture
def stored(dsn: str, namespace: str) -> Stored:
    """Every hostile value, stored through the SQL API only, in every state a job can be in."""
    result = Stored(namespace)
    with psycopg.connect(dsn, autocommit=True) as connection:
        for name, text in DECODABLE.items():
            [(normal,)] = sql(connection, "SELECT %s::jsonb::text", text)
            result.decoded[name] = json.loads(normal)
        for name, text in PAYLOADS.items():
            result.running[name] = push(connection, namespace, text, None)
        claimed = sql(
            connection,
            "SELECT id FROM postkit_queue.pull(%s, %s, %s, NULL, 100)",
            namespace,
            QUEUE,
            WORKER,
        )
        assert len(claimed) == len(PAYLOADS)
        for name, text in PAYLOADS.items():
            result.dead[name] = push(connection, namespace, text, None)
        for (job_id,) in sql(
            connection,
            "SELECT id FROM postkit_queue.pull(%s, %s, %s, NULL, 100)",
            namespace,
            QUEUE,
            WORKER,
        ):
            sql(
                connection,
                "SELECT postkit_queue.nack(%s, %s, %s, %s, NULL, interval '0')",
                namespace,
                job_id,
                ERRORS[0],
                WORKER,
            )
        for (job_id,) in sql(
            connection,
            "SELECT id FROM postkit_queue.pull(%s, %s, %s, NULL, 100)",
            namespace,
            QUEUE,
            WORKER,
        ):
            sql(
                connection,
                "SELECT postkit_queue.fail(%s, %s, %s, %s)",
                namespace,
                job_id,
                ERRORS[1],
                WORKER,
            )
        for key in GROUP_KEYS:
            sql(
                connection,
                "SELECT postkit_queue.push(%s, %s, '{}', p_group_key => %s)",
                namespace,
                GROUPED,
                key,
            )
        for name, text in PAYLOADS.items():
            result.scheduled[name] = push(connection, namespace, text, "1 hour")
            result.pending[name] = push(connection, namespace, text, None)
        for number, schedule in enumerate(SCHEDULES):
            payload = PAYLOADS[schedule_payload(number)]
            sql(
                connection,
                "SELECT postkit_queue.save_schedule(%s, %s, %s, %s::jsonb, postkit_queue.clock(),"
                " %s, %s, %s::interval)",
                namespace,
                f"schedule {number} \U0001f389 'x' %s",
                QUEUE,
                payload,
                schedule.get("cron"),
                schedule["timezone"],
                schedule.get("every"),
            )
    return result


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


def assert_payload(stored: Stored, record: Any, name: str) -> None:
    """Decodable payloads come back as json.loads reads them; the others marked, not raised."""
    if name in UNDECODABLE:
        assert record.payload is None and record.payload_error is not None, name
        assert record.payload_error.startswith("payload could not be decoded: "), name
    else:
        assert record.payload_error is None, name
        assert record.payload == stored.decoded[name], name


# -------------------------------------------------------------------------------------------
# The SDK.
# -------------------------------------------------------------------------------------------


def test_the_sdk_reads_every_hostile_job_and_dead_letter(
    stored: Stored, client: QueueClient
) -> None:
    for state in ("pending", "scheduled", "running", "dead"):
        by_id = {job.id: job for job in client.jobs(QUEUE, state, limit=1000)}
        for name, job_id in getattr(stored, state).items():
            assert_payload(stored, by_id[job_id], name)
            assert_payload(stored, client.get_job(job_id), name)
    dead = {letter.job_id: letter for letter in client.dead_letters(QUEUE, limit=1000)}
    for name, job_id in stored.dead.items():
        assert_payload(stored, dead[job_id], name)
        # An attempt's error is kept to its first 8,192 characters.
        assert [entry["error"] for entry in dead[job_id].errors] == [e[:8192] for e in ERRORS]
        assert dead[job_id].worker_id == WORKER
    [stats] = client.stats(QUEUE)
    n = len(PAYLOADS)
    assert (stats.pending, stats.scheduled, stats.running, stats.dead) == (n, n, n, n)
    assert sorted(group.group_key for group in client.group_stats(GROUPED)) == sorted(GROUP_KEYS)


def test_every_claim_reads_every_hostile_payload(stored: Stored, client: QueueClient) -> None:
    names = {job_id: name for name, job_id in stored.pending.items()}
    claimed = client.pull_batch(QUEUE, limit=3)
    claimed += client.pull_any([QUEUE], limit=3)
    acked, more = client.ack_and_pull(QUEUE, claimed, limit=100)
    claimed += more

    assert sorted(acked) == sorted(job.id for job in claimed[:6])
    assert sorted(job.id for job in claimed) == sorted(names)
    for job in claimed:
        assert_payload(stored, job, names[job.id])


def test_the_sdk_reads_and_fires_every_hostile_schedule(
    stored: Stored, client: QueueClient
) -> None:
    schedules = client.schedules()
    assert len(schedules) == len(SCHEDULES)
    for number, schedule in enumerate(schedules):
        assert_payload(stored, schedule, schedule_payload(number))

    outcomes = client.tick_schedules()

    assert all(isinstance(outcome, Fired) for outcome in outcomes), outcomes
    assert len(outcomes) == len(SCHEDULES)
    assert all(schedule.broken_at is None for schedule in client.schedules())


# -------------------------------------------------------------------------------------------
# The worker.
# -------------------------------------------------------------------------------------------


@pytest.fixture
def worker(dsn: str, namespace: str) -> Iterator[Callable[[Callable[[Job], None]], Worker]]:
    started: list[tuple[Worker, threading.Thread]] = []

    def start(handler: Callable[[Job], None]) -> Worker:
        worker = Worker(
            dsn, {QUEUE: handler}, namespace=namespace, worker_id=WORKER, tick_interval=0.2,
            poll_interval=30.0, grace_period=2.0,
        )  # fmt: skip
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for running, thread in started:
        running.stop()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the worker did not shut down"


def test_a_worker_runs_or_dead_letters_every_hostile_job_and_keeps_working(
    stored: Stored, client: QueueClient, worker: Callable[[Callable[[Job], None]], Worker]
) -> None:
    handled: list[int] = []
    started = worker(lambda job: handled.append(job.id))
    # The pending jobs, and the ones its ticks push for the due schedules.
    pushed = list(PAYLOADS) + [schedule_payload(number) for number in range(len(SCHEDULES))]
    undecodable = sum(name in UNDECODABLE for name in pushed)

    wait_until(
        lambda: started.stats.completed + started.stats.dead_lettered >= len(pushed),
        lambda: f"the worker to settle every job (it stalled: {started.stats})",
        30,
    )

    assert (started.stats.completed, started.stats.dead_lettered) == (
        len(pushed) - undecodable,
        undecodable,
    )
    assert len(handled) == len(pushed) - undecodable
    for name in UNDECODABLE:
        job = client.get_job(stored.pending[name])
        assert job is not None and job.state == "dead"
        assert job.errors[-1]["error"] == job.payload_error
    assert all(client.get_job(stored.pending[name]) is None for name in DECODABLE)
    assert all(schedule.broken_at is None for schedule in client.schedules())


# -------------------------------------------------------------------------------------------
# The CLI.
# -------------------------------------------------------------------------------------------


def cli_commands(stored: Stored) -> list[list[str]]:
    commands = [
        ["stats"],
        *(["jobs", QUEUE, "--state", state] for state in ("pending", "scheduled", "running")),
        ["jobs", QUEUE, "--state", "dead"],
        ["dlq", "list"],
        ["dlq", "list", "--include-redriven", "--error", "\u202e"],
        ["dlq", "redrive", "--all", "--dry-run"],
        ["schedule", "list"],
        ["queue", "groups", GROUPED],
        ["queue", "groups", GROUPED, "--limit", "1", "--after", GROUP_KEYS[1]],
        *(["dlq", "show", str(job_id), "--full"] for job_id in stored.dead.values()),
        ["tick", "--once"],
    ]
    return commands + [[*command, "--json"] for command in commands]


def test_every_cli_command_shows_every_hostile_value(dsn: str, stored: Stored) -> None:
    for command in cli_commands(stored):
        result = CliRunner().invoke(main, [*command, "--dsn", dsn, "--namespace", stored.namespace])

        assert result.exit_code == 0, (command, result.output[-2000:], result.exception)
        assert result.exception is None, command
        if "--json" in command:
            json.loads(result.stdout)  # a script can read it
