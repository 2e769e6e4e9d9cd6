"""Installing and upgrading the queue schema: from Python and through the real psql binary."""

from __future__ import annotations

import asyncio
import json
import subprocess
import warnings
from datetime import timedelta

import psycopg
import pytest

from postkit import errors
from postkit.queue import (
    InstallResult,
    QueueClient,
    install,
    install_async,
    install_script,
    installed_version,
    latest_version,
)
from postkit.queue.schema import migrations
from tests.queue.legacy import install_legacy
from tests.queue.psql import find_psql, run_psql

ALL_VERSIONS = tuple(range(1, latest_version() + 1))


def version_of(dsn: str) -> int:
    with psycopg.connect(dsn) as connection, connection.cursor() as cursor:
        return installed_version(cursor)


def recorded_migrations(connection: psycopg.Connection) -> list[tuple[int, str, object]]:
    rows = connection.execute(
        "SELECT version, name, applied_at FROM postkit_queue.migrations ORDER BY version"
    ).fetchall()
    return [(row[0], row[1], row[2]) for row in rows]


def test_the_package_ships_migrations_numbered_from_one() -> None:
    assert [m.version for m in migrations()] == list(ALL_VERSIONS)
    assert latest_version() >= 2
    assert [m.name for m in migrations()[:2]] == ["core", "queue_settings"]


def test_installed_version_is_zero_on_an_empty_database(fresh_database: str) -> None:
    assert version_of(fresh_database) == 0


