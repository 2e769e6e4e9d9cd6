"""Turn a comparison run (the JSON ``suite.run`` returns) into Markdown and a PNG chart."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, Spread

RATE_COLUMNS = (
    ("enqueue_single", "enqueue/s single"),
    ("enqueue_batch", "enqueue/s batch"),
    ("drain_burst", "drain/s burst (W1)"),
    ("drain_sustained", "drain/s sustained (W1s)"),
    ("drain_backlog", "drain/s backlog (W3)"),
)
LATENCY_COLUMNS = (
    ("latency_p50_ms", "p50 ms"),
    ("latency_p99_ms", "p99 ms"),
    ("latency_max_ms", "max ms"),
)


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


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measure: Callable[[dict[str, Any]], tuple[str, float] | None]
    """(what was measured, ratio) or None when a needed number is missing."""
    threshold: float
    at_most: bool = False


def _median(report: dict[str, Any], library: str, key: str) -> float | None:
    found = spread(report["libraries"].get(library, {}), key)
    return found.median if found else None


def _versus_pgqueuer(key: str) -> Callable[[dict[str, Any]], tuple[str, float] | None]:
    def measure(report: dict[str, Any]) -> tuple[str, float] | None:
        ours, theirs = _median(report, "postkit", key), _median(report, "pgqueuer", key)
        if ours is None or not theirs:
            return None
        return f"{ours:,.0f} vs {theirs:,.0f} jobs/s", ours / theirs

    return measure


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


def _ratio(
    numerator: str, denominator: str, unit: str = "jobs/s"
) -> Callable[[dict[str, Any]], tuple[str, float] | None]:
    def measure(report: dict[str, Any]) -> tuple[str, float] | None:
        top, bottom = _median(report, "postkit", numerator), _median(report, "postkit", denominator)
        if top is None or not bottom:
            return None
        return f"{top:,.0f} vs {bottom:,.0f} {unit}", top / bottom

    return measure


def _storage_growth(report: dict[str, Any]) -> tuple[str, float] | None:
    end = _median(report, "postkit", "storage_end_mb")
    middle = _median(report, "postkit", "storage_mid_mb")
    start = _median(report, "postkit", "storage_start_mb")
    if end is None or not middle or start is None:
        return None
    return (
        f"{start:.1f} MB after 10%, {middle:.1f} MB halfway, {end:.1f} MB at the end",
        end / middle,
    )


TARGETS = (
    Target("sustained drain", ">= 2x PGQueuer", _versus_pgqueuer("drain_sustained"), 2.0),
    Target("burst drain", ">= 1.5x PGQueuer", _versus_pgqueuer("drain_burst"), 1.5),
    Target("batch enqueue", ">= 2x PGQueuer", _versus_pgqueuer("enqueue_batch"), 2.0),
    Target("single enqueue", ">= 90% of pgbench single insert", _single_vs_floor, 0.9),
    Target("idle latency p50", "<= 1.0 ms", _latency("latency_p50_ms"), 1.0, at_most=True),
    Target("idle latency p99", "<= 2.5 ms", _latency("latency_p99_ms"), 2.5, at_most=True),
    Target(
        "backlog drain",
        ">= 90% of empty-queue (W1 burst) drain",
        _ratio("drain_backlog", "drain_burst"),
        0.9,
    ),
    Target(
        "endurance throughput",
        "end within 10% of start",
        _ratio("endurance_end", "endurance_start"),
        0.9,
    ),
    Target(
        "endurance storage",
        "bounded: the second half grows it by <= 20%",
        _storage_growth,
        1.2,
        at_most=True,
    ),
    Target("held horizon", "drop <= 20%", _ratio("held_with", "held_without"), 0.8),
)


def targets_table(report: dict[str, Any]) -> list[str]:
    lines = ["| target | goal | measured | ratio | met? |", "|---|---|---|---|---|"]
    for target in TARGETS:
        found = target.measure(report)
        if found is None:
            lines.append(f"| {target.name} | {target.goal} | not measured | - | n/a |")
            continue
        measured, ratio = found
        met = ratio <= target.threshold if target.at_most else ratio >= target.threshold
        shown = f"{ratio:.2f}" if target.at_most and "ms" in measured else f"{ratio:.2f}x"
        lines.append(
            f"| {target.name} | {target.goal} | {measured} | {shown} | "
            f"{'**met**' if met else 'missed'} |"
        )
    return lines


def markdown(report: dict[str, Any]) -> str:
    meta = report["meta"]
    libraries: dict[str, dict[str, Any]] = report["libraries"]
    runs = meta["runs"]
    scale = meta["scale"]
    capped = _capped(report) or "none was cut short"
    every = scale.get("vacuum_every", 0)
    vacuum = (
        f"While workers run, the harness runs VACUUM (ANALYZE) on the library's tables every "
        f"{every:.0f} s "
        f"(autovacuum is {meta['settings'].get('autovacuum', '?')} on this server: this "
        "stands in for it)."
        if every
        else f"No VACUUM from the harness while workers run (autovacuum: "
        f"{meta['settings'].get('autovacuum', '?')})."
    )
    idle = ", ".join(f"{n}: {lib.get('latency_config', '-')}" for n, lib in libraries.items())
    lines = [
        "# Postkit and its peers on one machine",
        "",
        f"{meta['machine']}, Python {meta['python']}; run {meta['started']}, "
        f"{meta['seconds']} s; Postkit from {meta.get('postkit_source', '?')}. "
        f"Command: `{meta['command']}`"
        + "".join(f"; then `{extra}`" for extra in meta.get("merged", []))
        + (" (**quick mode**: small counts, not comparable to a full run)" if meta["quick"] else "")
        + ".",
        "",
        f"Median of {runs} run(s) (min-max). Every library runs the same no-op handler "
        "(benchmarks/handlers.py) in worker processes separate from the pusher, in a database "
        "of its own on the same server (RQ: a Redis database of its own). Other processes were "
        "using the machine during the run, so expect noise of the order of 10-20%.",
        "",
        "## Throughput and latency",
        "",
        "| library | version | workers (chosen) | "
        + " | ".join(title for _, title in RATE_COLUMNS)
        + " | single / pgbench insert | commits per job (W1 drain)"
        + " | W2 p50 ms | W2 p99 ms | W2 max ms |",
        "|---" * (3 + len(RATE_COLUMNS) + 5) + "|",
    ]
    for name, library in libraries.items():
        row = [name, library.get("version", "?"), library.get("config", "-")]
        row += [cell(library, key) for key, _ in RATE_COLUMNS]
        row.append(cell(library, "single_vs_floor", 2))
        row.append(cell(library, "commits_per_job", 2))
        row += [cell(library, key, 2) for key, _ in LATENCY_COLUMNS]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        f"- W1: {scale['w1_jobs']:,} jobs pushed one per transaction (enqueue/s single; right "
        "after it, pgbench's single-row insert for as long, one client: the ratio is taken per "
        "run, as both are bound by the WAL flush at commit), then "
        f"{scale['w1_jobs']:,} in transactions of {scale['batch']:,} (enqueue/s batch), then "
        "drained by the chosen worker configuration (drain/s burst).",
        f"- W1s: {scale['w1s_jobs']:,} jobs preloaded with the library's bulk path (then VACUUM "
        "ANALYZE), then drained to the end or "
        f"for at most {scale['drain_cap']:.0f} s (every drain is capped so: {capped}).",
        f"- W2: an idle worker ({idle}); {scale['latency_jobs']} jobs pushed 20 ms apart; "
        "push commit to handler start.",
        f"- W3: {scale['backlog']:,} jobs preloaded (the library's fastest bulk path, then VACUUM "
        f"ANALYZE); each run drains {_backlog_measure(report):,} of them.",
        "- Drain rates are measured from outside by polling the library's counts of unclaimed "
        "and unfinished jobs: from the last poll before the first claim to the poll that saw "
        "the last completion. Commits per job: transactions in the library's database "
        "(pg_stat_database) during the W1 drain, less the harness's polls, per job.",
        f"- {vacuum}",
        "",
        "How each library enqueues a batch:",
        "",
    ]
    for name, library in libraries.items():
        if library.get("batch_note"):
            lines.append(f"- {name}: {library['batch_note']}")
    lines += _endurance_section(report)
    lines += _floor_section(report)
    lines += ["", "## Targets (Postkit)", "", *targets_table(report)]
    lines += _configuration_section(report)
    errors = [
        f"- {name} {what}: {message}"
        for name, library in libraries.items()
        for what, message in library.get("errors", {}).items()
    ]
    if errors:
        lines += ["", "## Not measured", "", *errors]
    return "\n".join(lines) + "\n"


def _backlog_measure(report: dict[str, Any]) -> int:
    scale = report["meta"]["scale"]
    return int(min(scale["backlog_measure"], scale["backlog"] // (report["meta"]["runs"] + 1)))


def _capped(report: dict[str, Any]) -> str:
    """Which drains stopped at the time cap, and how many jobs they covered."""
    scale = report["meta"]["scale"]
    notes = []
    for name, library in report["libraries"].items():
        for key, title, planned in (
            ("drain_sustained_jobs", "W1s", scale["w1s_jobs"]),
            ("drain_backlog_jobs", "W3", _backlog_measure(report)),
        ):
            found = spread(library, key)
            if found is not None and found.low < planned:
                notes.append(
                    f"{name} {title} timed over as few as {found.low:,.0f} of {planned:,} jobs"
                )
    return "; ".join(notes)


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
        ("peak_rss_mb", "W4 worker peak RSS (MB)", 0),
        ("held_without", "W5 jobs/s", 0),
        ("held_with", "W5 jobs/s, xmin held", 0),
        ("held_dead_tuples", "W5 dead tuples, held", 0),
    )
    present = [k for k in keys if any(spread(lib, k[0]) for lib in libraries.values())]
    if not present:
        return []
    scale = report["meta"]["scale"]
    lines = [
        "",
        "## Endurance (W4) and held horizon (W5)",
        "",
        f"A producer keeps {scale['refill']:,}-{2 * scale['refill']:,} jobs pending (topped up "
        "with the library's bulk path) while the workers run. W4: "
        f"{scale['endurance_jobs']:,} jobs or {scale['endurance_seconds']:.0f} s, whichever "
        "comes first; start = the first tenth (less a warm-up), end = as many jobs at the end; "
        "size = heap + indexes of the library's tables. "
        f"W5: {scale['held_seconds']:.0f} s without, then {scale['held_seconds']:.0f} s "
        "with a session in the same database holding `BEGIN; SELECT txid_current();` open. "
        "One run each.",
        "",
        "| library | " + " | ".join(title for _, title, _ in present) + " |",
        "|---" * (1 + len(present)) + "|",
    ]
    for name, library in libraries.items():
        lines.append(f"| {name} | " + " | ".join(cell(library, k, d) for k, _, d in present) + " |")
    return lines


def _floor_section(report: dict[str, Any]) -> list[str]:
    floor = report.get("floor")
    if not floor:
        return []
    lines = ["", "## Floor: pgbench on a minimal table", ""]
    if "error" in floor:
        return [*lines, f"Not measured: {floor['error']}"]
    runs = len(floor["insert_tps"])
    lines += [
        f"`pgbench -M prepared` ({floor['pgbench']}), median of {runs} (min-max). Insert: one "
        f"client for {floor['seconds']} s. Dequeue: {floor['clients']} clients deleting "
        "`FOR UPDATE SKIP LOCKED` rows from a preloaded table.",
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
    return lines


def _configuration_section(report: dict[str, Any]) -> list[str]:
    meta = report["meta"]
    lines = ["", "## Configuration", "", "Worker configurations tried (drain jobs/s):", ""]
    for name, library in report["libraries"].items():
        calibration = library.get("calibration")
        if calibration:
            tried = "; ".join(f"{label}: {rate:,.0f}" for label, rate in calibration.items())
            lines.append(f"- {name}: {tried} -> **{library.get('config')}**")
        else:
            lines.append(f"- {name}: {library.get('config', '-')} (not calibrated)")
    lines += ["", "PostgreSQL settings:", "", "| setting | value |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in meta["settings"].items()]
    servers = [
        f"- {name}: " + ", ".join(f"{k} {v}" for k, v in library["server"].items())
        for name, library in report["libraries"].items()
        if library.get("server")
    ]
    if servers:
        lines += ["", "Other backends:", "", *servers]
    return lines


def chart(report: dict[str, Any], path: Path) -> Path:
    """Bars (median, min-max whiskers) per library for each headline figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    libraries: dict[str, dict[str, Any]] = report["libraries"]
    panels = [*RATE_COLUMNS, ("latency_p50_ms", "W2 latency p50 (ms)")]
    figure, axes = plt.subplots(2, 3, figsize=(15, 8))
    for axis, (key, title) in zip(axes.flat, panels, strict=True):
        names, medians, below, above = [], [], [], []
        for name, library in libraries.items():
            found = spread(library, key)
            if found is None:
                continue
            names.append(name)
            medians.append(found.median)
            below.append(found.median - found.low)
            above.append(found.high - found.median)
        if not names:
            axis.set_title(title)
            axis.text(0.5, 0.5, "not measured", ha="center", va="center")
            axis.set_axis_off()
            continue
        colors = ["#d62728" if name == "postkit" else "#1f77b4" for name in names]
        axis.bar(names, medians, yerr=[below, above], color=colors, capsize=4)
        axis.set_title(title)
        axis.tick_params(axis="x", labelrotation=20)
        for index, value in enumerate(medians):
            axis.annotate(
                f"{value:,.2f}" if key.endswith("_ms") else f"{value:,.0f}",
                (index, value),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    meta = report["meta"]
    figure.suptitle(
        f"Job queues on {meta['machine']}, PostgreSQL {meta['settings'].get('server_version', '?')}"
        f" (median of {meta['runs']}, whiskers min-max{'; QUICK mode' if meta['quick'] else ''})"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write(report: dict[str, Any], name: str) -> list[Path]:
    RESULTS.mkdir(exist_ok=True)
    markdown_path = RESULTS / f"{name}.md"
    markdown_path.write_text(markdown(report), encoding="utf-8")
    written = [markdown_path]
    # matplotlib comes with the bench extra; without it the Markdown is enough.
    with contextlib.suppress(ImportError):
        written.append(chart(report, RESULTS / f"{name}.png"))
    return written
