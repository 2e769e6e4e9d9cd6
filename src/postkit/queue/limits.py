"""Every limit an argument is checked against, for the SDK, in one place.

The SQL module checks the same limits (``check_*`` and ``is_*`` in sql/schema/helpers.sql), and
the SDK checks them first, before it sends anything: a refusal by the SQL module aborts the
caller's transaction, with whatever the application wrote in it, while a refusal here leaves it
intact. ``tests/queue/test_limits.py`` proves the two agree: for each limit, the values at the
boundary and just beyond it are accepted or refused alike by the SQL function and by the SDK,
and the name rule agrees on every Unicode code point.

The one check the SDK cannot make is a payload's size against its queue's
``max_payload_bytes``: the limit is a setting of the queue, stored in the database. A job's
result has a fixed limit instead (:data:`RESULT_BYTES`), which the SDK checks: a worker can
then keep what fits and drop what does not before a batch of acks is sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from postkit.errors import LONGEST_BACKOFF

# --------------------------------------------------------------------------------------------
# Names: namespaces, queues, worker ids, unique keys, schedule names.
# --------------------------------------------------------------------------------------------

NAME_MAX_CHARS = 128
"""A name is at most this many characters (code points)."""

CONTROL_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F),  # Cc: C0 controls, tab and newline among them
    (0x007F, 0x009F),  # Cc: DEL and the C1 controls
    (0x00AD, 0x00AD),  # Cf from here on: soft hyphen
    (0x0600, 0x0605),
    (0x061C, 0x061C),  # Arabic letter mark (bidi)
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner; left-to-right and right-to-left marks
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x2064),  # word joiner and invisible operators
    (0x2066, 0x206F),  # bidi isolates and deprecated format characters
    (0xFEFF, 0xFEFF),  # zero-width no-break space (byte order mark)
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),  # tag characters
)
"""Characters no name may hold: Unicode's control (Cc) and format (Cf) characters, as of
Unicode 15. They are invisible or move text around, so two names that look alike could differ."""

BLANK_RANGES: tuple[tuple[int, int], ...] = (
    (0x0020, 0x0020),
    (0x00A0, 0x00A0),  # no-break space
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),  # line and paragraph separators (Zl, Zp)
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),  # ideographic space
)
"""Unicode's space separators (Zs, Zl, Zp): a name made only of these is blank."""


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(
        re.escape(chr(low)) if low == high else f"{re.escape(chr(low))}-{re.escape(chr(high))}"
        for low, high in ranges
    )


# Lone surrogates exist in Python strings only: PostgreSQL text cannot hold them.
_CONTROL = re.compile(f"[{_char_class(CONTROL_RANGES)}\ud800-\udfff]")
_NOT_BLANK = re.compile(f"[^{_char_class(BLANK_RANGES)}]")


def name_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a name, in the words the SQL module's check_name uses
    after the argument's name; None when it is a valid name. The checks run in the same order
    as there: length, control characters, blank."""
    if len(value) > NAME_MAX_CHARS:
        return f"is {len(value)} characters long; the limit is {NAME_MAX_CHARS}"
    control = _CONTROL.search(value)
    if control is not None:
        return (
            "must not contain control or format characters "
            f"(U+{ord(control.group()):04X} at position {control.start() + 1})"
        )
    if _NOT_BLANK.search(value) is None:
        return "must not be empty or blank"
    return None


# --------------------------------------------------------------------------------------------
# Numbers.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """An inclusive range of integers."""

    low: int
    high: int

    def __contains__(self, value: int) -> bool:
        return self.low <= value <= self.high


PRIORITY = Bounds(-32768, 32767)
MAX_ATTEMPTS = Bounds(1, 1000)
MAX_PAYLOAD_BYTES = Bounds(1, 104_857_600)
"""What ``configure_queue`` accepts as a queue's ``max_payload_bytes`` (up to 100 MiB)."""
JOB_ID = Bounds(-(2**63), 2**63 - 1)
BATCH_PAYLOADS = 100_000
"""At most this many payloads per ``push_batch``."""
PROGRESS_NOTE_CHARS = 200
"""A progress report's note is at most this many characters (``report_progress``)."""
MAX_PARENTS = 10_000
"""At most this many parents per job (``push(depends_on=...)``; the SQL module's
``max_parents()``)."""
MAX_STEPS = 100_000
"""The most steps one workflow run may record (the SQL module's ``max_steps()``): its positions
are 0 to MAX_STEPS - 1."""
WORKER_PID = Bounds(1, 2**31 - 1)
"""A registered worker's process id."""
WORKER_CONCURRENCY = Bounds(0, 100_000)
"""A registered worker's concurrency (0 for a ticker, which runs no jobs)."""
QUEUE_CONCURRENCY = Bounds(1, 100_000)
"""A queue's ``concurrency`` limit: its running jobs across every worker."""
RATE_LIMIT = Bounds(1, 100_000)
"""The claims a queue's ``rate`` allows per period."""
GROUP_CONCURRENCY = Bounds(1, 10_000)
"""A queue's ``group_concurrency``: running jobs per group key."""
MAX_PENDING = Bounds(1, 100_000)
"""A queue's ``max_pending``: the pending jobs it may hold before a push is refused."""
GROUP_WEIGHT = Bounds(1, 1000)
"""A group key's weight in a fair queue: the jobs each of its turns gives it."""
QUEUE_WEIGHT = Bounds(1, 1000)
"""A queue's weight in a claim from several queues (``pull_any``, a worker's queues): its share
of the claims."""
NAMESPACE_WEIGHT = Bounds(1, 1000)
"""A namespace's weight in a shared worker (``postkit.worker.SharedWorker``): its share of the
worker's slots."""
WORKER_KINDS = ("worker", "ticker")
"""What a registered process is: a worker that runs jobs, or a ticker (``postkit tick``)."""

