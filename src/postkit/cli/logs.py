"""Logging for ``postkit worker``: plain text or one JSON object per line, and the periodic
throughput line.

Quiet by default: warnings and errors, plus the throughput line and the queue policies an App
writes as the worker starts (the ``postkit.tasks`` logger's INFO records: a change to shared
state is shown). Verbose adds the INFO records of the other ``postkit`` loggers, one per job
event. Records keep the fields a caller passes in
``extra`` (``event``, ``job_id``, ``queue``, ``attempt``, ``duration_ms``, ...); the JSON format
writes them out next to ``ts``, ``level``, ``logger`` and ``message``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from postkit.worker import WorkerStats

REPORT_LOGGER = "postkit.report"
"""The logger of the throughput line; it logs at INFO and is shown even when not verbose."""

TASKS_LOGGER = "postkit.tasks"
"""The logger of typed tasks (postkit.tasks); it logs at INFO only the queue policies an App
applies as a worker starts, and is shown even when not verbose."""

# Every attribute a LogRecord has before ``extra`` is applied; anything else came from ``extra``.
_STANDARD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))
) | {"message", "asctime", "taskName"}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields ``extra`` added to ``record``."""
    return {key: value for key, value in vars(record).items() if key not in _STANDARD_ATTRIBUTES}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts (ISO 8601, UTC), level, logger, message, then the
    ``extra`` fields, and ``exc_info`` when an exception is attached."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(extra_fields(record))
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``12:00:01 WARNING postkit.worker: message``; the throughput line as
    ``[postkit] message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        if record.name == REPORT_LOGGER:
            return f"[postkit] {record.getMessage()}"
        return super().format(record)


def configure_logging(verbose: bool, fmt: str) -> None:
    """Send every log record to stderr, as ``fmt`` ("text" or "json") says.

    Warnings and errors of any logger are shown, the throughput line and the queue policies
    an App applies (``postkit.tasks``); with ``verbose``, the INFO records of the other
    ``postkit`` loggers too (a line per job event).
    """
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}: use 'text' or 'json'")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("postkit").setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger(REPORT_LOGGER).setLevel(logging.INFO)
    logging.getLogger(TASKS_LOGGER).setLevel(logging.INFO)
    logging.captureWarnings(True)


class ThroughputReport:
    """A ``report`` callback for :class:`~postkit.worker.Worker`: each call logs the
    attempts settled since the previous call (a job retried twice counts three times), and
    their rate over that interval, e.g.
    ``1,234 attempts settled in 10.0s (123.4/s): 1,200 completed, 30 retried, 4 dead-lettered``.
    Intervals without a settled job log nothing. With ``prefix``, the line starts with the
    worker id, to tell the lines of several worker processes apart."""

    def __init__(self, worker_id: str | None = None, *, prefix: bool = False) -> None:
        self.worker_id = worker_id
        self.prefix = prefix
        self._logger = logging.getLogger(REPORT_LOGGER)
        self._since = time.monotonic()
        self._last: tuple[int, int, int, int] = (0, 0, 0, 0)

    def __call__(self, stats: WorkerStats) -> None:
        now = time.monotonic()
        current = (stats.completed, stats.retried, stats.dead_lettered, stats.stale)
        completed, retried, dead, stale = (
            new - old for new, old in zip(current, self._last, strict=True)
        )
        seconds = max(now - self._since, 1e-9)
        self._since, self._last = now, current
        attempts = completed + retried + dead + stale
        if not attempts:
            return
        rate = attempts / seconds
        message = (
            f"{attempts:,} {'attempt' if attempts == 1 else 'attempts'} settled in "
            f"{seconds:.1f}s ({rate:,.1f}/s): {completed:,} completed, {retried:,} retried, "
            f"{dead:,} dead-lettered"
        )
        if stale:
            message += f", {stale:,} stale"
        if self.prefix and self.worker_id:
            message = f"{self.worker_id}: {message}"
        self._logger.info(
            "%s",
            message,
            extra={
                "event": "report",
                "worker_id": self.worker_id,
                "attempts": attempts,
                "seconds": round(seconds, 3),
                "rate": round(rate, 1),
                "completed": completed,
                "retried": retried,
                "dead_lettered": dead,
                "stale": stale,
            },
        )


__all__ = [
    "REPORT_LOGGER",
    "JsonFormatter",
    "TextFormatter",
    "ThroughputReport",
    "configure_logging",
    "extra_fields",
]
