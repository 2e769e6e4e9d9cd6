"""Operating the queue from the command line: stats (and stats --watch), jobs, push, cancel,
dlq, queue, schedule and tick, and the refusal of queue names a namespace never saw.

Every command runs against the test server in a namespace of its own, through click's
CliRunner (the `postkit tick` loop and `postkit stats --watch` also as real processes, to stop
them with a signal). The
tests set up jobs with the SDK, run a command, and check both what it printed and what it
changed in the database.
"""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import click
import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql

from postkit.cli import main
from postkit.cli.output import (
    capped,
    format_duration,
    mask_password,
    parse_duration,
    parse_time,
    render_table,
)
from postkit.queue import QueueClient
from postkit.queue.admin import grant_access
from tests.signals import wait_until

Run = Callable[..., Result]


@pytest.fixture
def run(dsn: str, namespace: str) -> Run:
    """Run `postkit ARGS --dsn DSN --namespace NS`; ``input`` answers prompts."""

    def _run(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(
            main, [*args, "--dsn", dsn, "--namespace", namespace], input=input
        )

    return _run


@pytest.fixture
def client(make_client: Callable[[], QueueClient]) -> QueueClient:
    return make_client()


def commit(client: QueueClient) -> None:
    client.cursor.connection.commit()


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def as_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


def fails_cleanly(result: Result, code: int | None = None) -> str:
    """The command failed with a message, not a traceback; returns its output."""
    assert result.exit_code != 0, result.output
    if code is not None:
        assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "Error" in result.output or "Aborted" in result.output, result.output
    return result.output


def bury(client: QueueClient, queue: str, user: str, error: str, *, fail: bool = False) -> int:
    """Push a job with one attempt, claim it and nack (or fail) it: a dead letter."""
    job_id = client.push(queue, {"user_id": user}, max_attempts=1)
    job = client.pull(queue, worker_id="server-b")
    assert job is not None and job.id == job_id
    if fail:
        client.fail(job, error=error)
    else:
        client.nack(job, error=error)
    commit(client)
    return job.id


@pytest.fixture
def dead(client: QueueClient) -> dict[str, int]:
    """The article's two dead letters: a cursed OTP and a number not on WhatsApp."""
    cursed = bury(client, "send_otp", "11", "TemporaryError: Meta is down: 503\n  File x.py")
    whatsapp = bury(
        client, "send_otp", "4", "NotOnWhatsApp: +1555 is not registered on WhatsApp", fail=True
    )
    return {"cursed": cursed, "whatsapp": whatsapp}


def live_job_ids(client: QueueClient, queue: str) -> list[int]:
    rows = client.jobs(queue, "pending") + client.jobs(queue, "scheduled")
    commit(client)
    return sorted(job.id for job in rows)


# -------------------------------------------------------------------------------------------
# Help and bad arguments
# -------------------------------------------------------------------------------------------

COMMANDS = [
    ["stats"],
    ["jobs"],
    ["job"],
    ["push"],
    ["cancel"],
    ["dlq"],
    ["dlq", "list"],
    ["dlq", "show"],
    ["dlq", "redrive"],
    ["dlq", "purge"],
    ["queue"],
    ["queue", "pause"],
    ["queue", "resume"],
    ["queue", "configure"],
    ["queue", "purge"],
    ["queue", "cancel"],
    ["schedule"],
    ["schedule", "create"],
    ["schedule", "list"],
    ["schedule", "pause"],
    ["schedule", "resume"],
    ["schedule", "delete"],
    ["tick"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])

    assert result.exit_code == 0, result.output
    assert "Example:" in result.output
    assert f"postkit {' '.join(command)}" in result.output.split("Example:")[1]


def test_the_main_help_lists_the_operating_commands() -> None:
    output = ok(CliRunner().invoke(main, ["--help"])).output

    for command in ("stats", "jobs", "job", "push", "cancel", "dlq", "queue", "schedule", "tick"):
        assert f"postkit {command}" in output
    assert "(and schedule create, pause, resume, delete)" in " ".join(output.split())


def every_command(
    group: click.Group = main, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from every_command(command, (*path, name))


def test_every_option_of_every_command_says_what_it_does() -> None:
    undocumented = [
        f"postkit {' '.join(path)} {option.opts[0]}"
        for path, command in every_command()
        for option in command.params
        if isinstance(option, click.Option) and not option.hidden and not option.help
    ]

    assert undocumented == []


def test_every_namespace_option_is_the_same_option() -> None:
    options = {
        " ".join(path): (option.metavar, option.help, option.default)
        for path, command in every_command()
        for option in command.params
        if option.name == "namespace"
    }

    assert "worker" in options and "schedule create" in options
    assert set(options.values()) == {
        (
            "NAME",
            "The application's namespace; a command sees and changes only its own jobs.",
            "default",
        )
    }


@pytest.mark.parametrize(
    "args",
    [
        ["cancel", "abc"],
        ["cancel", "0"],
        ["dlq", "show", "4.5"],
        ["dlq", "redrive", "1x"],
        ["job", "-"],
    ],
)
def test_a_job_id_that_is_not_a_positive_integer_is_named_as_such(
    run: Run, args: list[str]
) -> None:
    output = fails_cleanly(run(*args), code=2)

    assert output.splitlines()[-1].endswith(f"{args[-1]!r} is not a job id (a positive integer)")


def test_a_role_without_the_access_is_told_the_install_option_as_documented(
    dsn: str, namespace: str
) -> None:
    role = f"pk_cli_producer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        try:
            grant_access(admin.cursor(), role, "producer")
            as_producer = psycopg.conninfo.make_conninfo(dsn, user=role)
            result = CliRunner().invoke(
                main, ["stats", "--dsn", as_producer, "--namespace", namespace]
            )
            install_help = ok(CliRunner().invoke(main, ["install", "--help"])).output
        finally:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))

    output = fails_cleanly(result, code=1)
    assert "`postkit install --grant ROLE:KIND`" in output
    assert "--grant ROLE[:KIND]" in install_help


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["jobs", "q", "--state", "done"], "Invalid value for '--state'"),
        (["jobs", "q", "--limit", "0"], "Invalid value for '--limit'"),
        (["dlq", "purge", "--older-than", "7 days"], "is not a duration"),
        (["dlq", "purge", "--older-than", "30"], "has no unit"),
        (["dlq", "purge"], "Missing option '--older-than'"),
        (["dlq", "list", "--since", "yesterday"], "neither a duration ago"),
        (["dlq", "show", "abc"], "Invalid value for 'JOB_ID'"),
        (["dlq", "redrive"], "say which dead letters to redrive"),
        (["schedule", "create", "s", "--queue", "q"], "exactly one of --cron and --every"),
        (
            ["schedule", "create", "s", "--queue", "q", "--cron", "* * * * *", "--every", "1m"],
            "exactly one of --cron and --every",
        ),
        (["schedule", "create", "s", "--queue", "q", "--every", "5x"], "is not a duration"),
        (
            ["schedule", "create", "s", "--queue", "q", "--every", "1m", "--timezone", "UTC"],
            "--timezone applies to --cron",
        ),
        (
            ["schedule", "create", "s", "--queue", "q", "--every", "1m", "--payload", "{x"],
            "not valid JSON",
        ),
        (
            ["schedule", "create", "s", "--queue", "q", "--every", "1m", "--payload", "[" * 3000],
            "not valid JSON",
        ),
        (["tick", "--interval", "0"], "must be a positive number of seconds"),
        (["push", "q", "{x"], "Invalid value for JSON: not valid JSON"),
        (["push", "q", "{}", "--priority", "40000"], "Invalid value for '--priority'"),
        (["push", "q", "{}", "--delay", "soon"], "is not a duration"),
        (["cancel", "abc"], "Invalid value for 'JOB_ID'"),
        (["queue", "configure", "q"], "give at least one setting to change"),
        (["queue", "configure", "q", "--max-attempts", "0"], "Invalid value for '--max-attempts'"),
        (["queue", "configure", "q", "--retain-dead", "7"], "has no unit"),
        (["stats", "--watch", "--interval", "0"], "must be a positive number of seconds"),
        (["tick", "--interval", "soon"], "is not a duration"),
    ],
)
def test_a_bad_argument_is_a_usage_error_without_a_traceback(
    run: Run, args: list[str], message: str
) -> None:
    output = fails_cleanly(run(*args), code=2)

    assert message in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["schedule", "create", "s", "--queue", "q", "--cron", "61 * * * *"],
            "Error: '61' in the minute field of '61 * * * *' is out of range (0 to 59)",
        ),
        (
            ["schedule", "create", "s", "--queue", "q", "--cron", "every five minutes"],
            "Error: not a 5-field cron expression",
        ),
        (
            ["schedule", "create", "s", "--queue", "q", "--cron", "0 0 30 2 *"],
            "Error: '0 0 30 2 *' never fires: none of its months has those days",
        ),
        (
            ["schedule", "create", "s", "--queue", "q", "--cron", "0 9 * * *", "--timezone", "X/Y"],
            "Error: unknown time zone 'X/Y'",
        ),
        (
            ["schedule", "create", "s", "--queue", "q", "--every", "0s"],
            "Error: a schedule runs at most every second",
        ),
        (["stats", "--queue", " "], "Error: queue must not be empty or blank"),
        (["push", "", "{}", "--create"], "Error: queue must not be empty or blank"),
        (["dlq", "show", str(2**64)], f"Error: job id is out of range: {2**64}"),
        (["cancel", str(2**63), "--yes"], f"Error: job id is out of range: {2**63}"),
        (
            ["queue", "configure", "q", "--create", "--retain-completed", "0s"],
            "Error: retain_completed must be positive",
        ),
        (["push", "q", '{"a": "\\u0000"}', "--create"], "Error: "),
    ],
)
def test_a_value_the_sdk_refuses_is_a_bad_argument_one_line_and_exit_code_2(
    run: Run, args: list[str], message: str
) -> None:
    output = fails_cleanly(run(*args), code=2)

    assert output.startswith(message)
    assert len(output.strip().splitlines()) == 1


