"""A shared worker serves several namespaces from one set of slots (postkit.worker.shared):
no more jobs run at once than its concurrency, the namespaces with jobs share the slots by
weight, one without jobs leaves its part to the others, and one whose jobs arrive late gets
its part back as the others' jobs end."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import Job, QueueClient
from postkit.worker import SharedWorker
from postkit.worker.namespace_shares import NamespaceShares
from tests.scrape import scrape, value
from tests.signals import wait_until
from tests.threads import QUIET, worker_threads


class Timeline:
    """The jobs' starts and ends, by namespace, and the most that ran at once."""

    def __init__(self, run_for: float) -> None:
        self.run_for = run_for
        self.starts: list[str] = []
        self.running: Counter[str] = Counter()
        self.most_at_once = 0
        self.most_of: Counter[str] = Counter()
        self._lock = threading.Lock()

    def handler(self, job: Job) -> None:
        with self._lock:
            self.starts.append(job.namespace)
            self.running[job.namespace] += 1
            self.most_at_once = max(self.most_at_once, self.running.total())
            self.most_of[job.namespace] = max(
                self.most_of[job.namespace], self.running[job.namespace]
            )
        time.sleep(self.run_for)  # each job holds its slot for a while: the point of the test
        with self._lock:
            self.running[job.namespace] -= 1


@pytest.fixture
def namespaces(namespace: str) -> tuple[str, str]:
    return f"{namespace}-a", f"{namespace}-b"


@pytest.fixture
def push(connect: Callable[..., psycopg.Connection[Any]]) -> Callable[[str, int], None]:
    def _push(namespace: str, count: int) -> None:
        client = QueueClient(connect(autocommit=True).cursor(), namespace=namespace)
        client.push_batch("work", [{"n": n} for n in range(count)])

    return _push


def shared(dsn: str, timeline: Timeline, namespaces: Any, concurrency: int) -> SharedWorker:
    return SharedWorker(
        dsn, {"work": timeline.handler}, namespaces=namespaces, concurrency=concurrency, **QUIET
    )


def test_namespaces_weighing_3_and_1_start_3_jobs_to_1_while_both_have_work(
    dsn: str, namespaces: tuple[str, str], push: Callable[[str, int], None]
) -> None:
    heavy, light = namespaces
    push(heavy, 600)
    push(light, 600)
    timeline = Timeline(run_for=0.02)

    with worker_threads() as run:
        run(shared(dsn, timeline, {heavy: 3, light: 1}, concurrency=4))
        wait_until(lambda: len(timeline.starts) >= 440, "440 jobs to start")

    # Past the first claims (one namespace may take every slot before the other asks), every
    # slot a heavy job leaves goes to a heavy job, and the same for light: 3 to 1 within 10%.
    settled = Counter(timeline.starts[40:440])
    assert 2.7 <= settled[heavy] / settled[light] <= 3.3, settled


def test_no_more_jobs_run_at_once_than_the_shared_concurrency(
    dsn: str, namespaces: tuple[str, str], push: Callable[[str, int], None]
) -> None:
    for namespace in namespaces:
        push(namespace, 200)
    timeline = Timeline(run_for=0.01)

    with worker_threads() as run:
        run(shared(dsn, timeline, list(namespaces), concurrency=3))
        wait_until(lambda: len(timeline.starts) >= 400, "every job to start")

    # Each namespace's worker alone may run 3: together they still run 3 at most.
    assert timeline.most_at_once == 3


def test_a_namespace_without_jobs_leaves_every_slot_to_the_others(
    dsn: str, namespaces: tuple[str, str], push: Callable[[str, int], None]
) -> None:
    busy, idle = namespaces
    push(busy, 60)
    timeline = Timeline(run_for=0.05)

    with worker_threads() as run:
        run(shared(dsn, timeline, {busy: 1, idle: 3}, concurrency=4))
        wait_until(lambda: len(timeline.starts) >= 60, "the busy namespace's jobs to start")

    # The idle namespace weighs 3 but has nothing to run: its part is the busy one's.
    assert timeline.most_of[busy] == 4