LIMITS: dict[str, Bounds] = {
    "pull": Bounds(1, 1000),
    "pull_any": Bounds(1, 1000),
    "tick_timeouts": Bounds(1, 100_000),
    "dead_letters": Bounds(1, 10_000),
    "stats": Bounds(1, 10_000_000),
    "stats_page": Bounds(1, 10_000),
    "jobs": Bounds(1, 10_000),
    "redrive": Bounds(1, 100_000),
    "prune": Bounds(1, 100_000),
    "due_schedules": Bounds(1, 10_000),
    "schedules": Bounds(1, 10_000),
    "running_jobs": Bounds(1, 10_000),
    "search_dead_letters": Bounds(1, 10_000),
    "search_scan": Bounds(1, 100_000),
    "count_dead_letters": Bounds(1, 10_000_000),
    "job_lineage": Bounds(1, 1000),
    "waiting_children": Bounds(1, 10_000),
    "cancel_queue": Bounds(1, 100_000),
    "job_tree": Bounds(1, 100_000),
    "cancel_tree": Bounds(1, 100_000),
    "cancel_run": Bounds(1, 100_000),
    "group_weights": Bounds(1, 10_000),
    "group_stats": Bounds(1, 10_000),
}
"""The ``limit`` (``cap`` for stats and count_dead_letters, ``scan_limit`` for search_scan, the
page's ``limit`` for stats_page) each SQL function accepts."""

SEARCH_SCAN = 2_000
"""How many dead letters ``search_dead_letters`` reads per call unless told otherwise (the SQL
function's default too). Matching a substring lowercases each dead letter's last error: about
5 us for an error of 500 characters with its traceback, more for longer ones (they are kept up
to 8 KiB), so 2,000 take about 10-20 ms."""

# --------------------------------------------------------------------------------------------
# Trace contexts.
# --------------------------------------------------------------------------------------------

TRACE_CONTEXT_BYTES = 1024
"""A job's trace context (a W3C propagation carrier) is at most this many bytes as JSON text."""


def trace_context_bytes(carrier: Mapping[str, str]) -> int:
    """The size of ``carrier`` as the SQL module measures it: the bytes of its jsonb value's
    text. PostgreSQL prints that text with ``", "`` and ``": "`` between the parts and escapes
    it as json.dumps does without ``ensure_ascii``, so json.dumps writes the same bytes.

    Raises:
        UnicodeEncodeError: ``carrier`` holds a lone surrogate, which no text column stores.
    """
    return len(json.dumps(dict(carrier), ensure_ascii=False).encode("utf-8"))


# --------------------------------------------------------------------------------------------
# Job results.
# --------------------------------------------------------------------------------------------

RESULT_BYTES = 1_048_576
"""A job's result is at most this many bytes (1 MiB) as JSON text, as PostgreSQL writes the
jsonb value (the SQL module's is_result): ``", "`` and ``": "`` between the parts, numbers in
plain notation (``1e-07`` is ``0.0000001``)."""

RESULT_SEPARATORS = (", ", ": ")
"""The separators PostgreSQL writes a jsonb value with, which the SDK sends a result with, so
that the text it measures is the text the SQL module measures."""