def test_an_empty_namespace_is_a_bad_argument_one_line_and_exit_code_2(dsn: str) -> None:
    result = CliRunner().invoke(main, ["stats", "--namespace", "", "--dsn", dsn])

    output = fails_cleanly(result, code=2)
    assert output == "Error: namespace must not be empty or blank\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["schedule", "pause", "nope"], "Error: no schedule named 'nope'"),
        (["schedule", "resume", "nope"], "Error: no schedule named 'nope'"),
        (["schedule", "delete", "nope", "--yes"], "Error: no schedule named 'nope'"),
        (["dlq", "show", "999999999"], "Error: no job 999999999"),
    ],
)
def test_a_rejected_value_is_one_line_and_exit_code_1(
    run: Run, args: list[str], message: str
) -> None:
    output = fails_cleanly(run(*args), code=1)

    assert output.startswith(message)
    assert len(output.strip().splitlines()) == 1


def test_a_database_without_the_schema_is_one_line(fresh_database: str) -> None:
    result = CliRunner().invoke(main, ["stats", "--dsn", fresh_database])

    output = fails_cleanly(result, code=1)
    assert "run `postkit install`" in output
    assert len(output.strip().splitlines()) == 1


def test_an_unreachable_database_is_one_line() -> None:
    result = CliRunner().invoke(main, ["dlq", "list", "--dsn", "postgresql://x@127.0.0.1:1/x"])

    output = fails_cleanly(result, code=1)
    assert len(output.strip().splitlines()) == 1


# -------------------------------------------------------------------------------------------
# Queue names the namespace has never seen
# -------------------------------------------------------------------------------------------


def seen_queues(client: QueueClient) -> set[str]:
    queues = set(client.queues()) | {row.queue for row in client.schedules()}
    commit(client)
    return queues


@pytest.mark.parametrize(
    "args",
    [
        ["queue", "pause", "sned_otp"],
        ["queue", "resume", "sned_otp"],
        ["queue", "purge", "sned_otp", "--yes"],
        ["queue", "cancel", "sned_otp", "--yes"],
        ["queue", "configure", "sned_otp", "--max-attempts", "3"],
        ["jobs", "sned_otp"],
        ["stats", "--queue", "sned_otp"],
        ["stats", "--queue", "sned_otp", "--watch", "--iterations", "1"],
        ["dlq", "list", "--queue", "sned_otp"],
        ["dlq", "redrive", "--queue", "sned_otp", "--yes"],
        ["dlq", "redrive", "--all", "--to-queue", "sned_otp", "--yes"],
        ["dlq", "purge", "--older-than", "1d", "--queue", "sned_otp", "--yes"],
        ["push", "sned_otp", "{}"],
        ["schedule", "create", "otp", "--queue", "sned_otp", "--every", "1m"],
    ],
    ids=" ".join,
)
def test_a_queue_name_the_namespace_never_saw_is_refused_with_a_hint(
    run: Run, client: QueueClient, args: list[str]
) -> None:
    client.push("send_otp", {"user_id": "42"})
    client.push("emails", {})
    commit(client)

    output = fails_cleanly(run(*args), code=2)

    assert "'sned_otp' is unknown in namespace" in output
    assert "Did you mean 'send_otp'?" in output
    assert "Known queues: emails, send_otp." in output
    assert len(output.strip().splitlines()) == 1
    assert seen_queues(client) == {"emails", "send_otp"}  # no ghost queue


def test_the_hint_of_an_empty_namespace_says_it_has_no_queues(run: Run) -> None:
    output = fails_cleanly(run("queue", "pause", "send_otp"), code=2)

    assert "The namespace has no queues yet. Pass --create to use a new queue name." in output


def test_a_read_only_command_offers_no_create(run: Run, client: QueueClient) -> None:
    client.push("send_otp", {})
    commit(client)

    assert "--create" not in fails_cleanly(run("jobs", "sned_otp"), code=2)
    assert "--create" in fails_cleanly(run("push", "sned_otp", "{}"), code=2)


def test_create_accepts_a_new_queue_name(run: Run, client: QueueClient) -> None:
    assert ok(run("queue", "pause", "reports", "--create")).output.startswith(
        "Paused queue reports"
    )
    pushed = as_json(run("push", "newsletter", '{"issue": 1}', "--create", "--json"))

    assert seen_queues(client) == {"newsletter", "reports"}
    assert live_job_ids(client, "newsletter") == [pushed["id"]]
    assert as_json(run("stats", "--queue", "reports", "--json"))[0]["paused"] is True


def test_a_queue_known_only_by_its_schedule_is_known(run: Run) -> None:
    ok(run("schedule", "create", "beat", "--queue", "pings", "--every", "1h", "--create"))

    assert "Paused queue pings" in ok(run("queue", "pause", "pings")).output


def test_resuming_a_queue_that_is_not_paused_says_so_and_changes_nothing(
    run: Run, client: QueueClient
) -> None:
    client.push("emails", {})
    commit(client)

    text = ok(run("queue", "resume", "emails")).output
    assert text == "Queue emails is not paused; nothing changed (workers already get its jobs).\n"
    assert as_json(run("queue", "resume", "emails", "--json")) == {
        "queue": "emails",
        "paused": False,
        "changed": False,
    }
    ok(run("queue", "pause", "emails"))
    again = ok(run("queue", "pause", "emails")).output
    assert again == "Queue emails is already paused; nothing changed.\n"
    assert as_json(run("queue", "pause", "emails", "--json"))["changed"] is False


# -------------------------------------------------------------------------------------------
# push and cancel
# -------------------------------------------------------------------------------------------


def test_push_prints_the_new_job_with_the_options_given(run: Run, client: QueueClient) -> None:
    client.push("reports", {})
    commit(client)
    before = datetime.now(timezone.utc)

    pushed = as_json(
        run(
            "push", "reports", '{"kind": "weekly"}', "--delay", "1h", "--priority", "5",
            "--unique-key", "weekly", "--max-attempts", "3", "--json",
        )
    )  # fmt: skip

    job = client.get_job(pushed["id"])
    commit(client)
    assert job is not None and job.payload == {"kind": "weekly"}
    assert (job.priority, job.max_attempts, job.unique_key) == (5, 3, "weekly")
    assert job.run_at - before >= timedelta(minutes=59)
    assert pushed["deduplicated"] is False and pushed["queue"] == "reports"
    again = ok(run("push", "reports", "{}", "--unique-key", "weekly")).output
    assert again.startswith("Not pushed: a job with unique key 'weekly' is already pending")
    text = ok(run("push", "reports", '{"kind": "daily"}')).output
    assert re.fullmatch(r"Pushed job \d+ to queue reports; it is ready now\.\n", text)


def test_push_says_the_job_is_ready_or_when_it_is_due_never_that_it_runs(
    run: Run, client: QueueClient
) -> None:
    client.push("send_otp", {})
    commit(client)

    ready = ok(run("push", "send_otp", "{}")).output
    due = ok(run("push", "send_otp", "{}", "--delay", "1h")).output

    assert re.fullmatch(r"Pushed job \d+ to queue send_otp; it is ready now\.\n", ready)
    job_id = int(due.split()[2])
    job = client.get_job(job_id)
    commit(client)
    assert job is not None
    assert due == (
        f"Pushed job {job_id} to queue send_otp; it is due at "
        f"{job.run_at.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC.\n"
    )
    assert "run" not in ready + due


def test_push_to_a_paused_queue_says_no_worker_takes_it_until_it_is_resumed(
    run: Run, client: QueueClient, namespace: str
) -> None:
    client.pause_queue("send_otp")
    commit(client)

    text = ok(run("push", "send_otp", "{}")).output
    pushed = as_json(run("push", "send_otp", "{}", "--json"))

    assert re.fullmatch(
        r"Pushed job \d+ to queue send_otp; it is ready now, but queue send_otp is paused: no "
        rf"worker takes it until postkit queue resume send_otp --namespace {namespace}\.\n",
        text,
    )
    assert pushed["paused"] is True


