-- Migration 31: jobs that wait for jobs (dependencies.sql). A job pushed with parents
-- (depends_on) is waiting until each has completed; a parent dead-lettered or cancelled
-- cancels its waiting descendants, which cancelled_jobs records with why, as it records an
-- operator's cancel. The job_state type gains waiting and cancelled; jobs gains the parents,
-- the count still to complete and whether any child waits (the state check compares as text:
-- the new labels cannot be used in the transaction that adds them). push and push_batch take
-- the parents, get_job returns them, prune counts the cancelled jobs it prunes: their argument
-- or result lists change, so the old signatures go before the current functions are defined.
ALTER TYPE postkit_queue.job_state ADD VALUE IF NOT EXISTS 'waiting';
ALTER TYPE postkit_queue.job_state ADD VALUE IF NOT EXISTS 'cancelled';
ALTER TABLE postkit_queue.jobs
    ADD COLUMN depends_on bigint[],
    ADD COLUMN waiting_on integer,
    ADD COLUMN has_children boolean,
    DROP CONSTRAINT jobs_state_check,
    ADD CONSTRAINT jobs_state_check CHECK (state::text IN ('pending', 'running', 'waiting')),
    ADD CONSTRAINT jobs_waiting_check CHECK ((state::text = 'waiting') = (waiting_on IS NOT NULL));
CREATE INDEX jobs_waiting_idx ON postkit_queue.jobs (namespace, queue, id)
    WHERE waiting_on IS NOT NULL;
CREATE TABLE postkit_queue.job_dependencies (
    namespace text   NOT NULL,
    parent_id bigint NOT NULL,
    child_id  bigint NOT NULL,
    PRIMARY KEY (namespace, parent_id, child_id)
);
CREATE TABLE postkit_queue.cancelled_jobs (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL,
    attempts     integer     NOT NULL,
    depends_on   bigint[],
    reason       text        NOT NULL,
    cancelled_by text        NOT NULL,
    created_at   timestamptz NOT NULL,
    cancelled_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, job_id)
);
CREATE INDEX cancelled_jobs_expires_at_idx ON postkit_queue.cancelled_jobs (namespace, expires_at);
CREATE INDEX cancelled_jobs_queue_idx ON postkit_queue.cancelled_jobs (namespace, queue, job_id);
DROP FUNCTION IF EXISTS postkit_queue.push(
    text, text, jsonb, interval, integer, integer, text, interval, interval, jsonb, text);
DROP FUNCTION IF EXISTS postkit_queue.push_batch(
    text, text, jsonb, interval, integer, integer, text[], jsonb, text[]);
DROP FUNCTION IF EXISTS postkit_queue.get_job(text, bigint);
DROP FUNCTION IF EXISTS postkit_queue.prune(text, integer);
-- schema: 54fd794786b3c13b
