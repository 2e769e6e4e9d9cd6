"""The story ``postkit demo`` tells, on a real PostgreSQL: one-time passwords sent at sign-up.

1. Server A registers users; each registration saves the user and queues its OTP in one
   transaction. One registration fails halfway and leaves neither a user nor a job.
2. Three worker processes (server-b, server-c, server-d) run the worker runtime and send the
   OTPs through a flaky fake provider: temporary errors are retried with backoff, a phone number
   that is not on WhatsApp goes to the dead-letter queue, and one cursed OTP keeps failing until
   its attempts are spent. Each OTP code is stored in the ack's transaction.
3. One worker sends an OTP and then hangs before it can ack. It is killed with SIGKILL; its
   heartbeats stop, a tick_timeouts call rescues the job, another worker completes it, and the
   dead worker's late ack is refused.
4. A summary: completed, retried, dead-lettered (with their errors), rescued.

The story is told from the workers' own structured log events, forwarded to this process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import psycopg

from postkit import errors
from postkit.queue import Job, QueueClient, install
from postkit.worker import Handlers, Worker

NAMESPACE = "postkit-demo"
QUEUE = "send_otp"
WORKERS = ("server-b", "server-c", "server-d")
VISIBILITY_TIMEOUT = 2.0
MAX_ATTEMPTS = 4

# The app's own tables. otp_codes is written in the ack's transaction (exactly once per user);
# provider_sends is the provider's log, outside our transactions (at least once per user).
# Each run starts clean: whatever an earlier run (or an operator trying the CLI on the demo's
# namespace: a paused queue, a schedule) left behind is removed first.
_APP_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS postkit_demo;
CREATE TABLE IF NOT EXISTS postkit_demo.users (
    id bigint PRIMARY KEY, email text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS postkit_demo.otp_codes (
    user_id bigint PRIMARY KEY, code text NOT NULL, worker_id text NOT NULL);
CREATE TABLE IF NOT EXISTS postkit_demo.provider_sends (
    user_id bigint NOT NULL, worker_id text NOT NULL, at timestamptz NOT NULL DEFAULT now());
TRUNCATE postkit_demo.users, postkit_demo.otp_codes, postkit_demo.provider_sends;
"""


def _start_clean(queue: QueueClient) -> None:
    """Remove what an earlier run (or an operator trying the CLI on the demo's namespace) left
    in the queue: waiting jobs, dead letters, a pause, schedules. The settings are set anew by
    the caller."""
    queue.resume_queue(QUEUE)
    queue.purge_queue(QUEUE)
    queue.purge_dead_letters(older_than=0)
    for schedule in queue.schedules():
        queue.delete_schedule(schedule.name)


class TemporaryError(Exception):
    """The provider failed this time; trying again later may work."""


class NotOnWhatsApp(errors.PermanentError):
    """The provider will never accept this request: the worker runtime fails the job."""


@dataclass(frozen=True)
class Cast:
    """Which users the flaky provider treats specially, chosen from the number of users."""

    flaky: tuple[int, ...]  # fail once with a temporary error, then succeed
    not_on_whatsapp: int  # fails permanently
    cursed: int  # fails temporarily every time
    hangs_after_send: int  # the provider sends, then the worker hangs before it can ack
    rolled_back: int  # its registration fails after the push, so neither row survives

    @classmethod
    def for_users(cls, users: int) -> Cast:
        return cls(
            flaky=(2, 6),
            not_on_whatsapp=4,
            cursed=users - 1,
            hangs_after_send=users // 2 + 1,
            rolled_back=3,
        )


@dataclass(frozen=True)
class Event:
    """One thing that happened in a worker process, sent to the narrator."""

    worker: str
    kind: str  # a worker log event (claimed, ack, retried, ...) or "hang"
    job_id: int | None = None
    attempt: int | None = None
    detail: str = ""
    count: int | None = None


class EventPipe:
    """A worker's end of its own pipe to the narrator. One pipe per worker: a worker killed in
    the middle of a send can only break its own pipe, never the others' (a shared
    multiprocessing.Queue would stay locked forever)."""

    def __init__(self, worker: str, connection: Connection) -> None:
        self.worker = worker
        self._connection = connection
        self._lock = threading.Lock()  # handler threads and the runtime's threads share it

    def send(self, event: Event) -> None:
        with self._lock:
            self._connection.send(event)


class _ForwardEvents(logging.Handler):
    """Sends the worker runtime's structured log records to the demo's narrator."""

    def __init__(self, pipe: EventPipe) -> None:
        super().__init__(logging.INFO)
        self._pipe = pipe

    def emit(self, record: logging.LogRecord) -> None:
        kind = getattr(record, "event", None)
        if kind is not None:
            self._pipe.send(
                Event(
                    self._pipe.worker,
                    kind,
                    getattr(record, "job_id", None),
                    getattr(record, "attempt", None),
                    record.getMessage(),
                    getattr(record, "count", None),
                )
            )