def test_push_by_a_producer_that_may_not_read_the_queues_state_says_only_ready(
    dsn: str, namespace: str, client: QueueClient
) -> None:
    client.pause_queue("send_otp")
    commit(client)
    role = f"pk_cli_producer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        try:
            grant_access(admin.cursor(), role, "producer")
            as_producer = psycopg.conninfo.make_conninfo(dsn, user=role)
            arguments = ["push", "send_otp", "{}", "--dsn", as_producer, "--namespace", namespace]
            text = ok(CliRunner().invoke(main, arguments)).output
            pushed = as_json(CliRunner().invoke(main, [*arguments, "--json"]))
        finally:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))

    assert re.fullmatch(r"Pushed job \d+ to queue send_otp; it is ready now\.\n", text)
    assert pushed["paused"] is None


def test_push_reads_the_payload_from_stdin(run: Run, client: QueueClient) -> None:
    client.push("send_otp", {})
    commit(client)

    pushed = as_json(run("push", "send_otp", "-", "--json", input='{"user_id": "42"}\n'))

    job = client.get_job(pushed["id"])
    commit(client)
    assert job is not None and job.payload == {"user_id": "42"}


def test_push_to_a_full_queue_fails_cleanly_at_once_or_after_its_wait_for_room(
    run: Run, client: QueueClient
) -> None:
    client.configure_queue("imports", max_pending=1)
    client.push("imports", {})
    commit(client)

    at_once = fails_cleanly(run("push", "imports", "{}"), code=2)
    waited = fails_cleanly(run("push", "imports", "{}", "--wait-for-room", "0.2"), code=2)

    assert "queue imports is full: 1 pending jobs" in at_once
    assert "after waiting 00:00:00.2 for room" in waited


def test_cancel_asks_then_deletes_a_pending_job(run: Run, client: QueueClient) -> None:
    keep, drop = client.push("emails", {"n": 1}), client.push("emails", {"n": 2})
    commit(client)

    declined = fails_cleanly(run("cancel", str(drop), input="n\n"), code=1)
    assert f"Cancel job {drop} of queue emails" in declined and "ready since" in declined
    assert "Aborted" in declined
    assert live_job_ids(client, "emails") == [keep, drop]

    assert as_json(run("cancel", str(drop), "--yes", "--json")) == {
        "id": drop,
        "queue": "emails",
        "cancelled": True,
    }
    assert live_job_ids(client, "emails") == [keep]
    again = fails_cleanly(run("cancel", str(drop), "--yes"), code=1)
    assert f"job {drop} of queue 'emails' is cancelled already" in again
    assert "cancelled (cancelled)" in run("job", str(drop)).output


def test_cancel_cancels_a_running_job_and_refuses_a_dead_letter(
    run: Run, client: QueueClient, dead: dict[str, int]
) -> None:
    client.push("emails", {})
    commit(client)
    running = client.pull("emails", worker_id="server-b")
    commit(client)
    assert running is not None

    asked = run("cancel", str(running.id), input="y\n")
    assert "running on server-b, whose claim ends now" in ok(asked).output
    buried = fails_cleanly(run("cancel", str(dead["cursed"]), "--yes"), code=1)
    assert "is a dead letter of queue 'send_otp', not a live job" in buried
    assert client.ack(running) is False
    commit(client)


def test_cancel_tree_cancels_the_live_jobs_beneath_a_completed_root(
    run: Run, client: QueueClient
) -> None:
    root = client.push("emails", {})
    assert root is not None
    children = [client.push("emails", {"n": n}, depends_on=[root]) for n in range(2)]
    job = client.pull("emails", worker_id="w")
    assert job is not None and job.id == root and client.ack(job)
    running = client.pull("emails", worker_id="w")
    commit(client)
    assert running is not None

    asked = ok(run("cancel", str(root), "--tree", input="y\n")).output
    assert f"Cancel 2 live jobs of job {root}'s tree (1 running)?" in asked
    assert asked.endswith(f"Cancelled 2 jobs of job {root}'s tree.\n")
    assert [client.result(child).state for child in children] == ["cancelled"] * 2
    finished = fails_cleanly(run("cancel", str(root), "--tree", "--yes"), code=1)
    assert "no live job descends from it" in finished
    commit(client)


def test_cancel_tree_of_a_tree_with_nothing_live_says_so(run: Run, client: QueueClient) -> None:
    client.configure_queue("emails", retain_results=3600)
    root = client.push("emails", {})
    job = client.pull("emails", worker_id="w")
    assert job is not None and job.id == root and client.ack(job)
    commit(client)

    assert as_json(run("cancel", str(root), "--tree", "--json")) == {
        "id": root,
        "tree": True,
        "cancelled": 0,
    }
    assert "Nothing to cancel" in ok(run("cancel", str(root), "--tree")).output


# -------------------------------------------------------------------------------------------
# queue configure
# -------------------------------------------------------------------------------------------


def test_queue_configure_changes_only_the_settings_given(run: Run, client: QueueClient) -> None:
    client.push("send_otp", {})
    commit(client)

    first = as_json(
        run(
            "queue", "configure", "send_otp", "--max-attempts", "5", "--retain-dead", "7d", "--json"
        )
    )
    second = as_json(
        run("queue", "configure", "send_otp", "--backoff-base", "2s", "--backoff-cap", "10m",
            "--visibility-timeout", "90", "--retain-completed", "1h",
            "--max-payload-bytes", "2048", "--json")
    )  # fmt: skip

    assert first["max_attempts"] == 5 and first["retain_dead"] == 7 * 86400
    assert second == {
        "queue": "send_otp",
        "max_attempts": 5,
        "visibility_timeout": 90.0,
        "backoff_base": 2.0,
        "backoff_cap": 600.0,
        "paused": False,
        "retain_completed": 3600.0,
        "retain_dead": 7 * 86400.0,
        "max_payload_bytes": 2048,
        "retain_results": None,
        "concurrency": None,
        "rate_limit": None,
        "rate_period": None,
        "group_concurrency": None,
        "group_ordered": False,
        "fair": False,
        "max_pending": None,
    }
    job = client.get_job(client.push("send_otp", {}) or 0)
    commit(client)
    assert job is not None and job.max_attempts == 5


def test_queue_configure_keeps_results_and_says_so(run: Run, client: QueueClient) -> None:
    client.push("reports", {})
    commit(client)

    text = ok(run("queue", "configure", "reports", "--retain-results", "1d")).output
    kept = as_json(run("queue", "configure", "reports", "--retain-completed", "1h", "--json"))
    reset = as_json(run("queue", "configure", "reports", "--retain-results", "default", "--json"))

    fields = dict(line.strip().split("  ", 1) for line in text.splitlines()[1:])
    assert fields["job results"].strip() == "kept 1d"
    assert kept["retain_results"] == 86400.0
    assert reset["retain_results"] is None and reset["retain_completed"] == 3600.0


def test_queue_configure_default_restores_the_built_in_value(run: Run, client: QueueClient) -> None:
    client.push("send_otp", {})
    commit(client)
    ok(run("queue", "configure", "send_otp", "--max-attempts", "5", "--retain-completed", "1h"))

    text = ok(
        run("queue", "configure", "send_otp", "--max-attempts", "default", "--retain-completed",
            "DEFAULT")
    ).output  # fmt: skip

    assert text.splitlines()[0] == "Configured queue send_otp:"
    fields = dict(line.strip().split("  ", 1) for line in text.splitlines()[1:])
    assert fields["max attempts"].strip() == "20"
    assert fields["completed jobs"].strip() == "deleted at once"
    assert fields["backoff"].strip() == "1s doubling, up to 1h"


def test_queue_configure_sets_and_lifts_flow_limits(run: Run, client: QueueClient) -> None:
    client.push("webhooks", {})
    commit(client)

    text = ok(
        run("queue", "configure", "webhooks", "--concurrency", "20", "--rate", "10/1s",
            "--group-ordered")
    ).output  # fmt: skip
    kept = as_json(run("queue", "configure", "webhooks", "--max-attempts", "5", "--json"))
    lifted = as_json(
        run("queue", "configure", "webhooks", "--concurrency", "default", "--rate", "default",
            "--no-group-ordered", "--json")
    )  # fmt: skip

    fields = dict(line.strip().split("  ", 1) for line in text.splitlines()[1:])
    assert fields["concurrency"].strip() == "at most 20 running"
    assert fields["rate"].strip() == "at most 10 claims per 1s"
    assert fields["per group key"].strip() == "one at a time, in push order"
    assert (kept["concurrency"], kept["rate_limit"], kept["rate_period"]) == (20, 10, 1.0)
    assert kept["group_ordered"] is True
    assert (lifted["concurrency"], lifted["rate_limit"], lifted["group_ordered"]) == (
        None,
        None,
        False,
    )


def test_queue_configure_makes_a_queue_fair_and_queue_weight_weighs_its_group_keys(
    run: Run, client: QueueClient
) -> None:
    client.push("reports", {}, group_key="acme")
    commit(client)

    text = ok(run("queue", "configure", "reports", "--fair")).output
    set_to = ok(run("queue", "weight", "reports", "acme", "3")).output
    listed = as_json(run("queue", "weight", "reports", "--json"))
    put_back = as_json(run("queue", "weight", "reports", "acme", "default", "--json"))
    none_left = ok(run("queue", "weight", "reports")).output
    lifted = as_json(run("queue", "configure", "reports", "--no-fair", "--json"))

    fields = dict(line.strip().split("  ", 1) for line in text.splitlines()[1:])
    assert fields["claims"].strip() == "shared fairly among group keys, by weight"
    assert set_to.strip() == "Group key acme of queue reports weighs 3."
    assert listed == {"queue": "reports", "weights": {"acme": 3}}
    assert put_back == {"queue": "reports", "group_key": "acme", "weight": 1}
    assert "each weighs 1" in none_left
    assert lifted["fair"] is False


