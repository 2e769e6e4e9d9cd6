"""Chaos for jobs that wait for jobs: 200 random DAGs run by real worker processes while the
test kills them, crashes PostgreSQL and cancels jobs at random.

Each DAG has 1 to 50 jobs; each job depends on up to three earlier jobs of its DAG, drawn at
random, so the DAGs have chains, fan-outs and fan-ins. One job in twenty fails permanently (it
is dead-lettered). A DAG is pushed in one transaction, over a push window of about 20 s, while
three worker processes (``dag_worker.py``) run them. Meanwhile the test SIGKILLs a worker now
and then (it is restarted), crashes PostgreSQL once (``pg_ctl stop -m immediate``) and
restarts it, and cancels 100 jobs drawn at random, whatever their state (each one of the last
100 pushed, most of them still waiting or running). Then it lets the workers drain, and
checks the books:

- none is stranded: nothing is left waiting, pending or running, nor any edge of the
  dependency graph;
- every job ended exactly one way (completed, dead or cancelled), and the way the rules say,
  from its parents' ends: a job whose parent was dead-lettered or cancelled is cancelled, with
  the reason naming that parent ('parent 17 was dead-lettered'), or with 'cancelled' if the
  test cancelled it first; a job whose parents all completed is dead if it fails permanently,
  cancelled only if the test's cancel of it succeeded (or its outcome is unknown, the server
  having crashed under it), and completed otherwise; a cancel the test saw succeed left its
  job cancelled;
- no child ran before its parents: every handler run found each parent completed;
- a completed job's effect, written in its ack's transaction, happened exactly once, and a
  dead or cancelled job's never.

The cancels' outcomes and the run log are kept by the test, outside the database, so the
server's crash cannot lose them.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from postkit.embedded import EmbeddedServer
from postkit.queue import QueueClient, install
from tests.chaos.harness import DB_DEADLINE, Database, WorkerSlot
from tests.signals import poll_until, wait_until

QUEUE = "dag"
NAMESPACE = "dag-chaos"
WORKER_SCRIPT = Path(__file__).with_name("dag_worker.py")
SEED = int(os.environ.get("POSTKIT_CHAOS_SEED", "20261207"))
DAGS = 200
WORKERS = 3
PUSH_WINDOW = 20.0
"""Seconds over which the DAGs are pushed and the faults injected."""
KILLS = 3
CANCELS = 100
DRAIN_TIMEOUT = 120.0

SCHEMA = """
CREATE TABLE dag_pushed (job_id bigint PRIMARY KEY, dag integer NOT NULL, kind text NOT NULL,
                         parents bigint[] NOT NULL);
CREATE TABLE dag_batches (dag integer PRIMARY KEY);
CREATE TABLE dag_effects (job_id bigint NOT NULL, attempt integer NOT NULL,
                          worker_id text NOT NULL);
