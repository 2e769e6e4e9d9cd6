"""Helpers of the ``postkit`` command line: duration and time arguments, aligned tables for
people, JSON for scripts, and DSNs shown without their password."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import click
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from postkit.queue.limits import NAMESPACE_WEIGHT, QUEUE_WEIGHT, name_problem
from postkit.queue.records import to_jsonable

if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]  # generic from click 8.4 on
else:
    _ParamType = click.ParamType

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_DURATION_EXAMPLES = "30s, 5m, 2h, 7d or 1h30m"


# -------------------------------------------------------------------------------------------
# Durations and times
# -------------------------------------------------------------------------------------------


def parse_duration(text: str) -> timedelta:
    """A duration written like ``30s``, ``5m``, ``2h``, ``7d``, ``2w`` or ``1h30m`` (a number
    and a unit, repeated; decimals allowed: ``1.5h``).

    Raises:
        ValueError: anything else, with a message that shows the accepted forms.
    """
    compact = text.strip().lower().replace(" ", "")
    if not compact:
        raise ValueError(f"expected a duration such as {_DURATION_EXAMPLES}, got an empty value")
    if re.fullmatch(r"\d+(?:\.\d+)?", compact):
        raise ValueError(
            f"{text!r} has no unit; add one: {compact}s, {compact}m, {compact}h or {compact}d"
        )
    position, seconds = 0, 0.0
    for match in _DURATION.finditer(compact):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(compact):
        raise ValueError(f"{text!r} is not a duration; use e.g. {_DURATION_EXAMPLES}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration") from None


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """A moment: a duration ago (``2h`` is two hours before ``now``), or an ISO 8601 time
    (``2025-01-31``, ``2025-01-31T09:00``, ``2025-01-31 09:00:00+01:00``; UTC unless it
    names an offset).

    Raises:
        ValueError: neither form.
    """
    now = now or datetime.now(timezone.utc)
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration ago ({_DURATION_EXAMPLES}) nor an ISO time "
            "(2025-01-31 or 2025-01-31T09:00, UTC unless it names an offset)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


class DurationType(_ParamType):
    """A click parameter for :func:`parse_duration`; converts to a timedelta."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@dataclasses.dataclass(frozen=True)
class Ago:
    """A duration before now (``--since 2h``), now being the database's clock: the command
    reads it, as the queue measures every age by it, whatever the client's clock says."""

    duration: timedelta

    def before(self, now: datetime) -> datetime:
        return now - self.duration