def test_queue_configure_sets_and_lifts_max_pending(run: Run, client: QueueClient) -> None:
    client.push("imports", {})
    commit(client)

    text = ok(run("queue", "configure", "imports", "--max-pending", "10000")).output
    lifted = as_json(run("queue", "configure", "imports", "--max-pending", "default", "--json"))

    fields = dict(line.strip().split("  ", 1) for line in text.splitlines()[1:])
    assert fields["max pending"].strip() == "10,000 (a push past it is refused)"
    assert lifted["max_pending"] is None


def test_queue_weight_shows_a_key_written_by_hand_in_sql_escaped_on_one_line(
    run: Run, client: QueueClient
) -> None:
    client.cursor.execute(
        "INSERT INTO postkit_queue.group_weights VALUES (%s, 'reports', %s, 7, now())",
        (client.namespace, "evil\n\x1b[31mkey"),
    )
    commit(client)

    lines = ok(run("queue", "weight", "reports")).output.splitlines()

    assert lines[0].split() == ["GROUP", "KEY", "WEIGHT"]
    assert len(lines) == 2 and "\x1b" not in lines[1] and lines[1].endswith("7")


def test_queue_weight_refuses_a_weight_out_of_range_and_a_key_without_one(run: Run) -> None:
    assert "1000" in fails_cleanly(run("queue", "weight", "reports", "acme", "1001"), code=2)
    assert "WEIGHT" in fails_cleanly(run("queue", "weight", "reports", "acme"), code=2)


def test_queue_configure_refuses_a_rate_that_is_not_claims_per_period(run: Run) -> None:
    message = fails_cleanly(run("queue", "configure", "webhooks", "--rate", "10"), code=2)

    assert "is not a rate: give claims/period, e.g. 10/1s" in message


def test_stats_shows_running_against_the_limit_and_a_rate_limited_queue(
    run: Run, client: QueueClient
) -> None:
    client.configure_queue("webhooks", concurrency=20, rate=(1, 3600))
    for _ in range(2):
        client.push("webhooks", {})
    commit(client)
    assert client.pull("webhooks") is not None
    commit(client)

    table = ok(run("stats")).output.splitlines()
    (row,) = as_json(run("stats", "--json"))

    assert table[1].split()[:6] == ["webhooks", "rate-limited", "1", "0", "0", "1/20"]
    assert row["concurrency"] == 20 and row["rate_limited_until"] is not None


def test_stats_shows_a_queue_at_its_max_pending_as_full(run: Run, client: QueueClient) -> None:
    client.configure_queue("imports", max_pending=2)
    client.push_batch("imports", [{}, {}])
    commit(client)

    table = ok(run("stats")).output.splitlines()
    (row,) = as_json(run("stats", "--json"))

    assert table[1].split()[:3] == ["imports", "full", "2"]
    assert row["max_pending"] == 2


# -------------------------------------------------------------------------------------------
# job
# -------------------------------------------------------------------------------------------


def finish(client: QueueClient, queue: str, result: Any) -> int:
    """Push a job to ``queue``, claim it and ack it with ``result``."""
    job_id = client.push(queue, {"report": "weekly"})
    job = client.pull(queue)
    assert job is not None and job.id == job_id
    assert client.ack(job, result=result)
    commit(client)
    return job.id


def test_job_shows_a_completed_jobs_result(run: Run, client: QueueClient) -> None:
    client.configure_queue("reports", retain_results=86400)
    job_id = finish(client, "reports", {"rows": 3, "note": "line\nbreak"})

    text = ok(run("job", str(job_id))).output
    shown = as_json(run("job", str(job_id), "--json"))

    lines = text.splitlines()
    assert lines[0] == f"Job {job_id} of queue reports: completed after 1 attempt"
    fields = dict(line.strip().split("  ", 1) for line in lines[1:])
    assert fields["result"].strip() == '{"note": "line\\nbreak", "rows": 3}'  # jsonb's key order
    assert "(the queue's retention)" in fields["kept until"]
    assert shown["state"] == "completed" and shown["job"] is None
    assert shown["value"] == {"rows": 3, "note": "line\nbreak"}
    assert shown["attempts"] == 1 and shown["expires_at"] is not None


def test_job_shows_a_dead_letters_error_and_where_to_see_every_attempt(
    run: Run, client: QueueClient, dead: dict[str, int], namespace: str
) -> None:
    text = ok(run("job", str(dead["whatsapp"]))).output
    shown = as_json(run("job", str(dead["whatsapp"]), "--json"))

    lines = text.splitlines()
    assert lines[0] == f"Job {dead['whatsapp']} of queue send_otp: dead (failed) after 1 attempt"
    fields = dict(line.strip().split("  ", 1) for line in lines[1:])
    assert "not registered on WhatsApp" in fields["error"]
    assert fields["payload"].strip() == '{"user_id": "4"}'
    assert fields["all errors"].strip() == (
        f"postkit dlq show {dead['whatsapp']} --namespace {namespace}"
    )
    assert (shown["state"], shown["reason"]) == ("dead", "failed")
    assert shown["job"]["payload"] == {"user_id": "4"}


def test_job_shows_a_live_job_and_its_attempts(run: Run, client: QueueClient) -> None:
    waiting = client.push("reports", {"n": 1}, delay=3600)
    running = client.push("emails", {"n": 2})
    assert client.pull("emails", worker_id="server-a") is not None
    commit(client)

    scheduled = ok(run("job", str(waiting))).output.splitlines()
    claimed = ok(run("job", str(running))).output.splitlines()

    assert scheduled[0] == f"Job {waiting} of queue reports: scheduled (0 of 20 attempts made)"
    assert any(line.strip().startswith("runs at") for line in scheduled)
    assert claimed[0] == f"Job {running} of queue emails: running (attempt 1 of 20)"
    assert any(line.split() == ["worker", "server-a"] for line in claimed)
    assert as_json(run("job", str(running), "--json"))["job"]["worker_id"] == "server-a"
    assert as_json(run("job", str(running), "--json"))["claim_expired"] is False


def test_job_shows_a_running_jobs_progress_and_children_and_a_waiting_jobs_parents(
    run: Run, client: QueueClient
) -> None:
    running = client.push("emails", {"n": 1})
    claimed = client.pull("emails", worker_id="server-a")
    assert claimed is not None and client.report_progress(claimed, 0.42, note="page 42")
    child = client.push("reports", {"n": 2}, depends_on=[running])
    commit(client)

    shown = ok(run("job", str(running))).output.splitlines()
    waiting = ok(run("job", str(child))).output.splitlines()

    assert any(line.split()[:3] == ["progress", "42%:", "page"] for line in shown)
    assert any(line.split() == ["waiting", "for", "it", str(child)] for line in shown)
    assert as_json(run("job", str(running), "--json"))["waiting_children"] == [child]
    assert waiting[0] == f"Job {child} of queue reports: waiting (0 of 20 attempts made)"
    assert any(line.split() == ["parents", str(running)] for line in waiting)
    assert any(line.split()[:3] == ["waiting", "on", "1"] for line in waiting)


def test_job_shows_an_expired_claim_as_expired_and_what_returns_it(
    run: Run, client: QueueClient, namespace: str
) -> None:
    """No worker or ticker runs in the namespace: the claim ended and nothing rescued it."""
    job_id = client.push("emails", {"n": 1})
    assert client.pull("emails", worker_id="server-a", visibility_timeout=0.01) is not None
    commit(client)
    time.sleep(0.05)

    shown = ok(run("job", str(job_id))).output.splitlines()
    found = as_json(run("job", str(job_id), "--json"))

    assert shown[0] == (
        f"Job {job_id} of queue emails: claim expired (attempt 1 of 20): no worker holds it, "
        "and the next tick_timeouts returns it to pending"
    )
    assert any(line.strip().startswith("claim ended") for line in shown)
    assert any(f"postkit tick --namespace {namespace}" in line for line in shown)
    assert found["claim_expired"] is True and found["state"] == "running"


def test_job_of_a_job_nothing_is_known_of_is_one_error_line(run: Run, client: QueueClient) -> None:
    job_id = finish(client, "plain", {"kept": False})  # its queue keeps no results

    output = fails_cleanly(run("job", str(job_id)), code=1)

    assert f"no job {job_id} in namespace" in output
    assert "--retain-results" in output


