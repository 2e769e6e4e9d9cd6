"""The owner's calls: grants by access kind and tenant isolation (run by postkit.queue.admin)."""

from __future__ import annotations

from typing import Literal

from postkit import errors
from postkit.queue.protocol.call import Call, Rows

Access = Literal["producer", "worker", "operator"]
ACCESS_KINDS: tuple[Access, ...] = ("producer", "worker", "operator")
"""The access kinds, each including the one before (security.sql's grant_access)."""

OWNER_QUERIES = (
    "grant_access",
    "revoke_access",
    "enable_tenant_isolation",
    "assign_namespace",
    "distribute_on_citus",
)
"""The statements of queries.sql that only the queue's owner (or a superuser) may run."""


def _nothing(rows: Rows) -> None:
    return None


def grant_access(role: str, access: Access) -> Call[None]:
    """Grant ``role`` one access kind.

    Raises:
        InvalidAccessError: an unknown access kind.
    """
    if access not in ACCESS_KINDS:
        raise errors.InvalidAccessError(f"access must be one of {', '.join(ACCESS_KINDS)}")
    return Call("grant_access", {"role": role, "access": access}, _nothing)


def revoke_access(role: str) -> Call[bool]:
    """Take every Postkit privilege from ``role``; the row says whether it had an access kind."""
    return Call("revoke_access", {"role": role}, lambda rows: bool(rows[0]["revoked"]))


def enable_tenant_isolation() -> Call[None]:
    """Turn on row-level security on every queue table."""
    return Call("enable_tenant_isolation", {}, _nothing)


def distribute_on_citus() -> Call[list[tuple[str, str]]]:
    """Spread the schema over a Citus cluster: (object, placement) for each table and function."""
    return Call(
        "distribute_on_citus",
        {},
        lambda rows: [(row["object"], row["placement"]) for row in rows],
    )


def assign_namespace(namespace: str, role: str) -> Call[None]:
    """Let ``role`` (and its members) use ``namespace`` under tenant isolation."""
    return Call("assign_namespace", {"namespace": namespace, "role": role}, _nothing)
