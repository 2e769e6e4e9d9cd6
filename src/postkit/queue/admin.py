"""Administering an installation: who may use the queue, and for which namespaces.

Callers reach the queue's tables only through its API functions, which run as the queue's owner
(SECURITY DEFINER) and enforce its rules; a role holds EXECUTE on the functions of its access
kind and nothing on the tables (docs/guarantees.md, "Roles"). Once tenant isolation is on,
row-level security limits every call to the caller's own namespaces. These calls run in the
caller's transaction (commit afterwards) and need the queue's owner or a superuser.
"""

from __future__ import annotations

from typing import Any, Literal

from postkit import errors
from postkit.queue.protocol import translate_error
from postkit.queue.rows import first_value

Access = Literal["producer", "worker", "operator"]
ACCESS_KINDS: tuple[Access, ...] = ("producer", "worker", "operator")


def _call(cursor: Any, statement: str, params: tuple[object, ...]) -> None:
    try:
        cursor.execute(statement, params)
    except Exception as exc:
        translated = translate_error(exc)
        if translated is None:
            raise
        raise translated from exc


def grant_access(cursor: Any, role: str, access: Access) -> None:
    """Give ``role`` what a producer (push), a worker (pull and settle) or an operator
    (everything: redrive, purge, settings, schedules) needs, and nothing more.

    Raises:
        InvalidAccessError: no such role, or an unknown access kind.
    """
    if access not in ACCESS_KINDS:
        raise errors.InvalidAccessError(f"access must be one of {', '.join(ACCESS_KINDS)}")
    _call(cursor, "SELECT postkit_queue.grant_access(%s, %s)", (role, access))


def revoke_access(cursor: Any, role: str) -> bool:
    """Take every Postkit privilege from ``role``; False if it had no access kind.

    Raises:
        InvalidAccessError: no such role.
    """
    _call(cursor, "SELECT postkit_queue.revoke_access(%s)", (role,))
    return bool(first_value(cursor.fetchone()))


def enable_tenant_isolation(cursor: Any) -> None:
    """Turn on row-level security: from now on each role other than the owner sees and
    changes only the rows of the namespaces assigned to it, through Postkit or by hand."""
    _call(cursor, "SELECT postkit_queue.enable_tenant_isolation()", ())


def assign_namespace(cursor: Any, namespace: str, role: str) -> None:
    """Let ``role`` (and every role that is a member of it) use ``namespace``.

    Raises:
        InvalidAccessError: no such role.
        InvalidNameError: an invalid namespace.
    """
    _call(cursor, "SELECT postkit_queue.assign_namespace(%s, %s)", (namespace, role))
