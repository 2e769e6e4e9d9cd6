"""A model-based test of the queue's state machine.

Hypothesis drives random sequences of push, pull (one or a batch), ack, nack, fail,
extend_visibility, release, the batched acks (ack_many, ack_batch, ack_and_pull), tick_timeouts,
configure_queue, settles of unknown jobs, invalid calls and time advances against the real SQL
module (through the SDK, on one autocommit connection, in a fresh namespace per example) and
against :class:`QueueModel`, a plain Python model of the same state machine. Every observable
result is compared: each call's return value, every job as ``get_job`` shows it after every step
(state, attempts, max_attempts, worker, claim token, priority, payload, run_at, visible_until,
error history) and the dead letters (reason, attempts, last worker, error, history).

The model covers fencing (current, stale and foreign claim tokens; worker_id matching with and
without a token; claims superseded by a newer claim of the same job), attempts and
max_attempts, delays, priorities and pull order, unique keys, the nack backoff (explicit, or
random in ``[base * 2^(n-1), 2 * base * 2^(n-1)]`` capped, whose drawn value is measured and
checked against its bounds), releases, visibility deadlines and their extension, and
dead-lettering (nack with no attempts left, fail, a timeout with no attempts left).

It covers two flow limits (flow.sql) as part of each queue's policy: a global ``concurrency``
(a pull claims no more than the room under it) and ``group_ordered`` over the jobs' group keys
(a job is claimed only while no older live job and no running job of its key exists), and
checks after every step that no queue runs more than its limit, nor an ordered key two jobs.

Time without sleeping
---------------------
The SQL clock is ``statement_timestamp() + postkit_queue.clock_offset``; the model's clock is
``now``, in seconds since the example started, and the session's offset is set to ``now``. So
the database reads ``now + e``, where ``e`` is the real time the example has taken so far: it
grows from statement to statement and stays far below :data:`MARGIN`. Every duration the test
chooses is a whole number of minutes (:data:`UNIT`), so two model times on that grid never
compare differently in the database, whatever ``e`` is; a tie on the grid is decided by which
statement set the value first (``seq``), as the growing ``e`` decides it in the database. The
only values off the grid are the random backoffs, measured right after the nack; the model
never lets its clock land within :data:`MARGIN` of one, and treats two pull candidates whose
run_at are within :data:`MARGIN` of each other (one of them off the grid) as a tie that either
order may settle.

Runs 200 examples of up to 30 steps (10-15 s); ``POSTKIT_MODEL_EXAMPLES`` and
``POSTKIT_MODEL_STEPS`` change that, e.g. ``POSTKIT_MODEL_EXAMPLES=5000`` for a long hunt.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from postkit import errors
from postkit.queue import Job, NackOutcome, QueueClient

UNIT = 60
"""Seconds: every delay, timeout, backoff, extension and clock advance is a multiple of this."""
MARGIN = 20.0
"""Seconds: the real time one example may take at most, and the closest the model's clock gets
to a measured (off-grid) random backoff."""
QUEUES = ("a", "b")
queues = st.sampled_from(("a", "a", "a", "b"))
WORKERS = ("w1", "w2", None)
HOW = (
    "job",  # the Job object: its claim token is the fence
    "token_and_worker",  # job id, claim_token and the claimant's worker_id
    "token_and_other_worker",  # the right token under another worker_id
    "worker",  # job id and worker_id, no token
    "nothing",  # job id alone: the token the client remembers from its pull, if any
    "foreign_token",  # the claimant's worker_id with a token nobody holds
)
# Mostly the ways a worker names its own claim, so that many calls take effect.
CREDENTIALS = st.sampled_from(("job", "job", "job", "token_and_worker", "worker", *HOW))
TIMEOUT_ERROR = "visibility timeout expired"

EXAMPLES = int(os.environ.get("POSTKIT_MODEL_EXAMPLES", "200"))
STEPS = int(os.environ.get("POSTKIT_MODEL_STEPS", "30"))

minutes = st.integers(min_value=1, max_value=5).map(lambda n: n * UNIT)
SETTLES = ("ack", "nack", "fail", "extend_visibility", "release")


@dataclasses.dataclass(frozen=True)
class Instant:
    """A time on the model's clock. ``exact``: on the minute grid, set by statement ``seq``;
    otherwise a measured random backoff."""

    at: float
    seq: int
    exact: bool = True


@dataclasses.dataclass
class Policy:
    max_attempts: int
    visibility_timeout: int
    backoff_base: int
    backoff_cap: int
    concurrency: int | None = None
    group_ordered: bool = False


policies = st.builds(
    Policy,
    max_attempts=st.sampled_from([1, 1, 2, 2, 3, 4]),
    visibility_timeout=minutes,
    backoff_base=minutes,
    backoff_cap=st.integers(1, 60).map(lambda n: n * UNIT),
    concurrency=st.sampled_from([None, None, 1, 2]),
    group_ordered=st.sampled_from([False, False, True]),
)
GROUP_KEYS = st.sampled_from([None, None, "g1", "g2"])


@dataclasses.dataclass
class ModelJob:
    id: int
    queue: str
    payload: Any
    priority: int
    max_attempts: int
    unique_key: str | None
    backoff_base: int | None
    backoff_cap: int | None
    run_at: Instant
    group_key: str | None = None
    state: str = "pending"  # pending, running, dead, done
    attempts: int = 0
    worker_id: str | None = None
    claim_token: str | None = None
    visible_until: Instant | None = None
    # One entry per failed attempt: (attempt, kind, worker_id, error); error None for timeouts.
    errors: list[tuple[int, str, str | None, str | None]] = dataclasses.field(default_factory=list)
    reason: str | None = None

    @property
    def live(self) -> bool:
        return self.state in ("pending", "running")


def pulled_before(a: ModelJob, b: ModelJob) -> bool | None:
    """True if a pull surely takes ``a`` before ``b``, False if surely after, None if either
    order is possible (a measured backoff within MARGIN of the other run_at)."""
    if a.priority != b.priority:
        return a.priority > b.priority
    ra, rb = a.run_at, b.run_at
    if ra.exact and rb.exact:
        # Same time on the grid: the statement that set it first set the earlier timestamp;
        # one statement (tick_timeouts) sets identical timestamps, and then the id decides.
        return (ra.at, ra.seq, a.id) < (rb.at, rb.seq, b.id)
    if abs(ra.at - rb.at) >= MARGIN:
        return ra.at < rb.at
    return None


def holds_claim(job: ModelJob, worker_id: str | None, claim_token: str | None) -> bool:
    """The fence, as the SQL module's holds_claim defines it."""
    if job.state != "running":
        return False
    if claim_token is not None:
        return job.claim_token == claim_token and (worker_id is None or job.worker_id == worker_id)
    return worker_id is not None and job.worker_id == worker_id


