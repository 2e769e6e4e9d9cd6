-- Migration 21: flow control (flow.sql). A job may belong to a group of its queue (group_key,
-- which its dead letter and a redriven job keep), and a queue's settings gain its flow limits:
-- concurrency, a rate (rate_limit claims per rate_period), group_concurrency and group_ordered.
-- The claims of a flow-controlled queue take turns on its flow_state row, which also logs its
-- recent claims for the rate limit. push and push_batch take the group key, the policy
-- functions return the limits, configure_queue and update_queue_settings take them, and stats
-- reports them, get_job returns the group key: their argument or result lists change, so the old signatures go before the
-- current functions are defined (an install older than version 3 has no push_batch, older than
-- 2 no configure_queue, older than 10 no update_queue_settings, older than 19 no
-- get_queue_policy).
DROP FUNCTION IF EXISTS postkit_queue.push(
    text, text, jsonb, interval, integer, integer, text, interval, interval, jsonb);
DROP FUNCTION IF EXISTS postkit_queue.push_batch(
    text, text, jsonb, interval, integer, integer, text[], jsonb);
DROP FUNCTION IF EXISTS postkit_queue.queue_policy(text, text);
DROP FUNCTION IF EXISTS postkit_queue.configure_queue(
    text, text, integer, interval, interval, interval, interval, interval, integer, interval);
DROP FUNCTION IF EXISTS postkit_queue.update_queue_settings(
    text, text, integer, interval, interval, interval, interval, interval, integer, text[],
    interval);
DROP FUNCTION IF EXISTS postkit_queue.get_queue_policy(text, text);
DROP FUNCTION IF EXISTS postkit_queue.stats(text, text, integer);
DROP FUNCTION IF EXISTS postkit_queue.get_job(text, bigint);
ALTER TABLE postkit_queue.jobs ADD COLUMN group_key text;
ALTER TABLE postkit_queue.dead_letters ADD COLUMN group_key text;
ALTER TABLE postkit_queue.queue_settings
    ADD COLUMN concurrency integer CHECK (concurrency BETWEEN 1 AND 100000),
    ADD COLUMN rate_limit integer CHECK (rate_limit BETWEEN 1 AND 100000),
    ADD COLUMN rate_period interval
        CHECK (rate_period > interval '0' AND rate_period <= interval '1 day'),
    ADD COLUMN group_concurrency integer CHECK (group_concurrency BETWEEN 1 AND 10000),
    ADD COLUMN group_ordered boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT queue_settings_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    ADD CONSTRAINT queue_settings_ordered_check
        CHECK (NOT group_ordered OR group_concurrency IS NULL OR group_concurrency = 1);
CREATE INDEX jobs_group_idx ON postkit_queue.jobs (namespace, queue, group_key, id)
    WHERE group_key IS NOT NULL;
CREATE INDEX jobs_group_running_idx ON postkit_queue.jobs (namespace, queue, group_key)
    WHERE state = 'running' AND group_key IS NOT NULL;
CREATE TABLE postkit_queue.flow_state (
    namespace     text          NOT NULL,
    queue         text          NOT NULL,
    window_at     timestamptz[] NOT NULL DEFAULT '{}',
    window_claims integer[]     NOT NULL DEFAULT '{}',
    PRIMARY KEY (namespace, queue)
);
-- schema: 2b1778f9881c72de
