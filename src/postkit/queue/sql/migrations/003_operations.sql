-- Migration 3: operating the queue: the archive of completed jobs, the outcome counters, and
-- the index that keeps queues() and stats() fast whatever other queues' dead letters hold.
CREATE TABLE postkit_queue.completed_jobs (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL,
    attempts     integer     NOT NULL,
    worker_id    text,
    errors       jsonb       NOT NULL,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, job_id)
);
CREATE INDEX completed_jobs_expires_at_idx ON postkit_queue.completed_jobs (namespace, expires_at);

CREATE TABLE postkit_queue.queue_stats (
    namespace          text        NOT NULL,
    queue              text        NOT NULL,
    minute             timestamptz NOT NULL,
    slot               smallint    NOT NULL,
    completed          bigint      NOT NULL DEFAULT 0,
    retried            bigint      NOT NULL DEFAULT 0,
    rescued            bigint      NOT NULL DEFAULT 0,
    dead               bigint      NOT NULL DEFAULT 0,
    completed_attempts bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, queue, minute, slot)
);

CREATE INDEX dead_letters_queue_idx ON postkit_queue.dead_letters (namespace, queue, job_id)
    WHERE redriven_job_id IS NULL;
