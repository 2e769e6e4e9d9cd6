-- Migration 17: the worker registry (workers.sql).
CREATE TABLE postkit_queue.workers (
    namespace          text        NOT NULL,
    worker_id          text        NOT NULL,
    kind               text        NOT NULL CHECK (kind IN ('worker', 'ticker')),
    host               text        NOT NULL,
    pid                integer     NOT NULL,
    queues             text[]      NOT NULL,
    concurrency        integer     NOT NULL,
    version            text        NOT NULL,
    heartbeat_interval interval    NOT NULL,
    started_at         timestamptz NOT NULL,
    heartbeat_at       timestamptz NOT NULL,
    PRIMARY KEY (namespace, worker_id)
);
-- schema: 7ce751219ffeb084
