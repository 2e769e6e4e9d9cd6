"""Turn a comparison run (the JSON ``suite.run`` returns) into Markdown and a PNG chart."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, Spread

LATENCY_COLUMNS = (
    ("latency_p50_ms", "W2 p50 ms"),
    ("latency_p99_ms", "W2 p99 ms"),
    ("latency_max_ms", "W2 max ms"),
)
AUTOVACUUM_OFF = "autovacuum_off"


def spread(library: dict[str, Any], key: str) -> Spread | None:
    values = library.get("metrics", {}).get(key)
    return Spread.of(values) if values else None


def cell(library: dict[str, Any], key: str, digits: int = 0) -> str:
    found = spread(library, key)
    if found is None:
        return "-"
    if len(library["metrics"][key]) == 1:
        return f"{found.median:,.{digits}f}"
    return found.render(digits)


def _median(report: dict[str, Any], library: str, key: str) -> float | None:
    found = spread(report["libraries"].get(library, {}), key)
    return found.median if found else None


def _title(name: str, library: dict[str, Any]) -> str:
    return str(library.get("title") or name)


def _backlog_key(backlog: int) -> str:
    return f"drain_backlog@{backlog}"


def _first_backlog(report: dict[str, Any]) -> int | None:
    backlogs = report["meta"]["scale"].get("backlogs") or ()
    return int(backlogs[0]) if backlogs else None


# ---------------------------------------------------------------------------------------------
# The floor
# ---------------------------------------------------------------------------------------------


def _floor_figure(report: dict[str, Any], library: dict[str, Any]) -> tuple[str, float] | None:
    """The floor a library's drains are compared with: pgbench's SKIP LOCKED dequeue of 100
    jobs per transaction for a library that claims in batches, of 1 for one that claims one
    job per statement; None for Redis or without a floor."""
    floor = report.get("floor") or {}
    if "error" in floor or not floor or library.get("backend") != "PostgreSQL":
        return None
    if library.get("claims_in_batches", True):
        return "dequeue 100/tx", float(floor["dequeue100_jobs_median"])
    return "dequeue 1/tx", float(floor["dequeue1_jobs_median"])


def _of_floor(report: dict[str, Any], library: dict[str, Any], value: float | None) -> str:
    found = _floor_figure(report, library)
    if value is None or found is None:
        return "-"
    return f"{value / found[1]:.2f} of {found[0]}"


# ---------------------------------------------------------------------------------------------
# Targets: issue 15 section 2
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measure: Callable[[dict[str, Any]], tuple[str, float] | None]
    """(what was measured, ratio) or None when a needed number is missing."""
    threshold: float
    at_most: bool = False
    unit: str = "x"


def _pair(
    top: tuple[str, str], bottom: tuple[str, str], unit: str = "jobs/s"
) -> Callable[[dict[str, Any]], tuple[str, float] | None]:
    """``top`` / ``bottom``, each a (library, metric)."""

    def measure(report: dict[str, Any]) -> tuple[str, float] | None:
        high, low = _median(report, *top), _median(report, *bottom)
        if high is None or not low:
            return None
        return f"{high:,.0f} vs {low:,.0f} {unit}", high / low

    return measure


def _backlog_ratio(report: dict[str, Any]) -> tuple[str, float] | None:
    backlog = _first_backlog(report)
    if backlog is None:
        return None
    found = _pair(("postkit", _backlog_key(backlog)), ("postkit", "drain_sustained"))(report)
    if found is None:
        return None
    return f"{found[0]} ({backlog:,} pending vs W1s)", found[1]


def _single_vs_floor(report: dict[str, Any]) -> tuple[str, float] | None:
    ours = _median(report, "postkit", "enqueue_single")
    floor = _median(report, "postkit", "floor_insert")
    ratio = _median(report, "postkit", "single_vs_floor")
    if ours is None or not floor or ratio is None:
        return None
    return f"{ours:,.0f} vs pgbench {floor:,.0f} inserts/s (median of per-run ratios)", ratio


def _latency(key: str) -> Callable[[dict[str, Any]], tuple[str, float] | None]:
    def measure(report: dict[str, Any]) -> tuple[str, float] | None:
        value = _median(report, "postkit", key)
        return None if value is None else (f"{value:.2f} ms", value)

    return measure


def _latency_vs_rq(report: dict[str, Any]) -> tuple[str, float] | None:
    ours = [_median(report, "postkit", key) for key in ("latency_p50_ms", "latency_p99_ms")]
    theirs = [_median(report, "rq", key) for key in ("latency_p50_ms", "latency_p99_ms")]
    if None in ours or None in theirs or not all(theirs):
        return None
    p50, p99 = (o / t for o, t in zip(ours, theirs, strict=True))  # type: ignore[operator]
    return (
        f"p50 {ours[0]:.2f} vs {theirs[0]:.2f} ms, p99 {ours[1]:.2f} vs {theirs[1]:.2f} ms "
        "(the larger ratio)",
        max(p50, p99),
    )


def _growth(
    first: str, second: str, what: tuple[str, str]
) -> Callable[[dict[str, Any]], tuple[str, float] | None]:
    def measure(report: dict[str, Any]) -> tuple[str, float] | None:
        start, end = _median(report, "postkit", first), _median(report, "postkit", second)
        if start is None or end is None or not start:
            return None
        return f"{start:.1f} MB {what[0]}, {end:.1f} MB {what[1]}", end / start

    return measure


def _held(report: dict[str, Any]) -> tuple[str, float] | None:
    found = _pair(("postkit", "held_with"), ("postkit", "held_without"))(report)
    if found is None:
        return None
    seconds = report["meta"]["scale"]["held_seconds"]
    return f"{found[0]} ({seconds:.0f} s phases)", found[1]


TARGETS = (
    Target(
        "sustained drain, best config",
        ">= 2.5x best-tuned PGQueuer",
        _pair(("postkit", "drain_sustained"), ("pgqueuer", "drain_sustained")),
        2.5,
    ),
    Target(
        "sustained drain, defaults",
        "within 10% of Postkit's best config",
        _pair(("postkit_defaults", "drain_sustained"), ("postkit", "drain_sustained")),
        0.9,
    ),
    Target("1,000,000 backlog", ">= 90% of the empty-queue drain", _backlog_ratio, 0.9),
    Target(
        "endurance throughput",
        "end within 10% of start",
        _pair(("postkit", "endurance_end"), ("postkit", "endurance_start")),
        0.9,
    ),
    Target(
        "endurance table size",
        "flat in the second half (<= 10% growth)",
        _growth("storage_mid_mb", "storage_end_mb", ("halfway", "at the end")),
        1.1,
        at_most=True,
    ),
    Target("held xmin horizon", "drop <= 20%", _held, 0.8),
    Target(
        "single push, autocommit",
        ">= 0.8x pgbench's single-row insert",
        _single_vs_floor,
        0.8,
    ),
    Target(
        "batch push",
        ">= 3x PGQueuer's batch enqueue",
        _pair(("postkit", "enqueue_batch"), ("pgqueuer", "enqueue_batch")),
        3.0,
    ),
    Target(
        "idle latency p50", "<= 1.0 ms", _latency("latency_p50_ms"), 1.0, at_most=True, unit=" ms"
    ),
    Target(
        "idle latency p99", "<= 2.0 ms", _latency("latency_p99_ms"), 2.0, at_most=True, unit=" ms"
    ),
    Target(
        "idle latency vs RQ",
        "below RQ on Redis in the same run",
        _latency_vs_rq,
        1.0,
        at_most=True,
    ),
    Target(
        "transactional handlers (batch=100)",
        ">= 70% of the plain drain",
        _pair(("postkit", "drain_transactional"), ("postkit", "drain_sustained")),
        0.7,
    ),
    Target(
        "worker memory",
        "flat over the endurance run (<= 10% growth)",
        _growth("rss_start_mb", "rss_end_mb", ("after the first tenth", "at the end")),
        1.1,
        at_most=True,
    ),
)


def targets_table(report: dict[str, Any]) -> list[str]:
    lines = ["| figure | target | measured | ratio | met? |", "|---|---|---|---|---|"]
    for target in TARGETS:
        found = target.measure(report)
        if found is None:
            lines.append(f"| {target.name} | {target.goal} | not measured | - | n/a |")
            continue
        measured, ratio = found
        met = ratio <= target.threshold if target.at_most else ratio >= target.threshold
        shown = (
            f"{ratio / target.threshold:.2f}x the target"
            if target.unit == " ms"
            else f"{ratio:.2f}{target.unit}"
        )
        lines.append(
            f"| {target.name} | {target.goal} | {measured} | {shown} | "
            f"{'**met**' if met else 'missed'} |"
        )
    return lines


# ---------------------------------------------------------------------------------------------
# The Markdown
# ---------------------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    meta = report["meta"]
    libraries: dict[str, dict[str, Any]] = report["libraries"]
    settings = meta["settings"]
    off = report.get(AUTOVACUUM_OFF)
    loads = (
        f"load average (1, 5, 15 min) {_loads(meta.get('load_average_start'))} at the start, "
        f"{_loads(meta.get('load_average_end'))} at the end"
    )
    lines = [
        "# Postkit and its peers on one machine",
        "",
        f"Run {meta['started']} on {meta['machine']}, Python {meta['python']}, "
        f"{meta['seconds']:,} s ({loads}); Postkit from {meta.get('postkit_source', '?')}.",
        "",
        f"Command: `{meta['command']}`"
        + "".join(f"; then `{extra}`" for extra in meta.get("merged", []))
        + (
            " (**quick mode**: small counts, no sweep, not comparable to a full run)"
            if meta["quick"]
            else ""
        )
        + ".",
        "",
        f"Server: {meta.get('server', '?')}: PostgreSQL {settings.get('server_version', '?')}, "
        f"autovacuum {settings.get('autovacuum', '?')}, shared_buffers "
        f"{settings.get('shared_buffers', '?')}, synchronous_commit "
        f"{settings.get('synchronous_commit', '?')} (every setting read from the server: "
        "[Settings](#settings)).",
        "",
        f"Every figure is the median of {meta['runs']} run(s) (min-max) unless it says "
        "otherwise. Every library runs the same no-op handler (benchmarks/handlers.py) in worker "
        "processes separate from the pusher, in a database of its own on the same server (RQ: "
        "a Redis database of its own). Each library's workers are the fastest of its sweep "
        "([The sweep](#the-sweep)), chosen by one rule for all: the highest calibration drain. "
        "Other processes may have been using the machine (see the load average above), so "
        "expect noise of the order of 10-20%.",
        "",
        "## Sustained drain (the headline)",
        "",
    ]
    lines += _headline(report)
    lines += _cpu_section(report)
    lines += ["", "## Enqueue and idle latency", ""]
    lines += _enqueue_table(report)
    lines += _curves(report)
    lines += _floor_section(report)
    lines += _endurance_section(report)
    lines += [
        "",
        "## Targets (issue 15 section 2)",
        "",
        "Ratios from this one run, Postkit against the target of each figure of issue 15's "
        "table. A ratio is the first figure over the second; latency is shown as measured.",
        "",
        *targets_table(report),
    ]
    lines += _own_section(
        report, "producers", "The producer's transaction (on a cluster of its own, in the same run)"
    )
    lines += _own_section(
        report, "dependencies", "Jobs that wait for jobs, and progress (Postkit, in the same run)"
    )
    lines += _own_section(report, "workflows", "What a workflow's step costs (Postkit)")
    lines += _own_section(
        report, "flow", "Flow control and fair share: drains and claims (Postkit, in the same run)"
    )
    lines += _sweep_section(report)
    lines += _settings_section(report, off)
    lines += _workload_notes(report)
    problems = [
        f"- {_title(name, library)} {what}: {message}"
        for name, library in libraries.items()
        for what, message in library.get("errors", {}).items()
    ]
    if off:
        problems += [
            f"- {_title(name, library)} {what} (autovacuum off): {message}"
            for name, library in off["libraries"].items()
            for what, message in library.get("errors", {}).items()
        ]
    skipped = [
        f"- {_title(name, library)}: {', '.join(library['skipped'])} (not in the preset's "
        "libraries for these; `--every-library` runs them)"
        for name, library in libraries.items()
        if library.get("skipped") and name != "postkit_defaults"
    ]
    if problems or skipped:
        lines += ["", "## Not measured", "", *problems, *skipped]
    return "\n".join(lines) + "\n"


def _loads(values: list[float] | None) -> str:
    return ", ".join(f"{value:.2f}" for value in values) if values else "?"


def _headline(report: dict[str, Any]) -> list[str]:
    libraries: dict[str, dict[str, Any]] = report["libraries"]
    off = report.get(AUTOVACUUM_OFF)
    backlog = _first_backlog(report)
    scale = report["meta"]["scale"]
    header = [
        "library",
        "version",
        "workers",
        f"W1s: {scale['w1s_jobs']:,} preloaded, jobs/s",
        "W1s of the floor",
    ]
    if off:
        header.append(
            f"W1s, autovacuum off (harness VACUUM every "
            f"{off['meta']['scale'].get('vacuum_every', 0):.0f} s), jobs/s"
        )
    burst = any(spread(library, "drain_burst") for library in libraries.values())
    if burst:
        header.append(f"W1 burst ({scale['w1_jobs']:,}), jobs/s")
    if backlog and not any(
        spread(library, _backlog_key(backlog)) for library in libraries.values()
    ):
        backlog = None
    if backlog:
        header.append(f"W3: {backlog:,} pending, jobs/s")
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for name, library in libraries.items():
        sustained = spread(library, "drain_sustained")
        row = [
            _title(name, library),
            library.get("version", "?"),
            library.get("config", "-"),
            cell(library, "drain_sustained"),
            _of_floor(report, library, sustained.median if sustained else None),
        ]
        if off:
            row.append(cell(off["libraries"].get(name, {}), "drain_sustained"))
        if burst:
            row.append(cell(library, "drain_burst"))
        if backlog:
            row.append(cell(library, _backlog_key(backlog)))
        lines.append("| " + " | ".join(row) + " |")
    best = _median(report, "postkit", "drain_sustained")
    pgqueuer = _median(report, "pgqueuer", "drain_sustained")
    defaults = _median(report, "postkit_defaults", "drain_sustained")
    notes = []
    if best and pgqueuer:
        notes.append(f"Postkit at its best configuration drains {best / pgqueuer:.2f}x PGQueuer")
    if defaults and pgqueuer:
        notes.append(f"at its defaults {defaults / pgqueuer:.2f}x")
    if best and defaults:
        notes.append(f"its defaults reach {defaults / best:.0%} of its best")
    if notes:
        lines += ["", "; ".join(notes) + " (sustained drain, W1s, default settings)."]
    if off:
        lines += [
            "",
            "The autovacuum-off column comes from a second cluster of the same run "
            f"({off['meta'].get('server', '?')}), each library with the workers chosen on the "
            f"first, median of {off['meta']['runs']} run(s); its load average: "
            f"{_loads(off['meta'].get('load_average_start'))} at its start. Each drain there "
            f"lasts at most {scale['drain_cap']:.0f} s, under the harness's "
            f"{off['meta']['scale'].get('vacuum_every', 0):.0f} s VACUUM period, and every "
            "drain on either cluster starts after the same untimed VACUUM ANALYZE: the two "
            "columns differ by autovacuum's own workers, which on the headline cluster may run "
            "during a drain.",
        ]
    return lines


def _cpu_section(report: dict[str, Any]) -> list[str]:
    """Where a job's time goes in the sustained drain: the worker processes' CPU and the
    server's, per job, against the wall time per job the machine's cores give."""
    libraries: dict[str, dict[str, Any]] = report["libraries"]
    cores = int(report["meta"].get("cores", 1))
    rows = []
    for name, library in libraries.items():
        rate = _median(report, name, "drain_sustained")
        client = _median(report, name, "cpu_client_us")
        if not rate or client is None:
            continue
        server = _median(report, name, "cpu_server_us")
        wall = 1e6 / rate
        total = client + (server or 0.0)
        rows.append(
            f"| {_title(name, library)} | {rate:,.0f} | {wall:,.1f} | {client:,.1f} | "
            + (f"{server:,.1f}" if server is not None else "-")
            + f" | {total / (wall * cores):.0%} |"
        )
    if not rows:
        return []
    return [
        "",
        "## Where a job's time goes (W1s)",
        "",
        "CPU time per job over the sustained drain's span, read from /proc: the worker "
        "processes' (user and system, children included) and the server's (the postmaster and "
        f"every process under it: backends, WAL writer, checkpointer, autovacuum). On {cores} "
        "cores the wall time per job is cores x that of a CPU second: the last column is the "
        "share of the machine the two use; the rest is waiting (round trips, locks, I/O, "
        "the harness's polls).",
        "",
        "| library | jobs/s | wall us per job | worker CPU us per job | server CPU us per job "
        "| machine busy |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


def _enqueue_table(report: dict[str, Any]) -> list[str]:
    header = [
        "library",
        "enqueue/s single",
        "single / pgbench insert",
        "enqueue/s batch",
        "commits per job (W1 drain)",
        *(title for _, title in LATENCY_COLUMNS),
        "idle worker",
    ]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for name, library in report["libraries"].items():
        if "W1" not in library.get("ran", ["W1"]) and "W2" not in library.get("ran", ["W2"]):
            continue
        row = [
            _title(name, library),
            cell(library, "enqueue_single"),
            cell(library, "single_vs_floor", 2),
            cell(library, "enqueue_batch"),
            cell(library, "commits_per_job", 2),
            *(cell(library, key, 2) for key, _ in LATENCY_COLUMNS),
            library.get("latency_config", "-"),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _concurrency(library: dict[str, Any]) -> int:
    """The concurrency per process of the library's chosen ``P proc x C conc`` workers."""
    label = str(library.get("config", ""))
    with contextlib.suppress(ValueError, IndexError):
        return int(label.split(" x ")[1].split()[0])
    return 0


