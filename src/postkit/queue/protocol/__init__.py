"""The sans-IO core of the SDK: it builds each call's statement and reads its rows.

Nothing here touches a connection. A client hands a :class:`Call` to
:mod:`postkit.queue.executor`, which runs it as one ``execute`` and one ``fetchall`` and passes
the rows back to :meth:`Call.parse`. The SQL functions own every rule of the state machine;
this package checks every argument before anything is sent (:mod:`.checks`), so a refusal here
leaves the caller's transaction as it was, while a refusal by the SQL module aborts it.

- :mod:`.call`: :class:`Call` and the named statements of ``queries.sql``
- :mod:`.checks`: argument checks; :mod:`.readers`: row readers
- :mod:`.lifecycle`, :mod:`.operations`, :mod:`.scheduling`: the calls, one per SDK method
- :mod:`.workers`: the worker registry
- :mod:`.session`: the session settings of a worker's connections, and the schema's version
- :mod:`.cron`: the cron grammar and the next run of a schedule
"""

from __future__ import annotations

from postkit.queue.protocol import (
    admin,
    checks,
    cron,
    lifecycle,
    operations,
    readers,
    scheduling,
    session,
    workers,
)
from postkit.queue.protocol.call import Call, Duration, JobRef, Rows, queries
from postkit.queue.protocol.checks import CheckedResult
from postkit.queue.protocol.checks import result as checked_result
from postkit.queue.protocol.readers import NextDue

__all__ = [
    "Call",
    "CheckedResult",
    "Duration",
    "JobRef",
    "NextDue",
    "Rows",
    "admin",
    "checked_result",
    "checks",
    "cron",
    "lifecycle",
    "operations",
    "queries",
    "readers",
    "scheduling",
    "session",
    "workers",
]
