"""Flow control with real workers: worker processes (``flow_worker.py``) that a test kills with
SIGKILL, and a worker on a thread whose claims the server counts.

Each handler run prints when it started and ended on CLOCK_MONOTONIC, one clock for every
process of the machine, and the claim's ``claimed_at`` on the queue's clock; the tests read
the runs of every process together. Nothing sleeps and hopes: every wait is on a line printed,
a row changed, or a backend gone, bounded by a timeout.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue as stdlib_queue
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postkit.queue import Job, QueueClient
from postkit.worker import Worker
from tests.processes import WorkerProcess
from tests.signals import function_calls, wait_until
from tests.threads import QUIET, worker_threads

Q = "limited"
SCRIPT = Path(__file__).with_name("flow_worker.py")
Spawn = Callable[..., WorkerProcess]


@dataclasses.dataclass(frozen=True)
class Run:
    """One handler run, as a worker process printed it."""

    job_id: int
    attempt: int
    claimed_at: datetime
    started: int
    """CLOCK_MONOTONIC, ns."""
    finished: int | None
    group_key: str | None


def runs(*workers: WorkerProcess) -> list[Run]:
    """Every run the workers printed so far, in the order they started."""
    found = []
    for worker in workers:
        ends = {
            (int(job_id), int(attempt)): int(at)
            for _, job_id, attempt, at in (line.split() for line in worker.lines("finished "))
        }
        for line in worker.lines("started "):
            _, job_id, attempt, claimed_at, at, key = line.split(" ", 5)
            found.append(
                Run(
                    int(job_id),
                    int(attempt),
                    datetime.fromisoformat(claimed_at),
                    int(at),
                    ends.get((int(job_id), int(attempt))),
                    None if key == "-" else key.encode().decode("unicode_escape"),
                )
            )
    return sorted(found, key=lambda run: run.started)


def most_at_once(found: list[Run]) -> int:
    """The most runs that were in progress at one moment."""
    edges = sorted(
        [(run.started, 1) for run in found] + [(run.finished or 0, -1) for run in found],
        key=lambda edge: (edge[0], edge[1]),
    )
    now = peak = 0
    for _, change in edges:
        now += change
        peak = max(peak, now)
    return peak


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client: each push commits at once; reads see the latest state."""
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def spawn(dsn: str, namespace: str) -> Iterator[Spawn]:
    """Start flow_worker.py processes; any still running after the test is killed. With
    ``counted``, its sessions count their function calls (pg_stat_user_functions)."""
    spawned: list[WorkerProcess] = []

    def _spawn(
        *, concurrency: int = 4, visibility: float = 30.0, tick: float = 0.2, counted: bool = False
    ) -> WorkerProcess:
        options = {"options": "-c track_functions=pl"} if counted else {}
        options["application_name"] = application_name(namespace)
        worker = WorkerProcess(
            [sys.executable, str(SCRIPT)],
            env={
                "FLOW_DSN": psycopg.conninfo.make_conninfo(dsn, **options),
                "FLOW_NAMESPACE": namespace,
                "FLOW_CONCURRENCY": str(concurrency),
                "FLOW_VISIBILITY": str(visibility),
                "FLOW_TICK": str(tick),
            },
        )
        spawned.append(worker)
        worker.expect("ready")
        return worker

    yield _spawn
    for worker in spawned:
        if worker.process.poll() is None:
            worker.kill()


def application_name(namespace: str) -> str:
    """The application_name of the sessions of the test's worker processes."""
    return f"pk-flow-{namespace}"


def stopped(monitor: psycopg.Connection[Any], namespace: str, *workers: WorkerProcess) -> None:
    """Stop the workers (SIGTERM) and wait until their sessions have ended, each reporting its
    function calls (pg_stat_user_functions) as it ends."""
    for worker in workers:
        worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0
    wait_until(
        lambda: (
            not monitor.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s",
                (application_name(namespace),),
            ).fetchone()
        ),
        "the workers' sessions to end (and report their function calls)",
    )


def claim(client: QueueClient, job_id: int) -> Job:
    job = client.get_job(job_id)
    assert job is not None
    return job


# --------------------------------------------------------------------------------------------
# Global concurrency.
# --------------------------------------------------------------------------------------------


