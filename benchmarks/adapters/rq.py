"""RQ on Redis, the non-PostgreSQL reference: Queue.enqueue / enqueue_many (a pipeline per
batch); SimpleWorker processes (no fork per job: the default Worker forks for every job).

Redis here is in memory only (no AOF, no snapshots, unless the server says otherwise: see
describe_backend): a push is acknowledged without anything reaching a disk."""

from __future__ import annotations

import os
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker
from rq.intermediate_queue import IntermediateQueue

from benchmarks import handlers
from benchmarks.adapters import Adapter, WorkerConfig

QUEUE = "bench"
DEFAULT_URL = "redis://127.0.0.1:6379/13"


def redis_url() -> str:
    return os.environ.get("BENCHMARK_REDIS_URL", DEFAULT_URL)


class RqAdapter(Adapter):
    name = "rq"
    distribution = "rq"
    backend = "Redis"
    configs = (
        WorkerConfig(2, 1),
        WorkerConfig(3, 1),
        WorkerConfig(4, 1),
        WorkerConfig(8, 1),
    )
    latency_config = WorkerConfig(1, 1)
    batch_note = "Queue.enqueue_many (one Redis pipeline per batch)"
    tuning_note = (
        "2, 3, 4 and 8 SimpleWorker processes (python-rq.org/docs/workers: each worker "
        "processes a single job at a time, to perform jobs concurrently start more workers; "
        "SimpleWorker skips the fork per job)"
    )
    claims_in_batches = False

    def __init__(self, server_dsn: str) -> None:
        super().__init__(server_dsn)
        self.dsn = redis_url()

    def setup(self) -> None:
        self.open()
        self.redis.flushdb()

    def teardown(self) -> None:
        self.redis.flushdb()
        self.close()

    def install(self) -> None:
        pass

    def open(self) -> None:
        self.redis = Redis.from_url(redis_url())
        self.queue = Queue(QUEUE, connection=self.redis)

    def close(self) -> None:
        self.redis.close()

    def clear(self) -> None:
        self.redis.flushdb()

    def progress(self) -> tuple[int, int]:
        intermediate = IntermediateQueue.get_intermediate_queue_key(self.queue.key)
        with self.redis.pipeline() as pipe:
            pipe.llen(self.queue.key)
            pipe.llen(intermediate)
            pipe.zcard(self.queue.started_job_registry.key)
            queued, dequeued, started = pipe.execute()
        return int(queued), int(queued) + int(dequeued) + int(started)

    def transactions(self) -> int | None:
        return None

    def describe_backend(self) -> dict[str, str]:
        info: dict[str, Any] = self.redis.info("server")
        appendonly = self.redis.config_get("appendonly").get("appendonly", "?")
        save = self.redis.config_get("save").get("save", "?")
        return {
            "Redis": str(info.get("redis_version", "?")),
            "appendonly": str(appendonly),
            "save": repr(save),
        }

    def storage(self) -> dict[str, Any]:
        memory: dict[str, Any] = self.redis.info("memory")
        return {"table_bytes": int(memory["used_memory"]), "index_bytes": 0, "dead_tuples": 0}

    def push_one(self, sequence: int) -> None:
        self.queue.enqueue(handlers.noop, sequence)

    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        for first in range(start, start + count, batch):
            last = min(first + batch, start + count)
            self.queue.enqueue_many(
                [Queue.prepare_data(handlers.noop, args=(n,)) for n in range(first, last)]
            )


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    handlers.configure(probe_port)
    redis = Redis.from_url(dsn)
    worker = SimpleWorker([Queue(QUEUE, connection=redis)], connection=redis)
    worker.work(logging_level="WARNING", with_scheduler=False)


ADAPTER = RqAdapter
