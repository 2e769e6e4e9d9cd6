"""Databases as earlier Postkits left them, for the upgrade tests.

Until version 15 each version's whole SQL (tables and every function body, restated) lived in
its own numbered file, and an install ran the files in order and recorded each one's
fingerprint. ``legacy_sql/`` keeps those files exactly as they shipped; :func:`install_legacy`
installs a database from them the way those Postkits did, so that an upgrade test starts from
what a user of an earlier version has, and :func:`push_in_every_state` gives it jobs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import psycopg

LEGACY_SQL = Path(__file__).with_name("legacy_sql")


def legacy_files() -> list[Path]:
    return sorted(LEGACY_SQL.glob("[0-9][0-9][0-9]_*.sql"))


def install_legacy(connection: psycopg.Connection, version: int) -> None:
    """Install versions 1 to ``version`` from the historical files, recorded with their
    historical fingerprints, then apply the privileges as those installs did. Commits."""
    files = legacy_files()[:version]
    assert len(files) == version, f"no historical file for version {version}"
    with connection.transaction():
        connection.execute("SET LOCAL search_path = pg_catalog, pg_temp")
        connection.execute("SET LOCAL client_min_messages = warning")
        connection.execute("CREATE SCHEMA IF NOT EXISTS postkit_queue")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS postkit_queue.migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, checksum text, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for path in files:
            sql = path.read_text(encoding="utf-8")
            connection.execute(sql.encode("utf-8"))
            connection.execute(
                "INSERT INTO postkit_queue.migrations (version, name, checksum)"
                " VALUES (%s, %s, %s)",
                (
                    int(path.name[:3]),
                    path.stem[4:],
                    hashlib.sha256(sql.encode("utf-8")).hexdigest()[:16],
                ),
            )
        if version >= 9:
            connection.execute("SELECT postkit_queue.apply_privileges()")


def push_in_every_state(connection: psycopg.Connection) -> dict[str, Any]:
    """Jobs as version 1's functions leave them: pending, scheduled, running (with the claim's
    token), retried after a nack, and dead-lettered. Raw SQL, as any client would send it."""

    def one(sql: str, *args: Any) -> Any:
        return connection.execute(sql, args).fetchone()[0]  # type: ignore[index]

    def push(n: int, delay: str | None = None) -> int:
        return int(
            one(
                "SELECT postkit_queue.push('app', 'emails', %s::jsonb, p_delay => %s::interval)",
                json.dumps({"n": n}),
                delay,
            )
        )

    jobs = {"running": push(1), "retried": push(2), "dead": push(3)}
    claims = connection.execute(
        "SELECT id, claim_token FROM postkit_queue.pull('app', 'emails', 'old-worker', NULL, 3)"
    ).fetchall()
    tokens = dict(claims)
    assert set(tokens) == set(jobs.values())
    one(
        "SELECT postkit_queue.nack('app', %s, 'flaky', 'old-worker', %s)",
        jobs["retried"],
        tokens[jobs["retried"]],
    )
    one(
        "SELECT postkit_queue.fail('app', %s, 'broken', 'old-worker', %s)",
        jobs["dead"],
        tokens[jobs["dead"]],
    )
    jobs["pending"] = push(4)
    jobs["scheduled"] = push(5, "1 hour")
    connection.commit()
    return {"jobs": jobs, "token": tokens[jobs["running"]]}
