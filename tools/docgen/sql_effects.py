"""What a SQL function locks and raises, read from its body and its callees' bodies.

"Locks" comes from the FOR UPDATE [SKIP LOCKED], UPDATE, DELETE, INSERT, DDL, GRANT and
pg_notify statements, "raises" from the ERRCODEs raised; both also count what the
postkit_queue functions it calls do, directly or not, and mark what happens only inside an IF.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable

from docgen.sql_schema import SqlFunction


def _strip_comments(body: str) -> str:
    return re.sub(r"--[^\n]*", "", body)


def _depth_at(body: str) -> Callable[[int], int]:
    """How many plpgsql IF blocks are open at a position of ``body`` (comments stripped): an
    IF that starts a statement opens one, END IF closes it."""
    events: list[tuple[int, int]] = []
    for match in re.finditer(r"\bEND\s+IF\b|\bIF\b", body):
        if match.group().startswith("END"):
            events.append((match.start(), -1))
            continue
        before = body[: match.start()].rstrip()
        if re.search(r"\bEND$", before):
            continue
        if not before or re.search(r"(;|\bTHEN|\bELSE|\bLOOP|\bBEGIN)$", before):
            events.append((match.start(), 1))
    return lambda position: sum(delta for at, delta in events if at < position)


@dataclasses.dataclass(frozen=True)
class Effect:
    """Something a function's statement locks or writes. ``conditional``: only on some paths
    (inside an IF, or in a callee called inside one)."""

    target: str
    what: str
    conditional: bool


def _calls(function: SqlFunction, names: Iterable[str]) -> dict[str, bool]:
    """The postkit_queue functions ``function`` calls: name -> whether only conditionally."""
    known = set(names)
    body = _strip_comments(function.body)
    depth = _depth_at(body)
    calls: dict[str, bool] = {}
    for match in re.finditer(r"(?<!INTO )postkit_queue\.(\w+)\s*\(", body):
        name = match.group(1)
        if name in known and name != function.name:
            calls[name] = calls.get(name, True) and depth(match.start()) > 0
    return calls


def _direct_effects(function: SqlFunction) -> list[Effect]:
    """What each locking or writing statement of the body does, in order."""
    body = _strip_comments(function.body)
    depth = _depth_at(body)
    found: list[Effect] = []
    for chunk in re.finditer(r"[^;]+", body):
        statement = chunk.group()

        def add(target: str, what: str, at: int, statement_start: int = chunk.start()) -> None:
            found.append(Effect(target, what, depth(statement_start + at) > 0))

        for match in re.finditer(r"FOR\s+UPDATE(?:\s+OF\s+\w+)?(\s+SKIP\s+LOCKED)?", statement):
            tables = re.findall(r"FROM\s+postkit_queue\.(\w+)", statement[: match.start()])
            if match.group(1):
                what = (
                    "locks rows FOR UPDATE SKIP LOCKED: rows another transaction holds are "
                    "skipped, never waited for"
                )
            else:
                what = "locks rows FOR UPDATE: waits for a transaction that holds them"
            add(tables[-1] if tables else "?", what, match.start())
        for match in re.finditer(r"(?<!FOR )(?<!DO )\bUPDATE\s+postkit_queue\.(\w+)", statement):
            add(
                match.group(1), "updates rows (row locks until the transaction ends)", match.start()
            )
        for match in re.finditer(r"DELETE\s+FROM\s+postkit_queue\.(\w+)", statement):
            add(
                match.group(1), "deletes rows (row locks until the transaction ends)", match.start()
            )
        for match in re.finditer(r"INSERT\s+INTO\s+postkit_queue\.(\w+)", statement):
            if re.search(r"ON\s+CONFLICT.*DO\s+UPDATE", statement, re.S):
                what = "inserts rows, or updates the existing one (ON CONFLICT DO UPDATE)"
            elif re.search(r"ON\s+CONFLICT", statement):
                what = "inserts rows (ON CONFLICT DO NOTHING)"
            else:
                what = "inserts rows"
            add(match.group(1), what, match.start())
        ddl = re.search(r"ALTER\s+TABLE|CREATE\s+POLICY|DROP\s+POLICY", statement)
        if ddl:
            add(
                "",
                "DDL (ALTER TABLE, CREATE/DROP POLICY): ACCESS EXCLUSIVE table locks",
                ddl.start(),
            )
        grant = re.search(r"\bGRANT\b", statement)
        if grant:
            add("", "GRANT statements (privileges on the queue's schema and tables)", grant.start())
        notify = re.search(r"pg_notify\(", statement)
        if notify:
            add("", "notifies listeners when the transaction commits", notify.start())
    return found


def _closure(name: str, functions: dict[str, SqlFunction]) -> dict[str, tuple[str, bool]]:
    """Every function ``name`` calls, directly or not: callee -> (the direct callee it is
    reached through, whether it is reached only conditionally)."""
    reached: dict[str, tuple[str, bool]] = {}
    frontier = [
        (callee, callee, conditional)
        for callee, conditional in _calls(functions[name], functions).items()
    ]
    while frontier:
        callee, via, conditional = frontier.pop(0)
        if callee == name:
            continue
        known = reached.get(callee)
        if known is not None and (known[1] <= conditional):
            continue
        reached[callee] = (via, conditional if known is None else known[1] and conditional)
        for deeper, deeper_conditional in _calls(functions[callee], functions).items():
            frontier.append((deeper, via, conditional or deeper_conditional))
    return reached


def locks_of(name: str, functions: dict[str, SqlFunction]) -> list[str]:
    effects: dict[tuple[str, str], tuple[str, bool]] = {}

    def add(effect: Effect, via: str, conditional: bool) -> None:
        key = (effect.target, effect.what)
        known = effects.get(key)
        if known is None or (known[1] and not conditional):
            effects[key] = (via if known is None else known[0], conditional)

    for effect in _direct_effects(functions[name]):
        add(effect, "", effect.conditional)
    for callee, (via, call_conditional) in _closure(name, functions).items():
        for effect in _direct_effects(functions[callee]):
            add(effect, f"via `{via}`", call_conditional or effect.conditional)
    lines = []
    for (target, what), (via, conditional) in effects.items():
        notes = [note for note in (via, "on some paths" if conditional else "") if note]
        suffix = f" ({', '.join(notes)})" if notes else ""
        lines.append(
            f"`{target}`: {what}{suffix}" if target else f"{what[0].upper()}{what[1:]}{suffix}"
        )
    return lines


def raises_of(name: str, functions: dict[str, SqlFunction]) -> list[str]:
    from postkit.errors import SQLSTATE_ERRORS

    codes: dict[str, str] = {}
    for code in re.findall(r"ERRCODE = '(\w+)'", functions[name].body):
        codes.setdefault(code, "")
    for callee, (via, _) in _closure(name, functions).items():
        for code in re.findall(r"ERRCODE = '(\w+)'", functions[callee].body):
            codes.setdefault(code, f" (via `{via}`)")
    return [
        f"`{code}` {SQLSTATE_ERRORS[code].__name__ if code in SQLSTATE_ERRORS else '(unmapped)'}"
        f"{via}"
        for code, via in sorted(codes.items())
    ]