class TimeType(_ParamType):
    """A click parameter for :func:`parse_time`: converts a duration to an :class:`Ago` and
    an ISO time to an aware datetime."""

    name = "duration|time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (datetime, Ago)):
            return value
        try:
            return Ago(parse_duration(str(value)))
        except ValueError:
            pass
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class SecondsType(_ParamType):
    """A positive number of seconds, or a duration (``5s``, ``1m``); converts to float."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = parse_duration(str(value)).total_seconds()
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if not 0 < seconds < float("inf"):
            self.fail(f"must be a positive number of seconds, got {value!r}", param, ctx)
        return seconds


class JobIdType(_ParamType):
    """A job id: a positive integer (how large a one the queue accepts is the queue's to say);
    converts to int."""

    name = "job_id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
            self.fail(f"{value!r} is not a job id (a positive integer)", param, ctx)
        return int(text)


class RateType(_ParamType):
    """A rate limit, ``CLAIMS/PERIOD`` (``10/1s``, ``600/1m``; a bare number after the slash
    is seconds); converts to ``(claims, seconds)``."""

    name = "claims/period"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        claims, slash, period = str(value).partition("/")
        if not slash or not re.fullmatch(r"\s*[0-9]+\s*", claims):
            self.fail(
                f"{value!r} is not a rate: give claims/period, e.g. 10/1s or 600/1m", param, ctx
            )
        return (int(claims), SECONDS.convert(period.strip(), param, ctx))


RESET = "default"
"""What an :class:`OrDefault` parameter converts ``default`` to."""


class OrDefault(_ParamType):
    """A setting's value as ``inner`` converts it, or ``default`` (converted to
    :data:`RESET`): restore the built-in default."""

    def __init__(self, inner: _ParamType) -> None:
        self.inner = inner
        self.name = f"{inner.name}|default"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == RESET:
            return RESET
        return self.inner.convert(value, param, ctx)


DURATION = DurationType()
TIME = TimeType()
SECONDS = SecondsType()
RATE = RateType()
JOB_ID = JobIdType()


def format_duration(value: timedelta | float | None) -> str:
    """A short, readable duration in its two largest units, a zero second unit left out:
    ``850ms``, ``42s``, ``4m12s``, ``10m``, ``2h5m``, ``1h``, ``3d4h``, ``30d``."""
    if value is None:
        return "-"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f}ms"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next(index for index, (count, _) in enumerate(parts) if count)
    shown = [(count, unit) for count, unit in parts[first : first + 2] if count]
    return sign + "".join(f"{count}{unit}" for count, unit in shown)


def format_time(value: datetime | str | None) -> str:
    """A moment in UTC, to the second: ``2025-01-31 09:00:05``. Tables say it is UTC."""
    if value is None:
        return "-"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


# -------------------------------------------------------------------------------------------
# Text
# -------------------------------------------------------------------------------------------


def first_line(text: str | None) -> str:
    """The first non-empty line of ``text`` (errors may carry a traceback after it)."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def mask_password(dsn: str) -> str:
    """``dsn`` with its password, if any, replaced by ``***``: a URL's
    (``postgresql://user:***@host/db``, and a ``password=`` query parameter) or a
    ``key=value`` string's. Anything unparsable is shown as ``(unparsable DSN)``."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        userinfo, at, hostinfo = netloc.rpartition("@")
        if at and ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{hostinfo}"
        query = re.sub(r"(^|&)password=[^&]*", r"\1password=***", parts.query)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparsable DSN)"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **params)


# Characters that would break a table's line or move the terminal's cursor (C0 and C1 controls,
# DEL, the line and paragraph separators) or reorder what follows them (bidirectional
# controls): a stored name or error may hold any of them, and a table shows them as escapes.
_ESCAPES = {
    code: {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}.get(
        code, f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    )
    for code in (
        *range(0x20),
        *range(0x7F, 0xA0),
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    )
}


def printable(text: str) -> str:
    """``text`` with the characters a table cannot show as they are written as escapes."""
    return text.translate(_ESCAPES)


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with an ellipsis when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def capped(count: int, cap: int) -> str:
    """A count that a read stopped at ``cap``: ``100000+`` when it reached it (there may be
    more), else the count itself."""
    return f"{count}+" if count >= cap else str(count)


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """``1 job``, ``2 jobs``."""
    return f"{count} {noun if count == 1 else (plural_noun or noun + 's')}"


def render_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, right: Iterable[str] = ()
) -> str:
    """Plain aligned columns under upper-case headers; the ``right`` columns are right-aligned
    (numbers). None renders as ``-``. Trailing spaces are trimmed."""
    right_aligned = set(right)
    cells = [list(headers)]
    cells += [["-" if cell is None else printable(str(cell)) for cell in row] for row in rows]
    widths = [max(len(row[index]) for row in cells) for index in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if header in right_aligned else cell.ljust(width)
            for cell, width, header in zip(row, widths, headers, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def render_fields(fields: Sequence[tuple[str, object]], *, indent: str = "  ") -> str:
    """``label  value`` lines with the values aligned."""
    width = max((len(label) for label, _ in fields), default=0)
    return "\n".join(
        f"{indent}{label.ljust(width)}  {'-' if value is None else printable(str(value))}".rstrip()
        for label, value in fields
    )


# -------------------------------------------------------------------------------------------
# JSON
# -------------------------------------------------------------------------------------------


def echo_json(value: Any) -> None:
    click.echo(json.dumps(to_jsonable(value), ensure_ascii=False, indent=2))


class QueueWeight(str):
    """``QUEUE=N`` as ``postkit worker --weight`` takes it: ``queue`` weighs ``weight``. A
    string, written back as given, so that a supervisor passes it on to its children."""

    @property
    def queue(self) -> str:
        return self.rpartition("=")[0]

    @property
    def weight(self) -> int:
        return int(self.rpartition("=")[2])


class QueueWeightType(_ParamType):
    """Reads ``QUEUE=N``: N after the last ``=``, an int from 1 to 1000, since a queue's name
    may hold an ``=`` of its own."""

    name = "QUEUE=N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        queue, equals, weight = str(value).rpartition("=")
        if not equals or not queue or not weight.isascii() or not weight.isdigit():
            self.fail(f"{value!r} is not QUEUE=N (a queue and its weight, e.g. reports=3)")
        if int(weight) not in QUEUE_WEIGHT:
            self.fail(
                f"{queue!r}'s weight must be from {QUEUE_WEIGHT.low} to {QUEUE_WEIGHT.high}, "
                f"got {weight}"
            )
        return QueueWeight(value)


class NamespaceWeight(str):
    """``NAMESPACE[=N]`` as ``postkit worker --shared-namespace`` takes it: the namespace before
    the last ``=``, and the weight after it (1 without an ``=``). A string, written back as
    given, so that a supervisor passes it on to its children."""

    @property
    def namespace(self) -> str:
        namespace, equals, _ = self.rpartition("=")
        return namespace if equals else str(self)

    @property
    def weight_text(self) -> str | None:
        """What follows the last ``=``, as given; None without an ``=``."""
        _, equals, weight = self.rpartition("=")
        return weight if equals else None

    @property
    def weight(self) -> int:
        """The weight; only for a value :class:`NamespaceWeightType` accepted (an ``=`` is
        followed by digits)."""
        return 1 if self.weight_text is None else int(self.weight_text)


class NamespaceWeightType(_ParamType):
    """Reads ``NAMESPACE[=N]``: a namespace the SQL module accepts, and a weight from 1 to
    1000. Whatever follows the last ``=`` is the weight, so that ``tenant-a=-1`` or
    ``tenant-a= 3`` is refused rather than read as a namespace of that name, which no job is
    pushed to; a namespace with an ``=`` of its own takes a weight (``a=b=1``)."""

    name = "NAMESPACE[=N]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        given = NamespaceWeight(value)
        namespace, weight = given.namespace, given.weight_text
        problem = name_problem(namespace)
        if problem is not None:
            self.fail(f"the namespace {problem}")
        if weight is not None and not (weight.isascii() and weight.isdigit()):
            self.fail(
                f"{namespace!r}'s weight (after the last '=') must be a whole number from "
                f"{NAMESPACE_WEIGHT.low} to {NAMESPACE_WEIGHT.high}, got {weight!r}; a "
                f"namespace with '=' in its name takes a weight: {f'{value}=1'!r}"
            )
        if given.weight not in NAMESPACE_WEIGHT:
            self.fail(
                f"{namespace!r}'s weight must be from {NAMESPACE_WEIGHT.low} to "
                f"{NAMESPACE_WEIGHT.high}, got {given.weight}"
            )
        return given