def test_a_namespace_whose_jobs_come_late_gets_its_part_as_the_others_jobs_end(
    dsn: str, namespaces: tuple[str, str], push: Callable[[str, int], None]
) -> None:
    early, late = namespaces
    push(early, 2000)
    timeline = Timeline(run_for=0.1)

    with worker_threads() as run:
        worker = run(shared(dsn, timeline, [early, late], concurrency=4))
        wait_until(lambda: timeline.running[early] == 4, "the early namespace to hold every slot")
        pushed_at = len(timeline.starts)
        push(late, 20)
        wait_until(lambda: timeline.running[late] == 2, "the late namespace to hold its part")
        assert worker.shares.owed() == {early: 2, late: 2}

    # A running job is never taken back: the late namespace waits for the early one's jobs to
    # end, and takes the slots they leave (the early one may start a few jobs while the late
    # one's notification is on its way), not the early one's backlog of 2,000.
    first_late = timeline.starts.index(late)
    assert first_late - pushed_at <= 8, timeline.starts[pushed_at - 2 : first_late + 4]
    assert timeline.starts[first_late : first_late + 2] == [late, late]


def test_one_endpoint_serves_every_namespaces_metrics_each_under_its_label(
    dsn: str, namespaces: tuple[str, str], push: Callable[[str, int], None]
) -> None:
    first, second = namespaces
    push(first, 3)
    push(second, 2)
    release = threading.Event()
    ran: list[str] = []

    def held(job: Job) -> None:
        ran.append(job.namespace)
        release.wait(timeout=15)  # every job holds its slot until the gauges are read

    with worker_threads() as run:
        worker = run(
            SharedWorker(
                dsn,
                {"work": held},
                namespaces=list(namespaces),
                concurrency=5,
                metrics_port=0,
                **QUIET,
            )
        )
        wait_until(lambda: len(ran) == 5 and worker.metrics_address, "every job to start")
        assert worker.metrics_address is not None
        endpoint = "http://{}:{}/metrics".format(*worker.metrics_address)
        samples = scrape(endpoint)
        running = {
            namespace: value(samples, "postkit_jobs_running", namespace=namespace, queue="work")
            for namespace in namespaces
        }
        release.set()
        wait_until(
            lambda: sum(each.stats.completed for each in worker.workers.values()) == 5,
            "every job to be acknowledged",
        )
        samples = scrape(endpoint)

    assert running == {first: 3, second: 2}
    for namespace, count in ((first, 3), (second, 2)):
        completed = {"namespace": namespace, "queue": "work", "outcome": "completed"}
        assert value(samples, "postkit_jobs_total", **completed) == count
        assert value(samples, "postkit_worker_concurrency", namespace=namespace) == 5


@pytest.mark.parametrize(
    ("namespaces", "error"),
    [
        ([], "at least one namespace"),
        ("tenant", r"got the str 'tenant' \(one namespace: \['tenant'\]\)"),
        (["a", "a"], "listed twice"),
        (["bad\x00name"], "namespace must not contain"),
        ({"a": 0}, "namespace 'a''s weight must be between 1 and 1000, got 0"),
        ({"a": 1001}, "namespace 'a''s weight must be between 1 and 1000, got 1001"),
        ({"a": True}, "namespace 'a''s weight must be an int, got bool"),
    ],
)
def test_a_bad_namespace_or_weight_is_refused_before_anything_starts(
    namespaces: Any, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        SharedWorker("postgresql://nowhere.invalid/db", {"work": print}, namespaces=namespaces)


def test_a_weight_out_of_bounds_is_a_flow_control_error() -> None:
    with pytest.raises(errors.InvalidFlowControlError):
        NamespaceShares(4, {"a": 1001})
