"""The SDK's limits (postkit.queue.limits) and the SQL module's checks are one rule: at every
boundary, and just beyond it, the SQL function called directly and the SDK accept and refuse
the same values, with the same exception."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import Job, limits, protocol
from postkit.queue.protocol.checks import json_text

US = timedelta(microseconds=1)
TOKEN = "00000000-0000-0000-0000-000000000000"
JOB = Job(
    id=1,
    queue="q",
    payload=None,
    attempts=1,
    max_attempts=1,
    worker_id="w",
    claim_token=TOKEN,
    visible_until=None,
    state="running",
    priority=0,
    run_at=None,
    namespace="ns",
    unique_key=None,
    claimed_at=None,
    errors=(),
    created_at=datetime.now(timezone.utc),
)
NONE: dict[str, Any] = {
    "delay": None,
    "run_at": None,
    "priority": 0,
    "max_attempts": None,
    "unique_key": None,
    "backoff_base": None,
    "backoff_cap": None,
    "trace_context": None,
}
SEARCH: dict[str, Any] = {
    "failed_after": None,
    "failed_before": None,
    "include_redriven": False,
    "after": None,
}
POLICY: dict[str, Any] = {
    "max_attempts": None,
    "visibility_timeout": None,
    "backoff_base": None,
    "backoff_cap": None,
    "retain_completed": None,
    "retain_dead": None,
    "max_payload_bytes": None,
    "retain_results": None,
}


@dataclass(frozen=True)
class Limit:
    sdk: Callable[[str, Any], object]
    """Builds the SDK's call for namespace and value (and raises where the SDK refuses)."""
    sql: str
    """The SQL function called directly, with %(ns)s and %(v)s."""
    values: tuple[Any, ...]
    """The boundaries and the values just beyond them."""


def around(bounds: limits.Bounds) -> tuple[int, ...]:
    return (bounds.low - 1, bounds.low, bounds.high, bounds.high + 1)


def durations(what: str) -> tuple[int, ...]:
    rule = limits.DURATIONS[what]
    return (-1, 0, 1, rule.maximum_us, rule.maximum_us + 1)


def carrier_text(size: int) -> str:
    """A trace context of ``size`` bytes as the SQL module measures it, as JSON text: two
    entries, with a two-byte character and characters JSON escapes, so that the SDK's measure
    has to agree with the jsonb text's separators, escapes and encoding."""
    carrier = {"traceparent": "00-x", "tracestate": 'é\n"'}
    carrier["tracestate"] += "x" * (size - limits.trace_context_bytes(carrier))
    assert limits.trace_context_bytes(carrier) == size
    return json.dumps(carrier)


def result_text(size: int) -> str:
    """A job result of ``size`` bytes as the SQL module measures it, as JSON text: floats in
    exponent notation and a negative zero (which PostgreSQL writes otherwise than json.dumps),
    escaped and two-byte characters, nesting, so that the SDK's measure has to agree with the
    jsonb text's."""
    value: dict[str, Any] = {"numbers": [1e-07, 1e16, -0.0, 2.5], "text": 'é\n"', "pad": ""}
    value["pad"] = "x" * (size - limits.result_bytes(value, json.dumps(value)))
    # As the SDK writes it (1e16 as 10000000000000000.0, which jsonb keeps as a float).
    text = json_text(value, limits.RESULT_SEPARATORS)
    assert limits.result_bytes(value, text) == size
    return text