def test_tick_reports_the_job_results_it_pruned(
    run: Run, client: QueueClient, connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    client.configure_queue("reports", retain_results=60)
    finish(client, "reports", 1)
    connect(autocommit=True).execute(
        "UPDATE postkit_queue.job_results SET expires_at = now() - interval '1 minute'"
        " WHERE namespace = %s",
        (namespace,),
    )

    text = ok(run("tick", "--once")).output

    assert (
        "retention deleted 0 archived jobs, 0 dead letters, 1 job result, 0 cancelled jobs,"
        " 0 ancestry links and 0 workflow steps" in text
    )


# -------------------------------------------------------------------------------------------
# stats --watch
# -------------------------------------------------------------------------------------------


def test_stats_watch_redraws_in_place_with_rate_columns(
    dsn: str, namespace: str, client: QueueClient
) -> None:
    client.push("emails", {})
    commit(client)
    args = ["stats", "--watch", "--interval", "0.05", "--iterations", "3"]

    # color=True: as on a terminal (click leaves ANSI codes out of output that is not one).
    result = CliRunner().invoke(main, [*args, "--dsn", dsn, "--namespace", namespace], color=True)

    output = ok(result).output

    frames = output.split("\x1b[H\x1b[2J")
    assert frames[0] == "" and len(frames) == 4
    for frame in frames[1:]:
        title, blank, header, row = frame.splitlines()
        assert title.startswith("postkit stats --watch: namespace") and blank == ""
        assert header.split()[:4] == ["QUEUE", "STATE", "COMPLETED/S", "DEAD-LETTERED/S"]
        assert row.split()[0] == "emails"
    assert frames[1].splitlines()[3].split()[2:4] == ["-", "-"]  # no rate before a second look
    assert frames[3].splitlines()[3].split()[2:4] == ["0.0", "0.0"]


def test_stats_watch_rates_count_the_jobs_settled_between_redraws_and_ctrl_c_stops_it(
    dsn: str, namespace: str, client: QueueClient, tmp_path: Path
) -> None:
    for _ in range(6):
        client.push("emails", {})
    bury(client, "send_otp", "1", "Meta is down")
    err = tmp_path / "err.txt"
    with err.open("w") as stderr:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "postkit.cli", "stats", "--watch", "--json",
             "--interval", "0.1", "--dsn", dsn, "--namespace", namespace],
            stdout=subprocess.PIPE, stderr=stderr, text=True,
            # As from a terminal: a suite run as a background job (`cmd &` in a script) passes
            # SIGINT on ignored, and Python then never turns it into Ctrl-C.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        try:
            assert watcher.stdout is not None
            frames = [json.loads(watcher.stdout.readline())]
            assert frames[0]["seconds"] is None
            for job in client.pull_batch("emails", limit=6, worker_id="server-b"):
                client.ack(job)
            bury(client, "send_otp", "2", "Meta is down")
            deadline = time.monotonic() + 15

            def settled(kind: str) -> float:
                return sum(
                    queue[kind] * frame["seconds"]
                    for frame in frames[1:]
                    for queue in frame["queues"]
                )

            while (
                settled("completed_per_second") < 5.5 or settled("dead_lettered_per_second") < 0.5
            ):
                assert time.monotonic() < deadline, frames
                frames.append(json.loads(watcher.stdout.readline()))
            watcher.send_signal(signal.SIGINT)
            # Read what it wrote meanwhile: with the pipe full, its exit would block on the
            # flush of its last frames, and wait() alone would never return.
            watcher.communicate(timeout=30)
            code = watcher.returncode
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait()

    assert code == 0, err.read_text()
    assert settled("completed_per_second") == pytest.approx(6)
    assert settled("dead_lettered_per_second") == pytest.approx(1)
    assert "Stopped." in err.read_text() and "Traceback" not in err.read_text()


# -------------------------------------------------------------------------------------------
# stats and jobs
# -------------------------------------------------------------------------------------------


def test_stats_counts_each_queue(run: Run, client: QueueClient, dead: dict[str, int]) -> None:
    for _ in range(3):
        client.push("emails", {})
    client.push("emails", {}, delay=3600)
    commit(client)

    rows = {row["queue"]: row for row in as_json(run("stats", "--json"))}

    assert set(rows) == {"emails", "send_otp"}
    assert rows["emails"]["pending"] == 3 and rows["emails"]["scheduled"] == 1
    assert rows["emails"]["paused"] is False
    assert isinstance(rows["emails"]["oldest_ready_age"], float)
    assert rows["send_otp"]["dead"] == 2 and rows["send_otp"]["dead_lettered_last_hour"] == 2
    only = as_json(run("stats", "--queue", "emails", "--json"))
    assert [row["queue"] for row in only] == ["emails"]
    table = ok(run("stats")).output.splitlines()
    headers = ["QUEUE", "STATE", "PENDING", "SCHEDULED", "WAITING", "RUNNING", "DEAD", "CANCELLED"]
    assert table[0].split()[:8] == headers
    assert table[1].split()[:8] == ["emails", "active", "3", "1", "0", "0", "0", "0"]
    assert table[2].split()[:8] == ["send_otp", "active", "0", "0", "0", "0", "2", "0"]


def test_stats_of_an_empty_namespace_says_so(run: Run, namespace: str) -> None:
    assert ok(run("stats")).output == f"No queues in namespace {namespace!r} yet.\n"
    assert as_json(run("stats", "--json")) == []


def test_jobs_pages_with_the_printed_cursor(run: Run, client: QueueClient, namespace: str) -> None:
    ids = [client.push("emails", {"n": n}) for n in range(5)]
    commit(client)

    first = as_json(run("jobs", "emails", "--limit", "2", "--json"))
    assert [job["id"] for job in first["jobs"]] == ids[:2]
    assert first["next_after"].startswith(f"pending:{ids[1]}:0:")
    assert first["jobs"][0]["payload"] == {"n": 0} and first["jobs"][0]["state"] == "pending"
    assert first["jobs"][0]["age"] >= 0
    text = ok(run("jobs", "emails", "--limit", "2", "--after", first["next_after"])).output
    (cursor,) = [
        line.split("--after ")[1].split()[0] for line in text.splitlines() if "--after" in line
    ]
    assert f"--after {cursor} --namespace {namespace}" in text
    assert text.splitlines()[0].split()[:4] == ["ID", "ATTEMPTS", "PRIORITY", "AGE"]
    last = as_json(run("jobs", "emails", "--limit", "2", "--after", cursor, "--json"))
    assert [job["id"] for job in last["jobs"]] == [ids[4]] and last["next_after"] is None
    assert "Next page" not in ok(run("jobs", "emails", "--after", cursor)).output


def test_jobs_refuses_a_cursor_of_another_listing_or_none(run: Run, client: QueueClient) -> None:
    client.push("emails", {})
    commit(client)
    cursor = as_json(run("jobs", "emails", "--limit", "1", "--json"))["next_after"]

    other_state = run("jobs", "emails", "--state", "running", "--after", cursor)
    garbage = run("jobs", "emails", "--after", "pending:1")

    assert other_state.exit_code == 2 and "--state pending" in other_state.output
    assert garbage.exit_code == 2 and "not the cursor of a jobs listing" in garbage.output


def test_jobs_by_state(run: Run, client: QueueClient, dead: dict[str, int]) -> None:
    client.push("emails", {"to": "ada"})
    later = client.push("emails", {}, delay=3600)
    commit(client)
    claimed = client.pull("emails", worker_id="server-c")
    commit(client)
    assert claimed is not None

    running = ok(run("jobs", "emails", "--state", "running")).output
    assert "server-c" in running and "CLAIM ENDS (UTC)" in running
    scheduled = as_json(run("jobs", "emails", "--state", "scheduled", "--json"))["jobs"]
    assert [job["id"] for job in scheduled] == [later]
    dead_jobs = as_json(run("jobs", "send_otp", "--state", "dead", "--json"))["jobs"]
    assert sorted(job["id"] for job in dead_jobs) == sorted(dead.values())
    assert "No pending jobs in queue 'emails'." in ok(run("jobs", "emails")).output


# -------------------------------------------------------------------------------------------
# dlq
# -------------------------------------------------------------------------------------------


