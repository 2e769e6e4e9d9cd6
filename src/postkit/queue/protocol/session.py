"""What a session asks of the database itself: which version of the schema is installed."""

from __future__ import annotations

from postkit.queue.protocol.call import Call


def schema_probe() -> Call[tuple[bool, bool]]:
    """Whether the schema is installed, and whether it reports its version through
    ``schema_version()`` (version 9 on) rather than its migrations table."""
    return Call(
        "schema_probe", {}, lambda rows: (bool(rows[0]["installed"]), bool(rows[0]["by_function"]))
    )


def schema_version(*, by_function: bool) -> Call[int]:
    """The newest version recorded in the schema; 0 if none."""
    return Call(
        "schema_version" if by_function else "schema_version_from_table",
        {},
        lambda rows: int(rows[0]["version"] or 0),
    )