def duration(what: str) -> Callable[[str, Any], object]:
    """The SDK's call that takes the duration ``what``, given in microseconds."""
    value = lambda v: v * US  # noqa: E731
    claim = {"worker_id": "w", "claim_token": None}
    return {
        "visibility_timeout": lambda ns, v: protocol.lifecycle.pull(
            ns, "q", worker_id=None, visibility_timeout=value(v), limit=1
        ),
        "extension": lambda ns, v: protocol.lifecycle.extend_visibility(
            ns, 1, extension=value(v), **claim
        ),
        "delay": lambda ns, v: protocol.lifecycle.push(ns, "q", 1, **{**NONE, "delay": value(v)}),
        "backoff": lambda ns, v: protocol.lifecycle.nack(
            ns, 1, error=None, backoff=value(v), **claim
        ),
        "backoff_base": lambda ns, v: protocol.lifecycle.push(
            ns, "q", 1, **{**NONE, "backoff_base": value(v)}
        ),
        "backoff_cap": lambda ns, v: protocol.lifecycle.push(
            ns, "q", 1, **{**NONE, "backoff_cap": value(v)}
        ),
        "retain_completed": lambda ns, v: protocol.operations.configure_queue(
            ns, "q", **{**POLICY, "retain_completed": value(v)}
        ),
        "retain_dead": lambda ns, v: protocol.operations.configure_queue(
            ns, "q", **{**POLICY, "retain_dead": value(v)}
        ),
        "retain_results": lambda ns, v: protocol.operations.configure_queue(
            ns, "q", **{**POLICY, "retain_results": value(v)}
        ),
        "rate_period": lambda ns, v: protocol.operations.configure_queue(
            ns, "q", **{**POLICY, "rate": (1, value(v))}
        ),
        "older_than": lambda ns, v: protocol.operations.purge_dead_letters(
            ns, older_than=value(v), queue=None
        ),
        "heartbeat_interval": lambda ns, v: protocol.workers.register_worker(
            ns, "w", **{**REGISTRATION, "heartbeat_interval": value(v)}
        ),
        "wait_for_room": lambda ns, v: protocol.lifecycle.push(
            ns, "q", 1, **{**NONE, "wait_for_room": value(v)}
        ),
    }[what]


V = "%(v)s::bigint * interval '1 microsecond'"
DURATION_SQL = {
    "visibility_timeout": f"SELECT count(*) FROM postkit_queue.pull(%(ns)s, 'q', NULL, {V})",
    "extension": f"SELECT postkit_queue.extend_visibility(%(ns)s, 1, {V}, 'w')",
    "delay": f"SELECT postkit_queue.push(%(ns)s, 'q', '1', p_delay => {V})",
    "backoff": f"SELECT postkit_queue.nack(%(ns)s, 1, NULL, 'w', NULL, {V})",
    "backoff_base": f"SELECT postkit_queue.push(%(ns)s, 'q', '1', p_backoff_base => {V})",
    "backoff_cap": f"SELECT postkit_queue.push(%(ns)s, 'q', '1', p_backoff_cap => {V})",
    "retain_completed": (
        f"SELECT postkit_queue.configure_queue(%(ns)s, 'q', p_retain_completed => {V})"
    ),
    "retain_dead": f"SELECT postkit_queue.configure_queue(%(ns)s, 'q', p_retain_dead => {V})",
    "retain_results": (
        f"SELECT postkit_queue.configure_queue(%(ns)s, 'q', p_retain_results => {V})"
    ),
    "rate_period": (
        "SELECT postkit_queue.configure_queue("
        f"%(ns)s, 'q', p_rate_limit => 1, p_rate_period => {V})"
    ),
    "older_than": f"SELECT postkit_queue.purge_dead_letters(%(ns)s, {V})",
    "heartbeat_interval": (
        f"SELECT postkit_queue.register_worker(%(ns)s, 'w', 'worker', 'h', 1, '{{}}', 1, 'v', {V})"
    ),
    "wait_for_room": f"SELECT postkit_queue.push(%(ns)s, 'q', '1', p_wait_for_room => {V})",
}
assert set(DURATION_SQL) == set(limits.DURATIONS)

REGISTRATION: dict[str, object] = {
    "kind": "worker",
    "host": "h",
    "pid": 1,
    "queues": [],
    "concurrency": 1,
    "version": "v",
    "heartbeat_interval": 5,
}
REGISTER_SQL = (
    "SELECT postkit_queue.register_worker("
    "%(ns)s, 'w', 'worker', 'h', {pid}, '{{}}', {c}, 'v', interval '5 s')"
)

