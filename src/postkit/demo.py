"""``postkit demo``: the article's story, end to end, on a real PostgreSQL.

1. Server A registers users; each registration saves the user and queues its OTP in one
   transaction. One registration fails halfway and leaves neither a user nor a job.
2. Three worker processes (server-b, server-c, server-d) send the OTPs through a flaky fake
   provider: temporary errors are nacked and retried with backoff, a phone number that is not
   on WhatsApp is failed into the dead-letter queue, and one cursed OTP keeps failing until its
   attempts are spent.
3. One worker sends an OTP and then hangs before it can ack. It is killed with SIGKILL;
   tick_timeouts rescues the job, another worker completes it, and the dead worker's late ack
   is refused.
4. A summary: done, retried, dead-lettered (with their errors), rescued.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as stdlib_queue
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.synchronize import Event
from typing import Any

import psycopg

from postkit.queue import QueueClient, install

NAMESPACE = "postkit-demo"
QUEUE = "send_otp"
WORKERS = ("server-b", "server-c", "server-d")
VISIBILITY_TIMEOUT = 2.0
MAX_ATTEMPTS = 4

# The app's own tables. otp_codes is written in the ack's transaction (exactly once per user);
# provider_sends is the provider's log, outside our transactions (at least once per user).
_APP_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS postkit_demo;
CREATE TABLE IF NOT EXISTS postkit_demo.users (
    id bigint PRIMARY KEY, email text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS postkit_demo.otp_codes (
    user_id bigint PRIMARY KEY, code text NOT NULL, worker_id text NOT NULL);
CREATE TABLE IF NOT EXISTS postkit_demo.provider_sends (
    user_id bigint NOT NULL, worker_id text NOT NULL, at timestamptz NOT NULL DEFAULT now());
TRUNCATE postkit_demo.users, postkit_demo.otp_codes, postkit_demo.provider_sends;
DELETE FROM postkit_queue.jobs WHERE namespace = 'postkit-demo';
DELETE FROM postkit_queue.dead_letters WHERE namespace = 'postkit-demo';
"""


class TemporaryError(Exception):
    """The provider failed this time; trying again later may work."""


class PermanentError(Exception):
    """The provider will never accept this request."""


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


class FlakyProvider:
    """A fake OTP provider: somebody else's computer, slow, unavailable or saying no."""

    def __init__(self, cast: Cast, sends: psycopg.Connection) -> None:
        self._cast = cast
        self._sends = sends  # autocommit: the provider's log survives our rollbacks and crashes

    def send(self, user_id: int, attempt: int, worker_id: str) -> None:
        if user_id == self._cast.not_on_whatsapp:
            raise PermanentError(f"+1555010{user_id:04d} is not registered on WhatsApp")
        if user_id == self._cast.cursed or (user_id in self._cast.flaky and attempt == 1):
            raise TemporaryError("Meta is down: 503 Service Unavailable")
        self._sends.execute(
            "INSERT INTO postkit_demo.provider_sends (user_id, worker_id) VALUES (%s, %s)",
            (user_id, worker_id),
        )


def run_worker(dsn: str, worker_id: str, cast: Cast, events: Any, stop: Event) -> None:
    """The article's worker loop, in a process of its own: pull, try, then ack, nack or fail."""
    with psycopg.connect(dsn) as conn, psycopg.connect(dsn, autocommit=True) as sends:
        queue = QueueClient(conn.cursor(), namespace=NAMESPACE)
        provider = FlakyProvider(cast, sends)
        while not stop.is_set():
            job = queue.pull(QUEUE, worker_id=worker_id, visibility_timeout=VISIBILITY_TIMEOUT)
            conn.commit()  # the claim sticks
            if job is None:
                stop.wait(0.05)
                continue
            user_id = int(job["payload"]["user_id"])
            try:
                provider.send(user_id, job["attempts"], worker_id)
            except TemporaryError as error:
                outcome = queue.nack_outcome(job, error=error, worker_id=worker_id)
                conn.commit()
                events.put((worker_id, "nack", job["id"], user_id, job["attempts"], outcome.value))
                continue
            except PermanentError as error:
                queue.fail(job, error=error, worker_id=worker_id)
                conn.commit()
                events.put((worker_id, "fail", job["id"], user_id, job["attempts"], str(error)))
                continue
            if user_id == cast.hangs_after_send and job["attempts"] == 1:
                events.put(
                    (worker_id, "hang", job["id"], user_id, job["attempts"], job["claim_token"])
                )
                time.sleep(3600)  # wedged: only SIGKILL ends this
            # The OTP code is stored in the ack's transaction: both commit or neither does.
            conn.execute(
                "INSERT INTO postkit_demo.otp_codes (user_id, code, worker_id) VALUES (%s, %s, %s)",
                (user_id, f"{(user_id * 7919) % 1000000:06d}", worker_id),
            )
            acked = queue.ack(job, worker_id=worker_id)
            conn.commit()
            events.put((worker_id, "ack", job["id"], user_id, job["attempts"], acked))


