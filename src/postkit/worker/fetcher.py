"""Fetching work: settle-and-claim round trips, woken by notifications.

Jobs that succeed are acknowledged in batches: each round trip acknowledges every job that
finished since the last one (with the values their handlers returned, which the SQL module keeps
for queues that keep results) and claims as many new jobs as there are free slots, in one
statement and one transaction. With several queues, each claim gives every queue, from a
changing start, up to its share of the free slots (its part of the queues' weights: equal
unless given) before the queues that filled theirs get the rest: a queue with a deep backlog
cannot crowd out another's jobs (``postkit.worker.shares``). When the queues run
dry the fetcher waits: for a notification
(a listener thread on a connection of its own, see ``postkit.queue.listen``) or for a slot to
free. The listener's every wait begins with a look for due jobs, at least every poll_interval:
that is the fallback poll for a missed notification, on the listener's connection, so that an
idle worker uses no pooled connection and its pool closes them. Between its waits the listener
also runs the claim path's maintenance (the registry's heartbeat, rescues, schedules) on that
connection. In pooler mode there is no listener: the claim loop polls, and the maintenance runs
on a connection of its own.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg_pool

from postkit import errors
from postkit.queue import Job, QueueClient, WorkListener, protocol
from postkit.queue.executor import run as run_call
from postkit.queue.protocol import CheckedResult
from postkit.worker.backoff import Backoff
from postkit.worker.claims import Claims
from postkit.worker.job_executor import JobExecutor
from postkit.worker.maintenance import Maintenance, RoundReport
from postkit.worker.metrics import Recorder
from postkit.worker.namespace_shares import NamespaceShares
from postkit.worker.outcomes import OutcomeLog
from postkit.worker.pool import WorkerPool
from postkit.worker.prefetch import Prefetch
from postkit.worker.server_guard import ServerGuard
from postkit.worker.shares import Shares
from postkit.worker.threads import SelectableEvent

logger = logging.getLogger("postkit.worker")

_LISTENER_DOWN_POLL = 1.0


class Fetcher:
    """Claims jobs for the free slots and sends the batched acks. See the module docstring."""

    def __init__(
        self,
        claims: Claims,
        executor: JobExecutor,
        outcomes: OutcomeLog,
        pool: WorkerPool,
        metrics: Recorder,
        *,
        dsn: str,
        namespace: str,
        shares: Shares,
        worker_id: str,
        prefetch: Prefetch,
        visibility_timeout: float | None,
        poll_interval: float,
        pooler: bool,
        stopping: threading.Event,
        closed: threading.Event,
        maintenance: Maintenance | None = None,
        on_round: Callable[[RoundReport], None] | None = None,
        on_refusal: Callable[[BaseException], None] | None = None,
        guard: ServerGuard | None = None,
        namespace_shares: NamespaceShares | None = None,
    ) -> None:
        """
        Args:
            maintenance: services the listener runs on its connection between waits (not in
                pooler mode); ``on_round`` is called with what each round did, and
                ``on_refusal`` with a step the database refused (the worker then stops).
            guard: checks the listener's server as it connects; a failover it follows makes
                the listener reconnect (server_guard.py).
            namespace_shares: the slots this namespace shares with the others of a shared
                worker: each claim takes only what they give it (namespace_shares.py).
        """
        self.claims = claims
        self.executor = executor
        self.outcomes = outcomes
        self.pool = pool
        self.metrics = metrics
        self.dsn = dsn
        self.namespace = namespace
        self.shares = shares
        self.queues = shares.queues
        self.worker_id = worker_id
        self.prefetch = prefetch
        self.visibility_timeout = visibility_timeout
        self.poll_interval = poll_interval
        self.pooler = pooler
        self._stopping = stopping
        self._closed = closed
        self.maintenance = maintenance
        self.guard = guard
        self.namespace_shares = namespace_shares
        if namespace_shares is not None:
            namespace_shares.join(
                namespace, held=lambda: claims.held()[0], wake=self._wake_for_slots
            )
        self._on_round = on_round
        self._on_refusal = on_refusal
        self._queues_registered = False
        # Set by the listener thread when a job may be ready; cleared by the claim loop.
        self._work_hint = threading.Event()
        self._hint_taken = threading.Event()
        # Set while the claim loop waits for something to do: only then does the listener
        # thread wait for work (a notification, a due job). While the claim loop is claiming,
        # or every slot is taken, the listener only reads the cancels of running jobs; its
        # wait for them ends as soon as this is set.
        self._idle = SelectableEvent()
        # Set by the listener thread when it read an announcement of work while the claim loop
        # was busy: its next wait for work returns at once.
        self._announced = False
        # Held while claiming, by the claim loop or by the listener thread on a wake-up
        # (_claim_on_wake), so the two never claim at once and never overfill the slots.
        self._claiming = threading.Lock()
        self._listener: WorkListener | None = None
        # Set by the claim loop when the database answers again after errors: the listener
        # reconnects at once instead of waiting out its backoff.
        self._database_back = threading.Event()

    # ---------------------------------------------------------------------------------------
    # The claim loop.
    # ---------------------------------------------------------------------------------------

    def run(self) -> None:
        """Claim, settle and wait until ``stopping`` is set. Database errors are retried,
        at most a second apart; any other error ends the loop."""
        backoff = Backoff.claim_path()
        last_look = time.monotonic()
        want_jobs = True
        claims = self.claims
        while not self._stopping.is_set():
            try:
                if not self._queues_registered:
                    # Once: the queues served stay known while idle (the command line's typo
                    # guard, postkit_queue.known_queues).
                    self.pool.run(lambda client: client.register_queues(self.queues))
                    self._queues_registered = True
                now = time.monotonic()
                if self._work_hint.is_set():
                    self._work_hint.clear()
                    self._hint_taken.set()
                    want_jobs = True
                with self._claiming:
                    acks = claims.take_finished()
                    free = self._slots_to_claim() if want_jobs else self._free_slots()
                    if acks or (want_jobs and free > 0):
                        if want_jobs and free > 0:
                            last_look = now
                        claimed = self.settle_and_claim(acks, free if want_jobs else 0)
                        # Keep claiming while the queues give jobs; once they run dry, wait for
                        # a notification (or the fallback poll) before asking again.
                        want_jobs = claimed > 0 or (want_jobs and free <= 0)
                        if backoff.failures:
                            backoff.reset()
                            self._database_back.set()
                            self.metrics.reconnected("claims")
                        continue
                if self.namespace_shares is not None:
                    self.namespace_shares.offer(self.namespace)
                if free > 0:
                    # Waiting for work, not only for a handler to finish: the listener may
                    # look for some. With every slot taken it stays out of the way; a
                    # notification meanwhile waits on its connection for the next look.
                    self._idle.set()
                # The fallback poll: a notification may have been missed. With a listener
                # it looks itself (every wait of it begins with a look for due jobs); without
                # one none can come: poll at least every second until it is back (or for good,
                # every poll_interval, in pooler mode). A listener that fails wakes this loop.
                if self.pooler:
                    poll = self.poll_interval
                elif self._listener is not None:
                    poll = math.inf
                else:
                    poll = min(self.poll_interval, _LISTENER_DOWN_POLL)
                next_poll = last_look + poll
                claims.wait(
                    lambda: self._work_hint.is_set() or self._stopping.is_set(),
                    timeout=None if poll == math.inf else max(next_poll - now, 0.0),
                )
                self._idle.clear()
                if time.monotonic() >= next_poll:
                    want_jobs = True
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                # Drop every pooled connection that died with this one, so the next try gets a
                # live one. The first retries come quickly.
                with contextlib.suppress(Exception):
                    self.pool.check()
                delay = backoff.failure()
                logger.warning(
                    "database error (%s); retrying in %.1fs",
                    exc,
                    delay,
                    extra={"event": "db_error"},
                )
                self._stopping.wait(delay)
        if self.namespace_shares is not None:
            self.namespace_shares.leave(self.namespace)

    def settle_and_claim(
        self,
        acks: list[tuple[Job, float]],
        limit: int,
        run: Callable[[Callable[[QueueClient], Any]], Any] | None = None,
    ) -> int:
        """Acknowledge ``acks`` and claim up to ``limit`` jobs, trying the queues in the order
        :attr:`shares` gives this round, each first up to its share of ``limit``, then the
        queues that filled theirs for the rest; on a pooled connection unless ``run`` gives
        another: the acks and the first queue's claims are one statement (one transaction),
        and each further claim is a pull of its own. Returns how many jobs it claimed. With
        namespace shares, ``limit`` comes from :meth:`_slots_to_claim`, and this gives back what
        the claim did not use (all of it when the round trip fails)."""
        claimed = 0
        try:
            claimed = self._settle_and_claim(acks, limit, run)
            return claimed
        finally:
            if limit > 0 and self.namespace_shares is not None:
                self.namespace_shares.claimed(self.namespace, limit, claimed)

    def _settle_and_claim(
        self,
        acks: list[tuple[Job, float]],
        limit: int,
        run: Callable[[Callable[[QueueClient], Any]], Any] | None,
    ) -> int:
        # A round that only settles takes no turn.
        order = self.shares.next_order() if limit > 0 else self.queues
        results = self.claims.results_of(acks)
        sent = time.monotonic()
        try:
            acked, jobs = (run or self.pool.run)(
                functools.partial(
                    self._ack_and_pull,
                    acks=[job for job, _ in acks],
                    results=results,
                    limit=limit,
                    order=order,
                )
            )
        except BaseException:
            # Nothing was acknowledged (the statement rolled back): try these again next time.
            self.claims.return_finished(acks)
            raise
        if results is not None:
            self.claims.forget_results(acks)
        self.metrics.round_trip(sent, len(jobs) if limit > 0 else None)
        self.outcomes.record_acks(acks, set(acked))
        for job in jobs:
            self.executor.dispatch(job)
        return len(jobs)

    def _ack_and_pull(
        self,
        client: QueueClient,
        *,
        acks: list[Job],
        results: list[CheckedResult | None] | None,
        limit: int,
        order: list[str],
    ) -> tuple[list[int], list[Job]]:
        if limit <= 0:
            return client.ack_many(acks, results=results), []
        # Shares: each queue, in this round's order, may first take its share of the free
        # slots, so a queue with a deep backlog cannot take them all while another has work;
        # the slots left then go to the queues that filled their share, in turn.
        share = self.shares.share(order[0], limit)
        acked, jobs = client.ack_and_pull(
            order[0],
            acks,
            results=results,
            limit=share,
            worker_id=self.worker_id,
            visibility_timeout=self.visibility_timeout,
        )
        hungry = [order[0]] if len(jobs) >= share else []
        for queue in order[1:]:
            if len(jobs) >= limit:
                break
            wanted = min(self.shares.share(queue, limit), limit - len(jobs))
            claimed = self._pull(client, queue, wanted)
            jobs += claimed
            if len(claimed) >= wanted:
                hungry.append(queue)
        for queue in hungry:
            if len(jobs) >= limit:
                break
            jobs += self._pull(client, queue, limit - len(jobs))
        return acked, jobs

    def _slots_to_claim(self) -> int:
        """How many jobs to claim now: the free slots, or with namespace shares what they give
        this namespace of them, held for it until :meth:`settle_and_claim` returns. Asking
        makes the namespace one that wants jobs: given none, it is woken when it may have
        some (:meth:`_wake_for_slots`)."""
        free = self._free_slots()
        if self.namespace_shares is None or free <= 0:
            return free
        return self.namespace_shares.reserve(self.namespace, free)

    def _wake_for_slots(self) -> None:
        """Namespace shares have slots for this namespace: the claim loop asks for them."""
        self._work_hint.set()
        self.claims.wake()

    def _free_slots(self) -> int:
        """How many more jobs to claim now: the prefetch's capacity, as the settle rate makes
        it, less the jobs held."""
        holding, settled = self.claims.held()
        self.prefetch.observe(settled)
        return self.prefetch.capacity - holding

    def _pull(self, client: QueueClient, queue: str, limit: int) -> list[Job]:
        return client.pull_batch(
            queue, limit=limit, worker_id=self.worker_id, visibility_timeout=self.visibility_timeout
        )

    def drain(self, deadline: float) -> None:
        """Acknowledge the jobs that finish until none is left claimed or ``deadline``
        (time.monotonic()) passes."""
        claims = self.claims
        backoff = Backoff.claim_path()
        while True:
            acks, done = claims.wait_to_drain(
                None if deadline == math.inf else max(deadline - time.monotonic(), 0)
            )
            if acks:
                try:
                    self.settle_and_claim(acks, 0)
                except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                    logger.warning("could not acknowledge %d job(s) (%s)", len(acks), exc)
                    time.sleep(backoff.failure())
            if done or time.monotonic() >= deadline:
                return

    # ---------------------------------------------------------------------------------------
    # The listener thread.
    # ---------------------------------------------------------------------------------------

    def listen(self) -> None:
        """Turn notifications into wake-ups for the claim loop, on a connection of its own,
        until ``closed`` is set.

        A lost connection is retried with backoff, cut short when the claim loop reaches the
        database again: after a restart the listener is back as soon as the server is, not
        after a backoff that grew while it was down. A refusal by the database (a privilege or
        the schema missing), of the listener's statements or of the claim it makes when woken,
        is retried the same way."""
        listener: WorkListener | None = None
        generation = 0
        backoff = Backoff.claim_path()
        while not self._closed.is_set():
            try:
                if (
                    listener is not None
                    and self.guard is not None
                    and generation != self.guard.generation
                ):
                    # A failover: the listener's server is the former primary.
                    with contextlib.suppress(psycopg.Error):
                        listener.close()
                    listener = None
                if listener is None:
                    listener = WorkListener.connect(
                        self.dsn, self.namespace, self.queues, on_cancel=self.claims.check_soon
                    )
                    if self.guard is not None:
                        try:
                            self.guard.check(listener.connection)
                        except psycopg.Error:
                            with contextlib.suppress(psycopg.Error):
                                listener.close()
                            listener = None
                            raise
                        generation = self.guard.generation
                    self._listener = listener
                    if backoff.failures:
                        logger.info("listener reconnected", extra={"event": "db_back"})
                        self.metrics.reconnected("listener")
                    backoff.reset()
                wait = min(self.poll_interval, self._maintain(listener.connection))
                if not self._wait_until_idle(listener, wait):
                    continue
                if self._closed.is_set():
                    break
                received = listener.notifications
                announced, self._announced = self._announced, False
                woken = announced or listener.wait_for_work(timeout=wait)
                if woken:
                    if self._closed.is_set():
                        break
                    if announced or listener.notifications != received:
                        self.metrics.notified()
                    self._claim_on_wake(listener.connection)
                    self._hint_taken.clear()
                    self._work_hint.set()
                    self.claims.wake()
                    # Wait until the claim loop takes the hint: while every slot is busy a due
                    # job would otherwise make wait_for_work return at once, over and over.
                    while not self._hint_taken.wait(0.5) and not self._closed.is_set():
                        pass
            except (psycopg.Error, errors.PostkitError) as exc:
                # A refusal by the database (a privilege, the schema missing: the SDK's
                # exception, chained to the driver's error) is retried like a lost connection;
                # any other PostkitError is a bug to surface.
                if isinstance(exc, errors.PostkitError) and not isinstance(
                    exc.__cause__, psycopg.Error
                ):
                    raise
                self._listener = None
                # The claim loop waits on the listener: it polls until it is back.
                self._work_hint.set()
                self.claims.wake()
                if listener is not None:
                    with contextlib.suppress(psycopg.Error):
                        listener.close()
                    listener = None
                if self._closed.is_set():
                    break  # the worker stopped: the connection went with it
                delay = backoff.failure()
                # Once, not at every retry of an outage.
                logger.log(
                    logging.WARNING if backoff.failures == 1 else logging.DEBUG,
                    "listener connection failed (%s); reconnecting in %.1fs",
                    exc,
                    delay,
                    extra={"event": "db_error"},
                )
                self._database_back.clear()
                self._database_back.wait(delay)
        self._listener = None
        if listener is not None:
            with contextlib.suppress(psycopg.Error):
                listener.close()

    def _wait_until_idle(self, listener: WorkListener, timeout: float) -> bool:
        """Wait until the claim loop waits for work (True) or ``timeout`` passes (False),
        reading the listener's notifications meanwhile, so that a running job's cancel
        reaches its claim at once. An announcement of work read here is kept for the next
        wait for work, which then returns at once: a slot freed in a queue with a concurrency
        limit, say, is announced only once."""
        deadline = time.monotonic() + timeout
        while not self._idle.is_set():
            if listener.poll():
                self._announced = True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._idle.wait_with(listener.connection.fileno(), remaining)
        return True

    def close(self, listener_thread: threading.Thread | None) -> None:
        """Free what the fetcher holds once it has stopped: the pipe of its idle event, unless
        ``listener_thread`` still runs (stuck in a statement: it may wait on the pipe)."""
        if listener_thread is None or not listener_thread.is_alive():
            self._idle.close()

    def _maintain(self, connection: psycopg.Connection[Any]) -> float:
        """Run the maintenance services that are due on the listener's ``connection``; return
        the seconds until the next falls due. A database error is the listener's to retry; a
        refused step (a privilege, the schema) stops the worker, through ``on_refusal``."""
        if self.maintenance is None:
            return math.inf
        try:
            return self.maintenance.run_due(connection, self._on_round)
        except errors.PostkitError as exc:
            self.maintenance = None
            if self._on_refusal is not None:
                self._on_refusal(exc)
            return math.inf

    def stop_listener(self, thread: threading.Thread) -> None:
        """Make the listener thread close its connection and end: its wait is cut short by a
        notification on its wake channel. Called once the worker is closed."""
        listener = self._listener
        self._database_back.set()
        self._idle.set()
        if listener is not None:
            with (
                contextlib.suppress(psycopg.Error, errors.PostkitError, psycopg_pool.PoolTimeout),
                self.pool.connection() as connection,
            ):
                # pg_notify is a built-in function: it reads and writes no Postkit table. A
                # refusal (an administrator revoked it from PUBLIC) leaves the listener to end
                # at its next timeout, as a lost connection does.
                run_call(connection, protocol.lifecycle.wake(listener.wake_channel), given_to=None)
        # A maintenance step stuck behind a lock holds the thread in a statement: cancel it.
        deadline = time.monotonic() + 5
        thread.join(timeout=0.5)
        while thread.is_alive() and listener is not None and time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                listener.connection.cancel_safe(timeout=1.0)
            thread.join(timeout=0.1)

    def _claim_on_wake(self, connection: psycopg.Connection[Any]) -> None:
        """Claim for the free slots right away when a notification wakes the listener: on the
        listener's thread and its own connection, whose backend has just delivered the
        notification and is awake. Between a push's commit and its handler there is then no
        hand-off to the claim loop and no idle pooled backend to wake, each a few hundred
        microseconds on a virtual machine. The claim loop is woken next all the same, and goes
        on claiming while the queues give jobs. When it is claiming already, this leaves the
        claim to it."""
        if not self._claiming.acquire(blocking=False):
            return
        try:
            free = 0 if self._stopping.is_set() else self._slots_to_claim()
            if free > 0:
                self.settle_and_claim(
                    [], free, lambda action: action(self.pool.client_on(connection))
                )
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            # The claim loop, woken next, meets the same trouble and owns the retries.
            logger.debug("claim on wake-up failed (%s); the claim loop retries", exc)
        finally:
            self._claiming.release()


__all__ = ["Fetcher"]