LIMIT_CASES: dict[str, Limit] = {
    "worker-pid": Limit(
        lambda ns, v: protocol.workers.register_worker(ns, "w", **{**REGISTRATION, "pid": v}),
        REGISTER_SQL.format(pid="%(v)s", c=1),
        around(limits.WORKER_PID),
    ),
    "worker-concurrency": Limit(
        lambda ns, v: protocol.workers.register_worker(
            ns, "w", **{**REGISTRATION, "concurrency": v}
        ),
        REGISTER_SQL.format(pid=1, c="%(v)s"),
        around(limits.WORKER_CONCURRENCY),
    ),
    "priority": Limit(
        lambda ns, v: protocol.lifecycle.push(ns, "q", 1, **{**NONE, "priority": v}),
        "SELECT postkit_queue.push(%(ns)s, 'q', '1', p_priority => %(v)s)",
        around(limits.PRIORITY),
    ),
    "batch-priority": Limit(
        lambda ns, v: protocol.lifecycle.push_batch(
            ns,
            "q",
            [1],
            delay=None,
            run_at=None,
            priority=v,
            max_attempts=None,
            unique_keys=None,
            trace_context=None,
        ),
        "SELECT count(*) FROM postkit_queue.push_batch(%(ns)s, 'q', '[1]', p_priority => %(v)s)",
        around(limits.PRIORITY),
    ),
    "max_attempts": Limit(
        lambda ns, v: protocol.lifecycle.push(ns, "q", 1, **{**NONE, "max_attempts": v}),
        "SELECT postkit_queue.push(%(ns)s, 'q', '1', p_max_attempts => %(v)s)",
        around(limits.MAX_ATTEMPTS),
    ),
    "queue-max_attempts": Limit(
        lambda ns, v: protocol.operations.configure_queue(ns, "q", **{**POLICY, "max_attempts": v}),
        "SELECT postkit_queue.configure_queue(%(ns)s, 'q', p_max_attempts => %(v)s)",
        around(limits.MAX_ATTEMPTS),
    ),
    "queue-concurrency": Limit(
        lambda ns, v: protocol.operations.configure_queue(ns, "q", **{**POLICY, "concurrency": v}),
        "SELECT postkit_queue.configure_queue(%(ns)s, 'q', p_concurrency => %(v)s)",
        around(limits.QUEUE_CONCURRENCY),
    ),
    "rate-limit": Limit(
        lambda ns, v: protocol.operations.configure_queue(ns, "q", **{**POLICY, "rate": (v, 1)}),
        "SELECT postkit_queue.configure_queue("
        "%(ns)s, 'q', p_rate_limit => %(v)s, p_rate_period => interval '1 second')",
        around(limits.RATE_LIMIT),
    ),
    "group-concurrency": Limit(
        lambda ns, v: protocol.operations.configure_queue(
            ns, "q", **{**POLICY, "group_concurrency": v}
        ),
        "SELECT postkit_queue.configure_queue(%(ns)s, 'q', p_group_concurrency => %(v)s)",
        around(limits.GROUP_CONCURRENCY),
    ),
    "max-pending": Limit(
        lambda ns, v: protocol.operations.configure_queue(ns, "q", **{**POLICY, "max_pending": v}),
        "SELECT postkit_queue.configure_queue(%(ns)s, 'q', p_max_pending => %(v)s)",
        around(limits.MAX_PENDING),
    ),
    "group-weight": Limit(
        lambda ns, v: protocol.operations.set_group_weight(ns, "q", "k", v),
        "SELECT postkit_queue.set_group_weight(%(ns)s, 'q', 'k', %(v)s)",
        around(limits.GROUP_WEIGHT),
    ),
    "queue-weight": Limit(
        lambda ns, v: protocol.lifecycle.pull_any(
            ns, ["q"], worker_id=None, visibility_timeout=None, limit=1, weights={"q": v}
        ),
        "SELECT count(*) FROM postkit_queue.pull_any(%(ns)s, '{q}', p_weights => ARRAY[%(v)s])",
        around(limits.QUEUE_WEIGHT),
    ),
    "ordered-group-concurrency": Limit(
        lambda ns, v: protocol.operations.configure_queue(
            ns, "q", **{**POLICY, "group_concurrency": v, "group_ordered": True}
        ),
        "SELECT postkit_queue.configure_queue("
        "%(ns)s, 'q', p_group_concurrency => %(v)s, p_group_ordered => true)",
        (1, 2),
    ),
    "max_payload_bytes": Limit(
        lambda ns, v: protocol.operations.configure_queue(
            ns, "q", **{**POLICY, "max_payload_bytes": v}
        ),
        "SELECT postkit_queue.configure_queue(%(ns)s, 'q', p_max_payload_bytes => %(v)s)",
        around(limits.MAX_PAYLOAD_BYTES),
    ),
    "batch-payloads": Limit(
        lambda ns, v: protocol.lifecycle.push_batch(
            ns,
            "q",
            [0] * v,
            delay=None,
            run_at=None,
            priority=0,
            max_attempts=None,
            unique_keys=None,
            trace_context=None,
        ),
        "SELECT count(*) FROM postkit_queue.push_batch(%(ns)s, 'q', "
        "(SELECT jsonb_agg(0) FROM generate_series(1, %(v)s)))",
        (limits.BATCH_PAYLOADS, limits.BATCH_PAYLOADS + 1),
    ),
    "limit-pull": Limit(
        lambda ns, v: protocol.lifecycle.pull(
            ns, "q", worker_id=None, visibility_timeout=None, limit=v
        ),
        "SELECT count(*) FROM postkit_queue.pull(%(ns)s, 'q', p_limit => %(v)s)",
        around(limits.LIMITS["pull"]),
    ),
    "limit-pull_any": Limit(
        lambda ns, v: protocol.lifecycle.pull_any(
            ns, ["q"], worker_id=None, visibility_timeout=None, limit=v
        ),
        "SELECT count(*) FROM postkit_queue.pull_any(%(ns)s, '{q}', p_limit => %(v)s)",
        around(limits.LIMITS["pull_any"]),
    ),
    "limit-tick_timeouts": Limit(
        lambda ns, v: protocol.lifecycle.tick_timeouts(ns, limit=v),
        "SELECT count(*) FROM postkit_queue.tick_timeouts(%(ns)s, %(v)s)",
        around(limits.LIMITS["tick_timeouts"]),
    ),
    "limit-dead_letters": Limit(
        lambda ns, v: protocol.operations.dead_letters(ns, None, limit=v),
        "SELECT count(*) FROM postkit_queue.dead_letters(%(ns)s, p_limit => %(v)s)",
        around(limits.LIMITS["dead_letters"]),
    ),
    "limit-stats": Limit(
        lambda ns, v: protocol.operations.stats(ns, None, cap=v),
        "SELECT count(*) FROM postkit_queue.stats(%(ns)s, p_cap => %(v)s)",
        around(limits.LIMITS["stats"]),
    ),
    "limit-stats_page": Limit(
        lambda ns, v: protocol.operations.stats(ns, None, cap=10, limit=v),
        "SELECT count(*) FROM postkit_queue.stats(%(ns)s, p_limit => %(v)s)",
        around(limits.LIMITS["stats_page"]),
    ),
    "limit-jobs": Limit(
        lambda ns, v: protocol.operations.jobs(ns, "q", "pending", limit=v, after=None),
        "SELECT count(*) FROM postkit_queue.jobs(%(ns)s, 'q', 'pending', %(v)s)",
        around(limits.LIMITS["jobs"]),
    ),
    "limit-running_jobs": Limit(
        lambda ns, v: protocol.workers.running_jobs(ns, limit=v),
        "SELECT count(*) FROM postkit_queue.running_jobs(%(ns)s, %(v)s)",
        around(limits.LIMITS["running_jobs"]),
    ),
    "limit-count_dead_letters": Limit(
        lambda ns, v: protocol.operations.count_dead_letters(
            ns, None, failed_after=None, failed_before=None, include_redriven=False, cap=v
        ),
        "SELECT postkit_queue.count_dead_letters(%(ns)s, p_cap => %(v)s)",
        around(limits.LIMITS["count_dead_letters"]),
    ),
    "limit-job_lineage": Limit(
        lambda ns, v: protocol.operations.job_lineage(ns, 1, limit=v),
        "SELECT count(*) FROM postkit_queue.job_lineage(%(ns)s, 1, %(v)s)",
        around(limits.LIMITS["job_lineage"]),
    ),
    "limit-cancel_queue": Limit(
        lambda ns, v: protocol.operations.cancel_queue(ns, "q", created_before=None, limit=v),
        "SELECT postkit_queue.cancel_queue(%(ns)s, 'q', p_limit => %(v)s)",
        around(limits.LIMITS["cancel_queue"]),
    ),
    "limit-cancel_tree": Limit(
        lambda ns, v: protocol.operations.cancel_tree(ns, 1, limit=v),
        "SELECT postkit_queue.cancel_tree(%(ns)s, 1, %(v)s)",
        around(limits.LIMITS["cancel_tree"]),
    ),
    "limit-cancel_run": Limit(
        lambda ns, v: protocol.operations.cancel_run(ns, 1, limit=v),
        "SELECT postkit_queue.cancel_run(%(ns)s, 1, %(v)s)",
        around(limits.LIMITS["cancel_run"]),
    ),
    "limit-group_weights": Limit(
        lambda ns, v: protocol.operations.group_weights(ns, "q", after=None, limit=v),
        "SELECT count(*) FROM postkit_queue.group_weights(%(ns)s, 'q', NULL, %(v)s)",
        around(limits.LIMITS["group_weights"]),
    ),
    "limit-group_stats": Limit(
        lambda ns, v: protocol.operations.group_stats(ns, "q", after=None, limit=v, cap=10),
        "SELECT count(*) FROM postkit_queue.group_stats(%(ns)s, 'q', NULL, %(v)s)",
        around(limits.LIMITS["group_stats"]),
    ),
    "limit-group_stats_cap": Limit(
        lambda ns, v: protocol.operations.group_stats(ns, "q", after=None, limit=10, cap=v),
        "SELECT count(*) FROM postkit_queue.group_stats(%(ns)s, 'q', p_cap => %(v)s)",
        around(limits.LIMITS["stats"]),
    ),
    "limit-job_tree": Limit(
        lambda ns, v: protocol.lifecycle.job_tree(ns, 1, v),
        "SELECT count(*) FROM postkit_queue.job_tree(%(ns)s, 1, %(v)s)",
        around(limits.LIMITS["job_tree"]),
    ),
    "limit-waiting_children": Limit(
        lambda ns, v: protocol.lifecycle.waiting_children(ns, 1, v),
        "SELECT count(*) FROM postkit_queue.waiting_children(%(ns)s, 1, %(v)s)",
        around(limits.LIMITS["waiting_children"]),
    ),
    "limit-search_dead_letters": Limit(
        lambda ns, v: protocol.operations.search_dead_letters(
            ns, "x", None, **SEARCH, limit=v, scan_limit=10
        ),
        "SELECT count(*) FROM postkit_queue.search_dead_letters(%(ns)s, 'x', p_limit => %(v)s)",
        around(limits.LIMITS["search_dead_letters"]),
    ),
    "limit-search_scan": Limit(
        lambda ns, v: protocol.operations.search_dead_letters(
            ns, "x", None, **SEARCH, limit=10, scan_limit=v
        ),
        "SELECT count(*) FROM postkit_queue.search_dead_letters(%(ns)s, 'x', "
        "p_scan_limit => %(v)s)",
        around(limits.LIMITS["search_scan"]),
    ),
    "limit-redrive": Limit(
        lambda ns, v: protocol.operations.redrive(
            ns,
            job_ids=None,
            queue=None,
            failed_after=None,
            failed_before=None,
            error_contains=None,
            to_queue=None,
            limit=v,
            dry_run=True,
        ),
        "SELECT count(*) FROM postkit_queue.redrive(%(ns)s, p_limit => %(v)s)",
        around(limits.LIMITS["redrive"]),
    ),
    "limit-prune": Limit(
        lambda ns, v: protocol.operations.prune(ns, limit=v),
        "SELECT count(*) FROM postkit_queue.prune(%(ns)s, %(v)s)",
        around(limits.LIMITS["prune"]),
    ),
    "limit-due_schedules": Limit(
        lambda ns, v: protocol.scheduling.due_schedules(ns, limit=v),
        "SELECT count(*) FROM postkit_queue.due_schedules(%(ns)s, %(v)s)",
        around(limits.LIMITS["due_schedules"]),
    ),
    "limit-schedules": Limit(
        lambda ns, v: protocol.scheduling.schedules(ns, limit=v),
        "SELECT count(*) FROM postkit_queue.schedules(%(ns)s, p_limit => %(v)s)",
        around(limits.LIMITS["schedules"]),
    ),
    "limit-schedule_runs": Limit(
        lambda ns, v: protocol.scheduling.schedule_runs(ns, limit=v),
        "SELECT count(*) FROM postkit_queue.schedule_runs(%(ns)s, p_limit => %(v)s)",
        around(limits.LIMITS["schedules"]),
    ),
    "trace_context-bytes": Limit(
        lambda ns, v: protocol.lifecycle.push(
            ns, "q", 1, **{**NONE, "trace_context": json.loads(v)}
        ),
        "SELECT postkit_queue.push(%(ns)s, 'q', '1', p_trace_context => %(v)s::jsonb)",
        tuple(
            carrier_text(size)
            for size in (limits.TRACE_CONTEXT_BYTES, limits.TRACE_CONTEXT_BYTES + 1)
        ),
    ),
    "result-bytes": Limit(
        lambda ns, v: protocol.lifecycle.ack(
            ns, 1, worker_id="w", claim_token=None, result=json.loads(v)
        ),
        "SELECT postkit_queue.ack(%(ns)s, 1, 'w', NULL, %(v)s::jsonb)",
        tuple(result_text(size) for size in (limits.RESULT_BYTES, limits.RESULT_BYTES + 1)),
    ),
    "batch-result-bytes": Limit(
        lambda ns, v: protocol.lifecycle.ack_many(ns, [JOB], [json.loads(v)]),
        f"SELECT postkit_queue.ack_many(%(ns)s, '{{1}}', '{{{TOKEN}}}',"
        " ('[' || %(v)s || ']')::jsonb)",
        tuple(result_text(size) for size in (limits.RESULT_BYTES, limits.RESULT_BYTES + 1)),
    ),
    "name-length": Limit(
        lambda ns, v: protocol.lifecycle.push(ns, "x" * v, 1, **NONE),
        "SELECT postkit_queue.push(%(ns)s, repeat('x', %(v)s), '1')",
        (0, 1, limits.NAME_MAX_CHARS, limits.NAME_MAX_CHARS + 1),
    ),
    **{
        f"duration-{what}": Limit(duration(what), DURATION_SQL[what], durations(what))
        for what in limits.DURATIONS
    },
}
assert {f"limit-{call}" for call in limits.LIMITS} <= set(LIMIT_CASES)