@dataclass
class Summary:
    users_registered: int = 0
    registrations_rolled_back: int = 0
    done: int = 0
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
    """Tell the article's story against ``dsn`` and return what happened.

    Uses the namespace ``postkit-demo`` and the schema ``postkit_demo``, and clears both first.
    """
    if users < 8:
        raise ValueError("the demo needs at least 8 users to cast its roles")
    started = time.monotonic()
    cast = Cast.for_users(users)
    summary = Summary()

    def step(text: str) -> None:
        say(f"[{time.monotonic() - started:5.2f}s] {text}")

    with psycopg.connect(dsn) as conn:
        install(conn)
        conn.execute(_APP_SCHEMA)
        conn.commit()
        queue = QueueClient(conn.cursor(), namespace=NAMESPACE)
        queue.configure_queue(QUEUE, max_attempts=MAX_ATTEMPTS, backoff_base=0.2, backoff_cap=2)
        conn.commit()

        say("1. Server A registers users: the user and the OTP job commit together, or not at all")
        for user_id in range(1, users + 1):
            email = f"user{user_id}@example.com"
            conn.execute(
                "INSERT INTO postkit_demo.users (id, email) VALUES (%s, %s)", (user_id, email)
            )
            pushed = queue.push(QUEUE, {"user_id": str(user_id)})
            if user_id == cast.rolled_back:
                conn.rollback()  # server A loses power after the push, before the commit
                summary.registrations_rolled_back += 1
                step(f"server-a  {email}: crashed before commit -> no user, no job")
                continue
            conn.commit()
            summary.users_registered += 1
            step(f"server-a  {email}: registered, job {pushed} queued")

        say("2. Three workers send the OTPs through a flaky provider")
        context = multiprocessing.get_context("spawn")
        events = context.Queue()
        stop = context.Event()
        workers = {
            name: context.Process(
                target=run_worker, args=(dsn, name, cast, events, stop), name=name, daemon=True
            )
            for name in WORKERS
        }
        for process in workers.values():
            process.start()
        hung_claim: tuple[str, int, str] | None = None
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    worker, kind, job_id, user_id, attempt, detail = events.get(timeout=0.25)
                except stdlib_queue.Empty:
                    worker = ""
                if worker:
                    hung_claim = _narrate(
                        step, summary, worker, kind, job_id, user_id, attempt, detail, hung_claim
                    )
                    if kind == "hang":
                        say("3. A worker dies after sending the OTP, before its ack")
                        os.kill(workers[worker].pid or 0, signal.SIGKILL)
                        summary.killed_worker = worker
                        step(f"{worker}  killed with SIGKILL while holding job {job_id}")
                # The scheduled process of the article: tick_timeouts every so often.
                rescued = queue.tick_timeouts()
                conn.commit()
                if rescued:
                    summary.rescued += rescued
                    step(f"ticker    tick_timeouts rescued {rescued} expired claim(s)")
                remaining = conn.execute(
                    "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (NAMESPACE,)
                ).fetchone()
                conn.commit()
                if remaining is not None and remaining[0] == 0:
                    break
        finally:
            stop.set()
            for process in workers.values():
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()

        if hung_claim is not None:
            worker, job_id, token = hung_claim
            # The dead worker "reconnects" and tries to ack with the claim it held.
            summary.stale_ack_refused = not queue.ack(job_id, worker_id=worker, claim_token=token)
            conn.commit()
            step(
                f"{worker}  comes back and acks job {job_id}: refused "
                f"(ack returned {not summary.stale_ack_refused}); the job is no longer its own"
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


def _narrate(
    step: Callable[[str], None],
    summary: Summary,
    worker: str,
    kind: str,
    job_id: int,
    user_id: int,
    attempt: int,
    detail: Any,
    hung_claim: tuple[str, int, str] | None,
) -> tuple[str, int, str] | None:
    where = f"job {job_id} (user {user_id}, attempt {attempt})"
    if kind == "ack":
        summary.done += 1
        step(f"{worker}  sent OTP, acked {where}")
    elif kind == "nack":
        summary.retried += detail == "retried"
        then = "retry with backoff" if detail == "retried" else "attempts spent: dead-lettered"
        step(f"{worker}  provider down, nacked {where} -> {then}")
    elif kind == "fail":
        step(f"{worker}  permanent error, failed {where} -> dead-letter queue: {detail}")
    elif kind == "hang":
        step(f"{worker}  sent OTP for {where}, then hung before its ack")
        return (worker, job_id, str(detail))
    return hung_claim


def render_summary(summary: Summary) -> str:
    """The summary as a table for people."""
    rows = [
        (
            "users registered",
            f"{summary.users_registered}"
            f" ({summary.registrations_rolled_back} registration rolled back: no user, no job)",
        ),
        ("done (acked)", str(summary.done)),
        ("retried (nacked)", str(summary.retried)),
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
                f"{dead['error']}"
            )
    return "\n".join(lines)