def _curves(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    scale = report["meta"]["scale"]
    for name, library in report["libraries"].items():
        counts = [
            count
            for count in scale.get("process_counts", ())
            if spread(library, f"drain_processes@{count}")
        ]
        if not counts:
            continue
        floor = _floor_figure(report, library)
        lines += [
            "",
            f"## Cost curve: {_title(name, library)}'s drain against worker processes",
            "",
            f"W1s's drain ({scale['w1s_jobs']:,} preloaded) with {library.get('config')}'s "
            f"concurrency per process and {', '.join(map(str, counts))} processes; one run "
            "each.",
            "",
            "| processes | concurrency per process | jobs/s | of the floor |",
            "|---|---|---|---|",
        ]
        for count in counts:
            found = spread(library, f"drain_processes@{count}")
            assert found is not None
            share = f"{found.median / floor[1]:.2f} of {floor[0]}" if floor else "-"
            lines.append(f"| {count} | {_concurrency(library)} | {found.median:,.0f} | {share} |")
    for name, library in report["libraries"].items():
        backlogs = [b for b in scale.get("backlogs", ()) if spread(library, _backlog_key(int(b)))]
        if not backlogs:
            continue
        floor = _floor_figure(report, library)
        empty = spread(library, "drain_sustained")
        lines += [
            "",
            f"## Cost curve: {_title(name, library)}'s drain against the backlog",
            "",
            f"Backlog 0: W1s ({scale['w1s_jobs']:,} preloaded into an empty queue, drained to "
            f"the end). Larger backlogs: W3, that many preloaded, {scale['backlog_measure']:,} "
            f"drained per run while the rest waits; {library.get('config')}.",
            "",
            "| backlog | jobs/s | of backlog 0 | of the floor |",
            "|---|---|---|---|",
        ]
        rows = [(0, "drain_sustained"), *((int(b), _backlog_key(int(b))) for b in backlogs)]
        for backlog, key in rows:
            found = spread(library, key)
            if found is None:
                continue
            ratio = f"{found.median / empty.median:.2f}" if empty and empty.median else "-"
            share = f"{found.median / floor[1]:.2f} of {floor[0]}" if floor else "-"
            lines.append(f"| {backlog:,} | {cell(library, key)} | {ratio} | {share} |")
    return lines


def _endurance_section(report: dict[str, Any]) -> list[str]:
    libraries = report["libraries"]
    keys = (
        ("endurance_jobs", "W4 jobs", 0),
        ("endurance_start", "W4 start jobs/s", 0),
        ("endurance_end", "W4 end jobs/s", 0),
        ("storage_start_mb", "W4 size after 10% (MB)", 1),
        ("storage_mid_mb", "W4 size halfway (MB)", 1),
        ("storage_end_mb", "W4 size at end (MB)", 1),
        ("dead_tuples_end", "W4 dead tuples at end", 0),
        ("rss_start_mb", "W4 worker RSS after 10% (MB)", 0),
        ("rss_end_mb", "W4 worker RSS at end (MB)", 0),
        ("peak_rss_mb", "W4 worker peak RSS (MB)", 0),
        ("endurance_snapshot", "W4 jobs/s, a snapshot held", 0),
        ("held_without", "W5 jobs/s", 0),
        ("held_with", "W5 jobs/s, xmin held", 0),
        ("held_dead_tuples", "W5 dead tuples, held", 0),
        ("drain_transactional_each", "W6 transactional, a transaction per job, jobs/s", 0),
        ("drain_transactional", "W6 transactional, batch=100, jobs/s", 0),
    )
    present = [k for k in keys if any(spread(lib, k[0]) for lib in libraries.values())]
    if not present:
        return []
    scale = report["meta"]["scale"]
    lines = [
        "",
        "## Endurance (W4), held horizon (W5), transactional handlers (W6)",
        "",
        f"A producer keeps {scale['refill']:,}-{2 * scale['refill']:,} jobs pending (topped up "
        f"with the library's bulk path) while the workers run. W4: "
        f"{scale['endurance_seconds']:.0f} s at saturation; start = the first tenth (less a "
        "warm-up), end = as many jobs at the end; size = heap + indexes of the library's "
        "tables; worker RSS = the largest of its processes. "
        f"W5: {scale['held_seconds']:.0f} s without, then {scale['held_seconds']:.0f} s with a "
        "session in the same database holding `BEGIN; SELECT txid_current();` open. One run "
        f"each. W6: W1s's drain ({scale['w1s_jobs']:,} preloaded) with a transactional "
        "handler that inserts one row in the ack's transaction: a transaction (and a durable "
        "commit) per job, then `Handlers.add(..., transactional=True, batch=100)`, up to 100 "
        "jobs to a transaction.",
        "",
        "| library | " + " | ".join(title for _, title, _ in present) + " |",
        "|---" * (1 + len(present)) + "|",
    ]
    for name, library in libraries.items():
        if not any(spread(library, key) for key, _, _ in present):
            continue
        lines.append(
            f"| {_title(name, library)} | "
            + " | ".join(cell(library, k, d) for k, _, d in present)
            + " |"
        )
    lines += _transactional_note(report)
    lines += _timeline(report)
    return lines


def _timeline(report: dict[str, Any]) -> list[str]:
    """W4's throughput in each tenth of its time."""
    rows = [
        f"| {_title(name, library)} | "
        + " | ".join(cell(library, f"endurance_decile_{k}") for k in range(1, 11))
        + " |"
        for name, library in report["libraries"].items()
        if spread(library, "endurance_decile_1")
    ]
    if not rows:
        return []
    held = report["meta"]["scale"].get("snapshot_seconds", 0)
    return [
        "",
        "W4's throughput over time, jobs/s in each tenth of its time"
        + (
            f"; a reader held one snapshot (REPEATABLE READ) for {held:.0f} s from the start of "
            "its middle phase (after the first tenth of the jobs), the rate while it held it "
            "in the column above"
            if held
            else ""
        )
        + ":",
        "",
        "| library | " + " | ".join(f"{k}0%" for k in range(1, 11)) + " |",
        "|---" * 11 + "|",
        *rows,
    ]


def _transactional_note(report: dict[str, Any]) -> list[str]:
    """What concurrency W6 ran at; a run before the harness capped it may have passed the
    server's max_connections (a transactional handler holds a connection while it runs)."""
    library = report["libraries"].get("postkit", {})
    if spread(library, "drain_transactional") is None:
        return []
    max_connections = int(report["meta"]["settings"].get("max_connections", 0) or 0)
    used = spread(library, "transactional_concurrency")
    processes, concurrency = library.get("processes", 0), _concurrency(library)
    if used is not None:
        return [
            "",
            f"W6 ran {processes} processes x {used.median:.0f} concurrency: each running "
            "transactional handler holds a connection, so the harness caps the concurrency "
            f"to fit max_connections ({max_connections}, less 10).",
        ]
    if processes * (concurrency + 5) <= max_connections:
        return []
    return [
        "",
        f"W6 ran {processes} processes x {concurrency} concurrency: each running transactional "
        f"handler holds a connection, and the workers' pools asked for more than "
        f"max_connections ({max_connections}); some connections failed (`too many clients "
        "already` in the run's log), so this figure is also limited by connections. (The "
        "harness now caps W6's concurrency to fit.)",
    ]


def _floor_section(report: dict[str, Any]) -> list[str]:
    floor = report.get("floor")
    if not floor:
        return []
    lines = ["", "## Floor: pgbench on a minimal table", ""]
    if "error" in floor:
        return [*lines, f"Not measured: {floor['error']}"]
    runs = len(floor["insert_tps"])
    lines += [
        f"`pgbench -M prepared` ({floor['pgbench']}) on the same server, first in the run; "
        f"median of {runs} (min-max). Insert: one client for {floor['seconds']} s, one row per "
        f"transaction. Dequeue: {floor['clients']} clients deleting `FOR UPDATE SKIP LOCKED` "
        "rows from a preloaded table, 1 or 100 per transaction. A drain's fraction of the "
        "floor is taken against the 100-row dequeue for libraries that claim in batches "
        "(Postkit, PGQueuer, Chancy) and the 1-row one for procrastinate, which claims a job "
        "per statement.",
        "",
        "| script | tx/s | jobs/s |",
        "|---|---|---|",
    ]
    for key, title, per in (
        ("insert_tps", "single-row insert", 1),
        ("dequeue1_tps", "SKIP LOCKED dequeue, 1 job/tx", 1),
        ("dequeue100_tps", "SKIP LOCKED dequeue, 100 jobs/tx", 100),
    ):
        tps = Spread.of(floor[key])
        lines.append(f"| {title} | {tps.render()} | {tps.median * per:,.0f} |")
    if "idle_round_trip_ms" in floor:
        lines += [
            "",
            f"The idle round trip: psycopg's `SELECT 1` takes {floor['busy_round_trip_ms']:.2f} "
            f"ms back to back and {floor['idle_round_trip_ms']:.2f} ms 20 ms after the last one "
            "(medians), W2's gap between pushes: waking an idle client and server process. "
            "W2's path from a push's commit to its handler holds at least three such wake-ups "
            "(the listener's, its claim's round trip, the handler thread's).",
        ]
    return lines


def _own_section(report: dict[str, Any], key: str, heading: str) -> list[str]:
    """A report of its own measured in the same run (benchmarks/producers.py's under
    "producers", benchmarks/dependencies.py's under "dependencies"), under ``heading``, its
    own headings one level down."""
    text: str | None = report.get(key)
    if not text:
        return []
    lines = text.strip().splitlines()
    lines[0] = f"## {heading}"
    lines[1:] = [f"#{line}" if line.startswith("#") else line for line in lines[1:]]
    return ["", *lines]


def _sweep_section(report: dict[str, Any]) -> list[str]:
    scale = report["meta"]["scale"]
    lines = [
        "",
        "## The sweep",
        "",
        f"Each configuration drains {scale['calibration_jobs']:,} preloaded jobs once (timed "
        f"for at most {scale['calibration_cap']:.0f} s); the fastest is each library's workers "
        "for every workload. The configurations follow each library's own recommendations:",
        "",
    ]
    for name, library in report["libraries"].items():
        if library.get("tuning_note"):
            lines.append(f"- {_title(name, library)}: {library['tuning_note']}.")
    lines += ["", "| library | workers | calibration drain, jobs/s | chosen |", "|---|---|---|---|"]
    for name, library in report["libraries"].items():
        calibration = library.get("calibration")
        if not calibration:
            reason = library.get("calibration_skipped") or "one configuration, not calibrated"
            lines.append(
                f"| {_title(name, library)} | {library.get('config', '-')} | {reason} | yes |"
            )
            continue
        for label, rate in calibration.items():
            chosen = "**yes**" if label == library.get("config") else ""
            lines.append(f"| {_title(name, library)} | {label} | {rate:,.0f} | {chosen} |")
    return lines


def _settings_section(report: dict[str, Any], off: dict[str, Any] | None) -> list[str]:
    meta = report["meta"]
    lines = ["", "## Settings", "", f"Headline: {meta.get('server', '?')}."]
    if off:
        lines.append(f"Second column: {off['meta'].get('server', '?')}.")
    header = "| setting | headline |" + (" autovacuum off |" if off else "")
    lines += ["", header, "|---|---|" + ("---|" if off else "")]
    for key, value in meta["settings"].items():
        row = f"| {key} | {value} |"
        if off:
            row += f" {off['meta']['settings'].get(key, '?')} |"
        lines.append(row)
    servers = [
        f"- {_title(name, library)}: " + ", ".join(f"{k} {v}" for k, v in library["server"].items())
        for name, library in report["libraries"].items()
        if library.get("server")
    ]
    if servers:
        lines += ["", "Other backends:", "", *servers]
    return lines


def _workload_notes(report: dict[str, Any]) -> list[str]:
    meta = report["meta"]
    scale = meta["scale"]
    every = scale.get("vacuum_every", 0)
    vacuum = (
        f"While workers run, the harness runs VACUUM (ANALYZE) on the library's tables every "
        f"{every:.0f} s: autovacuum is off on this server, and this stands in for it."
        if every
        else "No VACUUM from the harness while workers run: autovacuum is "
        f"{meta['settings'].get('autovacuum', '?')} on this server."
    )
    lines = [
        "",
        "## The workloads",
        "",
        f"- W1: jobs pushed one per transaction for {scale['single_seconds']:.0f} s (enqueue/s "
        "single; right after it, pgbench's single-row insert for as long, one client: the "
        "ratio is taken per run, as both are bound by the WAL flush at commit), then "
        f"{scale['w1_jobs']:,} in transactions of {scale['batch']:,} (enqueue/s batch), then "
        "drained by the chosen workers (the burst).",
        f"- W1s: {scale['w1s_jobs']:,} jobs preloaded with the library's bulk path (then an "
        "untimed VACUUM ANALYZE, the statistics autovacuum's ANALYZE would give the backlog), "
        f"then drained to the end or for at most {scale['drain_cap']:.0f} s (every drain is "
        f"capped so: {_capped(report) or 'none was cut short'}).",
        "- W2: an idle worker; "
        f"{scale['latency_jobs']} jobs pushed 20 ms apart; push commit to handler start.",
        f"- W3: {', '.join(f'{int(b):,}' for b in scale.get('backlogs', ()))} jobs preloaded "
        f"(then VACUUM ANALYZE); each run drains {scale['backlog_measure']:,} of them.",
        "- Drain rates are measured from outside by polling the library's counts of unclaimed "
        "and unfinished jobs: from the last poll before the first claim to the poll that saw "
        "the last completion. Commits per job: transactions in the library's database "
        "(pg_stat_database) during the W1 drain, less the harness's polls, per job.",
        f"- {vacuum}",
        "",
        "How each library enqueues a batch:",
        "",
    ]
    for name, library in report["libraries"].items():
        if library.get("batch_note") and name != "postkit_defaults":
            lines.append(f"- {_title(name, library)}: {library['batch_note']}")
    return lines


def _capped(report: dict[str, Any]) -> str:
    """Which drains stopped at the time cap, and how many jobs they covered."""
    scale = report["meta"]["scale"]
    notes = []
    for name, library in report["libraries"].items():
        planned = [("drain_sustained_jobs", "W1s", scale["w1s_jobs"])]
        planned += [
            (f"drain_backlog_jobs@{int(b)}", f"W3 ({int(b):,})", scale["backlog_measure"])
            for b in scale.get("backlogs", ())
        ]
        for key, title, jobs in planned:
            found = spread(library, key)
            if found is not None and found.low < jobs:
                notes.append(
                    f"{_title(name, library)} {title} timed over as few as {found.low:,.0f} of "
                    f"{jobs:,} jobs"
                )
    return "; ".join(notes)


# ---------------------------------------------------------------------------------------------
# The chart
# ---------------------------------------------------------------------------------------------


def chart(report: dict[str, Any], path: Path) -> Path:
    """Bars (median, min-max whiskers) per library for the headline figures, and Postkit's
    cost curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    libraries: dict[str, dict[str, Any]] = report["libraries"]
    off = report.get(AUTOVACUUM_OFF)
    panels = [
        ("drain_sustained", "sustained drain, W1s (jobs/s)"),
        ("drain_burst", "burst drain, W1 (jobs/s)"),
        ("enqueue_single", "single enqueue (jobs/s)"),
        ("enqueue_batch", "batch enqueue (jobs/s)"),
        ("latency_p50_ms", "W2 idle latency p50 (ms)"),
    ]
    figure, axes = plt.subplots(2, 3, figsize=(16, 9))
    for axis, (key, title) in zip(axes.flat, panels, strict=False):
        names, medians, below, above = [], [], [], []
        for name, library in libraries.items():
            found = spread(library, key)
            if found is None:
                continue
            names.append(_title(name, library).replace(" (defaults)", "\n(defaults)"))
            medians.append(found.median)
            below.append(found.median - found.low)
            above.append(found.high - found.median)
        if not names:
            axis.set_title(title)
            axis.text(0.5, 0.5, "not measured", ha="center", va="center")
            axis.set_axis_off()
            continue
        colors = ["#d62728" if name.startswith("postkit") else "#1f77b4" for name in names]
        positions = list(range(len(names)))
        width = 0.4 if key == "drain_sustained" and off else 0.8
        axis.bar(positions, medians, width, yerr=[below, above], color=colors, capsize=4)
        if key == "drain_sustained" and off:
            values = [
                spread(off["libraries"].get(name, {}), key)
                for name in libraries
                if spread(libraries[name], key) is not None
            ]
            axis.bar(
                [p + width for p in positions],
                [v.median if v else 0 for v in values],
                width,
                color="#999999",
                label="autovacuum off",
            )
            axis.legend(fontsize=8)
        axis.set_xticks(positions, names)
        axis.set_title(title)
        axis.tick_params(axis="x", labelrotation=20, labelsize=8)
        for index, value in enumerate(medians):
            axis.annotate(
                f"{value:,.2f}" if key.endswith("_ms") else f"{value:,.0f}",
                (index, value),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    _curve_panel(axes.flat[5], report)
    meta = report["meta"]
    figure.suptitle(
        f"Job queues on {meta['machine']}, PostgreSQL {meta['settings'].get('server_version', '?')}"
        f", autovacuum {meta['settings'].get('autovacuum', '?')} (median of {meta['runs']}, "
        f"whiskers min-max; {meta['started']}{'; QUICK mode' if meta['quick'] else ''})"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _curve_panel(axis: Any, report: dict[str, Any]) -> None:
    """Postkit's drain against worker processes, with the floor's 100-row dequeue."""
    library = report["libraries"].get("postkit", {})
    counts = [
        count
        for count in report["meta"]["scale"].get("process_counts", ())
        if spread(library, f"drain_processes@{count}")
    ]
    axis.set_title("Postkit drain vs worker processes (jobs/s)")
    if not counts:
        axis.text(0.5, 0.5, "not measured", ha="center", va="center")
        axis.set_axis_off()
        return
    rates = [spread(library, f"drain_processes@{count}").median for count in counts]  # type: ignore[union-attr]
    axis.plot(counts, rates, marker="o", color="#d62728", label="postkit")
    floor = _floor_figure(report, library)
    if floor:
        axis.axhline(floor[1], linestyle="--", color="#555555", label=f"pgbench {floor[0]}")
    axis.set_xscale("log", base=2)
    axis.set_xticks(counts, [str(count) for count in counts])
    axis.set_ylim(bottom=0)
    axis.legend(fontsize=8)


def write(report: dict[str, Any], name: str) -> list[Path]:
    RESULTS.mkdir(exist_ok=True)
    markdown_path = RESULTS / f"{name}.md"
    markdown_path.write_text(markdown(report), encoding="utf-8")
    written = [markdown_path]
    # matplotlib comes with the bench extra; without it the Markdown is enough.
    with contextlib.suppress(ImportError):
        written.append(chart(report, RESULTS / f"{name}.png"))
    return written
