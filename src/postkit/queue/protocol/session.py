"""The session settings a worker sets on its connections: how long each commit waits."""

from __future__ import annotations

from postkit.queue.protocol.call import Call


def asynchronous_commit() -> Call[None]:
    """Commit without waiting for the WAL flush, for the rest of the session."""
    return Call("asynchronous_commit", {}, lambda rows: None)


def durable_commit() -> Call[None]:
    """Commit the current transaction only once its WAL is flushed, whatever the session's
    setting."""
    return Call("durable_commit", {}, lambda rows: None)
