"""Real non-superuser LOGIN roles for the privilege tests: each with one access kind (or none)
and its namespaces, connected to by a DSN of its own, and dropped afterwards with whatever was
granted to it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
from psycopg import sql

from postkit.queue.admin import assign_namespace, grant_access

MakeLogin = Callable[..., str]


def login_maker(database: str, *, prefix: str = "pk_login") -> Iterator[MakeLogin]:
    """Yield ``make(access=None, namespaces=())``, which creates a LOGIN role in ``database``'s
    server and returns a DSN that connects as it; every role made is dropped when the
    generator resumes (a fixture's teardown)."""
    created: list[str] = []

    def _make(access: str | None = None, namespaces: tuple[str, ...] = ()) -> str:
        role = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(database, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            created.append(role)
            if access is not None:
                grant_access(admin.cursor(), role, access)  # type: ignore[arg-type]
            for namespace in namespaces:
                assign_namespace(admin.cursor(), namespace, role)
        return psycopg.conninfo.make_conninfo(database, user=role)

    yield _make
    with psycopg.connect(database, autocommit=True) as admin:
        for role in created:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
