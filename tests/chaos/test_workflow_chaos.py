"""Chaos for workflows: 500 runs of a workflow with five transactional steps, a durable sleep, a
wait for an event and a map of ten jobs, run by real worker processes while the test kills
them, crashes PostgreSQL and sends events at random.

The runs are pushed over a window of about 20 s, while three worker processes
(``workflow_worker.py``) run them. Meanwhile the test SIGKILLs a worker now and then (it is
restarted), crashes PostgreSQL once (``pg_ctl stop -m immediate``) and restarts it, and sends
the event ``go`` to half of the runs. Then it lets the workers drain, and checks the books:

- none is stranded: no run or job is left live, nor any edge of the dependency graph;
- every run completed, with the sum of its map's results;
- each transactional step's effect is in the database exactly once: five rows per run;
- a run that received the event received what the test sent, and only a run it was sent to.

The events' outcomes are kept by the test, outside the database, so the crash cannot lose them.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from postkit.embedded import EmbeddedServer
from postkit.errors import WorkflowEventError
from postkit.queue import install
from postkit.tasks import App
from tests.chaos.harness import DB_DEADLINE, Database, WorkerSlot
from tests.signals import poll_until, wait_until

NAMESPACE = "workflow-chaos"
WORKER_SCRIPT = Path(__file__).with_name("workflow_worker.py")
SEED = int(os.environ.get("POSTKIT_CHAOS_SEED", "20261207"))
RUNS = 500
WORKERS = 3
PUSH_WINDOW = 20.0
KILLS = 4
DRAIN_TIMEOUT = 240.0

SCHEMA = """
CREATE TABLE wf_pushed (run_id bigint PRIMARY KEY, number integer NOT NULL UNIQUE);
CREATE TABLE wf_effects (run_id bigint NOT NULL, step integer NOT NULL);
"""


class WorkflowChaos:
    def __init__(self, server: EmbeddedServer, directory: Path) -> None:
        self.server = server
        self.dsn = server.dsn
        self.rng = random.Random(SEED)
        self.db = Database(self.dsn)
        self.app = App(namespace=NAMESPACE)
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
        self.pushed: dict[int, int] = {}
        """Each run, by its number."""
        self.events: dict[int, bool | None] = {}
        """Each run the test sent the event to: True once sent, False when refused (the run
        had finished), None when the server went away before it answered."""
        self.figures: collections.Counter[str] = collections.Counter()
        self.unexpected_exits: list[str] = []

    def install(self) -> None:
        with psycopg.connect(self.dsn) as connection:
            install(connection)
            connection.execute(SCHEMA)

    def push(self, number: int) -> None:
        """Push run ``number`` with its row in wf_pushed, in one transaction; when the
        commit's fate is unknown, wf_pushed says whether it happened."""
        deadline = time.monotonic() + DB_DEADLINE
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=5) as connection:
                    connection.execute(
                        "SELECT postkit_queue.push(%s, 'orders', %s::jsonb)",
                        (NAMESPACE, f'{{"args": [], "kwargs": {{"number": {number}}}}}'),
                    )
                    connection.execute(
                        "INSERT INTO wf_pushed (run_id, number)"
                        " SELECT currval(pg_get_serial_sequence('postkit_queue.jobs', 'id')), %s",
                        (number,),
                    )
                break
            except psycopg.OperationalError:
                if self.db.value("SELECT count(*) FROM wf_pushed WHERE number = %s", (number,)):
                    break
                self.figures["push retries"] += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.pushed[number] = int(
            self.db.value("SELECT run_id FROM wf_pushed WHERE number = %s", (number,))
        )

    def send_event(self) -> None:
        number = self.rng.choice(list(self.pushed)[-60:])
        run_id = self.pushed[number]
        if run_id in self.events:
            return
        try:
            with psycopg.connect(self.dsn, connect_timeout=5) as connection:
                self.events[run_id] = self.app.send_event(
                    connection.cursor(), run_id, "go", {"number": number}
                )
        except WorkflowEventError:
            self.events[run_id] = False  # finished already
        except psycopg.OperationalError:
            self.events[run_id] = None

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
        for slot in self.slots:
            assert slot.process is not None
            code = slot.process.poll()
            if code is not None:
                self.unexpected_exits.append(f"{slot.worker_id} exited with {code}")
                slot.start()

    def live_jobs(self) -> int:
        return int(
            self.db.value(
                "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (NAMESPACE,)
            )
        )

    def run(self) -> None:
        self.install()
        events: list[tuple[float, str]] = [
            (PUSH_WINDOW * (n + 0.5) / RUNS, "push") for n in range(RUNS)
        ]
        events += [(self.rng.uniform(0.05, 1.0) * PUSH_WINDOW, "event") for _ in range(RUNS // 2)]
        events += [(self.rng.uniform(0.2, 0.9) * PUSH_WINDOW, "kill") for _ in range(KILLS)]
        events.append((self.rng.uniform(0.3, 0.7) * PUSH_WINDOW, "crash"))
        events.sort()
        for slot in self.slots:
            slot.start()
        began = time.monotonic()
        number = 0
        for at, kind in events:
            time.sleep(max(0.0, at - (time.monotonic() - began)))
            if kind == "push":
                self.push(number)
                number += 1
            elif kind == "event" and self.pushed:
                self.send_event()
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
            lambda: f"the runs to drain: {self.live_jobs()} jobs still live",
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

    def check(self) -> None:
        db = self.db
        assert len(self.pushed) == RUNS
        edges = db.value(
            "SELECT count(*) FROM postkit_queue.job_dependencies WHERE namespace = %s",
            (NAMESPACE,),
        )
        assert edges == 0, f"{edges} edges outlived their waiting jobs"
        effects = collections.Counter(
            (run_id, step) for run_id, step in db.rows("SELECT run_id, step FROM wf_effects")
        )
        results = {
            run_id: (state, result)
            for run_id, state, result in db.rows(
                "SELECT r.job_id, r.state, r.result FROM wf_pushed p,"
                " LATERAL postkit_queue.job_result(%s, p.run_id) r",
                (NAMESPACE,),
            )
        }
        problems: list[str] = []
        for number, run_id in sorted(self.pushed.items()):
            state, result = results[run_id]
            if state != "completed":
                problems.append(f"run {run_id} ended {state}")
                continue
            expected_sum = sum((number * 10 + i) * 2 for i in range(10))
            if result["sum"] != expected_sum:
                problems.append(f"run {run_id} summed {result['sum']}, not {expected_sum}")
            sent = self.events.get(run_id)
            if result["event"] is not None and (
                sent is False or result["event"] != {"number": number}
            ):
                problems.append(f"run {run_id} received {result['event']}, sent: {sent}")
            self.figures["received the event"] += result["event"] is not None
            for step in range(5):
                if effects[(run_id, step)] != 1:
                    problems.append(
                        f"run {run_id}'s step {step} took effect {effects[(run_id, step)]} times"
                    )
        runs = [
            line.split()
            for slot in self.slots
            if slot.run_log.exists()
            for line in slot.run_log.read_text().splitlines()
        ]
        self.figures["runs"] = len(self.pushed)
        self.figures["workflow function calls"] = len(runs)
        self.figures["events sent"] = sum(1 for sent in self.events.values() if sent)
        print(f"\nWorkflow chaos figures (seed {SEED}): {dict(sorted(self.figures.items()))}")
        assert not self.unexpected_exits, self.unexpected_exits
        assert not problems, "\n".join(problems[:30])


@pytest.fixture
def workflow_chaos(own_server: EmbeddedServer, tmp_path: Path) -> Iterator[WorkflowChaos]:
    chaos = WorkflowChaos(own_server, tmp_path)
    yield chaos
    chaos.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_workflows_keep_their_books_under_kills_a_crash_and_events(
    workflow_chaos: WorkflowChaos,
) -> None:
    workflow_chaos.run()
    workflow_chaos.check()
