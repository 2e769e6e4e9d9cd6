-- Migration 4: recurring jobs.
CREATE TABLE postkit_queue.schedules (
    namespace    text        NOT NULL,
    name         text        NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    cron         text,
    timezone     text        NOT NULL DEFAULT 'UTC',
    every        interval,
    priority     smallint    NOT NULL DEFAULT 0,
    max_attempts integer,
    paused       boolean     NOT NULL DEFAULT false,
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_job_id  bigint,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, name),
    CHECK ((cron IS NULL) <> (every IS NULL))
);
CREATE INDEX schedules_due_idx ON postkit_queue.schedules (namespace, next_run_at)
    WHERE NOT paused;