def otp_handlers(cast: Cast, worker_id: str, dsn: str, events: EventPipe) -> Handlers:
    """The send_otp handler of one worker, talking to the flaky provider."""
    handlers = Handlers()
    provider_log = psycopg.connect(dsn, autocommit=True)  # the provider is not transactional

    @handlers.register(QUEUE, transactional=True)
    def send_otp(job: Job, cursor: Any) -> None:
        user_id = int(job.payload["user_id"])
        if user_id == cast.not_on_whatsapp:
            raise NotOnWhatsApp(f"+1555010{user_id:04d} is not registered on WhatsApp")
        if user_id == cast.cursed or (user_id in cast.flaky and job.attempts == 1):
            raise TemporaryError("Meta is down: 503 Service Unavailable")
        provider_log.execute(
            "INSERT INTO postkit_demo.provider_sends (user_id, worker_id) VALUES (%s, %s)",
            (user_id, worker_id),
        )
        if user_id == cast.hangs_after_send and job.attempts == 1:
            events.send(Event(worker_id, "hang", job.id, job.attempts, str(job.claim_token)))
            time.sleep(3600)  # wedged: only SIGKILL ends this
        # Written in the ack's transaction: the code is stored once, however often the OTP is sent.
        cursor.execute(
            "INSERT INTO postkit_demo.otp_codes (user_id, code, worker_id) VALUES (%s, %s, %s)",
            (user_id, f"{(user_id * 7919) % 1000000:06d}", worker_id),
        )

    return handlers


def run_worker(dsn: str, worker_id: str, cast: Cast, connection: Connection) -> None:
    """One worker process: the Postkit runtime with the send_otp handler. SIGTERM stops it."""
    events = EventPipe(worker_id, connection)
    logging.getLogger("postkit.worker").addHandler(_ForwardEvents(events))
    logging.getLogger("postkit.worker").setLevel(logging.INFO)
    Worker(
        dsn,
        otp_handlers(cast, worker_id, dsn, events),
        namespace=NAMESPACE,
        worker_id=worker_id,
        concurrency=1,
        prefetch=0,  # the killed worker holds exactly the job it hung on
        visibility_timeout=VISIBILITY_TIMEOUT,
        poll_interval=1.0,
        tick_interval=0.5,
        grace_period=2.0,
    ).run()


@dataclass
class Summary:
    users_registered: int = 0
    registrations_rolled_back: int = 0
    completed: int = 0
    retried: int = 0
    dead_lettered: list[dict[str, Any]] = field(default_factory=list)
    rescued: int = 0
    killed_worker: str | None = None
    stale_ack_refused: bool | None = None
    otp_codes_stored: int = 0
    provider_sends: int = 0
    users_messaged_twice: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def run_demo(dsn: str, *, users: int = 12, say: Callable[[str], None] = print) -> Summary:
    """Tell the story against ``dsn`` and return what happened.

    Uses the namespace ``postkit-demo`` and the schema ``postkit_demo``, and clears both first.
    """
    if users < 8:
        raise ValueError("the demo needs at least 8 users to cast its roles")
    started = time.monotonic()
    cast = Cast.for_users(users)
    summary = Summary()
    users_of_jobs: dict[int, int] = {}

    def step(text: str) -> None:
        say(f"[{time.monotonic() - started:5.2f}s] {text}")

    with psycopg.connect(dsn) as conn:
        install(conn)
        conn.execute(_APP_SCHEMA)
        conn.commit()
        queue = QueueClient(conn.cursor(), namespace=NAMESPACE)
        _start_clean(queue)
        queue.configure_queue(QUEUE, max_attempts=MAX_ATTEMPTS, backoff_base=0.2, backoff_cap=2)
        conn.commit()

        say("1. Server A registers users: the user and the OTP job commit together, or not at all")
        for user_id in range(1, users + 1):
            email = f"user{user_id}@example.com"
            conn.execute(
                "INSERT INTO postkit_demo.users (id, email) VALUES (%s, %s)", (user_id, email)
            )
            pushed = queue.push(QUEUE, {"user_id": str(user_id)})
            if pushed is not None:
                users_of_jobs[pushed] = user_id
            if user_id == cast.rolled_back:
                conn.rollback()  # server A loses power after the push, before the commit
                summary.registrations_rolled_back += 1
                step(f"server-a  {email}: crashed before commit -> no user, no job")
                continue
            conn.commit()
            summary.users_registered += 1
            step(f"server-a  {email}: registered, job {pushed} pushed")

        say("2. Three workers run the Postkit runtime and send OTPs through a flaky provider")
        context = multiprocessing.get_context("spawn")
        workers: dict[str, BaseProcess] = {}
        pipes: list[Connection] = []
        for name in WORKERS:
            reader, writer = context.Pipe(duplex=False)
            workers[name] = context.Process(
                target=run_worker, args=(dsn, name, cast, writer), name=name, daemon=True
            )
            workers[name].start()
            writer.close()
            pipes.append(reader)
        hung: Event | None = None
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for event in _receive(pipes, timeout=0.25):
                    _narrate(step, summary, event, users_of_jobs)
                    if event.kind == "hang":
                        hung = event
                        say("3. A worker dies after sending the OTP, before its ack")
                        os.kill(workers[event.worker].pid or 0, signal.SIGKILL)
                        summary.killed_worker = event.worker
                        step(
                            f"{event.worker}  killed with SIGKILL holding job {event.job_id};"
                            " its heartbeats stop"
                        )
                remaining = sum(s.pending + s.scheduled + s.running for s in queue.stats(QUEUE))
                conn.commit()
                if remaining == 0:
                    break
            say("4. All jobs are settled: the workers shut down gracefully (SIGTERM)")
        finally:
            for process in workers.values():
                if process.is_alive():
                    os.kill(process.pid or 0, signal.SIGTERM)
            for process in workers.values():
                process.join(timeout=10)
                if process.is_alive():
                    process.kill()
        for event in _receive(pipes, timeout=0):
            _narrate(step, summary, event, users_of_jobs)

        if hung is not None and hung.job_id is not None:
            # The dead worker "reconnects" and tries to ack with the claim it held.
            acked = queue.ack(hung.job_id, worker_id=hung.worker, claim_token=hung.detail)
            conn.commit()
            summary.stale_ack_refused = not acked
            step(
                f"{hung.worker}  comes back and acks job {hung.job_id}: ack returned {acked};"
                " the job is no longer its own"
            )

        summary.dead_lettered = [
            {
                "job_id": d.job_id,
                "user_id": int(d.payload["user_id"]),
                "reason": d.reason,
                "attempts": d.attempts,
                "error": d.error,
            }
            for d in queue.dead_letters(QUEUE)
        ]
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM postkit_demo.otp_codes),"
            "       (SELECT count(*) FROM postkit_demo.provider_sends)"
        ).fetchone()
        twice = conn.execute(
            "SELECT user_id FROM postkit_demo.provider_sends GROUP BY user_id"
            " HAVING count(*) > 1 ORDER BY user_id"
        ).fetchall()
        conn.commit()
        assert counts is not None
        summary.otp_codes_stored, summary.provider_sends = counts
        summary.users_messaged_twice = [row[0] for row in twice]
    summary.seconds = round(time.monotonic() - started, 2)
    return summary