def test_worker_processes_together_never_run_more_than_the_queues_concurrency(
    client: QueueClient, spawn: Spawn
) -> None:
    limit, job_count = 3, 24
    client.configure_queue(Q, concurrency=limit)
    workers = [spawn(concurrency=4) for _ in range(3)]  # twelve slots for three
    pushed = client.push_batch(Q, [{"hold": 0.05} for _ in range(job_count)])
    samples: list[int] = []

    def all_done() -> bool:
        (stats,) = client.stats(Q)
        samples.append(stats.running)
        return len([run for run in runs(*workers) if run.finished]) == job_count

    wait_until(all_done, "every job to run", 30)

    found = runs(*workers)
    assert sorted(run.job_id for run in found) == sorted(pushed), "each job ran once"
    assert max(samples) <= limit, f"stats showed {max(samples)} running"
    assert most_at_once(found) == limit, "the handlers ran at most three at a time, and did"


@pytest.mark.slow
def test_a_worker_killed_holding_the_only_slot_keeps_it_until_its_claim_is_rescued(
    client: QueueClient,
    spawn: Spawn,
    tmp_path: Path,
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """The survivor waits seconds for the dead claim to expire, with a job ready and free
    slots: it sleeps (no notification comes, next_run_at leaves the held-back job out) until
    its own tick rescues the claim, and does not ask again and again meanwhile."""
    monitor = connect(autocommit=True)
    client.configure_queue(Q, concurrency=1)
    go = tmp_path / "go"
    stranded = client.push(Q, {"go": str(go)})
    assert stranded is not None
    doomed = spawn(concurrency=2, visibility=3.0)
    doomed.expect(f"started {stranded} 1")
    doomed.kill()
    deadline = claim(client, stranded).visible_until
    assert deadline is not None
    go.touch()

    before = function_calls(monitor, "postkit_queue.claim_limited")
    survivor = spawn(concurrency=2, counted=True)
    waiting = client.push(Q, {})  # wakes the survivor, whose claim finds the slot taken
    assert waiting is not None
    assert claim(client, waiting).created_at < deadline, "the survivor came too late to tell"
    wait_until(lambda: len(survivor.lines("finished")) == 2, "both jobs to run on the survivor")

    first, second = runs(survivor)
    assert first.claimed_at >= deadline, "the dead claim held the slot until it expired"
    assert {(first.job_id, first.attempt), (second.job_id, second.attempt)} == {
        (waiting, 1),
        (stranded, 2),
    }
    assert second.started >= (first.finished or 0), "one at a time"
    survivor.process.send_signal(signal.SIGTERM)
    assert survivor.wait() == 0, survivor.output
    wait_until(
        lambda: function_calls(monitor, "postkit_queue.claim_limited") > before,
        "the survivor's sessions to report their claims",
    )
    calls = function_calls(monitor, "postkit_queue.claim_limited") - before
    assert calls <= 20, f"{calls} claims while it waited for one slot: the survivor spins"


# --------------------------------------------------------------------------------------------
# Rate limits: a waiting worker sleeps until the next slot, and does not spin.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [None, 10], ids=["rate alone", "with concurrency"])
def test_a_rate_limited_worker_sleeps_until_each_next_slot_without_spinning(
    client: QueueClient,
    dsn: str,
    namespace: str,
    connect: Callable[..., psycopg.Connection[Any]],
    concurrency: int | None,
) -> None:
    rate, period, job_count = 2, 1.0, 6
    client.configure_queue(Q, concurrency=concurrency, rate=(rate, period))
    application = f"pk-rate-{namespace}"
    # track_functions in the worker's own sessions: pg_stat_user_functions counts its claims.
    worker_dsn = psycopg.conninfo.make_conninfo(
        dsn, application_name=application, options="-c track_functions=pl"
    )
    monitor = connect(autocommit=True)
    before = function_calls(monitor, "postkit_queue.claim_limited")
    claims: stdlib_queue.SimpleQueue[Job] = stdlib_queue.SimpleQueue()
    with worker_threads() as run:
        # The fallback poll is 30 s (QUIET): every claim after the first window's is made on
        # waking at the slot next_run_at gave.
        run(Worker(worker_dsn, {Q: claims.put}, namespace=namespace, **QUIET))
        client.push_batch(Q, [{"n": n} for n in range(job_count)])
        got = []
        for _ in range(job_count):
            try:
                got.append(claims.get(timeout=10))
            except stdlib_queue.Empty:
                pytest.fail(f"after {len(got)} jobs the worker slept past the next rate slot")
    wait_until(
        lambda: (
            not monitor.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (application,)
            ).fetchone()
        ),
        "the worker's sessions to end (and report their function calls)",
    )

    claimed_at = sorted(job.claimed_at for job in got if job.claimed_at)
    assert len(claimed_at) == job_count
    window = timedelta(seconds=period)
    for end in claimed_at:
        assert len([at for at in claimed_at if end - window < at <= end]) <= rate
    assert claimed_at[-1] - claimed_at[0] < timedelta(seconds=period * (job_count / rate) + 1)
    calls = function_calls(monitor, "postkit_queue.claim_limited") - before
    # Three windows; each wake-up is a claim or two (the listener's, the claim loop's), and an
    # ack's round trip claims too. A worker that asked again and again would make thousands.
    assert 0 < calls <= 20, f"{calls} claims for {job_count} jobs"


