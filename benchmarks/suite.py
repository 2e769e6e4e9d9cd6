"""``python -m benchmarks run``: every selected library through every selected workload.

Libraries run one after another on the same server, each in a database of its own
(``bench_<lib>``, dropped and created again at the start); RQ uses a Redis database of its own.
Each library first tries its worker configurations on a short drain (skipped with ``--quick``,
which takes the first) and keeps the fastest for every workload. A workload that fails for one
library is recorded as an error and the run goes on.
"""

from __future__ import annotations

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

WORKLOADS = ("W1", "W1s", "W2", "W3", "W4", "W5", "floor")


def run(
    server_dsn: str,
    libraries: list[str],
    selected: list[str],
    *,
    runs: int,
    scale: workloads.Scale,
    quick: bool,
    command: str,
    chosen: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``selected`` workloads for each of ``libraries``. ``chosen`` maps a library to the
    label of a worker configuration to use instead of calibrating (a re-run, ``--merge``)."""
    started = time.time()
    report: dict[str, Any] = {
        "meta": {
            "command": command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
            "machine": f"{platform.node()}: {os.cpu_count()} cores, Linux {platform.release()}",
            "python": platform.python_version(),
            "settings": pg.server_settings(server_dsn),
            "quick": quick,
            "runs": runs,
            "workloads": selected,
            "scale": vars(scale),
            "postkit_source": postkit_source(),
        },
        "libraries": {},
    }
    bench_floor = floor.Floor.open(server_dsn) if {"W1", "floor"} & set(selected) else None
    try:
        for name in libraries:
            report["libraries"][name] = run_library(
                load(name)(server_dsn),
                selected,
                runs,
                scale,
                quick,
                bench_floor,
                (chosen or {}).get(name),
            )
        if "floor" in selected:
            log.info("floor: pgbench")
            try:
                if bench_floor is None:
                    raise RuntimeError("pgbench not found (PATH, /usr/lib/postgresql/*/bin)")
                report["floor"] = bench_floor.measure(quick=quick, runs=runs)
            except Exception as error:
                log.exception("floor failed")
                report["floor"] = {"error": f"{type(error).__name__}: {error}"}
    finally:
        if bench_floor is not None:
            bench_floor.close()
    report["meta"]["seconds"] = round(time.time() - started)
    return report


def run_library(
    adapter: Adapter,
    selected: list[str],
    runs: int,
    scale: workloads.Scale,
    quick: bool,
    bench_floor: floor.Floor | None,
    chosen: str | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "version": adapter.version(),
        "backend": adapter.backend,
        "batch_note": adapter.batch_note,
        "metrics": {},
        "errors": {},
    }
    metrics: dict[str, list[float]] = result["metrics"]
    log.info("%s %s: setting up %s", adapter.name, result["version"], adapter.backend)
    adapter.setup()
    try:
        result["server"] = adapter.describe_backend()
        config = next((c for c in adapter.configs if c.label == chosen), adapter.configs[0])
        if chosen is not None:
            result["calibration_skipped"] = f"reused {chosen}"
        elif not quick and len(adapter.configs) > 1 and _wants_workers(selected):
            calibration = _attempt(
                result, "calibration", lambda: workloads.calibrate(adapter, scale)
            )
            if calibration:
                result["calibration"] = calibration
                best = max(calibration, key=lambda label: calibration[label])
                config = next(c for c in adapter.configs if c.label == best)
        result["config"] = config.label
        result["latency_config"] = adapter.latency_config.label
        for workload in selected:
            if workload == "floor":
                continue
            log.info("%s: %s", adapter.name, workload)
            step = _workload(adapter, workload, config, scale, runs, bench_floor)
            if step is None:
                result["errors"][workload] = "not applicable"
                continue
            for values in _attempt(result, workload, step) or []:
                for key, value in values.items():
                    metrics.setdefault(key, []).append(value)
            log.info("%s: %s done: %s", adapter.name, workload, _summary(metrics))
    finally:
        adapter.teardown()
    return result


def _wants_workers(selected: list[str]) -> bool:
    return any(workload in selected for workload in ("W1", "W1s", "W3", "W4", "W5"))


def _workload(
    adapter: Adapter,
    workload: str,
    config: WorkerConfig,
    scale: workloads.Scale,
    runs: int,
    bench_floor: floor.Floor | None,
) -> Callable[[], list[dict[str, float]]] | None:
    if workload == "W1":
        return lambda: [workloads.w1(adapter, config, scale, bench_floor) for _ in range(runs)]
    if workload == "W1s":
        return lambda: [workloads.w1s(adapter, config, scale) for _ in range(runs)]
    if workload == "W2":
        return lambda: [workloads.w2(adapter, scale) for _ in range(runs)]
    if workload == "W3":
        return lambda: workloads.w3(adapter, config, scale, runs)
    if workload == "W4":
        return lambda: [workloads.w4(adapter, config, scale)]
    if workload == "W5":
        if adapter.backend != "PostgreSQL":
            return None
        return lambda: [workloads.w5(adapter, config, scale, adapter.server_dsn)]
    raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")


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
    "W1s": ("drain_sustained", "drain_sustained_jobs"),
    "W2": ("latency_p50_ms", "latency_p99_ms", "latency_max_ms"),
    "W3": ("drain_backlog", "drain_backlog_jobs"),
    "W4": (
        "endurance_jobs",
        "endurance_start",
        "endurance_end",
        "storage_start_mb",
        "storage_mid_mb",
        "storage_end_mb",
        "dead_tuples_end",
        "peak_rss_mb",
    ),
    "W5": ("held_without", "held_with", "held_dead_tuples"),
}


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
        for workload in meta["workloads"]:
            target["errors"].pop(workload, None)
            for key in WORKLOAD_METRICS.get(workload, ()):
                target["metrics"].pop(key, None)
                if key in library["metrics"]:
                    target["metrics"][key] = library["metrics"][key]
            if workload in library["errors"]:
                target["errors"][workload] = library["errors"][workload]
    if "floor" in new:
        old["floor"] = new["floor"]
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
