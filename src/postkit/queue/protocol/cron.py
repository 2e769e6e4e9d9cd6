"""When a schedule runs: its time zone, the cron grammar Postkit schedules, and the next run
after a moment."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from postkit import errors

_UTC = timezone.utc


def zone(timezone: object) -> ZoneInfo:
    """The time zone named ``timezone``, or InvalidScheduleError."""
    if not isinstance(timezone, str):
        raise errors.InvalidScheduleError("timezone must be a time zone name such as 'UTC'")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise errors.InvalidScheduleError(f"unknown time zone {timezone!r}") from exc


def next_run_after(
    moment: datetime,
    *,
    cron: str | None,
    timezone: str,
    every: timedelta | None,
    due_at: datetime | None = None,
) -> datetime:
    """The first run of a schedule strictly after ``moment``.

    A cron schedule runs at the times its expression names, in ``timezone`` (so "0 9 * * *"
    stays at 9 am across daylight-saving changes). An interval schedule keeps its phase: runs
    fall at ``due_at + k * every``. Runs between ``due_at`` and ``moment`` are skipped: that is
    the catch-up policy, one run for a gap of any length.
    """
    if every is not None:
        start = due_at or moment
        steps = max(0, int((moment - start) / every)) + 1
        return start + steps * every
    if cron is None:
        raise errors.InvalidScheduleError("a schedule needs a cron expression or an interval")
    local = moment.astimezone(zone(timezone))
    return croniter(cron, local).get_next(datetime).astimezone(_UTC)  # type: ignore[no-any-return]


# The cron grammar Postkit schedules, the same as postkit_queue.cron_problem's in SQL; a test
# runs both over the same expressions.
_CRON_TEXT = re.compile(r"[ -~\t\n\r\v\f]*", re.ASCII)

_CRON_WHITESPACE = " \t\n\r\v\f"

_CRON_SEPARATOR = re.compile(r"[ \t\n\r\v\f]+", re.ASCII)

_CRON_FIELDS = ("minute", "hour", "day of month", "month", "day of week")

_CRON_LOW = (0, 0, 1, 1, 0)

_CRON_HIGH = (59, 23, 31, 12, 7)

_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")

_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


_CRON_NAMES: dict[int, dict[str, int]] = {
    3: {name: number for number, name in enumerate(_MONTH_NAMES, start=1)},
    4: {name: number for number, name in enumerate(_WEEKDAY_NAMES)},
}

_CRON_ITEM = re.compile(
    r"(\*|([0-9]{1,4}|[a-z]{3})(-([0-9]{1,4}|[a-z]{3}))?)(/([0-9]{1,4}))?", re.ASCII
)

_CRON_NTH = re.compile(r"([0-9]{1,4}|[a-z]{3})#([0-9]{1,4})", re.ASCII)

_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _cron_value(token: str, field: int) -> int | None:
    if token.isdigit():
        return int(token)
    return _CRON_NAMES.get(field, {}).get(token)


def cron_problem(cron: object) -> str | None:
    """Why ``cron`` is not a cron expression Postkit schedules, or None when it is.

    Five fields separated by ASCII whitespace: minute (0-59), hour (0-23), day of month
    (1-31), month (1-12 or jan-dec), day of week (0-7 or sun-sat; 7 is Sunday). A field is a
    comma-separated list of items: ``*``, a value, a range ``a-b`` (a <= b), each with an
    optional step ``/n`` (1 <= n <= the field's span), or ``a/n`` (from a to the field's end).
    The day of month also takes ``L`` (its last day) and ``?``; the day of week ``?`` and
    ``v#n`` (the n-th weekday v of the month, n from 1 to 5; a list of those, not mixed with
    other items). Letters are case-insensitive.
    Refused besides: an expression that never fires (with the day of week unrestricted, days
    of month none of its months has, such as "0 0 30 2 *"), and an n-th weekday together with
    a restricted day of month. The SQL module's ``cron_problem`` accepts exactly the same.
    """
    if not isinstance(cron, str):
        return f"a cron expression is text, got {type(cron).__name__}"
    if not _CRON_TEXT.fullmatch(cron):
        return f"the cron expression {cron!r} holds a character other than printable ASCII"
    fields = _CRON_SEPARATOR.split(cron.strip(_CRON_WHITESPACE))
    if len(fields) != 5:
        return (
            f"not a 5-field cron expression (minute hour day-of-month month day-of-week): {cron!r}"
        )
    unrestricted = [False] * 5
    days: list[int] = []
    months: list[int] = []
    last_day = nth = plain_weekday = False
    for index, text in enumerate(fields):
        field = text.lower()
        what = _CRON_FIELDS[index]
        if field == "*" or (field == "?" and index in (2, 4)):
            unrestricted[index] = True
            continue
        for item in field.split(","):
            if index == 2 and item == "l":
                last_day = True
                continue
            nth_match = _CRON_NTH.fullmatch(item) if index == 4 else None
            if nth_match is not None:
                weekday = _cron_value(nth_match[1], 4)
                if weekday is None or weekday > 7 or not 1 <= int(nth_match[2]) <= 5:
                    return (
                        f"{item!r} in the day-of-week field of {cron!r} is not weekday#n "
                        "(n from 1 to 5)"
                    )
                nth = True
                continue
            plain_weekday = plain_weekday or index == 4
            match = _CRON_ITEM.fullmatch(item)
            if match is None:
                return f"{item!r} in the {what} field of {cron!r} is not a cron item"
            low: int | None
            high: int | None
            if match[1] == "*":
                low, high = _CRON_LOW[index], _CRON_HIGH[index]
            else:
                low = _cron_value(match[2], index)
                if match[4] is not None:
                    high = _cron_value(match[4], index)
                else:
                    high = _CRON_HIGH[index] if match[6] is not None else low
            if low is None or high is None or low < _CRON_LOW[index] or high > _CRON_HIGH[index]:
                return (
                    f"{item!r} in the {what} field of {cron!r} is out of range "
                    f"({_CRON_LOW[index]} to {_CRON_HIGH[index]})"
                )
            if low > high:
                return f"the range {item!r} in the {what} field of {cron!r} runs backwards"
            step = 1 if match[6] is None else int(match[6])
            span = _CRON_HIGH[index] - _CRON_LOW[index] + 1
            if not 1 <= step <= span:
                return (
                    f"the step of {item!r} in the {what} field of {cron!r} must be from 1 to {span}"
                )
            if index == 2:
                days.extend(range(low, high + 1, step))
            elif index == 3:
                months.extend(range(low, high + 1, step))
    if nth and plain_weekday:
        return f"{cron!r} mixes n-th weekdays (#) with other days of the week: give one kind"
    if nth and not unrestricted[2]:
        return (
            f"{cron!r} names both days of the month and an n-th weekday (#), which may never "
            "coincide: give one of them"
        )
    # With both day fields restricted, cron runs on either (the union), and every weekday comes
    # in every month; with the day of week unrestricted, the days of month alone decide.
    if (
        unrestricted[4]
        and not (unrestricted[2] or last_day or unrestricted[3])
        and not any(day <= _MONTH_DAYS[month - 1] for day in days for month in months)
    ):
        return f"{cron!r} never fires: none of its months has those days"
    return None


def check_cron(cron: str) -> str:
    """``cron``, if Postkit schedules it (see :func:`cron_problem`) and croniter agrees."""
    problem = cron_problem(cron)
    if problem is None and not croniter.is_valid(cron):
        problem = f"croniter cannot parse the cron expression {cron!r}"
    if problem is not None:
        raise errors.InvalidScheduleError(problem)
    return cron
