"""Installing the queue's SQL module: the current schema, or the changes an older install lacks.

The current definition lives in ``postkit/queue/sql/schema/`` (types, tables, then the
functions, each function's body in exactly one file); ``sql/migrations/NNN_name.sql`` holds
each version's table and data changes only, and ``sql/install.sql`` the statements around them.
:func:`install_script` renders one script that anyone can run with psql
(``postkit sql | psql "$DSN"``): it takes a lock so that concurrent installers queue up,
creates the schema and the ``postkit_queue.migrations`` table, checks the versions recorded
there, then installs the current definition (a fresh database) or the changes of the versions
an older one lacks and the current functions, and records the versions. Running the script again
changes nothing. :func:`install` runs the very same script from Python, and
:func:`install_async` from asyncio, on psycopg's async connections.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import psycopg

from postkit.errors import ClientClosedError, ValidationError
from postkit.queue import protocol
from postkit.queue.executor import run, run_async, translated
from postkit.queue.protocol.call import named_statements

SCHEMA = "postkit_queue"

# An arbitrary constant: the advisory lock that serializes concurrent installs ("postkit" in hex).
_INSTALL_LOCK_KEY = 0x706F73746B6974
_FILE_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
_BODY_QUOTE = "$postkit_migration$"
_DATA_MARKER = "-- Data, once the functions are current:\n"


@cache
def _statements() -> dict[str, str]:
    """The named statements of ``sql/install.sql``."""
    return named_statements(
        resources.files("postkit.queue").joinpath("sql").joinpath("install.sql").read_text("utf-8")
    )


def _statement(name: str, **values: object) -> str:
    """The statement ``name`` of ``sql/install.sql``, its ``{{placeholders}}`` filled in."""
    text = _statements()[name].replace("{{lock_key}}", str(_INSTALL_LOCK_KEY))
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", str(value))
    return text


@dataclass(frozen=True)
class Migration:
    """One numbered upgrade delta: the table and data changes of one version."""

    version: int
    name: str
    sql: str

    @property
    def tables(self) -> str:
        """The part of the delta that runs before the current functions are defined: the
        changes to tables, indexes and types."""
        return self.sql.partition(_DATA_MARKER)[0]

    @property
    def data(self) -> str:
        """The part after the line ``-- Data, once the functions are current:``, if any: data
        changes that call the current functions, run after they are defined."""
        return self.sql.partition(_DATA_MARKER)[2]

    @property
    def checksum(self) -> str:
        """A fingerprint of the delta, recorded when the version is installed. A delta is never
        edited once released; if the recorded fingerprint is not one this Postkit knows for
        that version, the database was set up by a different Postkit and the install stops
        rather than guess."""
        return _fingerprint(self.sql)


@dataclass(frozen=True)
class InstallResult:
    """What :func:`install` found and did."""

    previous_version: int
    """The version installed before the call; 0 when the schema was absent."""
    version: int
    """The version installed after the call."""
    applied: tuple[int, ...]
    """The versions this call installed, in order; empty when there was nothing to do."""


# The fingerprints that versions 1 to 15 recorded while each version's whole SQL lived in its
# own numbered file; a database installed then upgrades like any other.
_HISTORICAL_CHECKSUMS: Mapping[int, str] = {
    1: "d3711fc630a29e22",  # 001_core
    2: "9b36fce3335c6eea",  # 002_queue_settings
    3: "d0c07f81dd53bffb",  # 003_operations
    4: "2bf2b5ecb3e8dbbc",  # 004_schedules
    5: "99a808af32b3c46e",  # 005_security
    6: "73cc8f52e33be40f",  # 006_fast_paths
    7: "c365c707d86fcd8e",  # 007_paused_queues_sleep
    8: "fed2c4405d0565f3",  # 008_push_batch_without_keys
    9: "07adcad0c2b02e69",  # 009_privileges
    10: "49f7bded6cb6f09d",  # 010_cli_operations
    11: "146372bddfa865ff",  # 011_readable_values
    12: "b661c5d9ffe7d060",  # 012_worker_schedules
    13: "d196c5655fddf67d",  # 013_input_checks
    14: "1fd4728f9af020af",  # 014_purge_queue_before
    15: "1cea8d7845afe5db",  # 015_known_queues
}

# The current definition, in the order a fresh install runs it. An upgrade runs the deltas'
# table changes where a fresh install runs tables.sql.
_TYPES = "types.sql"
_TABLES = "tables.sql"
_CODE = (
    "helpers.sql",
    "lifecycle.sql",
    "dependencies.sql",
    "workflows.sql",
    "flow.sql",
    "fair.sql",
    "batches.sql",
    "operations.sql",
    "schedules.sql",
    "workers.sql",
    "security.sql",
    "citus.sql",
)


def _fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _read(folder: str, name: str) -> str:
    sql = (
        resources.files("postkit.queue")
        .joinpath("sql")
        .joinpath(folder)
        .joinpath(name)
        .read_text("utf-8")
    )
    if _BODY_QUOTE in sql:
        raise RuntimeError(f"{folder}/{name} must not contain {_BODY_QUOTE}")
    return sql


@cache
def schema_files() -> tuple[tuple[str, str], ...]:
    """The current definition of the schema: (file name, SQL) in the order a fresh install runs
    them. Every function's current body is in exactly one of them. security.sql's API list is
    written from the functions' own access lines (:func:`api_access`)."""
    files = [(name, _read("schema", name)) for name in (_TYPES, _TABLES, *_CODE)]
    rows = ",\n".join(
        f"    ('{function}', '{access}')"
        for function, access in sorted(
            _access_lines(files).items(), key=lambda item: (_KINDS.index(item[1]), item[0])
        )
    )
    return tuple((name, sql.replace("{{api}}", rows)) for name, sql in files)