def test_dlq_list_filters_by_queue_time_and_error(
    run: Run, client: QueueClient, dead: dict[str, int]
) -> None:
    other = bury(client, "emails", "9", "SMTP 550")

    everything = as_json(run("dlq", "list", "--json"))
    assert [row["job_id"] for row in everything] == [other, dead["whatsapp"], dead["cursed"]]
    assert everything[2]["reason"] == "attempts_exhausted"
    assert everything[2]["payload"] == {"user_id": "11"}

    def ids(*args: str) -> list[int]:
        return [row["job_id"] for row in as_json(run("dlq", "list", *args, "--json"))]

    assert ids("--queue", "send_otp") == [dead["whatsapp"], dead["cursed"]]
    assert ids("--error", "META IS DOWN") == [dead["cursed"]]
    assert ids("--since", "1h", "--queue", "emails") == [other]
    assert ids("--until", "1h") == []
    tomorrow = (datetime.now(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert ids("--until", tomorrow, "--limit", "1") == [other]
    table = ok(run("dlq", "list", "--queue", "send_otp")).output
    assert table.splitlines()[0].split()[:2] == ["JOB", "QUEUE"]
    assert "TemporaryError: Meta is down: 503" in table and "File x.py" not in table
    assert "not registered on WhatsApp" in table
    assert "No dead letters" in ok(run("dlq", "list", "--queue", "emails", "--until", "1h")).output


def test_dlq_show_prints_one_attempt_per_line(
    run: Run, client: QueueClient, namespace: str
) -> None:
    job_id = client.push("send_otp", {"user_id": "11"}, max_attempts=3)
    commit(client)
    for attempt in range(3):
        job = client.pull("send_otp", worker_id=f"server-{attempt}")
        assert job is not None
        client.nack(job, error=f"Meta is down (attempt {attempt + 1})\n  File x.py", backoff=0)
        commit(client)

    output = ok(run("dlq", "show", str(job_id))).output
    assert f"Job {job_id} of queue send_otp: attempts_exhausted after 3 of 3 attempts" in output
    assert '{"user_id": "11"}' in output
    history = [line for line in output.splitlines() if line.strip().startswith("#")]
    assert len(history) == 3
    for number, line in enumerate(history, start=1):
        assert line.split()[:2] == [f"#{number}", "nack"]
        assert line.endswith(f"Meta is down (attempt {number})")
    assert "File x.py" not in output
    assert ok(run("dlq", "show", str(job_id), "--full")).output.count("File x.py") == 3
    shown = as_json(run("dlq", "show", str(job_id), "--json"))
    assert shown["job_id"] == job_id and shown["reason"] == "attempts_exhausted"
    assert [entry["worker_id"] for entry in shown["errors"]] == ["server-0", "server-1", "server-2"]
    assert shown["redriven_job_id"] is None


def test_dlq_show_of_a_live_job_says_where_it_is(run: Run, client: QueueClient) -> None:
    job_id = client.push("emails", {})
    commit(client)

    output = fails_cleanly(run("dlq", "show", str(job_id)), code=1)

    assert f"job {job_id} is not a dead letter: it is pending in queue 'emails'" in output


def test_dlq_redrive_dry_run_changes_nothing(
    run: Run, client: QueueClient, dead: dict[str, int]
) -> None:
    planned = as_json(run("dlq", "redrive", str(dead["cursed"]), "--dry-run", "--json"))

    assert planned == {
        "dry_run": True,
        "redriven": [{"job_id": dead["cursed"], "queue": "send_otp", "new_job_id": None}],
        "missing": [],
    }
    text = ok(run("dlq", "redrive", "--queue", "send_otp", "--dry-run")).output
    assert "Would redrive 2 dead letters" in text and "Dry run: nothing changed." in text
    assert live_job_ids(client, "send_otp") == []
    assert len(client.dead_letters("send_otp")) == 2


def test_dlq_redrive_asks_and_declining_changes_nothing(
    run: Run, client: QueueClient, dead: dict[str, int]
) -> None:
    result = run("dlq", "redrive", str(dead["cursed"]), input="n\n")

    output = fails_cleanly(result, code=1)
    assert "Will redrive 1 dead letter" in output
    assert "Redrive 1 dead letter as a new job? [y/N]" in output and "Aborted" in output
    assert live_job_ids(client, "send_otp") == []
    assert client.dead_letters("send_otp")[1].redriven_job_id is None


def test_dlq_redrive_confirmed_makes_a_new_job_once(
    run: Run, client: QueueClient, dead: dict[str, int], namespace: str
) -> None:
    output = ok(run("dlq", "redrive", str(dead["cursed"]), input="y\n")).output

    (new_job,) = live_job_ids(client, "send_otp")
    assert "Redrove 1 dead letter as a new job" in output and str(new_job) in output
    job = client.get_job(new_job)
    assert job is not None and job.payload == {"user_id": "11"} and job.attempts == 0
    redriven = client.dead_letters("send_otp", include_redriven=True)
    commit(client)
    assert {d.job_id: d.redriven_job_id for d in redriven}[dead["cursed"]] == new_job

    again = run("dlq", "redrive", str(dead["cursed"]), "--yes")
    assert again.exit_code == 1
    assert f"job {dead['cursed']} was already redriven as job {new_job}" in again.output
    assert live_job_ids(client, "send_otp") == [new_job]


def test_dlq_redrive_of_a_dead_letter_already_redriven_is_one_error_line_naming_its_new_job(
    run: Run, client: QueueClient, dead: dict[str, int]
) -> None:
    (retried,) = as_json(run("dlq", "redrive", str(dead["cursed"]), "--yes", "--json"))["redriven"]

    again = run("dlq", "redrive", str(dead["cursed"]), "--yes")

    fails_cleanly(again, code=1)
    assert again.stdout == ""
    assert again.stderr == (
        f"Error: job {dead['cursed']} was already redriven as job {retried['new_job_id']}\n"
    )


def test_dlq_redrive_of_a_job_that_is_no_dead_letter_is_one_error_line(
    run: Run, client: QueueClient, dead: dict[str, int], namespace: str
) -> None:
    live = client.push("send_otp", {})
    commit(client)

    for job_id in (live, 999_999_999):
        result = run("dlq", "redrive", str(job_id), "--yes")

        fails_cleanly(result, code=1)
        assert result.stdout == ""
        assert result.stderr == (
            f"Error: job {job_id} is not in the dead-letter queue of namespace {namespace!r}\n"
        )


def test_dlq_redrive_by_filter_into_another_queue_with_yes(
    run: Run, client: QueueClient, dead: dict[str, int]
) -> None:
    result = as_json(
        run(
            "dlq",
            "redrive",
            "--error",
            "whatsapp",
            "--to-queue",
            "manual_review",
            "--create",
            "--yes",
            "--json",
        )
    )

    (retried,) = result["redriven"]
    assert retried["job_id"] == dead["whatsapp"] and retried["queue"] == "manual_review"
    assert live_job_ids(client, "manual_review") == [retried["new_job_id"]]
    assert live_job_ids(client, "send_otp") == []
    nothing = ok(run("dlq", "redrive", "--error", "whatsapp", "--yes")).output
    assert "No dead letters match" in nothing


def test_dlq_redrive_all_and_limit(run: Run, client: QueueClient, dead: dict[str, int]) -> None:
    first = as_json(run("dlq", "redrive", "--all", "--limit", "1", "--yes", "--json"))
    second = as_json(run("dlq", "redrive", "--all", "--yes", "--json"))

    assert [row["job_id"] for row in first["redriven"]] == [dead["cursed"]]
    assert [row["job_id"] for row in second["redriven"]] == [dead["whatsapp"]]
    assert len(live_job_ids(client, "send_otp")) == 2


def test_dlq_purge_asks_then_deletes(run: Run, client: QueueClient, dead: dict[str, int]) -> None:
    young = ok(run("dlq", "purge", "--older-than", "1h", "--yes")).output
    assert young == "Deleted 0 dead letters.\n"

    declined = fails_cleanly(run("dlq", "purge", "--older-than", "0s", input="n\n"), code=1)
    assert "Delete 2 dead letter(s) that failed more than 0s ago?" in declined
    assert len(client.dead_letters()) == 2
    commit(client)

    purged = as_json(
        run("dlq", "purge", "--older-than", "0s", "--queue", "send_otp", "--json", "--yes")
    )
    assert purged == {"deleted": 2}
    assert client.dead_letters() == []


def test_a_duration_ago_is_measured_by_the_queues_clock_not_the_clients(
    dsn: str,
    namespace: str,
    client: QueueClient,
    shift_clock: Callable[[QueueClient, float], None],
) -> None:
    day = 86400.0
    shift_clock(client, -day)
    bury(client, "send_otp", "a day ago", "boom")
    shift_clock(client, 2.5 * day)
    recent = bury(client, "send_otp", "in 2.5 days", "boom")
    # The command's session runs 3 days ahead: by the queue's clock only one failed < 2d ago.
    ahead = CliRunner(env={"PGOPTIONS": "-c postkit_queue.clock_offset=72:00:00"})
    options = ["--since", "2d", "--json", "--dsn", dsn, "--namespace", namespace]

    listed = ahead.invoke(main, ["dlq", "list", *options])
    retried = ahead.invoke(main, ["dlq", "redrive", "--dry-run", *options])

    assert [row["job_id"] for row in json.loads(ok(listed).stdout)] == [recent]
    assert [row["job_id"] for row in json.loads(ok(retried).stdout)["redriven"]] == [recent]


def test_dlq_purge_deletes_exactly_what_it_asked_about_whatever_the_clients_clock(
    dsn: str,
    namespace: str,
    client: QueueClient,
    shift_clock: Callable[[QueueClient, float], None],
) -> None:
    day = 86400.0
    buried = {}
    for name, offset in (
        ("five days ago", -5 * day),
        ("a day ago", -day),
        ("in 2.5 days", 2.5 * day),
    ):
        shift_clock(client, offset)
        buried[name] = bury(client, "send_otp", name, "boom")
    # The command's session runs 3 days ahead of this machine's clock (the server's clock
    # and the client's disagree): by the queue's clock, two dead letters are over 2 days old.
    ahead = {"PGOPTIONS": "-c postkit_queue.clock_offset=72:00:00"}
    args = ["dlq", "purge", "--older-than", "2d", "--dsn", dsn, "--namespace", namespace]

    result = CliRunner(env=ahead).invoke(main, args, input="y\n")

    assert result.exit_code == 0, result.output
    assert "Delete 2 dead letter(s) that failed more than 2d ago?" in result.output
    assert result.output.endswith("Deleted 2 dead letters.\n")
    shift_clock(client, 0)
    assert [dead.job_id for dead in client.dead_letters()] == [buried["in 2.5 days"]]


# -------------------------------------------------------------------------------------------
# queue
# -------------------------------------------------------------------------------------------


class AnswerAfter(io.BytesIO):
    """An answer typed at the prompt, after ``meanwhile`` ran: what happens between the
    question and the answer (another application pushing a job, say)."""

    def __init__(self, answer: str, meanwhile: Callable[[], object]) -> None:
        super().__init__(answer.encode())
        self._meanwhile: Callable[[], object] | None = meanwhile

    def _first(self, size: int | None) -> None:
        if self._meanwhile is not None and size != 0:  # click probes the stream with read(0)
            self._meanwhile, meanwhile = None, self._meanwhile
            meanwhile()

    def read1(self, size: int | None = -1, /) -> bytes:
        self._first(size)
        return super().read1(size)

    def read(self, size: int | None = -1, /) -> bytes:
        self._first(size)
        return super().read(size)


def test_queue_purge_deletes_what_it_asked_about_not_a_job_pushed_while_it_asked(
    dsn: str, namespace: str, client: QueueClient, make_client: Callable[[], QueueClient]
) -> None:
    asked = [client.push("emails", {"n": n}) for n in range(2)]
    commit(client)
    other = make_client()
    pushed_meanwhile: list[int | None] = []

    def push_another() -> None:
        pushed_meanwhile.append(other.push("emails", {"n": "late"}))
        commit(other)

    result = CliRunner().invoke(
        main,
        ["queue", "purge", "emails", "--dsn", dsn, "--namespace", namespace],
        input=AnswerAfter("y\n", push_another),
    )

    assert result.exit_code == 0, result.output
    assert "Delete 2 pending and scheduled job(s) of queue emails?" in result.output
    assert result.output.endswith("Deleted 2 pending and scheduled jobs of queue emails.\n")
    assert pushed_meanwhile[0] is not None and asked[0] is not None
    assert live_job_ids(client, "emails") == [pushed_meanwhile[0]]


def test_queue_cancel_cancels_what_it_asked_about_running_ones_and_descendants_too(
    dsn: str, namespace: str, client: QueueClient, make_client: Callable[[], QueueClient]
) -> None:
    first, second = (client.push("emails", {"n": n}) for n in range(2))
    running = client.pull("emails", worker_id="server-a")
    assert running is not None and running.id == first and second is not None
    child = client.push("reports", {}, depends_on=[second])
    commit(client)
    other = make_client()
    pushed_meanwhile: list[int | None] = []

    def push_another() -> None:
        pushed_meanwhile.append(other.push("emails", {"n": "late"}))
        commit(other)

    result = CliRunner().invoke(
        main,
        ["queue", "cancel", "emails", "--dsn", dsn, "--namespace", namespace],
        input=AnswerAfter("y\n", push_another),
    )

    assert result.exit_code == 0, result.output
    assert "Cancel 2 live job(s) of queue emails (1 running)" in result.output
    assert result.output.endswith(
        "Cancelled 3 jobs: the live jobs of queue emails and the jobs that waited for them.\n"
    )
    assert [client.result(job_id).state for job_id in (first, second, child)] == ["cancelled"] * 3
    assert client.ack(running) is False
    assert live_job_ids(client, "emails") == [pushed_meanwhile[0]]


def test_queue_pause_and_resume(run: Run, client: QueueClient, namespace: str) -> None:
    client.push("emails", {})
    commit(client)

    assert "Paused queue emails" in ok(run("queue", "pause", "emails")).output
    assert client.pull("emails") is None
    commit(client)
    assert as_json(run("stats", "--json"))[0]["paused"] is True
    assert "paused" in ok(run("stats")).output

    assert as_json(run("queue", "resume", "emails", "--json")) == {
        "queue": "emails",
        "paused": False,
        "changed": True,
    }
    assert client.pull("emails") is not None
    commit(client)


def test_queue_purge_asks_and_leaves_running_jobs(run: Run, client: QueueClient) -> None:
    for delay in (None, None, 3600):
        client.push("emails", {}, delay=delay)
    commit(client)
    running = client.pull("emails", worker_id="server-b")
    commit(client)
    assert running is not None

    declined = fails_cleanly(run("queue", "purge", "emails", input="n\n"), code=1)
    assert "Delete 2 pending and scheduled job(s) of queue emails?" in declined
    assert len(live_job_ids(client, "emails")) == 2

    assert as_json(run("queue", "purge", "emails", "--yes", "--json")) == {
        "queue": "emails",
        "deleted": 2,
    }
    assert live_job_ids(client, "emails") == []
    assert client.get_job(running.id) is not None
    commit(client)
    assert "Deleted 0 pending and scheduled jobs" in ok(run("queue", "purge", "emails")).output


# -------------------------------------------------------------------------------------------
# schedule
# -------------------------------------------------------------------------------------------


def test_schedule_create_list_pause_resume_delete(
    run: Run, client: QueueClient, namespace: str
) -> None:
    created = as_json(
        run(
            "schedule", "create", "nightly-report", "--queue", "reports", "--create",
            "--cron", "0 3 * * *", "--timezone", "Europe/Paris",
            "--payload", '{"kind": "daily"}', "--priority", "5", "--max-attempts", "3",
            "--json",
        )
    )  # fmt: skip
    assert created["cron"] == "0 3 * * *" and created["timezone"] == "Europe/Paris"
    assert created["payload"] == {"kind": "daily"} and created["priority"] == 5
    assert created["max_attempts"] == 3 and created["every"] is None
    text = ok(
        run("schedule", "create", "heartbeat", "--queue", "pings", "--every", "5m", "--create")
    ).output
    assert text.startswith("Created schedule heartbeat: pushes {} to pings, every 5m")
    replaced = ok(run("schedule", "create", "heartbeat", "--queue", "pings", "--every", "1h"))
    assert replaced.output.startswith("Replaced schedule heartbeat")

    listed = as_json(run("schedule", "list", "--json"))
    assert [row["name"] for row in listed] == ["heartbeat", "nightly-report"]
    assert listed[0]["every"] == 3600.0
    table = ok(run("schedule", "list")).output
    assert 'cron "0 3 * * *" Europe/Paris' in table and "every 1h" in table

    assert ok(run("schedule", "pause", "heartbeat")).output == (
        f"Paused schedule heartbeat: it does not fire until "
        f"`postkit schedule resume heartbeat --namespace {namespace}`.\n"
    )
    assert [row["paused"] for row in as_json(run("schedule", "list", "--json"))] == [True, False]
    assert as_json(run("schedule", "resume", "heartbeat", "--json"))["paused"] is False

    declined = fails_cleanly(run("schedule", "delete", "heartbeat", input="n\n"), code=1)
    assert "Delete schedule heartbeat? [y/N]" in declined
    assert len(client.schedules()) == 2
    commit(client)
    assert ok(run("schedule", "delete", "heartbeat", "--yes")).output == (
        "Deleted schedule heartbeat.\n"
    )
    assert [row.name for row in client.schedules()] == ["nightly-report"]


def test_resuming_a_schedule_that_is_not_paused_says_so_and_changes_nothing(run: Run) -> None:
    ok(run("schedule", "create", "beat", "--queue", "pings", "--every", "1h", "--create"))

    text = ok(run("schedule", "resume", "beat")).output
    assert text == "Schedule beat is not paused; nothing changed (it already fires).\n"
    assert as_json(run("schedule", "resume", "beat", "--json")) == {
        "name": "beat",
        "paused": False,
        "changed": False,
    }
    assert as_json(run("schedule", "pause", "beat", "--json"))["changed"] is True
    again = ok(run("schedule", "pause", "beat")).output
    assert again == "Schedule beat is already paused; nothing changed.\n"
    assert as_json(run("schedule", "pause", "beat", "--json"))["changed"] is False
    assert as_json(run("schedule", "resume", "beat", "--json"))["changed"] is True
    assert [row["paused"] for row in as_json(run("schedule", "list", "--json"))] == [False]


# -------------------------------------------------------------------------------------------
# tick
# -------------------------------------------------------------------------------------------


def printed(out: Path, err: Path) -> str:
    """What the process wrote so far to its stdout and stderr files, for a failure message."""
    return f"(stdout: {out.read_text()!r}, stderr: {err.read_text()!r})"


def make_due(connect: Callable[..., psycopg.Connection], namespace: str, name: str) -> None:
    with connect() as connection:
        connection.execute(
            "UPDATE postkit_queue.schedules SET next_run_at = now() - interval '1 second'"
            " WHERE namespace = %s AND name = %s",
            (namespace, name),
        )


def test_tick_once_rescues_fires_and_reports(
    run: Run,
    client: QueueClient,
    connect: Callable[..., psycopg.Connection],
    namespace: str,
) -> None:
    idle = ok(run("tick", "--once")).output
    assert "nothing to do" in idle

    job_id = client.push("emails", {})
    commit(client)
    assert client.pull("emails", worker_id="gone", visibility_timeout=0.05) is not None
    commit(client)
    ok(run("schedule", "create", "beat", "--queue", "pings", "--every", "1h", "--create"))
    make_due(connect, namespace, "beat")
    monitor = connect(autocommit=True)
    wait_until(
        lambda: (
            monitor.execute(
                "SELECT visible_until < postkit_queue.clock() FROM postkit_queue.jobs"
                " WHERE namespace = %s AND id = %s",
                (namespace, job_id),
            ).fetchone()
            == (True,)
        ),
        "the claim to expire",
    )

    report = as_json(run("tick", "--once", "--json"))

    assert report["rescued"] == 1
    (fired,) = report["fired"]
    assert fired["name"] == "beat"
    assert live_job_ids(client, "emails") == [job_id]
    assert live_job_ids(client, "pings") == [fired["job_id"]]
    make_due(connect, namespace, "beat")
    text = ok(run("tick", "--once")).output
    assert "schedule beat pushed job" in text and "next run" in text


def test_tick_and_schedule_list_report_a_schedule_that_cannot_be_computed(
    run: Run, client: QueueClient, connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    ok(run("schedule", "create", "beat", "--queue", "pings", "--every", "1h", "--create"))
    ok(run("schedule", "create", "legacy", "--queue", "pings", "--every", "1h"))
    with connect() as connection:  # saved before the SQL module checked cron expressions
        connection.execute(
            "UPDATE postkit_queue.schedules SET cron = '0 0 30 2 *', every = NULL"
            " WHERE namespace = %s AND name = 'legacy'",
            (namespace,),
        )
    make_due(connect, namespace, "beat")
    make_due(connect, namespace, "legacy")

    text = ok(run("tick", "--once")).output

    assert "schedule beat pushed job" in text
    assert "schedule legacy is broken and no longer fires: cannot compute the next run" in text
    table = ok(run("schedule", "list")).output
    assert "broken" in table.splitlines()[2], table
    assert "Schedule legacy is broken since" in table and "Create it again" in table
    [beat, legacy] = as_json(run("schedule", "list", "--json"))
    assert beat["broken_at"] is None and legacy["broken_reason"].startswith("cannot compute")
    make_due(connect, namespace, "legacy")
    assert "legacy" not in ok(run("tick", "--once")).output, "reported once, then skipped"


def test_a_broken_schedules_reason_cannot_write_escape_codes_to_the_operators_terminal(
    run: Run, connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    ok(run("schedule", "create", "nightly", "--queue", "pings", "--every", "1h", "--create"))
    with connect() as connection:  # a worker may mark a schedule broken, with any reason
        connection.execute(
            "SELECT postkit_queue.mark_schedule_broken(%s, 'nightly', s.next_run_at, %s)"
            " FROM postkit_queue.schedules(%s) AS s",
            (namespace, "ok\x1b[2J\x1b]52;c;cm0gLXJm\x07all healthy", namespace),
        )

    table = ok(run("schedule", "list")).output

    assert "\x1b" not in table and "\x07" not in table
    assert "all healthy" in table


def test_tick_runs_until_sigterm(
    dsn: str, namespace: str, connect: Callable[..., psycopg.Connection], tmp_path: Path
) -> None:
    in_namespace = ["--dsn", dsn, "--namespace", namespace]
    ok(
        CliRunner().invoke(
            main,
            [
                "schedule",
                "create",
                "beat",
                "--queue",
                "pings",
                "--every",
                "1h",
                "--create",
                *in_namespace,
            ],
        )
    )
    make_due(connect, namespace, "beat")
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        ticker = subprocess.Popen(
            [sys.executable, "-m", "postkit.cli", "tick", "--interval", "0.2", *in_namespace],
            stdout=stdout,
            stderr=stderr,
        )
        try:

            def pushed() -> bool:
                assert ticker.poll() is None, err.read_text()
                return "schedule beat pushed job" in out.read_text()

            wait_until(pushed, lambda: f"the ticker to push the schedule's job {printed(out, err)}")
            ticker.send_signal(signal.SIGTERM)
            code = ticker.wait(timeout=10)
        finally:
            if ticker.poll() is None:
                ticker.kill()
                ticker.wait()

    assert code == 0, err.read_text()
    assert "Ticking namespace" in err.read_text() and "Stopped." in err.read_text()
    assert "Traceback" not in err.read_text()
    assert out.read_text().count("schedule beat pushed job") == 1


def test_tick_wakes_for_each_due_schedule_whatever_its_interval(
    dsn: str, namespace: str, tmp_path: Path
) -> None:
    in_namespace = ["--dsn", dsn, "--namespace", namespace]
    ok(
        CliRunner().invoke(
            main,
            [
                "schedule",
                "create",
                "beat",
                "--queue",
                "pings",
                "--every",
                "1s",
                "--create",
                *in_namespace,
            ],
        )
    )
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        ticker = subprocess.Popen(
            [sys.executable, "-m", "postkit.cli", "tick", "--interval", "60", *in_namespace],
            stdout=stdout,
            stderr=stderr,
        )
        try:
            # Three runs of a schedule due every second, from a ticker whose rounds are a
            # minute apart.

            def pushed_three() -> bool:
                assert ticker.poll() is None, err.read_text()
                return out.read_text().count("schedule beat pushed job") >= 3

            wait_until(pushed_three, lambda: f"three runs of the schedule {printed(out, err)}", 10)
        finally:
            ticker.send_signal(signal.SIGTERM)
            ticker.wait(timeout=10)


# -------------------------------------------------------------------------------------------
# The helpers
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("7d", 604800),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("2w", 1209600),
        (" 10 M ", 600),
        ("0s", 0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "5 minutes", "-5m", "5m-", "m5", "1e3s", "h", "5mm"])
def test_junk_durations_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|unit"):
        parse_duration(text)


def test_times_are_a_duration_ago_or_iso() -> None:
    now = datetime(2025, 1, 31, 12, 0, tzinfo=timezone.utc)

    assert parse_time("2h", now=now) == datetime(2025, 1, 31, 10, 0, tzinfo=timezone.utc)
    assert parse_time("2025-01-30T09:00", now=now) == datetime(2025, 1, 30, 9, tzinfo=timezone.utc)
    assert parse_time("2025-01-30 09:00+01:00", now=now).utcoffset() == timedelta(hours=1)
    with pytest.raises(ValueError, match="is neither a duration ago"):
        parse_time("last tuesday", now=now)


def test_format_duration_and_tables() -> None:
    assert [format_duration(s) for s in (0.25, 42, 252, 7500, 273600)] == [
        "250ms",
        "42s",
        "4m12s",
        "2h5m",
        "3d4h",
    ]
    assert format_duration(None) == "-" and format_duration(0) == "0s"
    table = render_table(["NAME", "COUNT"], [["a", 5], ["long name", None]], right=["COUNT"])
    assert table.splitlines() == ["NAME       COUNT", "a              5", "long name      -"]


def test_a_count_that_reached_its_cap_reads_as_the_cap_and_more() -> None:
    assert [capped(n, 100_000) for n in (0, 99_999, 100_000)] == ["0", "99999", "100000+"]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(600, "10m"), (3600, "1h"), (30 * 86400, "30d"), (5400, "1h30m"), (187200, "2d4h"),
     (86430, "1d"), (3601, "1h")],
)  # fmt: skip
def test_a_duration_prints_its_two_largest_units_without_zero_padding(
    seconds: float, shown: str
) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/shop", "postgresql://app:***@db:5432/shop"),
        ("postgresql://app@db/shop?password=s3cret&sslmode=require",
         "postgresql://app@db/shop?password=***&sslmode=require"),
        ("postgresql://app@db/shop", "postgresql://app@db/shop"),
        ("host=db user=app password=s3cret dbname=shop",
         "host=db user=app password=*** dbname=shop"),
    ],
)  # fmt: skip
def test_a_dsn_is_shown_without_its_password(dsn: str, shown: str) -> None:
    assert sorted(mask_password(dsn).split()) == sorted(shown.split())