def test_install_on_a_fresh_database_applies_every_migration(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as connection:
        result = install(connection)

    newest = latest_version()
    assert (result.previous_version, result.version) == (0, newest)
    assert result.applied == tuple(range(1, newest + 1))
    assert version_of(fresh_database) == newest


def test_a_second_install_is_a_no_op(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as connection:
        install(connection)
        before = recorded_migrations(connection)
        connection.commit()

        result = install(connection)

        assert (result.previous_version, result.version, result.applied) == (
            latest_version(),
            latest_version(),
            (),
        )
        assert recorded_migrations(connection) == before


def test_upgrade_from_version_1_keeps_the_jobs_and_enables_queue_settings(
    fresh_database: str,
) -> None:
    with psycopg.connect(fresh_database) as connection:
        install_legacy(connection, 1)
        assert installed_version(connection.cursor()) == 1
        assert connection.execute(
            "SELECT to_regclass('postkit_queue.queue_settings')"
        ).fetchone() == (None,)

        # Jobs pushed under version 1: raw SQL, as a client in any language would, and the SDK.
        raw_ids = [
            connection.execute(
                "SELECT postkit_queue.push(%s, %s, %s::jsonb)",
                ("app", "emails", json.dumps({"n": n})),
            ).fetchone()[0]  # type: ignore[index]
            for n in range(3)
        ]
        client = QueueClient(connection.cursor(), namespace="app")
        sdk_id = client.push("emails", {"n": 3}, priority=-1)
        connection.commit()

        # The upgrade runs in the same session the old jobs were pushed from.
        upgraded = install(connection)
        assert (upgraded.previous_version, upgraded.version, upgraded.applied) == (
            1,
            latest_version(),
            tuple(range(2, latest_version() + 1)),
        )

        pulled = []
        while (job := client.pull("emails", worker_id="w")) is not None:
            pulled.append((job["id"], job["payload"], job["attempts"], job["max_attempts"]))
        assert pulled == [
            (raw_ids[0], {"n": 0}, 1, 20),
            (raw_ids[1], {"n": 1}, 1, 20),
            (raw_ids[2], {"n": 2}, 1, 20),
            (sdk_id, {"n": 3}, 1, 20),
        ]
        connection.commit()

        # After the upgrade, version 2's per-queue settings drive the defaults of push and pull.
        policy = client.configure_queue("reports", max_attempts=3, visibility_timeout=90)
        assert (policy.max_attempts, policy.visibility_timeout) == (3, 90.0)
        client.push("reports", {"r": 1})
        job = client.pull("reports")
        assert job is not None and job["max_attempts"] == 3
        assert job["visible_until"] - job["claimed_at"] == timedelta(seconds=90)
        connection.commit()


def test_install_through_a_cursor_runs_in_the_callers_transaction(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as connection:
        cursor = connection.cursor()
        result = install(cursor)
        assert result.applied == ALL_VERSIONS
        assert installed_version(cursor) == latest_version()
        # Another session sees nothing yet: the caller has not committed.
        assert version_of(fresh_database) == 0

        connection.rollback()

        assert installed_version(connection.cursor()) == 0
        assert connection.execute("SELECT to_regnamespace('postkit_queue')").fetchone() == (None,)

        install(connection.cursor())
        connection.commit()
    assert version_of(fresh_database) == latest_version()


def test_install_on_a_connection_already_in_a_transaction_commits_with_it(
    fresh_database: str,
) -> None:
    with psycopg.connect(fresh_database) as connection:
        connection.execute("CREATE TABLE app_table (id int)")
        install(connection)  # a savepoint inside the caller's open transaction
        assert version_of(fresh_database) == 0
        connection.rollback()
        assert installed_version(connection.cursor()) == 0


def test_psql_installs_the_rendered_script_and_a_second_run_is_a_no_op(
    fresh_database: str,
) -> None:
    run_psql(fresh_database, install_script())

    assert version_of(fresh_database) == latest_version()
    with psycopg.connect(fresh_database) as connection:
        first = recorded_migrations(connection)
    assert [(version, name) for version, name, _ in first] == [
        (m.version, m.name) for m in migrations()
    ]

    run_psql(fresh_database, install_script())

    with psycopg.connect(fresh_database) as connection:
        assert recorded_migrations(connection) == first  # same rows, same applied_at
        # The schema psql installed is the one the SDK speaks to.
        client = QueueClient(connection.cursor(), namespace="psql")
        job_id = client.push("emails", {"via": "psql"})
        job = client.pull("emails")
        assert job is not None and (job["id"], job["payload"]) == (job_id, {"via": "psql"})


def test_psql_installs_and_reinstalls_in_silence(fresh_database: str) -> None:
    """No "column checksum already exists, skipping" and no result rows: an operator reads
    only what went wrong."""
    first = run_psql(fresh_database, install_script())
    again = run_psql(fresh_database, install_script())

    assert (first.stdout, first.stderr) == ("", "")
    assert (again.stdout, again.stderr) == ("", "")


def test_psql_upgrades_an_older_install_and_python_agrees(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as connection:
        install_legacy(connection, 1)
    assert version_of(fresh_database) == 1

    run_psql(fresh_database, install_script())
    assert version_of(fresh_database) == latest_version()

    with psycopg.connect(fresh_database) as connection:
        assert install(connection).applied == ()
        versions = [version for version, _, _ in recorded_migrations(connection)]
    assert versions == list(ALL_VERSIONS)


def test_a_failing_psql_script_leaves_nothing_behind(fresh_database: str) -> None:
    # The script carries its own BEGIN/COMMIT: if any statement fails, nothing is installed.
    broken = install_script().replace("COMMIT;", "SELECT 1/0;\nCOMMIT;")
    result = subprocess.run(
        [find_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", fresh_database],
        input=broken,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "division by zero" in result.stderr
    assert version_of(fresh_database) == 0


def test_a_database_set_up_from_other_migration_files_is_refused_unchanged(
    fresh_database: str,
) -> None:
    with psycopg.connect(fresh_database) as connection:
        install(connection)
        connection.execute(
            "UPDATE postkit_queue.migrations SET checksum = 'edited' WHERE version = 1"
        )
        connection.execute(
            "DELETE FROM postkit_queue.migrations WHERE version = %s", (latest_version(),)
        )
        connection.commit()

        with pytest.raises(errors.SchemaMismatchError, match="migration 1"):
            install(connection)
        connection.rollback()

        assert version_of(fresh_database) == latest_version() - 1


def test_the_upgrade_to_version_11_marks_schedules_it_would_refuse_broken(
    fresh_database: str,
) -> None:
    """Schedules saved before the SQL module checked cron expressions and run times: one
    croniter rejects, one that never fires, one whose next run no Python datetime can hold (it
    made every read of the namespace's schedules raise), and one fine, saved through
    save_schedule as version 8 allowed."""
    with psycopg.connect(fresh_database) as connection:
        install_legacy(connection, 8)
        for name, cron in (("garbage", "every five minutes"), ("never", "0 0 30 2 *")):
            connection.execute(
                "SELECT postkit_queue.save_schedule('ns', %s, 'q', '{}', now(), %s)", (name, cron)
            )
        connection.execute(
            "SELECT postkit_queue.save_schedule('ns', 'fine', 'q', '{}', now(), '0 9 * * *')"
        )
        connection.execute(
            "SELECT postkit_queue.save_schedule('ns', 'far', 'q', '{}', '20000-01-01', NULL,"
            " 'UTC', interval '1 hour')"
        )
        connection.commit()

        install(connection)

        schedules = QueueClient(connection.cursor(), namespace="ns").schedules()
    reasons = {schedule.name: schedule.broken_reason for schedule in schedules}
    assert reasons["fine"] is None
    assert reasons["garbage"] is not None and "not a 5-field cron expression" in reasons["garbage"]
    assert reasons["never"] is not None and "never fires" in reasons["never"]
    assert reasons["far"] is not None and "more than 100 years away" in reasons["far"]


def test_install_async_installs_through_an_async_connection(fresh_database: str) -> None:
    async def run() -> InstallResult:
        async with await psycopg.AsyncConnection.connect(fresh_database) as connection:
            return await install_async(connection)

    result = asyncio.run(run())

    assert (result.previous_version, result.version) == (0, latest_version())
    assert version_of(fresh_database) == latest_version()


def test_install_async_through_an_async_cursor_runs_in_the_callers_transaction(
    fresh_database: str,
) -> None:
    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(fresh_database) as connection:
            async with connection.cursor() as cursor:
                await install_async(cursor)
            await connection.rollback()

    asyncio.run(run())

    assert version_of(fresh_database) == 0


def test_install_given_an_async_connection_says_to_use_install_async(fresh_database: str) -> None:
    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(fresh_database) as connection:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no "coroutine was never awaited"
                with pytest.raises(errors.ValidationError, match="install_async"):
                    install(connection)

    asyncio.run(run())

    assert version_of(fresh_database) == 0


def test_installed_version_of_a_closed_cursor_raises_client_closed(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as connection:
        cursor = connection.cursor()
        cursor.close()
        with pytest.raises(errors.ClientClosedError, match="installed_version"):
            installed_version(cursor)