# --------------------------------------------------------------------------------------------
# Group ordering across worker processes.
# --------------------------------------------------------------------------------------------

KEYS = ["user 'o\"brien' %s {0}", "\U0001f389 e\u0301", "k" * 128, "plain"]


def test_worker_processes_run_each_keys_jobs_one_at_a_time_in_push_order(
    client: QueueClient, spawn: Spawn
) -> None:
    """A job retried (RetryLater) holds its key until its retry succeeds; the other keys and
    the jobs without a key go on meanwhile."""
    client.configure_queue(Q, group_ordered=True)
    workers = [spawn(concurrency=3) for _ in range(3)]
    per_key = 5
    order: list[tuple[str | None, dict[str, Any]]] = []
    for n in range(per_key):
        for key in KEYS:
            order.append((key, {"hold": 0.02, "retry_once": 0.1} if n == 2 else {"hold": 0.02}))
    order += [(None, {"hold": 0.05})] * 6
    pushed = client.push_batch(
        Q, [payload for _, payload in order], group_keys=[key for key, _ in order]
    )
    key_of = dict(zip(pushed, (key for key, _ in order), strict=True))
    expected_runs = len(order) + len(KEYS)  # each key's third job runs twice

    wait_until(
        lambda: len([run for run in runs(*workers) if run.finished]) == expected_runs,
        lambda: f"every job to run: {runs(*workers)}",
        30,
    )

    found = runs(*workers)
    for key in KEYS:
        mine = [run for run in found if key_of[run.job_id] == key]
        assert [run.group_key for run in mine] == [key] * len(mine)
        ids = [job_id for job_id, k in key_of.items() if k == key]
        expected = [(ids[n], 1) for n in range(per_key)]
        expected.insert(3, (ids[2], 2))
        assert [(run.job_id, run.attempt) for run in mine] == expected, f"order of {key!r}"
        for before, after in itertools.pairwise(mine):
            assert after.started > (before.finished or 0), f"two of {key!r} ran at once"


@pytest.mark.slow
def test_a_rescued_ordered_job_keeps_its_place_when_its_worker_is_killed(
    client: QueueClient, spawn: Spawn, tmp_path: Path
) -> None:
    client.configure_queue(Q, group_ordered=True)
    go = tmp_path / "go"
    first, second, third = client.push_batch(
        Q, [{"go": str(go)}, {}, {}], group_keys=["user-42"] * 3
    )
    doomed = spawn(visibility=1.5)
    doomed.expect(f"started {first} 1")
    doomed.kill()
    go.touch()

    survivor = spawn()
    wait_until(lambda: len(survivor.lines("finished")) == 3, "the key's jobs to run again")

    assert [(run.job_id, run.attempt) for run in runs(survivor)] == [
        (first, 2),
        (second, 1),
        (third, 1),
    ]


# --------------------------------------------------------------------------------------------
# Fair share between group keys (fair.sql).
# --------------------------------------------------------------------------------------------