def sdk_verdict(build: Callable[[str, Any], object], namespace: str, value: Any) -> Any:
    try:
        build(namespace, value)
    except errors.PostkitError as error:
        return type(error)
    return None


def sql_verdict(conn: psycopg.Connection, statement: str, params: dict[str, Any]) -> Any:
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(statement, params)
    except psycopg.Error as error:
        return errors.SQLSTATE_ERRORS.get(error.sqlstate or "", error.sqlstate)
    return None


@pytest.mark.parametrize("case", LIMIT_CASES.values(), ids=LIMIT_CASES.keys())
def test_the_sdk_and_the_sql_function_accept_and_refuse_alike_at_every_boundary(
    connect: Callable[..., psycopg.Connection], namespace: str, case: Limit
) -> None:
    conn = connect(autocommit=True)
    verdicts = {
        value: (
            sdk_verdict(case.sdk, namespace, value),
            sql_verdict(conn, case.sql, {"ns": namespace, "v": value}),
        )
        for value in case.values
    }

    assert {value: sdk for value, (sdk, _) in verdicts.items()} == {
        value: sql for value, (_, sql) in verdicts.items()
    }
    assert any(sdk is None for sdk, _ in verdicts.values())  # a boundary is accepted
    assert any(sdk is not None for sdk, _ in verdicts.values())  # and the next value refused


