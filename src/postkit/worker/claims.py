"""The jobs a worker holds claimed, each a small state machine, owned here.

Every claimed job is in one :class:`ClaimState`, and each move between states is one method of
:class:`Claims`, under its lock; the fetcher, the executor, the heartbeat and the shutdown ask
and tell it, and never read or write its bookkeeping themselves::

    claim ─> WAITING ─start─> RUNNING ─handler ended─> SETTLING ─settled─> (gone)
              │  │                │                       ▲   └─succeeded─> the batched ack
              │  └─cannot run (its payload)───────────────┘
              │                   ├─past its timeout─> TIMED_OUT ─nacked─> LATE ─ended─> (gone)
              │                   └─its claim lost (cancelled)─> LOST ─ended─> (gone)
              ├─its claim lost (cancelled)─> (gone)
              └─released at shutdown─> (gone)

A job holds one of the worker's slots from its claim until it is settled, or nacked as timed
out; its claim is extended (heartbeats) while it is WAITING or RUNNING. A job that succeeded
leaves its slot at once and waits, with its result, for the next batched ack. A claim the
heartbeat finds lost (an operator cancelled the running job, or it was rescued and settled
elsewhere) gives its slot back at once; its handler, if it runs, is LOST: whatever it returns
is dropped, and ``postkit.worker.is_cancelled()`` tells it to stop.
"""

from __future__ import annotations

import concurrent.futures
import enum
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from postkit.queue import Job
from postkit.queue.protocol import CheckedResult


def claim_seconds(job: Job) -> float:
    """How long ``job``'s claim lasts: the visibility timeout it was claimed with.

    Raises:
        ValueError: ``job`` is not a claimed job (pull always returns its claim's times).
    """
    if job.visible_until is None or job.claimed_at is None:
        raise ValueError(f"job {job.id} carries no claim")
    return (job.visible_until - job.claimed_at).total_seconds()


class ClaimState(enum.Enum):
    """Where a claimed job stands in the worker. See the module docstring."""

    WAITING = "waiting"
    """Claimed, its handler not started yet (prefetched, or waiting for a slot)."""
    RUNNING = "running"
    """Its handler runs; its timeout counts."""
    SETTLING = "settling"
    """Its handler ended (or it cannot run): its ack, nack or fail is under way, and its claim
    may end at any moment, so no heartbeat extends it."""
    TIMED_OUT = "timed_out"
    """Its handler ran past its timeout: it is being nacked as timed out, its slot still
    held."""
    LATE = "late"
    """Nacked as timed out, its slot given back, its handler still running: whatever the
    handler returns is dropped."""
    LOST = "lost"
    """Its claim is no longer the worker's (cancelled, or rescued and settled elsewhere), its
    slot given back, its handler still running: whatever the handler returns is dropped."""


HEARTBEATS = (ClaimState.WAITING, ClaimState.RUNNING)
"""The states whose claims the heartbeat extends."""
HOLDING = (ClaimState.WAITING, ClaimState.RUNNING, ClaimState.SETTLING, ClaimState.TIMED_OUT)
"""The states that hold one of the worker's slots."""
DROPPED = (ClaimState.TIMED_OUT, ClaimState.LATE, ClaimState.LOST)
"""The states whose handler's outcome is dropped."""


@dataclass
class Claim:
    """One claimed job and where it stands."""

    job: Job
    state: ClaimState
    next_beat: float
    """When its next heartbeat is due (monotonic)."""
    started: float | None = None
    """When its handler started (monotonic)."""
    deadline: float = math.inf
    """When its handler times out (monotonic)."""
    task: concurrent.futures.Future[None] | None = None
    """An async handler's task, cancelled when it times out."""
    handler_ended: bool = False
    """A timed-out handler has returned or raised (its outcome dropped)."""