_KINDS = ("producer", "worker", "operator")
_ACCESS_LINE = re.compile(
    r"^-- access: (\w+)\nCREATE (?:OR REPLACE )?FUNCTION postkit_queue\.(\w+)\(", re.MULTILINE
)


def _access_lines(files: list[tuple[str, str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, sql in files:
        for access, function in _ACCESS_LINE.findall(sql):
            if access not in _KINDS or found.setdefault(function, access) != access:
                raise RuntimeError(f"{name}: {function} has access {access!r}, or two of them")
    return found


def api_access() -> dict[str, str]:
    """The API: each function a caller may execute, by name, and the least access kind
    (producer, worker, operator; each includes the ones before it) that may call it, as the
    line ``-- access: KIND`` above its ``CREATE FUNCTION`` says, in the file of its body."""
    return _access_lines([(name, _read("schema", name)) for name in _CODE])


@cache
def migrations() -> tuple[Migration, ...]:
    """Every version's upgrade delta shipped with this package, in version order.

    Raises:
        RuntimeError: the package's migration files are misnumbered (a packaging bug).
    """
    found = []
    for entry in resources.files("postkit.queue").joinpath("sql").joinpath("migrations").iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is None:
            continue
        sql = _read("migrations", entry.name)
        found.append(Migration(int(match.group(1)), match.group(2), sql))
    found.sort(key=lambda migration: migration.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..N without gaps: {found!r}")
    return tuple(found)


def schema_fingerprint() -> str:
    """A fingerprint of the current definition (sql/schema/). The newest delta names it in its
    last line, so a change to the schema without a new version fails a test."""
    return _fingerprint("".join(sql for _, sql in schema_files()))


def latest_version() -> int:
    """The newest version this package ships."""
    return migrations()[-1].version


def _quoted(sql: str) -> str:
    return f"{_BODY_QUOTE}\n{sql.rstrip()}\n{_BODY_QUOTE}"


def _when_older(version: int, sqls: list[str], *, upgrade_only: bool = False) -> str:
    """A block that runs ``sqls`` when the database is older than ``version``: any older
    version, or with ``upgrade_only`` an installed one (an upgrade's own steps: a fresh install
    gets the tables from the schema, and has no tenant isolation to renew)."""
    statements = "\n".join(f"    EXECUTE {_quoted(sql)};" for sql in sqls if sql.strip())
    return _statement(
        "when_older",
        lowest=1 if upgrade_only else 0,
        version=version - 1,
        statements=statements,
    )


def install_script(*, transaction: bool = True) -> str:
    """Render the install as one idempotent script that anyone can run with psql.

    A database without the schema gets the current definition (sql/schema/) and records every
    version. A database at an older version gets the table changes of the versions it lacks
    (sql/migrations/, in order), then the current functions, then those versions' data changes
    that call them, and under tenant isolation the current policies; both reach the same
    objects. A database at the newest version only gets its ownership and grants applied again,
    which waits for no transaction on the queue's tables. Every recorded version is checked
    against the fingerprints this Postkit knows first.

    With ``transaction=True`` the script carries its own ``BEGIN``/``COMMIT``, as psql needs it;
    :func:`install` renders it without them and runs it inside a transaction of its own.
    """
    latest = latest_version()
    known = ", ".join(
        f"({m.version}, '{checksum}')"
        for m in migrations()
        for checksum in dict.fromkeys((m.checksum, _HISTORICAL_CHECKSUMS.get(m.version)))
        if checksum is not None
    )
    versions = ", ".join(f"({m.version}, '{m.name}', '{m.checksum}')" for m in migrations())
    files = dict(schema_files())
    parts = [
        f"-- Postkit queue module, version {latest}. Safe to run again: each version is installed",
        f"-- once and recorded in {SCHEMA}.migrations.",
    ]
    if transaction:
        parts.append("BEGIN;")
    parts += [
        _statement("pin_search_path"),
        _statement("lock"),
        _statement("prepare"),
        _statement("check_versions", latest=latest, known=known),
        "-- The types; the tables of a fresh install, or the table changes an older one lacks.",
        _when_older(latest, [files[_TYPES]]),
        _when_older(1, [files[_TABLES]]),
        *(_when_older(m.version, [m.tables], upgrade_only=True) for m in migrations()[1:]),
        "-- The functions, then the data changes that call them.",
        _when_older(latest, [files[name] for name in _CODE]),
        *(_when_older(m.version, [m.data], upgrade_only=True) for m in migrations()[1:] if m.data),
        _statement("record_versions", versions=versions),
        _statement("apply_privileges"),
        _when_older(latest, [_statement("tenant_isolation")], upgrade_only=True),
        _statement("restore_search_path"),
    ]
    if transaction:
        parts.append("COMMIT;")
    return "\n".join(parts) + "\n"


def installed_version(cursor: Any) -> int:
    """The newest version recorded in the database the cursor is connected to; 0 if none.

    Raises:
        ClientClosedError: the cursor (or its connection) is closed.
    """
    installed, by_function = run(
        cursor, protocol.session.schema_probe(), given_to="installed_version"
    )
    if not installed:
        return 0
    return run(cursor, protocol.session.schema_version(by_function=by_function), given_to=None)


async def _installed_version_async(cursor: Any) -> int:
    # As installed_version.
    installed, by_function = await run_async(cursor, protocol.session.schema_probe(), given_to=None)
    if not installed:
        return 0
    return await run_async(
        cursor, protocol.session.schema_version(by_function=by_function), given_to=None
    )


def _is_async(target: Any) -> bool:
    return isinstance(target, (psycopg.AsyncConnection, psycopg.AsyncCursor))


def install(target: Any) -> InstallResult:
    """Install the queue schema, or upgrade an older install in place. Idempotent.

    Args:
        target: a psycopg 3 connection, which gets a transaction of its own (committed on
            return; a savepoint instead, if the connection is already inside a transaction),
            or any DB-API cursor, which runs the script in the caller's transaction: the caller
            commits.

    Returns:
        the versions before and after, and which versions this call installed.

    Raises:
        ClientClosedError: the connection or cursor is closed.
        SchemaMismatchError: a migration recorded in the database differs from the one this
            Postkit ships (the database was set up by another version); nothing is changed.
        ValidationError: ``target`` is one of psycopg's async connections or cursors: those
            take ``await`` :func:`install_async`.
    """
    if _is_async(target):
        raise ValidationError(
            f"install() takes a synchronous connection or cursor, got {type(target).__name__}: "
            "use `await postkit.queue.install_async(connection)`"
        )
    script = install_script(transaction=False)
    if isinstance(target, psycopg.Connection):
        if target.closed:
            raise ClientClosedError("install() was given a closed connection")
        with target.transaction(), target.cursor() as cursor:
            return _run_install(cursor, script)
    if getattr(target, "closed", False):
        raise ClientClosedError("install() was given a closed cursor")
    return _run_install(target, script)


def _run_install(cursor: Any, script: str) -> InstallResult:
    with translated():
        # Wait for concurrent installers before reading the version, so that ``applied``
        # reports only what this call applied (the script takes the same lock again).
        cursor.execute(_statement("pin_search_path"))
        cursor.execute(_statement("lock"))
        before = installed_version(cursor)
        cursor.execute(script)
    after = installed_version(cursor)
    return InstallResult(before, after, tuple(range(before + 1, after + 1)))


async def install_async(target: Any) -> InstallResult:
    """:func:`install`, for asyncio: the same script and the same transaction rules, on a
    psycopg 3 ``AsyncConnection`` (a transaction of its own, or a savepoint) or
    ``AsyncCursor`` (the caller's transaction: the caller commits).

    Raises:
        ClientClosedError, SchemaMismatchError: as :func:`install`.
        ValidationError: ``target`` is not one of psycopg's async connections or cursors.
    """
    if not _is_async(target):
        raise ValidationError(
            f"install_async() takes a psycopg AsyncConnection or AsyncCursor, got "
            f"{type(target).__name__}: use postkit.queue.install(connection)"
        )
    script = install_script(transaction=False)
    if target.closed:
        raise ClientClosedError("install_async() was given a closed connection or cursor")
    if isinstance(target, psycopg.AsyncConnection):
        async with target.transaction(), target.cursor() as cursor:
            return await _run_install_async(cursor, script)
    return await _run_install_async(target, script)


async def _run_install_async(cursor: Any, script: str) -> InstallResult:
    # As _run_install.
    with translated():
        await cursor.execute(_statement("pin_search_path"))
        await cursor.execute(_statement("lock"))
        before = await _installed_version_async(cursor)
        await cursor.execute(script)
    after = await _installed_version_async(cursor)
    return InstallResult(before, after, tuple(range(before + 1, after + 1)))