def test_four_worker_processes_give_groups_weighing_3_and_1_jobs_3_to_1(
    client: QueueClient, spawn: Spawn
) -> None:
    client.configure_queue(Q, fair=True)
    client.set_group_weight(Q, "acme", 3)
    per_group = 600
    client.push_batch(Q, [{"hold": 0.002}] * per_group, group_keys=["acme"] * per_group)
    client.push_batch(Q, [{"hold": 0.002}] * per_group, group_keys=["globex"] * per_group)
    workers = [spawn(concurrency=4) for _ in range(4)]  # each claims as it starts

    # At 3:1, acme's 600 are gone after 800 claims: the first 600 were claimed while both had
    # work. In claim order (each claim at its own moment; two that overlap each give both
    # groups their turns), which the handler threads of four processes would blur, and only
    # once every job ran: a job claimed early may wait for a slot behind the rest of its claim.
    wait_until(lambda: len(runs(*workers)) == 2 * per_group, "every job to run", 60)

    claimed = sorted(runs(*workers), key=lambda run: run.claimed_at)
    first = [run.group_key for run in claimed[:600]]
    assert abs(first.count("acme") / first.count("globex") - 3) <= 0.3, (
        first.count("acme"),
        first.count("globex"),
    )


def test_a_group_pushed_behind_a_backlog_of_100000_starts_within_the_first_two_claims(
    client: QueueClient, spawn: Spawn
) -> None:
    client.configure_queue(Q, fair=True)
    client.push_batch(Q, [{}] * 100_000, group_keys=["a-backlog"] * 100_000)
    (late,) = client.push_batch(Q, [{}], group_keys=["b-late"])
    workers = [spawn(concurrency=4) for _ in range(4)]  # each claims as it starts

    wait_until(lambda: late in {run.job_id for run in runs(*workers)}, "the late group's job", 30)

    started = [run.job_id for run in runs(*workers)]
    # Sixteen slots: two claims of every worker are 32 jobs at most.
    assert started.index(late) < 32, started.index(late)


# --------------------------------------------------------------------------------------------
# A freed slot wakes one waiting worker, not all.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "group_key"),
    [({"concurrency": 1}, None), ({"group_concurrency": 1}, "tenant")],
    ids=["the queue's", "a key's"],
)
def test_a_slot_freed_under_a_limit_of_1_wakes_one_of_eight_waiting_workers_not_all(
    client: QueueClient,
    spawn: Spawn,
    namespace: str,
    connect: Callable[..., psycopg.Connection[Any]],
    limit: dict[str, int],
    group_key: str | None,
) -> None:
    client.configure_queue(Q, **limit)
    monitor = connect(autocommit=True)
    workers = [spawn(concurrency=1, counted=True) for _ in range(8)]
    wait_until(
        lambda: waiting_for_a_slot(monitor, namespace) == 8, "every worker to wait for the slot"
    )
    before = function_calls(monitor, "postkit_queue.claim_limited")
    job_count = 24

    client.push_batch(
        Q,
        [{"hold": 0.02}] * job_count,
        group_keys=None if group_key is None else [group_key] * job_count,
    )
    wait_until(lambda: len(runs(*workers)) == job_count, "every job to run", 60)
    # The last job's release has woken its waiting worker, which has claimed nothing.
    wait_until(
        lambda: waiting_for_a_slot(monitor, namespace) == 8, "every worker to wait again", 30
    )
    stopped(monitor, namespace, *workers)

    assert most_at_once(runs(*workers)) == 1
    claims = function_calls(monitor, "postkit_queue.claim_limited") - before
    # Each job: the claim that takes it, and the claim of its ack's round trip, which finds the
    # slot its own ack freed and takes the next job, or finds none. The release wakes one of
    # the seven other workers, which claims on waking and once more in its claim loop. Woken
    # all at once, as every worker listening on the queue's channel was, the workers made 390
    # to 410 claims for these 24 jobs, some 16 a job; woken one at a time, about 70.
    assert claims <= 5 * job_count, f"{claims} claims for {job_count} jobs"


def waiting_for_a_slot(monitor: psycopg.Connection[Any], namespace: str) -> int:
    """How many listeners wait for a slot of the queue (postkit_queue.wait_for_slot)."""
    row = monitor.execute(
        "SELECT count(*) FROM postkit_queue.slot_waiters WHERE namespace = %s AND queue = %s",
        (namespace, Q),
    ).fetchone()
    assert row is not None
    return int(row[0])
