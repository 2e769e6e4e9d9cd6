-- Migration 20: job results. A queue may keep the result of each completed job (what its
-- handler returned, given to ack) for a while (queue_settings.retain_results), in a table of
-- its own (job_results), read back by job_result and pruned by prune; waiters are told on a
-- channel per namespace (results_channel). ack and ack_many take a result (record_outcomes
-- passes it on), the policy functions return the new setting, configure_queue and
-- update_queue_settings take it, and prune counts the results it deletes: their argument or
-- result lists change, so the old signatures go before the current functions are defined
-- (version 1 has neither configure_queue nor prune, versions before 10 no
-- update_queue_settings, before 19 no get_queue_policy; before 16 record_outcomes took the
-- outcome as text, and migration 16 dropped that one before any outcome-typed one exists).
DROP FUNCTION postkit_queue.ack(text, bigint, text, uuid);
DROP FUNCTION postkit_queue.ack_many(text, bigint[], uuid[]);
DROP FUNCTION IF EXISTS postkit_queue.record_outcomes(
    postkit_queue.jobs[], postkit_queue.outcome, timestamptz);
DROP FUNCTION postkit_queue.queue_policy(text, text);
DROP FUNCTION IF EXISTS postkit_queue.configure_queue(
    text, text, integer, interval, interval, interval, interval, interval, integer);
DROP FUNCTION IF EXISTS postkit_queue.update_queue_settings(
    text, text, integer, interval, interval, interval, interval, interval, integer, text[]);
DROP FUNCTION IF EXISTS postkit_queue.get_queue_policy(text, text);
DROP FUNCTION IF EXISTS postkit_queue.prune(text, integer);
ALTER TABLE postkit_queue.queue_settings ADD COLUMN retain_results interval;
CREATE TABLE postkit_queue.job_results (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    result       jsonb,
    attempts     integer     NOT NULL,
    completed_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, job_id)
);
CREATE INDEX job_results_expires_at_idx ON postkit_queue.job_results (namespace, expires_at);
-- schema: 329da3e486f38fa7