def test_queue_groups_shows_each_keys_jobs_a_page_at_a_time(
    run: Run, client: QueueClient, namespace: str
) -> None:
    client.push_batch("reports", [{}] * 3, group_keys=["acme", "acme", "globex"])
    client.set_group_weight("reports", "acme", 3)
    commit(client)

    lines = ok(run("queue", "groups", "reports")).output.splitlines()
    listed = as_json(run("queue", "groups", "reports", "--json"))
    first_page = ok(run("queue", "groups", "reports", "--limit", "1")).output

    assert [line.split() for line in lines] == [
        ["GROUP", "KEY", "PENDING", "SCHEDULED", "RUNNING", "WEIGHT"],
        ["acme", "2", "0", "0", "3"],
        ["globex", "1", "0", "0", "1"],
    ]
    assert listed["next_after"] is None
    assert [group["group_key"] for group in listed["groups"]] == ["acme", "globex"]
    assert listed["groups"][0] == {
        "group_key": "acme",
        "pending": 2,
        "scheduled": 0,
        "running": 0,
        "weight": 3,
        "counts_capped": False,
    }
    assert first_page.splitlines()[-1] == (
        f"Next page: postkit queue groups reports --limit 1 --after acme --namespace {namespace}"
    )


def test_queue_groups_says_so_when_no_key_has_live_jobs(run: Run, client: QueueClient) -> None:
    client.push("reports", {})
    commit(client)

    assert ok(run("queue", "groups", "reports")).output.strip() == (
        "No group key of queue 'reports' has live jobs."
    )
