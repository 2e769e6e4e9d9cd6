"""PostgreSQL helpers shared by the comparison: one fresh database per library, sizes, settings."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

SETTINGS = (
    "server_version",
    "shared_buffers",
    "work_mem",
    "synchronous_commit",
    "fsync",
    "wal_level",
    "max_connections",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_max_workers",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "data_checksums",
    "jit",
)


def with_database(dsn: str, dbname: str) -> str:
    """``dsn`` pointing at another database of the same server."""
    return make_conninfo(dsn, dbname=dbname)


def database_name(dsn: str) -> str:
    return str(conninfo_to_dict(dsn).get("dbname") or "postgres")


def recreate_database(server_dsn: str, dbname: str) -> str:
    """Drop ``dbname`` (ending its sessions) and create it empty; returns its DSN."""
    with psycopg.connect(server_dsn, autocommit=True) as connection:
        name = sql.Identifier(dbname)
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(name))
    return with_database(server_dsn, dbname)


def drop_database(server_dsn: str, dbname: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
        )


def server_settings(dsn: str) -> dict[str, str]:
    """The settings that shape a queue benchmark, as the server reports them."""
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)", (list(SETTINGS),)
        ).fetchall()
    found = {name: _with_unit(setting, unit) for name, setting, unit in rows}
    return {name: found[name] for name in SETTINGS if name in found}


def _with_unit(setting: str, unit: str | None) -> str:
    if unit == "8kB":
        return f"{int(setting) * 8 // 1024} MB" if int(setting) >= 128 else f"{setting} x 8kB"
    if unit:
        return f"{setting} {unit}"
    return setting


def storage(dsn: str) -> dict[str, Any]:
    """Heap and index bytes of every user table of the database, and their dead tuples."""
    with psycopg.connect(dsn) as connection:
        row = connection.execute(
            """
            SELECT coalesce(sum(pg_table_size(c.oid)), 0)::bigint,
                   coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint,
                   coalesce(sum(s.n_dead_tup), 0)::bigint
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
            WHERE c.relkind IN ('r', 'p')
              AND n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND n.nspname NOT LIKE 'pg_toast%%'
            """
        ).fetchone()
    assert row is not None
    return {"table_bytes": row[0], "index_bytes": row[1], "dead_tuples": row[2]}


def as_uri(dsn: str) -> str:
    """``dsn`` as a ``postgresql://`` URI (asyncpg accepts no other form)."""
    params = conninfo_to_dict(dsn)
    dbname = quote(str(params.pop("dbname", "postgres")), safe="")
    return f"postgresql:///{dbname}?" + urlencode({k: str(v) for k, v in params.items()})
