"""``python -m benchmarks run``: every selected library through every selected workload.

Libraries run one after another on the same server, each in a database of its own
(``bench_<lib>``, dropped and created again at the start); RQ uses a Redis database of its own.
The pgbench floor runs first, on the idle server. Each library then tries its worker
configurations on a short drain (the sweep; skipped with ``--quick``, which takes the first)
and keeps the fastest for every workload: the same rule for every library. A workload that
fails for one library is recorded as an error and the run goes on.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import floor, pg, workloads
from benchmarks.adapters import Adapter, WorkerConfig, load
from benchmarks.common import RESULTS

log = logging.getLogger("benchmarks")

WORKLOADS = (
    "W1", "W1s", "W2", "W3", "W4", "W5", "W6", "curve", "floor", "producers", "dependencies",
    "workflows", "flow",
)  # fmt: skip
SERVER_WORKLOADS = ("floor", "producers", "dependencies", "workflows", "flow")
"""Workloads outside the per-library loop: pgbench's floor, the producer's transaction
(benchmarks/producers.py, run by ``run_comparison`` on a cluster of its own), and Postkit's
fan-in, no-dependency and progress rows (benchmarks/dependencies.py), a workflow step's cost
(benchmarks/workflows.py), and flow control's: limits, fair share, and a fair claim's cost
whatever the backlog's shape (benchmarks/flow.py)."""

PRESET_LIMITS: dict[str, tuple[str, ...]] = {
    "W3": ("postkit", "pgqueuer"),
    "W4": ("postkit",),
    "W5": ("postkit",),
    "W6": ("postkit",),
    "curve": ("postkit",),
}
"""The full preset's libraries for its longest workloads (``--every-library`` lifts it): the
1,000,000-job backlog for Postkit and PGQueuer, endurance, the held horizon, transactional
handlers and the processes curve for Postkit, whose targets (issue 15) they measure."""


