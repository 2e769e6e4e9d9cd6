-- Migration 2: per-queue settings.
CREATE TABLE postkit_queue.queue_settings (
    namespace          text        NOT NULL,
    queue              text        NOT NULL,
    max_attempts       integer     CHECK (max_attempts BETWEEN 1 AND 1000),
    visibility_timeout interval,
    backoff_base       interval,
    backoff_cap        interval,
    paused             boolean     NOT NULL DEFAULT false,
    retain_completed   interval,
    retain_dead        interval,
    max_payload_bytes  integer     CHECK (max_payload_bytes BETWEEN 1 AND 104857600),
    updated_at         timestamptz NOT NULL,
    PRIMARY KEY (namespace, queue)
);
