"""The worker's prefetch: fixed when given, else about 0.1 s of the jobs it settles, from its
concurrency to 500 (postkit.worker.prefetch). The rule on a clock the test sets, then a real
worker holding few slow jobs and many quick ones."""

from __future__ import annotations

import threading

import pytest

from postkit.queue import Job, QueueClient
from postkit.worker import Handlers
from postkit.worker.prefetch import MOST, SAMPLE, Prefetch
from tests.signals import wait_until
from tests.worker.conftest import StartWorker

Q = "work"


# ---------------------------------------------------------------------------------------------
# The rule.
# ---------------------------------------------------------------------------------------------


def test_the_adaptive_prefetch_starts_at_the_concurrency() -> None:
    prefetch = Prefetch(8)
    assert (prefetch.adaptive, prefetch.jobs, prefetch.capacity) == (True, 8, 16)


def test_quick_jobs_raise_the_prefetch_to_a_tenth_of_a_second_of_them() -> None:
    prefetch = Prefetch(8, now=100.0)
    prefetch.observe(300, now=100.2)  # 1,500 jobs a second
    assert prefetch.jobs == 150


def test_the_prefetch_never_exceeds_its_ceiling() -> None:
    prefetch = Prefetch(8, now=100.0)
    prefetch.observe(100_000, now=101.0)
    assert prefetch.jobs == MOST


def test_slow_jobs_keep_the_prefetch_at_the_concurrency() -> None:
    prefetch = Prefetch(8, now=100.0)
    prefetch.observe(8, now=102.0)  # 4 jobs a second
    assert prefetch.jobs == 8


def test_a_quiet_spell_brings_the_prefetch_back_to_the_concurrency() -> None:
    prefetch = Prefetch(8, now=100.0)
    prefetch.observe(1_000, now=100.5)
    assert prefetch.jobs == 200
    prefetch.observe(1_000, now=105.5)  # an idle wake-up: nothing settled for 5 s
    assert prefetch.jobs == 8


def test_a_sample_shorter_than_its_span_changes_nothing() -> None:
    prefetch = Prefetch(8, now=100.0)
    prefetch.observe(40, now=100.0 + SAMPLE / 2)
    assert prefetch.jobs == 8
    prefetch.observe(40, now=100.0 + SAMPLE)  # the same sample, now complete
    assert prefetch.jobs == round(40 * 0.1 / SAMPLE)


def test_a_fixed_prefetch_never_moves() -> None:
    prefetch = Prefetch(8, 0, now=100.0)
    prefetch.observe(100_000, now=101.0)
    assert (prefetch.adaptive, prefetch.jobs, prefetch.capacity) == (False, 0, 8)


def test_a_negative_prefetch_is_refused() -> None:
    with pytest.raises(ValueError, match="prefetch must be zero or positive"):
        Prefetch(8, -1)


# ---------------------------------------------------------------------------------------------
# A real worker.
# ---------------------------------------------------------------------------------------------


def running(client: QueueClient) -> int:
    client.cursor.execute(
        "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s AND state = 'running'",
        (client.namespace,),
    )
    count: int = client.cursor.fetchone()[0]
    return count


def test_a_worker_of_slow_jobs_holds_its_concurrency_and_as_many_again(
    start_worker: StartWorker, client: QueueClient
) -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def slow(job: Job) -> None:
        started.release()
        release.wait(30)

    client.push_batch(Q, [{} for _ in range(40)])
    worker = start_worker(Handlers({Q: slow}), concurrency=2)
    try:
        for _ in range(2):
            assert started.acquire(timeout=15), "two handlers to start"
        wait_until(lambda: running(client) == 4, "two jobs running and two held", 15)
        assert worker._claims.held()[0] == 4  # and no more were claimed
    finally:
        release.set()
    wait_until(lambda: worker.stats.completed == 40, "the jobs to be acked", 30)


def test_a_worker_of_quick_jobs_claims_far_beyond_its_concurrency(
    start_worker: StartWorker, client: QueueClient
) -> None:
    client.push_batch(Q, [{} for _ in range(6_000)])
    held: list[int] = []
    worker = start_worker(Handlers({Q: lambda job: None}), concurrency=1)
    while worker.stats.completed < 6_000:
        held.append(running(client))
        assert len(held) < 20_000, f"the jobs to be acked ({worker.stats.completed} of 6,000)"
    # A fixed prefetch of the concurrency would hold 2 at most.
    assert max(held) > 20, f"at most {max(held)} held claimed at once"
