"""Chaos: real worker processes doing real work while the test breaks everything around them.

The test owns an embedded PostgreSQL server. It starts several worker processes
(``chaos_worker.py``: postkit's Worker), pushes a few thousand jobs in batches while it injects
faults, lets the workers drain the queue, then checks the books.

Three jobs in four go to a transactional handler (its effect commits with the ack), the rest to
a plain handler (whose successes the worker acks in batches). Job kinds (see
``chaos_worker.py``): most succeed; some sleep first; some fail temporarily a few times (after
writing their effect, which must roll back) and then succeed; some fail permanently; a few
poison pills kill their own worker process every time.

Faults, spread over the push window at times drawn from a seeded random generator:

- SIGKILL a worker process (it is restarted at once);
- SIGSTOP a worker that holds claims, for longer than the visibility timeout, then SIGCONT: its
  claims expire and are rescued and re-run by other workers, and when it wakes up its handlers
  finish and try to ack under the stale claim, which must be refused;
- pg_terminate_backend of every connection of one worker;
- crash PostgreSQL (``pg_ctl stop -m immediate``) and restart it: the workers must reconnect by
  themselves.

A worker process that dies on its own (a poison pill) is restarted too, as a supervisor would.

The queues keep completed jobs (retain_completed), so every acked job is on record with the
attempt and the worker that acked it. The transactional queue has a global concurrency limit
(flow control) of fewer jobs than the workers have slots, and a thread samples its running
jobs throughout, faults included: the count never exceeds the limit. At the end, with nothing
left pending or running:

- no job is lost: every pushed job is either completed or dead-lettered, never both;
- the transactional effect of every completed job happened exactly once, written by the very
  claim (attempt and worker) that acked it, and never for a dead-lettered job; a flaky job was
  acked by an attempt after its failures (the failed attempts' effects rolled back);
- every plain job was acked by a claim whose run had finished before the ack;
- every permanent failure is in the dead-letter queue as 'failed' with its error; every poison
  pill is there as 'timed_out' after exactly max_attempts claims, instead of looping;
- no stale ack, nack or fail took effect (this follows from the above: an effect, or an ack,
  from any other claim than the one on record would show);
- no worker process died other than by the test's hand or a poison pill, and no exception
  escaped the runtime (no traceback in the workers' logs).

The external side effect (committed outside the job's transaction) is allowed duplicates; they
are counted and printed with the other figures (``pytest -s`` shows them).

Counted, and tolerated for poison pills: attempts charged to a job without its handler running
(a transactional handler given a pooled connection that had died was nacked; a bug this test
found, now fixed, that test_connection_loss.py pins down every time).

The CI variant pushes 2,000 jobs to 4 workers in about 30 s. The soak variant runs only with
``POSTKIT_CHAOS_SOAK=1`` and takes POSTKIT_CHAOS_JOBS, POSTKIT_CHAOS_SECONDS (the push window),
POSTKIT_CHAOS_WORKERS and POSTKIT_CHAOS_SEED from the environment (the CI variant takes
POSTKIT_CHAOS_SEED too).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.types.json import Jsonb

from postkit.embedded import EmbeddedServer
from postkit.queue import QueueClient, install
from tests.chaos.harness import DB_DEADLINE, Database, WorkerSlot
from tests.signals import poll_until, wait_until

T = TypeVar("T")

QUEUE = "chaos"
PLAIN_QUEUE = "chaos_plain"
NAMESPACE = "chaos"
WORKER_SCRIPT = Path(__file__).with_name("chaos_worker.py")
QUEUE_CONCURRENCY = 6
"""The transactional queue's concurrency limit: fewer than the workers' slots (4 x 4 in CI)."""

SCHEMA = """
CREATE TABLE chaos_pushed (job_id bigint PRIMARY KEY, queue text NOT NULL, kind text NOT NULL,
                           payload jsonb NOT NULL, max_attempts integer NOT NULL);
