"""Run Postkit's benchmarks: ``python -m benchmarks [latency|notify|all] [--dsn DSN]``.

Results are printed and written as Markdown to benchmarks/results/. Numbers depend on the
machine: every result file names the machine and server it came from.
"""

from __future__ import annotations

import argparse

from benchmarks import latency, notify_cost
from benchmarks.common import Spread, database, environment, write_result


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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("which", choices=["latency", "notify", "all"], nargs="?", default="all")
    parser.add_argument("--dsn", help="default: POSTKIT_DSN, DATABASE_URL, else embedded")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    dsn = database(args.dsn)
    if args.which in ("latency", "all"):
        text = run_latency(dsn, args.runs)
        print(text, f"-> {write_result('latency', text)}", sep="\n")
    if args.which in ("notify", "all"):
        text = run_notify(dsn, args.runs)
        print(text, f"-> {write_result('notify_cost', text)}", sep="\n")


if __name__ == "__main__":
    main()