def _receive(pipes: list[Connection], *, timeout: float) -> list[Event]:
    """Every event waiting in the pipes (waiting up to ``timeout`` for the first). A pipe whose
    worker died is dropped."""
    received: list[Event] = []
    for ready in wait(list(pipes), timeout=timeout):
        assert isinstance(ready, Connection)
        try:
            while ready.poll():
                received.append(ready.recv())
        except (EOFError, OSError):
            pipes.remove(ready)
    return received


def _narrate(
    step: Callable[[str], None], summary: Summary, event: Event, users_of_jobs: dict[int, int]
) -> None:
    """Tell one worker event, in the runtime's own words, and count it."""
    user = f" [user {users_of_jobs[event.job_id]}]" if event.job_id in users_of_jobs else ""
    if event.kind == "completed":
        summary.completed += 1
    elif event.kind == "retried":
        summary.retried += 1
    elif event.kind == "rescued":
        summary.rescued += event.count or 0
    elif event.kind == "hang":
        step(f"{event.worker}  sent the OTP of job {event.job_id}{user}, then hung before its ack")
        return
    elif event.kind not in ("dead_lettered", "stale", "claim_lost"):
        return
    step(f"{event.worker}  {event.detail.splitlines()[0]}{user}")


def render_summary(summary: Summary) -> str:
    """The summary as a table for people."""
    rows = [
        (
            "users registered",
            f"{summary.users_registered}"
            f" ({summary.registrations_rolled_back} registration rolled back: no user, no job)",
        ),
        ("completed", str(summary.completed)),
        ("retried", str(summary.retried)),
        ("dead-lettered", str(len(summary.dead_lettered))),
        (
            "rescued by tick_timeouts",
            str(summary.rescued)
            + (
                f" ({summary.killed_worker} was killed holding a job)"
                if summary.killed_worker
                else ""
            ),
        ),
        ("stale ack refused", "yes" if summary.stale_ack_refused else "no"),
        (
            "OTP codes stored",
            f"{summary.otp_codes_stored} (written in the ack's transaction: exactly once per user)",
        ),
        (
            "provider sends",
            f"{summary.provider_sends} (at least once: users "
            f"{summary.users_messaged_twice or 'none'} got the OTP twice)",
        ),
        ("time", f"{summary.seconds:.1f}s"),
    ]
    width = max(len(label) for label, _ in rows)
    lines = ["", "Summary"] + [f"  {label:<{width}}  {value}" for label, value in rows]
    if summary.dead_lettered:
        lines.append("")
        lines.append("Dead letters (kept with their payload and errors, to investigate):")
        for dead in summary.dead_lettered:
            lines.append(
                f"  job {dead['job_id']:<5} user {dead['user_id']:<3} "
                f"{dead['reason']:<19} after {dead['attempts']} attempt(s): "
                f"{(dead['error'] or '').splitlines()[0]}"
            )
    return "\n".join(lines)