CREATE TABLE chaos_batches (batch integer PRIMARY KEY);
CREATE TABLE chaos_effects (job_id bigint NOT NULL, attempt integer NOT NULL,
                            worker_id text NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE chaos_external (job_id bigint NOT NULL, queue text NOT NULL, attempt integer NOT NULL,
                             worker_id text NOT NULL, at timestamptz NOT NULL DEFAULT now());
"""


# ---------------------------------------------------------------------------------------------
# Configuration.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChaosConfig:
    jobs: int
    workers: int
    seconds: float
    """The push window: jobs are pushed, and faults injected, over this many seconds."""
    kills: int
    stops: int
    terminations: int
    crashes: int
    poison: int
    seed: int
    visibility: float = 2.0
    concurrency: int = 4
    drain_timeout: float = 120.0
    """How long the workers get to finish everything once the faults stop."""


CI_CONFIG = ChaosConfig(
    jobs=2000,
    workers=4,
    seconds=25.0,
    kills=3,
    stops=2,
    terminations=3,
    crashes=2,
    poison=6,
    seed=int(os.environ.get("POSTKIT_CHAOS_SEED", "20240611")),
)


def soak_config() -> ChaosConfig:
    seconds = float(os.environ.get("POSTKIT_CHAOS_SECONDS", "300"))
    jobs = int(os.environ.get("POSTKIT_CHAOS_JOBS", "20000"))
    faults = max(4, int(seconds / 4))  # one fault every four seconds or so
    return ChaosConfig(
        jobs=jobs,
        workers=int(os.environ.get("POSTKIT_CHAOS_WORKERS", "4")),
        seconds=seconds,
        kills=faults // 3,
        stops=faults // 4,
        terminations=faults // 4,
        crashes=max(1, int(seconds / 60)),
        poison=max(1, jobs // 400),
        seed=int(os.environ.get("POSTKIT_CHAOS_SEED", str(random.randrange(2**31)))),
        drain_timeout=max(120.0, seconds / 2),
    )


SOAK = os.environ.get("POSTKIT_CHAOS_SOAK") == "1"
SOAK_TIMEOUT = int(float(os.environ.get("POSTKIT_CHAOS_SECONDS", "300")) * 2) + 600 if SOAK else 600


# ---------------------------------------------------------------------------------------------
# The running jobs, sampled.
# ---------------------------------------------------------------------------------------------


class RunningSampler:
    """A thread that counts the running jobs of one queue every few milliseconds on a
    connection of its own, through crashes (a sample that fails is skipped), and keeps the
    most it saw."""

    def __init__(self, dsn: str, queue: str) -> None:
        self.dsn = dsn
        self.queue = queue
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="running-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        connection: psycopg.Connection[Any] | None = None
        while not self._stop.wait(0.005):  # a sample every few milliseconds
            try:
                if connection is None or connection.closed:
                    connection = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
                row = connection.execute(
                    "SELECT count(*) FROM postkit_queue.jobs"
                    " WHERE namespace = %s AND queue = %s AND state = 'running'",
                    (NAMESPACE, self.queue),
                ).fetchone()
                assert row is not None
                self.peak = max(self.peak, int(row[0]))
                self.samples += 1
            except psycopg.OperationalError:
                if connection is not None:
                    connection.close()
                connection = None
                self._stop.wait(0.2)  # the server is away (crashed on purpose)
        if connection is not None:
            connection.close()


# ---------------------------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobSpec:
    queue: str
    kind: str
    payload: dict[str, Any]
    max_attempts: int


@dataclasses.dataclass(frozen=True)
class Batch:
    number: int
    at: float
    jobs: list[JobSpec]


@dataclasses.dataclass(frozen=True)
class Fault:
    at: float
    kind: str


class Chaos:
    def __init__(self, server: EmbeddedServer, directory: Path, config: ChaosConfig) -> None:
        self.server = server
        self.dsn = server.dsn
        self.config = config
        self.random = random.Random(config.seed)
        self.db = Database(self.dsn)
        self.slots = [
            WorkerSlot(
                i,
                self.dsn,
                directory,
                script=WORKER_SCRIPT,
                namespace=NAMESPACE,
                visibility=config.visibility,
                concurrency=config.concurrency,
            )
            for i in range(config.workers)
        ]
        self.figures: collections.Counter[str] = collections.Counter()
        self.timings: dict[str, float] = {}
        self.unexpected_exits: list[str] = []
        self.unrun_examples: list[str] = []
        self.sampler = RunningSampler(self.dsn, QUEUE)
        self.started = time.monotonic()

    def log(self, message: str) -> None:
        print(f"[chaos {time.monotonic() - self.started:6.1f}s] {message}", flush=True)

    # -- setup ----------------------------------------------------------------------------

    def install(self) -> None:
        with psycopg.connect(self.dsn) as connection:
            install(connection)
            connection.execute(SCHEMA)
            # Keep completed jobs (postkit_queue.completed_jobs), with the attempt and worker
            # that acked each, for the books.
            # The transactional queue runs at most QUEUE_CONCURRENCY jobs at once.
            for queue, limit in ((QUEUE, QUEUE_CONCURRENCY), (PLAIN_QUEUE, None)):
                connection.execute(
                    "SELECT postkit_queue.configure_queue(p_namespace => %s, p_queue => %s,"
                    " p_retain_completed => interval '1 day', p_concurrency => %s)",
                    (NAMESPACE, queue, limit),
                )

    def batches(self) -> list[Batch]:
        config = self.config
        count = max(1, int(config.seconds / 0.5))
        specs = [self.job_spec() for _ in range(config.jobs - config.poison)]
        for number in range(config.poison):
            how = "sigkill" if number % 2 == 0 else "exit"
            poison = JobSpec(QUEUE, "poison", {"kind": "poison", "how": how}, max_attempts=3)
            # Spread the poison pills over the first two thirds of the run.
            specs.insert(int(len(specs) * (number + 0.5) / config.poison * 2 / 3), poison)
        size = -(-len(specs) // count)
        return [
            Batch(number, number * config.seconds / count, specs[start : start + size])
            for number, start in enumerate(range(0, len(specs), size))
        ]

    def job_spec(self) -> JobSpec:
        # A quarter of the jobs go to the plain handler, whose acks the worker batches.
        queue = PLAIN_QUEUE if self.random.random() < 0.25 else QUEUE
        draw = self.random.random()
        if draw < 0.70:
            return JobSpec(queue, "ok", {"kind": "ok"}, max_attempts=30)
        if draw < 0.80:
            payload = {"kind": "slow", "sleep": round(self.random.uniform(0.2, 0.6), 3)}
            return JobSpec(queue, "slow", payload, max_attempts=30)
        if draw < 0.95:
            payload = {
                "kind": "flaky",
                "fail_times": self.random.randint(1, 2),
                "retry_later": self.random.random() < 0.5,
            }
            return JobSpec(queue, "flaky", payload, max_attempts=30)
        return JobSpec(queue, "permanent", {"kind": "permanent"}, max_attempts=30)

    def faults(self) -> list[Fault]:
        config = self.config
        kinds = (
            ["kill"] * config.kills
            + ["stop"] * config.stops
            + ["terminate"] * config.terminations
            + ["crash"] * config.crashes
        )
        self.random.shuffle(kinds)
        # Evenly spaced over the middle of the push window, with some jitter.
        step = config.seconds * 0.8 / max(1, len(kinds))
        return [
            Fault(config.seconds * 0.1 + step * (n + self.random.uniform(0.0, 0.8)), kind)
            for n, kind in enumerate(kinds)
        ]

    # -- pushing --------------------------------------------------------------------------

    def push(self, batch: Batch) -> None:
        """Push one batch in one transaction, with a row per job in chaos_pushed and a row for
        the batch. If the commit's fate is unknown (the server went away), the batch row says
        whether it happened; if it did not, the batch is pushed again."""
        deadline = time.monotonic() + DB_DEADLINE
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=5) as connection:
                    client = QueueClient(connection.cursor(), namespace=NAMESPACE)
                    rows = []
                    for spec in batch.jobs:
                        job_id = client.push(
                            spec.queue,
                            spec.payload,
                            max_attempts=spec.max_attempts,
                            backoff_base=0.1,
                            backoff_cap=1.0,
                        )
                        assert job_id is not None
                        rows.append(
                            (job_id, spec.queue, spec.kind, Jsonb(spec.payload), spec.max_attempts)
                        )
                    with connection.cursor() as cursor:
                        cursor.executemany(
                            "INSERT INTO chaos_pushed (job_id, queue, kind, payload, max_attempts)"
                            " VALUES (%s, %s, %s, %s, %s)",
                            rows,
                        )
                    connection.execute(
                        "INSERT INTO chaos_batches (batch) VALUES (%s)", (batch.number,)
                    )
                return
            except psycopg.OperationalError:
                if self.db.value(
                    "SELECT count(*) FROM chaos_batches WHERE batch = %s", (batch.number,)
                ):
                    return
                self.figures["push retries"] += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # the server is away (crashed on purpose): try again shortly

    # -- faults ---------------------------------------------------------------------------

    def running_slots(self) -> list[WorkerSlot]:
        return [slot for slot in self.slots if slot.alive and slot.stopped_until is None]

    def inject(self, fault: Fault) -> None:
        candidates = self.running_slots()
        if fault.kind == "crash":
            began = time.monotonic()
            self.server.crash()
            dsn = self.server.restart()
            assert dsn == self.dsn, f"the server came back on another DSN: {dsn}"
            self.figures["server crashes"] += 1
            self.log(f"crashed and restarted PostgreSQL in {time.monotonic() - began:.1f}s")
        elif fault.kind == "terminate":
            slot = self.connected_slot()
            count = self.db.value(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                " FROM pg_stat_activity WHERE application_name = %s",
                (slot.application_name,),
            )
            self.figures["connection drops"] += 1
            self.figures["backends terminated"] += count
            self.log(f"terminated {count} connection(s) of {slot.worker_id}")
        elif fault.kind == "kill" and candidates:
            slot = self.random.choice(candidates)
            killed = slot.worker_id
            slot.kill()
            slot.start()
            self.figures["SIGKILLs"] += 1
            self.log(f"killed {killed}; started {slot.worker_id}")
        elif fault.kind == "stop" and len(candidates) > 1:
            slot = self.busiest(candidates)
            slot.signal(signal.SIGSTOP)
            # Long enough for its claims to expire and be rescued by the others' ticks.
            slot.stopped_until = time.monotonic() + self.config.visibility * 2 + 1.5
            self.figures["SIGSTOPs"] += 1
            self.log(f"stopped {slot.worker_id}")

    def connected_slot(self) -> WorkerSlot:
        """A worker with connections to cut (waiting briefly for one to reconnect, after a
        crash)."""

        def connected() -> list[WorkerSlot]:
            names = {
                name
                for (name,) in self.db.rows(
                    "SELECT DISTINCT application_name FROM pg_stat_activity"
                    " WHERE application_name LIKE 'chaos-%%'"
                )
            }
            return [slot for slot in self.slots if slot.application_name in names]

        return self.random.choice(poll_until(connected, 5.0, interval=0.05) or self.slots)

    def busiest(self, candidates: list[WorkerSlot]) -> WorkerSlot:
        """The candidate holding the most claims right now (waiting briefly for one that holds
        any), so that stopping it strands work."""

        def ranked() -> tuple[list[WorkerSlot], dict[str, int]]:
            held = dict(
                self.db.rows(
                    "SELECT worker_id, count(*) FROM postkit_queue.jobs"
                    " WHERE namespace = %s AND state = 'running' GROUP BY worker_id",
                    (NAMESPACE,),
                )
            )
            return sorted(candidates, key=lambda slot: -held.get(slot.worker_id, 0)), held

        def busiest_holding_any() -> WorkerSlot | None:
            ranking, held = ranked()
            return ranking[0] if held.get(ranking[0].worker_id, 0) else None

        return poll_until(busiest_holding_any, 2.0, interval=0.05) or ranked()[0][0]

    def supervise(self) -> None:
        """Resume stopped workers whose time is up; restart the ones that died on their own."""
        now = time.monotonic()
        for slot in self.slots:
            if slot.stopped_until is not None:
                if now < slot.stopped_until:
                    continue
                slot.signal(signal.SIGCONT)
                slot.stopped_until = None
                self.log(f"resumed {slot.worker_id}")
            assert slot.process is not None
            code = slot.process.poll()
            if code is None:
                continue
            if code in (-signal.SIGKILL, 3):
                self.figures["poison pill deaths"] += 1
            else:
                self.unexpected_exits.append(
                    f"{slot.worker_id} exited with {code}:\n{slot.log_tail()}"
                )
            slot.start()
            self.figures["worker restarts"] += 1

    # -- the run --------------------------------------------------------------------------

    def live_jobs(self) -> int:
        return int(
            self.db.value(
                "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (NAMESPACE,)
            )
        )

    def run(self) -> None:
        config = self.config
        self.log(
            f"seed {config.seed}: {config.jobs} jobs over {config.seconds:.0f}s to "
            f"{config.workers} workers"
        )
        self.install()
        batches = self.batches()
        faults = self.faults()
        self.sampler.start()
        for slot in self.slots:
            slot.start()

        began = time.monotonic()
        while batches or faults:
            now = time.monotonic() - began
            if batches and now >= batches[0].at:
                self.push(batches.pop(0))
            if faults and now >= faults[0].at:
                self.inject(faults.pop(0))
            self.supervise()
            time.sleep(0.02)  # the timeline's resolution: batches and faults fall due by the clock
        pushed_in = time.monotonic() - began
        self.timings["push window (s)"] = round(pushed_in, 1)

        drain_began = time.monotonic()

        def drained() -> bool:
            self.supervise()
            return not self.live_jobs() and all(slot.stopped_until is None for slot in self.slots)

        def stuck() -> str:
            states = self.db.rows(
                "SELECT state, worker_id, count(*) FROM postkit_queue.jobs"
                " WHERE namespace = %s GROUP BY 1, 2 ORDER BY 1, 2",
                (NAMESPACE,),
            )
            return (
                f"the queue to drain after the last fault: {self.live_jobs()} jobs still live"
                f" (state, worker, count: {states}); worker logs:\n"
                + "\n".join(f"--- {slot.worker_id}\n{slot.log_tail()}" for slot in self.slots)
            )

        wait_until(drained, stuck, config.drain_timeout, interval=0.25)
        self.timings["drain (s)"] = round(time.monotonic() - drain_began, 1)
        self.sampler.stop()

        for slot in self.slots:
            # Once it handles SIGTERM (a fresh incarnation may not yet); a worker that is not
            # ready in time gets the signal anyway, and its exit code tells.
            poll_until(slot.ready_or_gone, 30, interval=0.05)
            slot.signal(signal.SIGTERM)
        for slot in self.slots:
            assert slot.process is not None
            try:
                code = slot.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                slot.kill()
                code = None
            if code != 0:
                self.unexpected_exits.append(
                    f"{slot.worker_id} did not stop cleanly on SIGTERM ({code}):\n{slot.log_tail()}"
                )
        self.timings["seconds in all"] = round(time.monotonic() - self.started, 1)

    def stop_all(self) -> None:
        self.sampler.stop()
        for slot in self.slots:
            slot.kill()
        self.db.close()

    # -- the books ------------------------------------------------------------------------

    def check(self) -> None:
        db = self.db
        pushed = {
            row[0]: row[1:]
            for row in db.rows(
                "SELECT job_id, queue, kind, payload, max_attempts FROM chaos_pushed"
            )
        }
        assert len(pushed) == self.config.jobs, (
            f"pushed {len(pushed)} jobs, expected {self.config.jobs}"
        )
        assert db.value("SELECT count(*) FROM postkit_queue.jobs") == 0, "a job is still live"

        dead = {
            row[0]: row[1:]
            for row in db.rows(
                "SELECT job_id, reason, error, attempts, max_attempts, errors"
                " FROM postkit_queue.dead_letters WHERE namespace = %s",
                (NAMESPACE,),
            )
        }
        completed = {
            row[0]: row[1:]
            for row in db.rows(
                "SELECT job_id, attempts, worker_id, errors, completed_at"
                " FROM postkit_queue.completed_jobs"
                " WHERE namespace = %s",
                (NAMESPACE,),
            )
        }
        effects: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
        for job_id, attempt, worker_id in db.rows(
            "SELECT job_id, attempt, worker_id FROM chaos_effects"
        ):
            effects[job_id].append((attempt, worker_id))
        external: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
        finished_at: dict[tuple[int, int, str], datetime.datetime] = {}
        for job_id, attempt, worker_id, at in db.rows(
            "SELECT job_id, attempt, worker_id, at FROM chaos_external"
        ):
            external[job_id].append((attempt, worker_id))
            key = (job_id, attempt, worker_id)
            finished_at[key] = min(at, finished_at.get(key, at))
        runs = self.handler_runs()
        runs_of = collections.Counter(job_id for job_id, _ in runs.elements())
        assert set(dead) <= set(pushed), "a dead letter that nobody pushed"
        assert set(completed) <= set(pushed), "a completed job that nobody pushed"
        assert set(effects) <= set(pushed), "an effect of a job that nobody pushed"

        problems: list[str] = []

        def problem(message: str) -> None:
            if len(problems) < 30:
                problems.append(message)

        # Attempts the worker charged to a job for its own lost connection, before the handler
        # ran (test_connection_loss.py pins that down). Counted, and tolerated below.
        unrun_nacks = 0
        for job_id, (queue, kind, payload, max_attempts) in sorted(pushed.items()):
            name = f"job {job_id} ({queue}, {kind})"
            job_effects = effects.get(job_id, [])
            if queue == PLAIN_QUEUE and job_effects:
                problem(f"{name} has transactional effects, but its handler writes none")
            if (job_id in dead) == (job_id in completed):
                problem(f"{name} is {'both' if job_id in dead else 'neither'} dead and completed")
                continue
            history = dead[job_id][4] if job_id in dead else completed[job_id][2]
            # A failed attempt whose handler never ran: the runtime's own error, charged to the
            # job (the run log has every handler run, by job and attempt).
            unrun = [
                entry
                for entry in history
                if entry["kind"] == "nack" and (job_id, entry["attempt"]) not in runs
            ]
            unrun_nacks += len(unrun)
            for entry in unrun[: max(0, 3 - len(self.unrun_examples))]:
                self.unrun_examples.append(f"{name}, attempt {entry['attempt']}: {entry['error']}")
            if job_id in dead:
                reason, error, attempts, dead_max, _ = dead[job_id]
                if job_effects:
                    problem(f"{name} is dead ({reason}) but has effects")
                if kind == "permanent":
                    expected_error = f"permanent failure of job {job_id}"
                    if reason != "failed" or expected_error not in (error or ""):
                        problem(f"{name}: dead as {reason!r} with {error!r}")
                elif kind == "poison":
                    # Its handler never returns: only a timeout can end its attempts, or the
                    # runtime's own error before the handler ran (a nack, tolerated here).
                    endings = {entry["kind"] for entry in history}
                    ended_by_runtime = history[-1]["kind"] == "nack"
                    if reason != "timed_out" and not ended_by_runtime:
                        problem(f"{name}: dead as {reason!r}, not timed_out: {history}")
                    if (attempts, dead_max) != (max_attempts, max_attempts):
                        problem(f"{name}: dead after {attempts} of {dead_max} attempts")
                    if endings - {"timeout", "nack"}:
                        problem(f"{name}: errors {history}")
                else:
                    problem(f"{name} was dead-lettered ({reason}): {error!r}")
                continue
            # Completed: acked by one claim, whose run must have happened (and, for the
            # transactional queue, written the one effect that committed).
            attempts, worker_id, _, completed_at = completed[job_id]
            acking_run = (attempts, worker_id)
            if kind in ("permanent", "poison"):
                problem(f"{name} was acked, never dead-lettered")
            if runs_of[job_id] < 1:
                problem(f"{name} was acked but no run of it was recorded")
            if queue == PLAIN_QUEUE:
                # The worker acks a run of the plain handler after it finished (and wrote its
                # external row): the claim that acked must have such a run, finished before.
                finished = finished_at.get((job_id, attempts, worker_id))
                if finished is None or finished > completed_at:
                    problem(
                        f"{name} was acked at {completed_at} under attempt {attempts} of"
                        f" {worker_id}, whose run had not finished (finished runs:"
                        f" {external[job_id]}, the acking one at {finished})"
                    )
                continue
            if job_effects != [acking_run]:
                problem(
                    f"{name} was acked under attempt {attempts} of {worker_id}, with the"
                    f" transactional effects {job_effects}: exactly that one was expected"
                )
            if kind == "flaky" and attempts <= payload["fail_times"]:
                problem(f"{name} was acked in attempt {attempts}, which had to fail")

        def acked_of(queue: str) -> list[int]:
            return [job_id for job_id in completed if pushed[job_id][0] == queue]

        flaky_reruns = sum(
            pushed[job_id][2]["fail_times"]
            for job_id in acked_of(QUEUE)
            if pushed[job_id][1] == "flaky"
        )
        self.figures.update(
            {
                "jobs": len(pushed),
                "acked": len(completed),
                "dead-lettered": len(dead),
                "handler runs": runs.total(),
                "transactional effects": sum(len(v) for v in effects.values()),
                "external effects": sum(len(v) for v in external.values()),
                "external duplicates, transactional queue": sum(
                    len(external[job_id]) - 1 for job_id in acked_of(QUEUE)
                ),
                "  of which flaky retries (expected)": flaky_reruns,
                "external duplicates, plain queue": sum(
                    len(external[job_id]) - 1 for job_id in acked_of(PLAIN_QUEUE)
                ),
                "stale settles refused": self.log_lines("but its claim was stale"),
                "attempts charged without a run": unrun_nacks,
                "tracebacks in worker logs": self.log_lines("Traceback (most recent call last)"),
                f"most running at once, {QUEUE} (limit {QUEUE_CONCURRENCY})": self.sampler.peak,
                "running-count samples": self.sampler.samples,
            }
        )
        mix = collections.Counter(f"{queue} {kind}" for queue, kind, _, _ in pushed.values())
        for kind, count in sorted(mix.items()):
            self.figures[f"jobs: {kind}"] = count
        for reason, count in collections.Counter(row[0] for row in dead.values()).items():
            self.figures[f"dead: {reason}"] = count
        self.print_figures()
        for example in self.unrun_examples:
            print(f"charged without a run: {example}")

        assert not problems, "the books do not balance:\n" + "\n".join(problems)
        assert not self.unexpected_exits, "worker processes died unexpectedly:\n" + "\n\n".join(
            self.unexpected_exits
        )
        # An exception that escaped the runtime (a dead handler or heartbeat thread, say).
        assert not self.figures["tracebacks in worker logs"], "\n".join(
            f"--- {slot.worker_id}\n{slot.log_tail(60)}" for slot in self.slots
        )
        assert self.sampler.peak <= QUEUE_CONCURRENCY, (
            f"{self.sampler.peak} jobs of {QUEUE} ran at once; its limit is {QUEUE_CONCURRENCY}"
        )
        assert self.sampler.peak == QUEUE_CONCURRENCY, "the workers never filled the limit"
        for fault in ("SIGKILLs", "SIGSTOPs", "server crashes", "connection drops"):
            assert self.figures[fault] > 0, f"the run injected no {fault}"
        assert self.figures["poison pill deaths"] > 0, "no poison pill ever ran"

    def handler_runs(self) -> collections.Counter[tuple[int, int]]:
        """How many times each (job id, attempt) was run, from the workers' run logs."""
        runs: collections.Counter[tuple[int, int]] = collections.Counter()
        for slot in self.slots:
            if slot.run_log.exists():
                for line in slot.run_log.read_text().splitlines():
                    job_id, attempt = line.split()[:2]
                    runs[int(job_id), int(attempt)] += 1
        return runs

    def log_lines(self, needle: str) -> int:
        return sum(
            slot.log_path.read_text(errors="replace").count(needle)
            for slot in self.slots
            if slot.log_path.exists()
        )

    def print_figures(self) -> None:
        figures: dict[str, float] = {**self.figures, **self.timings}
        width = max(len(name) for name in figures)
        print(f"\nchaos figures (seed {self.config.seed}):")
        for name, value in figures.items():
            print(f"  {name:<{width}}  {value}")


@pytest.fixture
def run_chaos(
    own_server: EmbeddedServer, tmp_path: Path
) -> Iterator[Callable[[ChaosConfig], None]]:
    runs: list[Chaos] = []

    def _run(config: ChaosConfig) -> None:
        chaos = Chaos(own_server, tmp_path, config)
        runs.append(chaos)
        chaos.run()
        chaos.check()

    yield _run
    for chaos in runs:
        chaos.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_chaos(run_chaos: Callable[[ChaosConfig], None]) -> None:
    run_chaos(CI_CONFIG)


@pytest.mark.slow
@pytest.mark.timeout(SOAK_TIMEOUT)
@pytest.mark.skipif(not SOAK, reason="the soak run needs POSTKIT_CHAOS_SOAK=1")
def test_chaos_soak(run_chaos: Callable[[ChaosConfig], None]) -> None:
    run_chaos(soak_config())
