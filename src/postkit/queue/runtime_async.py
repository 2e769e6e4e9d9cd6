"""The worker registry calls of the queue client: register a worker, beat its heart, list the
workers and their running jobs, and prune the lost ones.

registry_async.py is the source of both: :class:`AsyncRegistry`, which
:class:`~postkit.queue.client_async.AsyncQueueClient` inherits, is written here, and
registry.py (``Registry``, which ``QueueClient`` inherits) is generated from it by
tools/async_to_sync.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from postkit.queue import protocol
from postkit.queue.calls_async import AsyncCalls
from postkit.queue.protocol import Duration
from postkit.queue.records import RunningJob, WorkerInfo


class AsyncRegistry(AsyncCalls):
    """The worker registry methods of the queue client (AsyncQueueClient inherits this class, and
    QueueClient its generated twin)."""

    async def register_worker(
        self,
        worker_id: str,
        *,
        kind: str = "worker",
        host: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
        version: str,
        heartbeat_interval: Duration,
    ) -> None:
        """Record that a worker (``kind`` 'worker') or a ticker ('ticker') runs, with what it
        serves, and its first heartbeat; registering the same ``worker_id`` again replaces it.
        It reads as lost once its last heartbeat is older than three ``heartbeat_interval``.

        Raises:
            InvalidWorkerError: an unknown kind, or a pid or concurrency out of range.
        """
        await self._run(
            protocol.register_worker(
                self._namespace,
                worker_id,
                kind=kind,
                host=host,
                pid=pid,
                queues=queues,
                concurrency=concurrency,
                version=version,
                heartbeat_interval=heartbeat_interval,
            )
        )

    async def worker_heartbeat(self, worker_id: str) -> bool:
        """The worker is alive. False when it is not registered (its row was pruned while it
        was cut off): register it again."""
        return await self._run(protocol.worker_heartbeat(self._namespace, worker_id))

    async def deregister_worker(self, worker_id: str) -> bool:
        """The worker stopped cleanly. False when it was not registered."""
        return await self._run(protocol.deregister_worker(self._namespace, worker_id))

    async def running_jobs(self, *, limit: int = 1000) -> list[RunningJob]:
        """What the workers of this namespace run now: each running job's id, queue, worker,
        attempt and claim, soonest deadline first, up to ``limit``. It reads the running jobs
        alone, through their index, whatever the backlog, and no payload."""
        return await self._run(protocol.running_jobs(self._namespace, limit=limit))

    async def workers(self) -> list[WorkerInfo]:
        """The registered workers and tickers of this namespace, oldest start first, each
        with whether it is lost. O(workers): it reads no job."""
        return await self._run(protocol.workers(self._namespace))

    async def prune_workers(self, *, older_than: Duration = 86400) -> int:
        """Forget the lost workers whose last heartbeat is older than ``older_than`` (a day
        unless given); one that is not lost stays, however short ``older_than``. Returns how
        many."""
        return await self._run(protocol.prune_workers(self._namespace, older_than=older_than))