"""

REASON = re.compile(r"parent (\d+) was (dead-lettered|cancelled)")


@dataclasses.dataclass(frozen=True)
class Node:
    parents: tuple[int, ...]
    """Indexes of earlier nodes of its DAG."""
    kind: str
    sleep: float


def random_dag(rng: random.Random) -> list[Node]:
    nodes: list[Node] = []
    for index in range(rng.randint(1, 50)):
        count = min(index, rng.choice((0, 1, 1, 1, 2, 2, 3)))
        parents = tuple(sorted(rng.sample(range(index), count)))
        kind = "permanent" if rng.random() < 0.05 else "ok"
        sleep = rng.uniform(0.1, 0.4) if rng.random() < 0.1 else rng.uniform(0.0, 0.02)
        nodes.append(Node(parents, kind, round(sleep, 3)))
    return nodes


class DagChaos:
    def __init__(self, server: EmbeddedServer, directory: Path) -> None:
        self.server = server
        self.dsn = server.dsn
        self.rng = random.Random(SEED)
        self.db = Database(self.dsn)
        self.slots = [
            WorkerSlot(
                i,
                self.dsn,
                directory,
                script=WORKER_SCRIPT,
                namespace=NAMESPACE,
                visibility=2.0,
                concurrency=4,
            )
            for i in range(WORKERS)
        ]
        self.pushed: list[int] = []
        self.cancels: dict[int, bool | None] = {}
        """Each job the test cancelled: what cancel returned, None when the server went away
        before it answered."""
        self.figures: collections.Counter[str] = collections.Counter()
        self.unexpected_exits: list[str] = []

    # -- setup and pushes -------------------------------------------------------------------

    def install(self) -> None:
        with psycopg.connect(self.dsn) as connection:
            install(connection)
            connection.execute(SCHEMA)
            # Completed parents stay on record, so that parent_results says 'completed'.
            QueueClient(connection.cursor(), namespace=NAMESPACE).configure_queue(
                QUEUE, retain_results=86400, retain_completed=86400, max_attempts=30
            )

    def push(self, number: int, dag: list[Node]) -> None:
        """Push one DAG in one transaction, with its rows in dag_pushed and dag_batches; when
        the commit's fate is unknown (the server went away), dag_batches says whether it
        happened, and if it did not, the DAG is pushed again."""
        deadline = time.monotonic() + DB_DEADLINE
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=5) as connection:
                    client = QueueClient(connection.cursor(), namespace=NAMESPACE)
                    ids: list[int] = []
                    rows = []
                    for node in dag:
                        parents = [ids[p] for p in node.parents]
                        job_id = client.push(
                            QUEUE,
                            {"kind": node.kind, "sleep": node.sleep},
                            depends_on=parents or None,
                            backoff_base=0.1,
                            backoff_cap=1.0,
                        )
                        assert job_id is not None
                        ids.append(job_id)
                        rows.append((job_id, number, node.kind, parents))
                    with connection.cursor() as cursor:
                        cursor.executemany(
                            "INSERT INTO dag_pushed (job_id, dag, kind, parents)"
                            " VALUES (%s, %s, %s, %s)",
                            rows,
                        )
                    connection.execute("INSERT INTO dag_batches (dag) VALUES (%s)", (number,))
                self.pushed.extend(ids)
                return
            except psycopg.OperationalError:
                if self.db.value("SELECT count(*) FROM dag_batches WHERE dag = %s", (number,)):
                    self.pushed.extend(
                        job_id
                        for (job_id,) in self.db.rows(
                            "SELECT job_id FROM dag_pushed WHERE dag = %s", (number,)
                        )
                    )
                    return
                self.figures["push retries"] += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # the server is away (crashed on purpose): try again shortly

    # -- faults -----------------------------------------------------------------------------

    def cancel_one(self) -> None:
        """Cancel one of the last 100 jobs pushed: waiting, pending, running or finished."""
        job_id = self.rng.choice(self.pushed[-100:])
        if job_id in self.cancels:
            return
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as connection:
                self.cancels[job_id] = QueueClient(connection.cursor(), namespace=NAMESPACE).cancel(
                    job_id
                )
        except psycopg.OperationalError:
            self.cancels[job_id] = None  # it may or may not have committed

    def crash(self) -> None:
        self.server.crash()
        assert self.server.restart() == self.dsn, "the server came back on another DSN"
        self.figures["server crashes"] += 1

    def kill(self) -> None:
        slot = self.rng.choice([slot for slot in self.slots if slot.alive] or self.slots)
        slot.kill()
        slot.start()
        self.figures["SIGKILLs"] += 1

    def supervise(self) -> None:
        """Restart a worker that died on its own (none should)."""
        for slot in self.slots:
            assert slot.process is not None
            code = slot.process.poll()
            if code is not None:
                self.unexpected_exits.append(f"{slot.worker_id} exited with {code}")
                slot.start()

    # -- the run ----------------------------------------------------------------------------

    def live_jobs(self) -> int:
        return int(
            self.db.value(
                "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (NAMESPACE,)
            )
        )

    def run(self) -> None:
        self.install()
        dags = [random_dag(self.rng) for _ in range(DAGS)]
        events: list[tuple[float, str]] = [
            (PUSH_WINDOW * (n + 0.5) / DAGS, "push") for n in range(DAGS)
        ]
        events += [(self.rng.uniform(0.1, 1.0) * PUSH_WINDOW, "cancel") for _ in range(CANCELS)]
        events += [(self.rng.uniform(0.2, 0.9) * PUSH_WINDOW, "kill") for _ in range(KILLS)]
        events.append((self.rng.uniform(0.3, 0.7) * PUSH_WINDOW, "crash"))
        events.sort()
        for slot in self.slots:
            slot.start()
        began = time.monotonic()
        next_dag = 0
        for at, kind in events:
            time.sleep(max(0.0, at - (time.monotonic() - began)))
            if kind == "push":
                self.push(next_dag, dags[next_dag])
                next_dag += 1
            elif kind == "cancel" and self.pushed:
                self.cancel_one()
            elif kind == "kill":
                self.kill()
            elif kind == "crash":
                self.crash()
            self.supervise()

        def drained() -> bool:
            self.supervise()
            return self.live_jobs() == 0

        wait_until(
            drained,
            lambda: f"the DAGs to drain: {self.live_jobs()} jobs still live",
            DRAIN_TIMEOUT,
            interval=0.25,
        )
        for slot in self.slots:
            poll_until(slot.ready_or_gone, 30, interval=0.05)
            slot.signal(signal.SIGTERM)
        for slot in self.slots:
            assert slot.process is not None
            try:
                slot.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                slot.kill()

    def stop_all(self) -> None:
        for slot in self.slots:
            slot.kill()
        self.db.close()

    # -- the books --------------------------------------------------------------------------

    def check(self) -> None:
        db = self.db
        pushed = {
            job_id: (kind, list(parents))
            for job_id, kind, parents in db.rows("SELECT job_id, kind, parents FROM dag_pushed")
        }
        assert len(pushed) == len(set(self.pushed)), "a pushed job is not on record"
        ends: dict[int, list[tuple[str, str | None]]] = collections.defaultdict(list)
        for job_id in db.rows(
            "SELECT job_id FROM postkit_queue.completed_jobs WHERE namespace = %s", (NAMESPACE,)
        ):
            ends[job_id[0]].append(("completed", None))
        for job_id, reason in db.rows(
            "SELECT job_id, reason FROM postkit_queue.dead_letters WHERE namespace = %s",
            (NAMESPACE,),
        ):
            ends[job_id].append(("dead", reason))
        for job_id, reason in db.rows(
            "SELECT job_id, reason FROM postkit_queue.cancelled_jobs WHERE namespace = %s",
            (NAMESPACE,),
        ):
            ends[job_id].append(("cancelled", reason))
        effects = collections.Counter(
            job_id for (job_id,) in db.rows("SELECT job_id FROM dag_effects")
        )
        runs = [
            line.split()
            for slot in self.slots
            if slot.run_log.exists()
            for line in slot.run_log.read_text().splitlines()
        ]

        problems: list[str] = []
        assert self.live_jobs() == 0, "a job is stranded"
        edges = self.db.value(
            "SELECT count(*) FROM postkit_queue.job_dependencies WHERE namespace = %s",
            (NAMESPACE,),
        )
        assert edges == 0, f"{edges} edges outlived their waiting children"
        early = [run for run in runs if run[2] != "1"]
        if early:
            problems.append(f"{len(early)} runs began before every parent completed: {early[:5]}")
        end_of: dict[int, tuple[str, str | None]] = {}
        for job_id in sorted(pushed):  # parents have smaller ids than their children
            kind, parents = pushed[job_id]
            if len(ends[job_id]) != 1:
                problems.append(f"job {job_id} ended {len(ends[job_id])} ways: {ends[job_id]}")
                continue
            end_of[job_id] = state, reason = ends[job_id][0]
            ended = {p: end_of[p][0] for p in parents if p in end_of}
            failed = {p for p, parent in ended.items() if parent in ("dead", "cancelled")}
            cancel = self.cancels.get(job_id, False)
            expected: str
            if cancel is True:
                expected = "cancelled by the test"
                ok = (state, reason) == ("cancelled", "cancelled")
            elif failed:
                expected = f"cancelled, for its parents {sorted(failed)}"
                match = REASON.fullmatch(reason or "")
                ok = state == "cancelled" and (
                    (reason == "cancelled" and cancel is None)
                    or (
                        match is not None
                        and int(match[1]) in failed
                        and match[2]
                        == ("dead-lettered" if ended[int(match[1])] == "dead" else "cancelled")
                    )
                )
            elif cancel is None and (state, reason) == ("cancelled", "cancelled"):
                expected = "cancelled, maybe (the cancel's outcome is unknown)"
                ok = True
            else:
                expected = "dead" if kind == "permanent" else "completed"
                ok = state == expected
            if not ok:
                problems.append(f"job {job_id} ({kind}): {state} ({reason}), not {expected}")
            if effects[job_id] != (1 if state == "completed" else 0):
                problems.append(f"job {job_id} ended {state} with {effects[job_id]} effects")
            self.figures[f"ended {state}"] += 1
        self.figures["jobs"] = len(pushed)
        self.figures["handler runs"] = len(runs)
        self.figures["cancels that succeeded"] = sum(1 for c in self.cancels.values() if c)
        self.figures["cancels of unknown outcome"] = sum(
            1 for c in self.cancels.values() if c is None
        )
        print(f"\nDAG chaos figures (seed {SEED}): {dict(sorted(self.figures.items()))}")
        assert not self.unexpected_exits, self.unexpected_exits
        assert not problems, "\n".join(problems[:30])


@pytest.fixture
def dag_chaos(own_server: EmbeddedServer, tmp_path: Path) -> Iterator[DagChaos]:
    chaos = DagChaos(own_server, tmp_path)
    yield chaos
    chaos.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_random_dags_end_as_the_rules_say_under_kills_a_crash_and_cancels(
    dag_chaos: DagChaos,
) -> None:
    dag_chaos.run()
    dag_chaos.check()