# Where the text json.dumps writes and PostgreSQL's differ in length: a float json.dumps writes
# with an exponent (PostgreSQL writes every digit) or a negative zero (PostgreSQL has none). The
# pattern may also match inside a string; that costs only the exact count.
_NOT_PLAIN = re.compile(r"[0-9][eE]|-0\.0(?![0-9])")


def result_bytes(value: Any, text: str) -> int:
    """The size of the result ``value`` as the SQL module measures it: the bytes of its jsonb
    value's text. ``text`` is ``value`` as json.dumps writes it with :data:`RESULT_SEPARATORS`
    and without ``ensure_ascii``, which escapes strings as PostgreSQL does: the same bytes,
    unless it holds a float in exponent notation or a negative zero, which are counted as
    PostgreSQL writes them. A dict whose keys json.dumps writes alike (``1`` and ``"1"``)
    counts each, where PostgreSQL keeps the last: never less than the SQL module measures.

    Raises:
        UnicodeEncodeError: ``text`` holds a lone surrogate, which no text column stores.
    """
    size = len(text.encode("utf-8"))
    if _NOT_PLAIN.search(text) is None:
        return size
    return _json_bytes(value)


def _json_bytes(value: Any) -> int:
    """The bytes of ``value`` as PostgreSQL writes it as jsonb text (see :func:`result_bytes`);
    ``value`` is one json.dumps wrote."""
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, str):
        return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if isinstance(value, int):
        return len(int.__repr__(value))
    if isinstance(value, float):
        plain = format(Decimal(float.__repr__(value)), "f")
        if "." not in plain:
            plain += ".0"  # an integral float past 1e16 is sent with a zero fraction (json_text)
        return len(plain) - (plain.startswith("-") and Decimal(plain) == 0)
    if isinstance(value, Mapping):
        parts = [_key_bytes(key) + 2 + _json_bytes(item) for key, item in value.items()]
    else:
        parts = [_json_bytes(item) for item in value]
    return 2 + sum(parts) + 2 * max(len(parts) - 1, 0)


def _key_bytes(key: Any) -> int:
    return len(key_text(key).encode("utf-8"))


def key_text(key: Any) -> str:
    """A dict key as json.dumps writes it (without ``ensure_ascii``): a JSON string, whatever
    the key's Python type."""
    if isinstance(key, str):
        text = key
    elif key is True or key is False or key is None:
        text = json.dumps(key)
    elif isinstance(key, float):
        text = float.__repr__(key)
    else:
        text = int.__repr__(key)
    return json.dumps(text, ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# Durations.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DurationRule:
    """A duration must be positive (or zero where ``allow_zero``) and at most ``maximum``."""

    allow_zero: bool
    maximum: timedelta

    @property
    def maximum_us(self) -> int:
        return self.maximum // timedelta(microseconds=1)


CLAIM_MAX = timedelta(hours=12)
"""A claim lasts at most 12 hours (visibility timeout, extension), as in SQS."""

DURATIONS: dict[str, DurationRule] = {
    "visibility_timeout": DurationRule(False, CLAIM_MAX),
    "extension": DurationRule(False, CLAIM_MAX),
    "delay": DurationRule(True, timedelta(days=3650)),
    "backoff": DurationRule(True, LONGEST_BACKOFF),
    "backoff_base": DurationRule(False, timedelta(days=1)),
    "backoff_cap": DurationRule(False, timedelta(days=30)),
    "retain_completed": DurationRule(False, timedelta(days=3650)),
    "retain_dead": DurationRule(False, timedelta(days=3650)),
    "retain_results": DurationRule(False, timedelta(days=3650)),
    "older_than": DurationRule(True, timedelta(days=3650)),
    "heartbeat_interval": DurationRule(False, timedelta(days=1)),
    "rate_period": DurationRule(False, timedelta(days=1)),
    "wait_for_room": DurationRule(True, timedelta(hours=1)),
}
"""Each duration argument and its rule, by the argument's name."""

EVERY_MAX = timedelta(days=3650)
"""A schedule's interval is at most this long (and at least a second)."""


def _shown(microseconds: int) -> str:
    return f"{microseconds / 1_000_000:g} seconds"


def duration_problem(what: str, microseconds: int) -> str | None:
    """What is wrong with a duration of ``microseconds`` as the argument ``what``, or None."""
    rule = DURATIONS[what]
    if microseconds > rule.maximum_us:
        return f"{what} of {_shown(microseconds)} is too long; the limit is {rule.maximum}"
    if microseconds < 0 or (microseconds == 0 and not rule.allow_zero):
        sign = "zero or positive" if rule.allow_zero else "positive"
        return f"{what} must be {sign}, got {_shown(microseconds)}"
    return None
