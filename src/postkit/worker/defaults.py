"""The worker's defaults, in one place: :class:`~postkit.worker.Worker` and ``postkit worker``
both take them from here, and ``--help`` shows them."""

from __future__ import annotations

CONCURRENCY = 8
"""Jobs run at once."""

POLL_INTERVAL = 5.0
"""Seconds: the longest wait between looks for work when no notification arrives."""

POOLER_POLL_INTERVAL = 1.0
"""Seconds: the same in pooler mode, where no notification can arrive."""

TICK_INTERVAL = 10.0
"""Seconds, on average, between rescues of expired claims and retention passes."""

GRACE_PERIOD = 30.0
"""Seconds claimed jobs get to finish after a stop is requested."""

CANCEL_GRACE = 5.0
"""Seconds an ``async def`` handler of a cancelled job gets to stop by itself (it sees
``is_cancelled()``) before it is cancelled with ``asyncio.CancelledError``."""

HANDLER_TIMEOUT = 3600.0
"""Seconds a handler may run, unless its registration says otherwise."""

VACUUM_INTERVAL = 2.0
"""Seconds between the vacuum service's looks at the jobs table."""

METRICS_HOST = "127.0.0.1"
"""The address the Prometheus endpoint listens on."""
