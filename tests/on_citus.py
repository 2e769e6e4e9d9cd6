"""The suite on a real Citus cluster (issue 16), when ``POSTKIT_TEST_CITUS_WORKERS`` names its
worker nodes (``host:port,host:port``) and ``POSTKIT_TEST_DSN`` its coordinator, as a
superuser whose login every node accepts.

Each database the shared fixtures make (``new_database``) is made on every node too, with the
citus extension, and the coordinator given the workers; each queue they install
(``dsn``, and ``database`` in tests/queue) is then placed by ``distribute_on_citus``, so every
SDK call runs as Citus runs it: delegated to the namespace's node, or, inside a transaction
block, planned on the coordinator statement by statement. CI has no Citus, so it does not set
the variable; docs/scaling.md says what a run on a cluster found.
"""

from __future__ import annotations

import os

import psycopg
from psycopg import sql

from postkit.queue import admin

WORKERS = [
    (host, int(port))
    for host, _, port in (
        node.strip().rpartition(":")
        for node in os.environ.get("POSTKIT_TEST_CITUS_WORKERS", "").split(",")
        if node.strip()
    )
]
ENABLED = bool(WORKERS)


def _on_node(server_dsn: str, host: str, port: int, **extra: str) -> str:
    return psycopg.conninfo.make_conninfo(server_dsn, host=host, port=str(port), **extra)


def create_on_workers(server_dsn: str, name: str) -> None:
    """Make database ``name`` a Citus database on every node, the coordinator included."""
    if not ENABLED:
        return
    for host, port in WORKERS:
        with psycopg.connect(_on_node(server_dsn, host, port), autocommit=True) as node:
            node.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        with psycopg.connect(_on_node(server_dsn, host, port, dbname=name)) as node:
            node.execute("CREATE EXTENSION citus")
    coordinator = psycopg.conninfo.conninfo_to_dict(server_dsn)
    with psycopg.connect(psycopg.conninfo.make_conninfo(server_dsn, dbname=name)) as node:
        node.execute("CREATE EXTENSION citus")
        node.execute(
            "SELECT citus_set_coordinator_host(%s, %s)",
            (coordinator.get("host", "127.0.0.1"), int(coordinator.get("port", 5432))),
        )
        for host, port in WORKERS:
            node.execute("SELECT citus_add_node(%s, %s)", (host, port))


def drop_on_workers(server_dsn: str, name: str) -> None:
    if not ENABLED:
        return
    for host, port in WORKERS:
        with psycopg.connect(_on_node(server_dsn, host, port), autocommit=True) as node:
            node.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def distribute(dsn: str) -> None:
    """Place the queue installed in ``dsn``'s database on the cluster."""
    if not ENABLED:
        return
    with psycopg.connect(dsn) as connection:
        admin.distribute_on_citus(connection.cursor())