class Claims:
    """The claimed jobs and where each one stands. See the module docstring. Thread-safe."""

    def __init__(self, on_handler_end: Callable[[str, float], None]) -> None:
        """
        Args:
            on_handler_end: told the queue of each job whose handler returned or raised in
                time, and when the handler started (the metrics' run time).
        """
        self._on_handler_end = on_handler_end
        self._lock = threading.Condition()
        # By job id and claim token: a job nacked as timed out may be claimed again by this
        # worker while its late handler still runs, and each claim keeps its own state.
        self._claims: dict[tuple[int, str | None], Claim] = {}
        self._finished: list[tuple[Job, float]] = []
        self._results: dict[int, CheckedResult] = {}
        self._slot_freed = False
        self._settled_total = 0
        self._holding = 0  # the claims in a HOLDING state, kept as they move
        self._heartbeat_wake = threading.Event()

    # ---------------------------------------------------------------------------------------
    # The moves of one job.
    # ---------------------------------------------------------------------------------------

    def add(self, job: Job) -> None:
        """``job`` was just claimed: WAITING, holding a slot, its first heartbeat due a third
        of the way through its claim."""
        with self._lock:
            self._claims[_key(job)] = Claim(
                job, ClaimState.WAITING, time.monotonic() + claim_seconds(job) / 3
            )
            self._holding += 1
        self._heartbeat_wake.set()

    def track_task(self, job: Job, task: concurrent.futures.Future[None]) -> None:
        """``job``'s async handler runs as ``task``: cancelled if it times out."""
        with self._lock:
            claim = self._claims.get(_key(job))
            if claim is not None:
                claim.task = task

    def start(self, job: Job, timeout: float | None) -> float | None:
        """WAITING to RUNNING: the handler of ``job`` starts now, and its ``timeout`` (seconds,
        None: none) runs. None when the job was released meanwhile (a stop)."""
        with self._lock:
            claim = self._claims.get(_key(job))
            if claim is None:
                return None
            now = time.monotonic()
            if claim.state is ClaimState.WAITING:
                claim.state = ClaimState.RUNNING
            claim.started = now
            claim.deadline = now + timeout if timeout is not None else math.inf
        self._heartbeat_wake.set()  # it also watches the handlers' timeouts
        return now

    def claim_outcome(self, job: Job) -> bool:
        """The handler of ``job`` returned or raised: to SETTLING, and True; or False when it
        had run past its timeout, whose outcome (the nack) stands and whose late one is
        dropped (:meth:`drop_late_outcome`)."""
        with self._lock:
            claim = self._claims.get(_key(job))
            if claim is None:
                return True  # released: a settle finds the claim stale
            if claim.state in DROPPED:
                return False
            started = claim.started if claim.state is ClaimState.RUNNING else None
            claim.state = ClaimState.SETTLING
        if started is not None:
            self._on_handler_end(job.queue, started)
        return True

    def begin_settle(self, job: Job) -> None:
        """From now on the job's claim may end at any moment: SETTLING, no more heartbeats.
        A job nacked as timed out stays TIMED_OUT."""
        with self._lock:
            claim = self._claims.get(_key(job))
            if claim is not None and claim.state in (ClaimState.WAITING, ClaimState.RUNNING):
                claim.state = ClaimState.SETTLING

    def complete(self, job: Job, started: float, result: CheckedResult | None = None) -> None:
        """The handler succeeded: the job leaves its slot and waits, with its ``result``
        (None: none), for the next batched ack."""
        with self._lock:
            self._forget(job)
            self._finished.append((job, started))
            if result is not None:
                self._results[job.id] = result
            self._lock.notify_all()

    def finish(self, job: Job) -> None:
        """The job was settled, or given up on, by its own thread: its slot is free, and the
        fetcher wakes to fill it. A job nacked as timed out whose handler still runs is LATE."""
        with self._lock:
            claim = self._claims.get(_key(job))
            if (
                claim is not None
                and claim.state is ClaimState.TIMED_OUT
                and not claim.handler_ended
            ):
                claim.state = ClaimState.LATE
                self._left_slot()
            else:
                self._forget(job)
            self._slot_freed = True
            self._lock.notify_all()

    def drop_late_outcome(self, job: Job) -> ClaimState | None:
        """The handler of a job nacked as timed out, or whose claim was lost, has ended: forget
        it (once it is nacked). Returns the state it was in."""
        with self._lock:
            claim = self._claims.get(_key(job))
            if claim is None:
                return None
            state = claim.state
            if state in (ClaimState.LATE, ClaimState.LOST):
                del self._claims[_key(job)]
            else:
                claim.handler_ended = True
            return state

    def ran_late(self, job: Job) -> bool:
        """Whether ``job``'s handler ran past its timeout or lost its claim (its outcome is
        dropped)."""
        with self._lock:
            claim = self._claims.get(_key(job))
            return claim is not None and claim.state in DROPPED

    def lose(self, job: Job) -> tuple[ClaimState | None, concurrent.futures.Future[None] | None]:
        """The heartbeat found ``job``'s claim lost: a WAITING job is forgotten, a RUNNING one
        is LOST; either gives its slot back, and the fetcher wakes to fill it. Returns the
        state it was in (None: gone already) and, for a RUNNING async handler, its task, for
        the executor to cancel after its grace."""
        with self._lock:
            claim = self._claims.get(_key(job))
            if claim is None or claim.state not in HEARTBEATS:
                return (None if claim is None else claim.state), None
            state = claim.state
            if state is ClaimState.WAITING:
                self._forget(job)
            else:
                claim.state = ClaimState.LOST
                self._left_slot()
            self._slot_freed = True
            self._lock.notify_all()
            return state, claim.task

    def check_soon(self, job_id: int) -> None:
        """A notification says job ``job_id`` was cancelled: if the worker holds it, its next
        heartbeat is due now, and that heartbeat's extend finds out whether the claim is still
        the worker's (a notification is only a hint, and may be forged)."""
        with self._lock:
            found = False
            for (claimed_id, _), claim in self._claims.items():
                if claimed_id == job_id and claim.state in HEARTBEATS:
                    claim.next_beat = -math.inf
                    found = True
        if found:
            self._heartbeat_wake.set()

    def is_lost(self, job: Job) -> bool:
        """Whether the worker found ``job``'s claim lost while its handler runs."""
        with self._lock:
            claim = self._claims.get(_key(job))
            return claim is not None and claim.state is ClaimState.LOST

    def _forget(self, job: Job) -> None:
        claim = self._claims.pop(_key(job), None)
        if claim is not None and claim.state in HOLDING:
            self._left_slot()

    def _left_slot(self) -> None:
        self._holding -= 1
        self._settled_total += 1

    # ---------------------------------------------------------------------------------------
    # The heartbeat's questions.
    # ---------------------------------------------------------------------------------------

    def due_beats(self, now: float, longest_wait: float) -> tuple[list[Job], float]:
        """The jobs whose heartbeat is due at ``now``, and how long to wait when none is: until
        the next heartbeat or handler timeout, at most ``longest_wait`` seconds."""
        with self._lock:
            beating = [claim for claim in self._claims.values() if claim.state in HEARTBEATS]
            due = [claim.job for claim in beating if claim.next_beat <= now]
            soonest = min(
                (
                    *(claim.next_beat for claim in beating),
                    *(claim.deadline for claim in beating if claim.state is ClaimState.RUNNING),
                ),
                default=math.inf,
            )
        return due, max(min(soonest - now, longest_wait), 0.0)

    def extended(self, jobs: list[Job], lost: set[int], at: float) -> list[Job]:
        """The claims of ``jobs`` were extended at ``at``, but those of ``lost`` (ids): their
        next heartbeat is a third of the way through the new claim. Returns the lost jobs it
        still heartbeats (the others were settled meanwhile), to report."""
        reported = []
        with self._lock:
            for job in jobs:
                claim = self._claims.get(_key(job))
                if claim is None or claim.state not in HEARTBEATS:
                    continue
                if job.id in lost:
                    claim.next_beat = math.inf
                    reported.append(job)
                else:
                    claim.next_beat = at + claim_seconds(job) / 3
        return reported

    def expire_overdue(self, now: float) -> list[tuple[Job, float]]:
        """Each RUNNING job whose handler is past its timeout goes TIMED_OUT (its async task is
        cancelled); returns them, with when their handler started, to be nacked."""
        overdue = []
        with self._lock:
            for claim in self._claims.values():
                if claim.state is ClaimState.RUNNING and claim.deadline <= now:
                    claim.state = ClaimState.TIMED_OUT
                    assert claim.started is not None
                    overdue.append((claim.job, claim.started))
                    if claim.task is not None:
                        claim.task.cancel()
        return overdue

    def wait_for_heartbeat(self, timeout: float) -> None:
        """Sleep until ``timeout`` passes, a claim is added or a handler starts (its timeout
        may come first), or :meth:`wake_heartbeat`."""
        self._heartbeat_wake.wait(timeout)
        self._heartbeat_wake.clear()

    def wake_heartbeat(self) -> None:
        self._heartbeat_wake.set()

    # ---------------------------------------------------------------------------------------
    # The fetcher's questions: slots, the batched acks, and its waits.
    # ---------------------------------------------------------------------------------------

    def held(self) -> tuple[int, int]:
        """How many jobs hold a slot now, and how many have left theirs since the start (the
        settle rate the adaptive prefetch follows)."""
        with self._lock:
            return self._holding, self._settled_total

    def take_finished(self) -> list[tuple[Job, float]]:
        """The jobs waiting for a batched ack, handed over to send it."""
        with self._lock:
            acks, self._finished = self._finished, []
            self._slot_freed = False
            return acks

    def return_finished(self, acks: list[tuple[Job, float]]) -> None:
        """The batched ack of ``acks`` failed (nothing was acknowledged): send them next time."""
        with self._lock:
            self._finished[:0] = acks

    def results_of(self, acks: list[tuple[Job, float]]) -> list[CheckedResult | None] | None:
        """The results to send with the batched ack of ``acks``, one per job; None when none
        of them has one."""
        with self._lock:
            if not self._results:
                return None
            found = [self._results.get(job.id) for job, _ in acks]
        return found if any(result is not None for result in found) else None

    def forget_results(self, acks: list[tuple[Job, float]]) -> None:
        """The batched ack of ``acks`` went through (each job acked, or its claim stale)."""
        with self._lock:
            if self._results:
                for job, _ in acks:
                    self._results.pop(job.id, None)

    def wait(self, woken: Callable[[], bool], timeout: float | None) -> None:
        """Sleep until acks wait to be sent, a slot was freed, ``woken()`` says so (checked
        under the lock, at each :meth:`wake`), or ``timeout`` seconds pass (None: no limit)."""
        with self._lock:
            self._lock.wait_for(
                lambda: bool(self._finished) or self._slot_freed or woken(), timeout=timeout
            )

    def wake(self) -> None:
        """Make :meth:`wait` and :meth:`wait_to_drain` look again."""
        with self._lock:
            self._lock.notify_all()

    def wait_to_drain(self, timeout: float | None) -> tuple[list[tuple[Job, float]], bool]:
        """Sleep until a job waits for its batched ack or none holds a slot, or ``timeout``
        passes; take the acks. Returns them, and whether no job holds a slot any more."""
        with self._lock:
            self._lock.wait_for(lambda: not self._holding or bool(self._finished), timeout=timeout)
            acks, self._finished = self._finished, []
            return acks, not self._holding

    def counts_by_queue(self) -> tuple[Counter[str], Counter[str]]:
        """Per queue, the jobs whose handler runs (RUNNING), and those holding a slot."""
        with self._lock:
            running = Counter(
                claim.job.queue
                for claim in self._claims.values()
                if claim.state is ClaimState.RUNNING
            )
            holding = Counter(
                claim.job.queue for claim in self._claims.values() if claim.state in HOLDING
            )
        return running, holding

    # ---------------------------------------------------------------------------------------
    # The shutdown's.
    # ---------------------------------------------------------------------------------------

    def release_waiting(self) -> tuple[list[Job], list[Job]]:
        """At the end of the grace period: every WAITING job is forgotten (a handler thread
        that takes it skips it), to be released; returns them, and the jobs whose handler
        still runs, whose claims stay."""
        with self._lock:
            waiting = [c.job for c in self._claims.values() if c.state is ClaimState.WAITING]
            for job in waiting:
                del self._claims[_key(job)]
            self._holding -= len(waiting)
            running = [c.job for c in self._claims.values() if c.state in HOLDING]
            return waiting, running


def _key(job: Job) -> tuple[int, str | None]:
    return job.id, job.claim_token


__all__ = ["Claim", "ClaimState", "Claims", "claim_seconds"]