def run(
    server_dsn: str,
    libraries: list[str],
    selected: list[str],
    *,
    runs: int,
    scale: workloads.Scale,
    quick: bool,
    command: str,
    server: str,
    chosen: dict[str, tuple[str, float | None]] | None = None,
    limits: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """Run ``selected`` workloads for each of ``libraries`` on ``server_dsn`` (described by
    ``server`` in the report). ``chosen`` maps a library to the label of a worker
    configuration to use instead of calibrating, with its calibration rate if known;
    ``limits`` maps a workload to the only libraries that run it."""
    started = time.time()
    report: dict[str, Any] = {
        "meta": {
            "command": command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
            "machine": f"{platform.node()}: {os.cpu_count()} cores, Linux {platform.release()}",
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "server": server,
            "settings": pg.server_settings(server_dsn),
            "load_average_start": _load_average(),
            "quick": quick,
            "runs": runs,
            "workloads": selected,
            "scale": vars(scale),
            "limits": {k: list(v) for k, v in (limits or {}).items() if k in selected},
            "postkit_source": postkit_source(),
        },
        "libraries": {},
    }
    bench_floor = floor.Floor.open(server_dsn) if {"W1", "floor"} & set(selected) else None
    try:
        if "floor" in selected:
            # First, on an idle server: the drains' fractions of it are taken against this.
            log.info("floor: pgbench")
            try:
                if bench_floor is None:
                    raise RuntimeError("pgbench not found (the wheel, PATH, /usr/lib/postgresql)")
                report["floor"] = bench_floor.measure(quick=quick, runs=runs)
            except Exception as error:
                log.exception("floor failed")
                report["floor"] = {"error": f"{type(error).__name__}: {error}"}
        for name in libraries:
            wanted = [
                workload
                for workload in selected
                if workload not in SERVER_WORKLOADS
                and name in (limits or {}).get(workload, (name,))
            ]
            report["libraries"][name] = run_library(
                load(name)(server_dsn),
                wanted,
                runs,
                scale,
                quick,
                bench_floor,
                (chosen or {}).get(name),
            )
            report["libraries"][name]["skipped"] = [
                workload
                for workload in selected
                if workload not in wanted and workload not in SERVER_WORKLOADS
            ]
    finally:
        if bench_floor is not None:
            bench_floor.close()
    report["meta"]["seconds"] = round(time.time() - started)
    report["meta"]["load_average_end"] = _load_average()
    return report


def run_library(
    adapter: Adapter,
    selected: list[str],
    runs: int,
    scale: workloads.Scale,
    quick: bool,
    bench_floor: floor.Floor | None,
    chosen: tuple[str, float | None] | None = None,
) -> dict[str, Any]:
    if adapter.workloads is not None:
        selected = [workload for workload in selected if workload in adapter.workloads]
    result: dict[str, Any] = {
        "title": adapter.title or adapter.name,
        "version": adapter.version(),
        "backend": adapter.backend,
        "batch_note": adapter.batch_note,
        "tuning_note": adapter.tuning_note,
        "claims_in_batches": adapter.claims_in_batches,
        "ran": selected,
        "metrics": {},
        "errors": {},
    }
    metrics: dict[str, list[float]] = result["metrics"]
    log.info("%s %s: setting up %s", adapter.name, result["version"], adapter.backend)
    adapter.setup()
    try:
        result["server"] = adapter.describe_backend()
        label, adapter.expected_rate = chosen or (None, None)
        config = next((c for c in adapter.configs if c.label == label), adapter.configs[0])
        if chosen is not None:
            result["calibration_skipped"] = f"reused {label}"
        elif not quick and len(adapter.configs) > 1 and _wants_workers(selected):
            calibration = _attempt(
                result, "calibration", lambda: workloads.calibrate(adapter, scale)
            )
            if calibration:
                result["calibration"] = calibration
                best = max(calibration, key=lambda label: calibration[label])
                config = next(c for c in adapter.configs if c.label == best)
                adapter.expected_rate = calibration[best]
        result["config"] = config.label
        result["processes"] = config.processes
        result["latency_config"] = adapter.latency_config.label
        for workload in selected:
            for step_name, step in _workload(adapter, workload, config, scale, runs, bench_floor):
                if step is None:
                    result["errors"][step_name] = "not applicable"
                    continue
                log.info("%s: %s", adapter.name, step_name)
                for values in _attempt(result, step_name, step) or []:
                    for key, value in values.items():
                        metrics.setdefault(key, []).append(value)
                log.info("%s: %s done: %s", adapter.name, step_name, _summary(metrics))
    finally:
        adapter.teardown()
    return result


def _wants_workers(selected: list[str]) -> bool:
    return any(workload in selected for workload in ("W1", "W1s", "W3", "W4", "W5", "curve"))


Step = Callable[[], list[dict[str, float]]]


def _workload(
    adapter: Adapter,
    workload: str,
    config: WorkerConfig,
    scale: workloads.Scale,
    runs: int,
    bench_floor: floor.Floor | None,
) -> list[tuple[str, Step | None]]:
    """The steps of ``workload`` (W3 has one per backlog size), by name."""
    if workload == "W1":
        return [
            (
                "W1",
                lambda: [workloads.w1(adapter, config, scale, bench_floor) for _ in range(runs)],
            )
        ]
    if workload == "W1s":
        return [("W1s", lambda: [workloads.w1s(adapter, config, scale) for _ in range(runs)])]
    if workload == "W2":
        return [("W2", lambda: [workloads.w2(adapter, scale) for _ in range(runs)])]
    if workload == "W3":
        return [
            (
                f"W3@{backlog}",
                functools.partial(workloads.w3, adapter, config, scale, runs, backlog),
            )
            for backlog in scale.backlogs
        ]
    if workload == "W4":
        return [("W4", lambda: [workloads.w4(adapter, config, scale)])]
    postgres = adapter.backend == "PostgreSQL"
    if workload == "W5":
        step = lambda: [workloads.w5(adapter, config, scale, adapter.server_dsn)]  # noqa: E731
        return [("W5", step if postgres else None)]
    if workload == "W6":
        transactional = adapter.name == "postkit"
        step = lambda: [workloads.w6(adapter, config, scale)]  # noqa: E731
        return [("W6", step if transactional else None)]
    if workload == "curve":
        return [("curve", lambda: workloads.processes_curve(adapter, config, scale))]
    raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")


def _load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def _attempt(result: dict[str, Any], what: str, action: Callable[[], Any]) -> Any:
    try:
        return action()
    except Exception as error:
        log.exception("%s failed", what)
        result["errors"][what] = f"{type(error).__name__}: {error}"
        return None


def _summary(metrics: dict[str, list[float]]) -> str:
    return ", ".join(f"{key}={values[-1]:,.1f}" for key, values in metrics.items())


def postkit_source() -> str:
    """The commit Postkit ran from, and whether its source had uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "an unknown commit"
    return f"commit {commit}" + (" with uncommitted changes in src/" if dirty else "")


WORKLOAD_METRICS = {
    "W1": (
        "enqueue_single",
        "floor_insert",
        "single_vs_floor",
        "enqueue_batch",
        "drain_burst",
        "commits_per_job",
    ),
    "W1s": ("drain_sustained", "cpu_"),
    "W2": ("latency_",),
    "W3": ("drain_backlog",),
    "W4": ("endurance_", "storage_", "dead_tuples_end", "peak_rss_mb", "rss_"),
    "W5": ("held_",),
    "W6": ("drain_transactional",),
    "curve": ("drain_processes",),
}
"""The metrics each workload writes, by key prefix."""


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with the workloads ``new`` measured replaced by ``new``'s numbers (a re-run of
    some workloads after a fix); the command is recorded in ``meta.merged``."""
    meta = new["meta"]
    old["meta"].setdefault("merged", []).append(
        f"{meta['command']} (Postkit from {meta.get('postkit_source', '?')}, {meta['started']})"
    )
    for name, library in new["libraries"].items():
        target = old["libraries"].setdefault(name, library)
        if target is library:
            continue
        for workload in library.get("ran", meta["workloads"]):
            prefixes = WORKLOAD_METRICS.get(workload, ())
            for key in list(target["metrics"]):
                if key.startswith(prefixes):
                    del target["metrics"][key]
            for key, values in library["metrics"].items():
                if key.startswith(prefixes):
                    target["metrics"][key] = values
            for what in list(target["errors"]):
                if what.split("@")[0] == workload:
                    del target["errors"][what]
            for what, message in library["errors"].items():
                if what.split("@")[0] == workload:
                    target["errors"][what] = message
    for workload in SERVER_WORKLOADS:
        if workload in new:
            old[workload] = new[workload]
    return old


def load_result(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    return result


def save(report: dict[str, Any], name: str) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def command_line() -> str:
    return "python -m benchmarks " + " ".join(sys.argv[1:])