def other_worker(worker_id: str | None) -> str:
    return "w2" if worker_id == "w1" else "w1"


class QueueModel(RuleBasedStateMachine):
    """The SQL module and the model, step by step. ``connection`` is set by the test."""

    connection: psycopg.Connection[Any]

    def __init__(self) -> None:
        super().__init__()
        self.namespace = f"model-{uuid.uuid4().hex[:12]}"
        self.client = QueueClient(self.connection.cursor(), namespace=self.namespace)
        self.now = 0
        self.seq = 0
        self.started = time.monotonic()
        self.policies: dict[str, Policy] = {}
        # Queues whose limits changed since the invariant last saw their running jobs within
        # them: claims made before a change may exceed the new limits until they settle.
        self.reconfigured: set[str] = set()
        self.jobs: dict[int, ModelJob] = {}
        self.claims: list[Job] = []
        # The claim tokens the client remembers: of the jobs it pulled and has not settled.
        self.remembered: dict[int, str] = {}
        self.payloads = 0
        self._set_clock()
        # nack's jitter (random()) decides where a retried job's run_at lands, and so which
        # jobs a later step finds due and which claims the next draws choose from. Hypothesis
        # replays a prefix of draws and requires the same choices to follow; one seed per
        # example makes the jitter, and so the example, repeat exactly.
        self.connection.execute("SELECT setseed(0.5)")

    # ---------------------------------------------------------------------------------------
    # Helpers.
    # ---------------------------------------------------------------------------------------

    def _set_clock(self) -> None:
        self.connection.execute(
            "SELECT set_config('postkit_queue.clock_offset', %s, false)", (f"{self.now} seconds",)
        )

    def _tick_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _holds_own_claim(self, claim: Job) -> bool:
        job = self.jobs[claim.id]
        return job.state == "running" and job.claim_token == claim.claim_token

    def _draw_claim(self, data: st.DataObject) -> Job | None:
        """A claim to settle: mostly one still held; often one superseded by a newer claim of
        the same job (the stale worker a fence exists for); sometimes any claim ever taken.
        None before the first claim.

        The draws are the same whatever the model holds (a kind, then an index taken modulo
        the list's length): what the server returns may differ between two runs of one
        example (ties in a pull's order, the time a statement takes), and Hypothesis requires
        the same draws from the same choices, or it reports the strategy as flaky."""
        held = [claim for claim in self.claims if self._holds_own_claim(claim)]
        superseded = [
            claim
            for claim in self.claims
            if self.jobs[claim.id].state == "running" and not self._holds_own_claim(claim)
        ]
        kind = data.draw(st.sampled_from(["held", "held", "superseded", "any"]), label="claim")
        index = data.draw(st.integers(0, 1 << 16), label="which claim")
        if kind == "held" and held:
            return held[index % len(held)]
        if kind == "superseded" and superseded:
            return superseded[index % len(superseded)]
        return self.claims[index % len(self.claims)] if self.claims else None

    def _credentials(self, claim: Job, how: str) -> tuple[Job | int, str | None, str | None]:
        """(job argument, worker_id, claim_token) for one way of naming a claim."""
        if how == "job":
            return claim, None, None
        if how == "token_and_worker":
            return claim.id, claim.worker_id, claim.claim_token
        if how == "token_and_other_worker":
            return claim.id, other_worker(claim.worker_id), claim.claim_token
        if how == "worker":
            return claim.id, claim.worker_id, None
        if how == "nothing":
            return claim.id, None, None
        assert how == "foreign_token"
        return claim.id, claim.worker_id, str(uuid.uuid4())

    def _effective(
        self, claim: Job, how: str
    ) -> tuple[ModelJob, Job | int, str | None, str | None, bool | None]:
        """The model job, the call's arguments, and whether the model says the call holds
        (None: the call names no claim, and the client refuses it before sending it)."""
        job_ref, worker_id, token = self._credentials(claim, how)
        model = self.jobs[claim.id]
        if isinstance(job_ref, Job):
            fence_token = claim.claim_token
        else:
            fence_token = token if token is not None else self.remembered.get(claim.id)
        if fence_token is None and worker_id is None:
            return model, job_ref, worker_id, token, None
        return model, job_ref, worker_id, token, holds_claim(model, worker_id, fence_token)

    def _due(self, queue: str) -> list[ModelJob]:
        return [
            job
            for job in self.jobs.values()
            if job.state == "pending" and job.queue == queue and job.run_at.at <= self.now
        ]

    def _claimable(self, queue: str, limit: int) -> tuple[list[ModelJob], int]:
        """The due jobs a pull of ``queue`` may take under its flow limits, and the most it
        may take: ``limit``, or less when the concurrency limit leaves less room. Of an
        ordered queue, a job whose key has an older live job or a running one waits."""
        policy = self.policies[queue]
        mine = [job for job in self.jobs.values() if job.live and job.queue == queue]
        due = self._due(queue)
        if policy.group_ordered:
            due = [
                job
                for job in due
                if job.group_key is None
                or not any(
                    other.group_key == job.group_key
                    and (other.id < job.id or other.state == "running")
                    for other in mine
                )
            ]
        if policy.concurrency is not None:
            running = sum(job.state == "running" for job in mine)
            limit = min(limit, max(policy.concurrency - running, 0))
        return due, limit

    def _bury(self, job: ModelJob, reason: str) -> None:
        job.state = "dead"
        job.reason = reason
        job.claim_token = None
        job.visible_until = None

    def _to_pending(self, job: ModelJob, run_at: Instant) -> None:
        job.state = "pending"
        job.run_at = run_at
        job.worker_id = None
        job.claim_token = None
        job.visible_until = None

    def _measure_run_in(self, job_id: int) -> float:
        """Seconds from the database's now to the job's run_at."""
        row = self.connection.execute(
            "SELECT extract(epoch FROM j.run_at - postkit_queue.clock())::float8"
            " FROM postkit_queue.get_job(%s, %s) AS j",
            (self.namespace, job_id),
        ).fetchone()
        assert row is not None and row[0] is not None
        return float(row[0])

    def _clock_blocked(self, at: int) -> bool:
        """Would the model's clock at ``at`` be too close to a deadline to predict?"""
        for job in self.jobs.values():
            off_grid = job.state == "pending" and not job.run_at.exact
            if off_grid and abs(job.run_at.at - at) < MARGIN:
                return True
            if job.state == "running":
                assert job.visible_until is not None
                if job.visible_until.at == at:  # a tie tick_timeouts's '<' would see either way
                    return True
        return False

    # ---------------------------------------------------------------------------------------
    # Setup: the queues' policies, and a few jobs to work on.
    # ---------------------------------------------------------------------------------------

    @initialize(
        policies=st.tuples(*[policies for _ in QUEUES]),
        jobs=st.integers(0, 4),
        claimed=st.integers(0, 3),
        rescued=st.integers(0, 2),
    )
    def start(self, policies: tuple[Policy, ...], jobs: int, claimed: int, rescued: int) -> None:
        """Every example starts with some jobs, some of them claimed, and some claimed,
        released and claimed again (whose first claim is stale): Hypothesis's swarm testing
        switches whole rules off for some examples, and those still have work to settle."""
        # The flow limits come after the setup, which expects its pulls to claim.
        for queue, policy in zip(QUEUES, policies, strict=True):
            self._configure(queue, dataclasses.replace(policy, concurrency=None))
        for _ in range(jobs):
            self.push("a", 0, None, None, None, None, None)
        for _ in range(claimed):
            self.pull("a", "w1", None, 1)
        for _ in range(rescued):  # in queue b, where nothing else is pending
            self.push("b", 0, None, None, None, None, None)
            self.pull("b", "w1", None, 1)
            self.settle_claim(self.claims[-1], "release", "job", None, None, UNIT)
            self.pull("b", "w2", None, 1)
            assert self.claims[-1].id == self.claims[-2].id
        for queue, policy in zip(QUEUES, policies, strict=True):
            self._configure(queue, policy)

    def _configure(self, queue: str, policy: Policy) -> None:
        # Through SQL with named arguments: configure_queue has more settings than these six,
        # which are all the state machine reads. It keeps a setting not given: no concurrency
        # limit is a reset.
        row = self.connection.execute(
            "SELECT p.max_attempts, extract(epoch FROM p.visibility_timeout)::float8,"
            "       extract(epoch FROM p.backoff_base)::float8,"
            "       extract(epoch FROM p.backoff_cap)::float8, p.concurrency, p.group_ordered"
            " FROM postkit_queue.configure_queue("
            "     p_namespace => %s, p_queue => %s, p_max_attempts => %s,"
            "     p_visibility_timeout => %s * interval '1 second',"
            "     p_backoff_base => %s * interval '1 second',"
            "     p_backoff_cap => %s * interval '1 second',"
            "     p_concurrency => %s, p_group_ordered => %s, p_reset => %s) AS p",
            (
                self.namespace,
                queue,
                policy.max_attempts,
                policy.visibility_timeout,
                policy.backoff_base,
                policy.backoff_cap,
                policy.concurrency,
                policy.group_ordered,
                ["concurrency"] if policy.concurrency is None else [],
            ),
        ).fetchone()
        assert row == (
            policy.max_attempts,
            policy.visibility_timeout,
            policy.backoff_base,
            policy.backoff_cap,
            policy.concurrency,
            policy.group_ordered,
        ), f"configure_queue returned {row} for {policy}"
        self.policies[queue] = policy
        self.reconfigured.add(queue)

    # ---------------------------------------------------------------------------------------
    # The state machine. Few rules, each with many cases: Hypothesis's swarm testing turns
    # whole rules off for some examples, and a rule per call would leave few examples that
    # push, pull and settle together.
    # ---------------------------------------------------------------------------------------

    @rule(
        queue=queues,
        priority=st.sampled_from([0, 0, 1]),
        delay=st.sampled_from([None, None, 0, UNIT, 3 * UNIT]),
        max_attempts=st.sampled_from([None, None, 1, 1, 2, 3]),
        unique_key=st.sampled_from([None, None, None, "k"]),
        backoff_base=st.sampled_from([None, None, UNIT, 2 * UNIT]),
        backoff_cap=st.sampled_from([None, None, 2 * UNIT, 10 * UNIT]),
        group_key=GROUP_KEYS,
    )
    def push(
        self,
        queue: str,
        priority: int,
        delay: int | None,
        max_attempts: int | None,
        unique_key: str | None,
        backoff_base: int | None,
        backoff_cap: int | None,
        group_key: str | None = None,
    ) -> None:
        self.payloads += 1
        payload = {"n": self.payloads}
        job_id = self.client.push(
            queue,
            payload,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            unique_key=unique_key,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            group_key=group_key,
        )
        seq = self._tick_seq()
        duplicate = unique_key is not None and any(
            job.live and job.queue == queue and job.unique_key == unique_key
            for job in self.jobs.values()
        )
        if duplicate:
            assert job_id is None, "a push whose unique_key matches a live job must be a no-op"
            return
        assert job_id is not None, "a push without a live duplicate must create a job"
        assert job_id not in self.jobs and all(job_id > known for known in self.jobs)
        self.jobs[job_id] = ModelJob(
            id=job_id,
            queue=queue,
            payload=payload,
            priority=priority,
            max_attempts=max_attempts or self.policies[queue].max_attempts,
            unique_key=unique_key,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            run_at=Instant(self.now + (delay or 0), seq),
            group_key=group_key,
        )

    @rule(
        queue=queues,
        worker_id=st.sampled_from(WORKERS),
        visibility_timeout=st.sampled_from([None, UNIT, 2 * UNIT, 5 * UNIT]),
        limit=st.sampled_from([1, 1, 1, 2, 3]),
    )
    def pull(
        self, queue: str, worker_id: str | None, visibility_timeout: int | None, limit: int
    ) -> None:
        due, allowed = self._claimable(queue, limit)
        if limit == 1:
            job = self.client.pull(
                queue, worker_id=worker_id, visibility_timeout=visibility_timeout
            )
            claimed = [] if job is None else [job]
        else:
            claimed = self.client.pull_batch(
                queue, limit=limit, worker_id=worker_id, visibility_timeout=visibility_timeout
            )
        self._check_pull(claimed, due, queue, worker_id, visibility_timeout, allowed)

    def _check_pull(
        self,
        claimed: list[Job],
        due: list[ModelJob],
        queue: str,
        worker_id: str | None,
        visibility_timeout: int | None,
        limit: int,
    ) -> None:
        """Check what a pull returned against the jobs that were due, then claim them."""
        seq = self._tick_seq()
        ids = {job.id for job in claimed}
        assert len(ids) == len(claimed), "one pull returned a job twice"
        assert ids <= {job.id for job in due}, (
            f"pulled {sorted(ids)} but only {sorted(job.id for job in due)} are due"
        )
        assert len(claimed) == min(limit, len(due)), (
            f"pulled {len(claimed)} of {len(due)} claimable jobs, with room for {limit}"
        )
        for taken in (self.jobs[i] for i in ids):
            for left in due:
                if left.id not in ids:
                    assert pulled_before(left, taken) is not True, (
                        f"pulled job {taken.id} before job {left.id}, which comes first"
                    )

        timeout = visibility_timeout or self.policies[queue].visibility_timeout
        for job in claimed:
            model = self.jobs[job.id]
            model.state = "running"
            model.attempts += 1
            model.worker_id = worker_id
            model.claim_token = job.claim_token
            model.visible_until = Instant(self.now + timeout, seq)
            assert job.claim_token is not None
            assert all(job.claim_token != claim.claim_token for claim in self.claims)
            assert (job.state, job.attempts, job.worker_id, job.payload, job.queue) == (
                "running",
                model.attempts,
                worker_id,
                model.payload,
                queue,
            )
            assert (job.priority, job.max_attempts) == (model.priority, model.max_attempts)
            self.claims.append(job)
            self.remembered[job.id] = job.claim_token

    @rule(
        data=st.data(),
        action=st.sampled_from(
            ["ack", "nack", "nack", "fail", "extend_visibility", "extend_visibility", "release"]
        ),
        how=CREDENTIALS,
        backoff=st.sampled_from([None, None, 0, UNIT, 10 * UNIT]),
        error=st.sampled_from([None, "boom", "invalid address"]),
        extension=st.sampled_from([UNIT, UNIT, 2 * UNIT, 60 * UNIT]),
    )
    def settle(
        self,
        data: st.DataObject,
        action: str,
        how: str,
        backoff: int | None,
        error: str | None,
        extension: int,
    ) -> None:
        """ack, nack (with ``backoff`` and ``error``), fail (with ``error``),
        extend_visibility (by ``extension``) or release one claim, named in one of the ways
        of CREDENTIALS (``how``)."""
        claim = self._draw_claim(data)
        if claim is not None:
            self.settle_claim(claim, action, how, backoff, error, extension)

    def settle_claim(
        self,
        claim: Job,
        action: str,
        how: str,
        backoff: int | None,
        error: str | None,
        extension: int,
    ) -> None:
        model, job_ref, worker_id, token, holds = self._effective(claim, how)
        call = {
            "ack": lambda: self.client.ack(job_ref, worker_id=worker_id, claim_token=token),
            "nack": lambda: self.client.nack_outcome(
                job_ref, error=error, worker_id=worker_id, claim_token=token, backoff=backoff
            ),
            "fail": lambda: self.client.fail(
                job_ref, error=error, worker_id=worker_id, claim_token=token
            ),
            "extend_visibility": lambda: self.client.extend_visibility(
                job_ref, extension=extension, worker_id=worker_id, claim_token=token
            ),
            "release": lambda: self.client.release(job_ref, worker_id=worker_id, claim_token=token),
        }[action]
        if holds is None:
            with pytest.raises(errors.InvalidClaimTokenError):
                call()
            return
        if action != "extend_visibility":
            self.remembered.pop(claim.id, None)  # a settle sent is a claim the client forgets
        if action == "nack":
            self._nack(model, call(), holds, backoff, error)
            return
        result = call()
        seq = self._tick_seq()
        assert result is holds, f"{action} returned {result}, the model says {holds}"
        if not holds:
            return
        if action == "ack":
            model.state = "done"
        elif action == "fail":
            model.errors.append((model.attempts, "fail", model.worker_id, error))
            self._bury(model, "failed")
        elif action == "extend_visibility":
            assert model.visible_until is not None
            if self.now + extension >= model.visible_until.at:
                model.visible_until = Instant(self.now + extension, seq)
        else:
            model.attempts -= 1
            self._to_pending(model, Instant(self.now, seq))

    def _nack(
        self,
        model: ModelJob,
        outcome: object,
        holds: bool,
        backoff: int | None,
        error: str | None,
    ) -> None:
        seq = self._tick_seq()
        if not holds:
            assert outcome is NackOutcome.STALE
            return
        model.errors.append((model.attempts, "nack", model.worker_id, error))
        if model.attempts >= model.max_attempts:
            assert outcome is NackOutcome.DEAD_LETTERED
            self._bury(model, "attempts_exhausted")
            return
        assert outcome is NackOutcome.RETRIED
        if backoff is not None:
            self._to_pending(model, Instant(self.now + backoff, seq))
            return
        policy = self.policies[model.queue]
        base = model.backoff_base or policy.backoff_base
        cap = model.backoff_cap or policy.backoff_cap
        low = min(cap, base * 2 ** min(model.attempts - 1, 40))
        high = min(cap, 2 * base * 2 ** min(model.attempts - 1, 40))
        measured = self._measure_run_in(model.id)
        # The measurement is taken one statement after the nack: up to a second early.
        assert low - 1 <= measured <= high, (
            f"attempt {model.attempts}: the retry waits {measured:.3f}s, outside the backoff "
            f"range [{low}, {high}] (base {base}, cap {cap})"
        )
        if low == high:
            self._to_pending(model, Instant(self.now + low, seq))
        else:
            self._to_pending(model, Instant(self.now + measured, seq, exact=False))

    def _ack_many_in_model(self, claims: list[Job]) -> list[int]:
        """ack_many: each job acknowledged if still claimed under the token it carries."""
        acked = []
        for claim in claims:
            job = self.jobs[claim.id]
            if job.state == "running" and job.claim_token == claim.claim_token:
                job.state = "done"
                acked.append(job.id)
        return sorted(acked)

    @rule(
        data=st.data(),
        action=st.sampled_from(["ack_many", "ack_batch", "ack_and_pull"]),
        worker_id=st.sampled_from(WORKERS),
        queue=queues,
        limit=st.sampled_from([1, 2]),
    )
    def settle_in_batch(
        self, data: st.DataObject, action: str, worker_id: str | None, queue: str, limit: int
    ) -> None:
        """ack_many, ack_batch (all or nothing, with ``worker_id``) or ack_and_pull (a
        worker's round trip: ack_many, then pull ``limit`` jobs of ``queue`` as
        ``worker_id``) of a few claims."""
        count = data.draw(st.integers(0, 3), label="how many claims")
        drawn = [self._draw_claim(data) for _ in range(count)]
        claims = [claim for claim in drawn if claim is not None]
        if not self.claims:
            return
        if action != "ack_batch":
            for claim in claims:
                self.remembered.pop(claim.id, None)
        if action == "ack_many":
            acked = self.client.ack_many(claims)
            self._tick_seq()
            expected = self._ack_many_in_model(claims)
            assert sorted(acked) == expected, f"ack_many acked {sorted(acked)}, model {expected}"
        elif action == "ack_batch":
            all_held = all(
                holds_claim(self.jobs[claim.id], worker_id, claim.claim_token) for claim in claims
            )
            result = self.client.ack_batch(claims, worker_id=worker_id)
            self._tick_seq()
            assert result is all_held, f"ack_batch returned {result}, the model says {all_held}"
            if all_held:
                for claim in claims:
                    self.jobs[claim.id].state = "done"
                    self.remembered.pop(claim.id, None)
        else:
            acked, claimed = self.client.ack_and_pull(
                queue, claims, limit=limit, worker_id=worker_id, visibility_timeout=UNIT
            )
            expected = self._ack_many_in_model(claims)
            assert sorted(acked) == expected, (
                f"ack_and_pull acked {sorted(acked)}, model {expected}"
            )
            # The acks come first, in the same statement: their slots are free for the pull.
            due, allowed = self._claimable(queue, limit)
            self._check_pull(claimed, due, queue, worker_id, UNIT, allowed)

    @rule(limit=st.sampled_from([1, 2, 1000]))
    def tick_timeouts(self, limit: int) -> None:
        self._tick(limit)

    def _tick(self, limit: int) -> None:
        expired = [
            job
            for job in self.jobs.values()
            if job.state == "running"
            and job.visible_until is not None
            and job.visible_until.at < self.now
        ]
        rescued_count = self.client.tick_timeouts(limit=limit)
        seq = self._tick_seq()
        assert rescued_count == min(limit, len(expired))

        if rescued_count == len(expired):
            rescued = expired
        else:
            # Which of the expired claims went first is the database's choice among ties:
            # read it back, then check no claim with a surely earlier deadline was skipped.
            rescued = []
            for job in expired:
                found = self.client.get_job(job.id)
                if found is None or found.claim_token != job.claim_token:
                    rescued.append(job)

            def key(job: ModelJob) -> tuple[float, int]:
                assert job.visible_until is not None
                return (job.visible_until.at, job.visible_until.seq)

            assert len(rescued) == rescued_count
            for taken in rescued:
                for left in expired:
                    if left not in rescued:
                        assert not key(left) < key(taken), (
                            f"tick_timeouts rescued job {taken.id} before job {left.id}, "
                            "whose deadline was earlier"
                        )
        for job in rescued:
            job.errors.append((job.attempts, "timeout", job.worker_id, None))
            if job.attempts >= job.max_attempts:
                self._bury(job, "timed_out")
            else:
                self._to_pending(job, Instant(self.now, seq))

    @rule(step=st.sampled_from([1, 1, 2, 3, 5, 10, 60, 600]), then_tick=st.booleans())
    def advance_clock(self, step: int, then_tick: bool) -> None:
        """Time passes (and, as a worker's ticker would, tick_timeouts may run)."""
        target = self.now + step * UNIT
        while self._clock_blocked(target):
            target += UNIT
        self.now = target
        self._set_clock()
        if then_tick:
            self._tick(1000)

    @rule(
        data=st.data(),
        what=st.sampled_from(["reconfigure", "settle an unknown job", "invalid call"]),
    )
    def now_and_then(self, data: st.DataObject, what: str) -> None:
        """The rarer calls: a queue's policy changes, a settle of a job nobody pushed, or an
        invalid call (which raises its ValidationError and changes nothing)."""
        if what == "reconfigure":
            self._configure(
                data.draw(st.sampled_from(QUEUES), label="queue"),
                data.draw(policies, label="policy"),
            )
        elif what == "settle an unknown job":
            action = data.draw(st.sampled_from(SETTLES), label="action")
            worker_id = data.draw(st.sampled_from(WORKERS), label="worker_id")
            job_id = max(self.jobs, default=0) + 1_000_000
            calls: dict[str, Callable[[], object]] = {
                "ack": lambda: self.client.ack(job_id, worker_id=worker_id),
                "nack": lambda: self.client.nack_outcome(job_id, worker_id=worker_id),
                "fail": lambda: self.client.fail(job_id, worker_id=worker_id),
                "extend_visibility": lambda: self.client.extend_visibility(
                    job_id, extension=UNIT, worker_id=worker_id
                ),
                "release": lambda: self.client.release(job_id, worker_id=worker_id),
            }
            if worker_id is None:  # a bare id of a job the client never pulled names no claim
                with pytest.raises(errors.InvalidClaimTokenError):
                    calls[action]()
                return
            result = calls[action]()
            assert result in (False, NackOutcome.STALE), f"{action} of an unknown job: {result!r}"
        else:
            expected, call = data.draw(st.sampled_from(self._invalid_calls()), label="call")
            with pytest.raises(expected):
                call()

    def _invalid_calls(self) -> list[tuple[type[errors.ValidationError], Callable[[], object]]]:
        some_claim: Job | int = self.claims[-1] if self.claims else 1
        client = self.client
        return [
            (errors.InvalidMaxAttemptsError, lambda: client.push("a", {}, max_attempts=0)),
            (errors.InvalidMaxAttemptsError, lambda: client.push("a", {}, max_attempts=1001)),
            (errors.InvalidDurationError, lambda: client.push("a", {}, delay=-UNIT)),
            (errors.InvalidNameError, lambda: client.push(" \t", {})),
            (errors.InvalidDurationError, lambda: client.pull("a", visibility_timeout=0)),
            (errors.InvalidLimitError, lambda: client.pull_batch("a", limit=0)),
            (
                errors.InvalidDurationError,
                lambda: client.extend_visibility(some_claim, extension=0, worker_id="w1"),
            ),
            (
                errors.InvalidDurationError,
                lambda: client.nack(some_claim, backoff=-1, worker_id="w1"),
            ),
            (errors.InvalidLimitError, lambda: client.tick_timeouts(limit=0)),
        ]

    # ---------------------------------------------------------------------------------------
    # What the database shows must be what the model says.
    # ---------------------------------------------------------------------------------------

    @invariant()
    def no_queue_runs_more_than_its_flow_limits_allow(self) -> None:
        rows = self.connection.execute(
            "SELECT queue, group_key FROM postkit_queue.jobs"
            " WHERE namespace = %s AND state = 'running'",
            (self.namespace,),
        ).fetchall()
        for queue, policy in self.policies.items():
            keys = [key for name, key in rows if name == queue]
            grouped = [key for key in keys if key is not None]
            within = (policy.concurrency is None or len(keys) <= policy.concurrency) and (
                not policy.group_ordered or len(grouped) == len(set(grouped))
            )
            if queue in self.reconfigured:
                if within:
                    self.reconfigured.discard(queue)
                continue
            assert within, f"{queue} runs {keys} under {policy}"

    @invariant()
    def the_example_stays_within_the_timing_margin(self) -> None:
        elapsed = time.monotonic() - self.started
        assert elapsed < MARGIN, (
            f"this example has taken {elapsed:.1f}s of real time; the model's timing argument "
            f"needs less than {MARGIN}s (an overloaded machine?)"
        )

    @invariant()
    def every_job_is_as_the_model_says(self) -> None:
        if not self.jobs:
            return
        rows = self.connection.execute(
            "SELECT i.id, j.state, j.attempts, j.max_attempts, j.worker_id,"
            "       j.claim_token::text, j.priority, j.queue, j.payload, j.unique_key,"
            "       extract(epoch FROM j.run_at - postkit_queue.clock())::float8,"
            "       extract(epoch FROM j.visible_until - postkit_queue.clock())::float8,"
            "       j.errors"
            " FROM unnest(%s::bigint[]) AS i(id)"
            " JOIN LATERAL postkit_queue.get_job(%s, i.id) AS j ON true",
            (list(self.jobs), self.namespace),
        ).fetchall()
        found = {row[0]: row[1:] for row in rows}
        for job in self.jobs.values():
            if job.state == "done":
                assert job.id not in found, f"job {job.id} was acked but get_job still shows it"
                continue
            assert job.id in found, f"job {job.id} ({job.state} in the model) is gone"
            (
                state,
                attempts,
                max_attempts,
                worker_id,
                token,
                priority,
                queue,
                payload,
                unique_key,
                run_in,
                visible_in,
                history,
            ) = found[job.id]
            expected = (
                job.state,
                job.attempts,
                job.max_attempts,
                job.worker_id,
                job.claim_token,
                job.priority,
                job.queue,
                job.payload,
                job.unique_key,
            )
            actual = (
                state,
                attempts,
                max_attempts,
                worker_id,
                token,
                priority,
                queue,
                payload,
                unique_key,
            )
            assert actual == expected, f"job {job.id}: database {actual}, model {expected}"
            if job.state == "dead":
                assert run_in is None and visible_in is None
            else:
                assert run_in is not None
                assert abs(run_in - (job.run_at.at - self.now)) < MARGIN, (
                    f"job {job.id}: run_at is {run_in:.1f}s from now, the model says "
                    f"{job.run_at.at - self.now:.1f}s"
                )
            if job.state == "running":
                assert job.visible_until is not None and visible_in is not None
                assert abs(visible_in - (job.visible_until.at - self.now)) < MARGIN, (
                    f"job {job.id}: visible_until is {visible_in:.1f}s from now, the model "
                    f"says {job.visible_until.at - self.now:.1f}s"
                )
            elif job.state == "pending":
                assert visible_in is None
            self._check_history(job, history)
        count = self.connection.execute(
            "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (self.namespace,)
        ).fetchone()
        assert count is not None
        assert count[0] == sum(job.live for job in self.jobs.values()), "unexpected live jobs"

    def _check_history(self, job: ModelJob, history: list[dict[str, Any]]) -> None:
        actual = [
            (entry["attempt"], entry["kind"], entry["worker_id"], entry["error"])
            for entry in history
        ]
        assert len(actual) == len(job.errors), f"job {job.id}: errors {actual}, model {job.errors}"
        for got, want in zip(actual, job.errors, strict=True):
            assert got[:3] == want[:3], f"job {job.id}: error entry {got}, model {want}"
            if want[1] == "timeout":
                assert str(got[3]).startswith(TIMEOUT_ERROR), got
            else:
                assert got[3] == want[3], f"job {job.id}: error entry {got}, model {want}"

    @invariant()
    def the_dead_letters_are_as_the_model_says(self) -> None:
        letters = {letter.job_id: letter for letter in self.client.dead_letters(limit=1000)}
        dead = {job.id: job for job in self.jobs.values() if job.state == "dead"}
        assert sorted(letters) == sorted(dead), "the dead letters are not the jobs the model buried"
        for job_id, letter in letters.items():
            job = dead[job_id]
            assert (
                letter.reason,
                letter.attempts,
                letter.max_attempts,
                letter.worker_id,
                letter.queue,
                letter.payload,
                letter.priority,
            ) == (
                job.reason,
                job.attempts,
                job.max_attempts,
                job.worker_id,
                job.queue,
                job.payload,
                job.priority,
            ), f"dead letter {job_id}"
            last = job.errors[-1]
            if last[1] == "timeout":
                assert str(letter.error).startswith(TIMEOUT_ERROR)
            else:
                assert letter.error == last[3]
            assert [entry["kind"] for entry in letter.errors] == [e[1] for e in job.errors]


# Passing takes seconds; a failure takes longer, while Hypothesis shrinks it to a short example.
@pytest.mark.timeout(900)
def test_the_queue_behaves_like_its_model(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        machine = type("QueueModelOnServer", (QueueModel,), {"connection": connection})
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )


def test_ack_many_fences_each_listed_claim_on_its_own(
    connect: Callable[..., psycopg.Connection[Any]], namespace: str
) -> None:
    """A job listed twice, under a stale claim and then under its current claim, is acked: each
    listed claim is checked on its own (as ack_batch does, and as the model expects)."""
    client = QueueClient(connect(autocommit=True).cursor(), namespace=namespace)
    client.push("a", {})
    stale = client.pull("a", worker_id="w1")
    assert stale is not None and client.release(stale)
    current = client.pull("a", worker_id="w2")
    assert current is not None and current.id == stale.id
    assert client.ack_many([current, stale]) == [current.id]  # current first: acked
    client.push("a", {})
    stale = client.pull("a", worker_id="w1")
    assert stale is not None and client.release(stale)
    current = client.pull("a", worker_id="w2")
    assert current is not None
    assert client.ack_many([stale, current]) == [current.id]  # stale first: acked all the same