def python_refuses(text: str) -> bool:
    return limits.name_problem(text) is not None


def test_the_name_rule_agrees_with_the_sql_module_on_every_code_point(
    connect: Callable[..., psycopg.Connection],
) -> None:
    """Alone, a character is refused when it is a control or format character or a space
    separator; after a letter, only when it is a control or format character."""
    conn = connect(autocommit=True)
    [[alone, after_letter]] = conn.execute(
        """
        SELECT coalesce(jsonb_agg(cp) FILTER (WHERE NOT postkit_queue.is_name(chr(cp))), '[]'),
               coalesce(jsonb_agg(cp) FILTER (WHERE NOT postkit_queue.is_name('x' || chr(cp))),
                        '[]')
        FROM generate_series(1, 1114111) AS cp
        WHERE cp NOT BETWEEN 55296 AND 57343  -- surrogates: not characters PostgreSQL stores
        """
    ).fetchall()
    code_points = [cp for cp in range(1, 0x110000) if not 0xD800 <= cp <= 0xDFFF]

    assert alone == [cp for cp in code_points if python_refuses(chr(cp))]
    assert after_letter == [cp for cp in code_points if python_refuses("x" + chr(cp))]


def test_the_name_rule_refuses_every_control_and_format_character_python_knows() -> None:
    for cp in range(0x110000):
        category = unicodedata.category(chr(cp))
        if category in ("Cc", "Cf", "Cs"):
            assert python_refuses(f"x{chr(cp)}"), f"U+{cp:04X} ({category})"
        if category in ("Zs", "Zl", "Zp"):
            assert python_refuses(chr(cp) * 2), f"U+{cp:04X} ({category})"
            assert not python_refuses(f"x{chr(cp)}x"), f"U+{cp:04X} ({category})"
