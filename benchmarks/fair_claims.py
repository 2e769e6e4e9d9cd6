"""What one claim of a fair queue costs (issue 32), whatever the shape of its backlog: claims of
one job each, in a loop on one connection in autocommit (each claim its own transaction, as a
worker's), timed from the call to its return, with no worker running.

- 10,000 groups of 3 jobs each, fair;
- one group of 1,000,000 jobs (100,000 in a quick run) and 1,000 groups of one job each, fair:
  the claims go round the groups, so most take a small group's job and one in each round the big
  group's;
- the same backlog claimed in pull order with ``group_concurrency=1`` and one job of the big
  group running, the shape the issue measured: each claim of a small group's job walks past the
  big group's jobs, which its limit holds back (fewer claims: each is slow).

Then many claimers at once: 16 connections, each claiming 32 jobs and acknowledging them in a
loop, for a few seconds, from a fair queue of 200,000 jobs over 1,000 groups. Fair is that
queue's only limit, so its claims overlap; the second row adds a ``group_concurrency`` that
never binds (1,000), which makes the claims take turns on the queue's flow_state row, as every
claim of a queue with a limit to count does: what the overlap saves a claim.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import psycopg

from postkit.queue import QueueClient

QUEUE = "fair"
CLAIMS = 2000
SLOW_CLAIMS = 20
BATCH = 50_000
CLAIMERS = 16
CLAIM_SIZE = 32


def _push_groups(client: QueueClient, sizes: dict[str, int]) -> None:
    """``sizes[group]`` jobs of each group, BATCH per push_batch."""
    keys = [group for group, size in sizes.items() for _ in range(size)]
    for first in range(0, len(keys), BATCH):
        chunk = keys[first : first + BATCH]
        client.push_batch(QUEUE, [{}] * len(chunk), group_keys=chunk)


def _timed_claims(client: QueueClient, count: int) -> list[float]:
    """Milliseconds each of ``count`` claims of one job took."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.pull(QUEUE, worker_id="bench")
        times.append((time.perf_counter() - started) * 1000)
    return times


def _concurrent_claims(dsn: str, namespace: str, seconds: float) -> list[float]:
    """Milliseconds each claim of CLAIM_SIZE jobs took, from CLAIMERS connections claiming and
    acknowledging at once for ``seconds`` (or until the queue is empty)."""
    times: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(CLAIMERS)

    def claimer() -> None:
        mine = []
        with psycopg.connect(dsn, autocommit=True) as connection:
            client = QueueClient(connection.cursor(), namespace=namespace)
            start.wait()
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                started = time.perf_counter()
                jobs = client.pull_batch(QUEUE, limit=CLAIM_SIZE, worker_id="bench")
                mine.append((time.perf_counter() - started) * 1000)
                if not jobs:
                    break
                client.ack_many(jobs)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=claimer) for _ in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def measure(dsn: str, *, quick: bool) -> dict[str, list[float]]:
    """Each shape's claim times, by label, each on a namespace of its own."""
    big = 100_000 if quick else 1_000_000
    shapes: list[tuple[str, dict[str, int], dict[str, Any], int]] = [
        (
            "10,000 groups of 3 jobs, fair",
            {f"group-{n:05}": 3 for n in range(10_000)},
            {"fair": True},
            CLAIMS,
        ),
        (
            f"one group of {big:,} jobs and 1,000 groups of 1, fair",
            {"big": big, **{f"small-{n:04}": 1 for n in range(1000)}},
            {"fair": True},
            CLAIMS,
        ),
        (
            "the same, in pull order with group_concurrency=1 and the big group running",
            {"big": big, **{f"small-{n:04}": 1 for n in range(1000)}},
            {"group_concurrency": 1},
            SLOW_CLAIMS,
        ),
    ]
    found: dict[str, list[float]] = {}
    with psycopg.connect(dsn, autocommit=True) as connection:
        for number, (label, sizes, settings, claims) in enumerate(shapes):
            client = QueueClient(connection.cursor(), namespace=f"bench-fair-{number}")
            client.configure_queue(QUEUE, **settings)
            _push_groups(client, sizes)
            if "group_concurrency" in settings:
                client.pull(QUEUE, worker_id="bench")  # the big group's first job: it runs
            connection.execute("VACUUM ANALYZE postkit_queue.jobs")
            found[label] = _timed_claims(client, claims)
            client.purge_queue(QUEUE)
        backlog = {f"group-{n:04}": 20 if quick else 200 for n in range(1000)}
        seconds = 2.0 if quick else 5.0
        for number, (label, settings) in enumerate(
            [
                (f"{CLAIMERS} claimers of {CLAIM_SIZE}, fair (claims overlap)", {"fair": True}),
                (
                    f"{CLAIMERS} claimers of {CLAIM_SIZE}, fair and group_concurrency=1000 "
                    "(claims take turns)",
                    {"fair": True, "group_concurrency": 1000},
                ),
            ]
        ):
            namespace = f"bench-fair-claimers-{number}"
            client = QueueClient(connection.cursor(), namespace=namespace)
            client.configure_queue(QUEUE, **settings)
            _push_groups(client, backlog)
            connection.execute("VACUUM ANALYZE postkit_queue.jobs")
            found[label] = _concurrent_claims(dsn, namespace, seconds)
            client.purge_queue(QUEUE)
    return found


def lines(found: dict[str, list[float]]) -> list[str]:
    """The markdown section of the figures."""
    rows = [
        "## One claim of a fair queue",
        "",
        "Claims of one job each on one connection (each its own transaction), no worker "
        "running, timed around the call (benchmarks/fair_claims.py). Target: p99 under 10 ms. "
        f"The last two rows: {CLAIMERS} connections at once, each claiming {CLAIM_SIZE} jobs "
        "and acknowledging them in a loop, from 1,000 groups of 200 jobs (20 in a quick run); "
        "a claim's time includes its wait for the others.",
        "",
        "| backlog | claims | p50 | p99 | max |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, times in found.items():
        ordered = sorted(times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        rows.append(
            f"| {label} | {len(times):,} | {statistics.median(times):.2f} ms | {p99:.2f} ms "
            f"| {ordered[-1]:.2f} ms |"
        )
    return rows
