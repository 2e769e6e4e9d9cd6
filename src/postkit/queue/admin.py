"""Administering an installation: who may use the queue, and for which namespaces.

Callers reach the queue's tables only through its API functions, which run as the queue's owner
(SECURITY DEFINER) and enforce its rules; a role holds EXECUTE on the functions of its access
kind and nothing on the tables (docs/guarantees.md, "Roles"). Once tenant isolation is on,
row-level security limits every call to the caller's own namespaces. These calls run in the
caller's transaction (commit afterwards) and need the queue's owner or a superuser.
"""

from __future__ import annotations

from typing import Any

from postkit.queue import executor
from postkit.queue.protocol import Call
from postkit.queue.protocol import admin as calls
from postkit.queue.protocol.admin import ACCESS_KINDS, OWNER_QUERIES, Access


def _run(cursor: Any, call: Call[Any]) -> Any:
    return executor.run(cursor, call, given_to="postkit.queue.admin")


def grant_access(cursor: Any, role: str, access: Access) -> None:
    """Give ``role`` what a producer (push), a worker (pull and settle) or an operator
    (everything: redrive, purge, settings, schedules) needs, and nothing more.

    Raises:
        InvalidAccessError: no such role, an unknown access kind, or a queue placed on Citus
            (roles are recorded by OID, which differs between its nodes: docs/scaling.md).
    """
    _run(cursor, calls.grant_access(role, access))


def revoke_access(cursor: Any, role: str) -> bool:
    """Take every Postkit privilege from ``role``; False if it had no access kind.

    Raises:
        InvalidAccessError: no such role.
    """
    return bool(_run(cursor, calls.revoke_access(role)))


def enable_tenant_isolation(cursor: Any) -> None:
    """Turn on row-level security: from now on each role other than the owner sees and
    changes only the rows of the namespaces assigned to it, through Postkit or by hand."""
    _run(cursor, calls.enable_tenant_isolation())


def distribute_on_citus(cursor: Any) -> list[tuple[str, str]]:
    """On a Citus coordinator, shard the queue's tables by namespace (co-located with jobs),
    make the small shared ones reference tables, and register every function with Citus, so
    that each call is delegated to the node that owns its namespace (docs/scaling.md). Run
    once after :func:`~postkit.queue.install`, in the caller's transaction; not needed on
    plain PostgreSQL.

    Returns:
        (object, placement) for each table and function placed.

    Raises:
        SchemaMismatchError: the server has no Citus, or the queue holds grants or tenant
            assignments (roles recorded by OID, which differs between Citus's nodes); nothing
            is changed.
    """
    return list(_run(cursor, calls.distribute_on_citus()))


def assign_namespace(cursor: Any, namespace: str, role: str) -> None:
    """Let ``role`` (and every role that is a member of it) use ``namespace``, from every
    session's next statement on. It takes no lock on the queue's tables.

    Raises:
        InvalidAccessError: no such role, or a queue placed on Citus (docs/scaling.md).
        InvalidNameError: an invalid namespace.
    """
    _run(cursor, calls.assign_namespace(namespace, role))


__all__ = [
    "ACCESS_KINDS",
    "OWNER_QUERIES",
    "Access",
    "assign_namespace",
    "distribute_on_citus",
    "enable_tenant_isolation",
    "grant_access",
    "revoke_access",
]
