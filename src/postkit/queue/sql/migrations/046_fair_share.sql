-- Migration 46: fair share (fair.sql) and backpressure. A fair queue (queue_settings.fair)
-- shares its claims among its groups by turns, each group given up to its weight
-- (group_weights) per turn; the round's state is the queue's flow_state row's, and
-- jobs_fair_idx finds the groups with pending jobs and each one's ready jobs. A queue's
-- max_pending refuses a push that would make it hold more pending jobs (check_room).
-- queue_policy, get_queue_policy, write_queue_settings and configure_queue return the new
-- settings and claim_limited takes fair: their argument or result lists change, so the old
-- signatures go before the current functions are defined.
ALTER TABLE postkit_queue.queue_settings
    ADD COLUMN fair boolean NOT NULL DEFAULT false,
    ADD COLUMN max_pending integer CHECK (max_pending BETWEEN 1 AND 100000);
ALTER TABLE postkit_queue.flow_state
    ADD COLUMN fair_group text,
    ADD COLUMN fair_given integer NOT NULL DEFAULT 0;
CREATE TABLE postkit_queue.group_weights (
    namespace  text        NOT NULL,
    queue      text        NOT NULL,
    group_key  text        NOT NULL,
    weight     integer     NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, queue, group_key)
);
CREATE INDEX jobs_fair_idx
    ON postkit_queue.jobs (namespace, queue, group_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_key IS NOT NULL;
DROP FUNCTION IF EXISTS postkit_queue.queue_policy(text, text);
DROP FUNCTION IF EXISTS postkit_queue.get_queue_policy(text, text);
DROP FUNCTION IF EXISTS postkit_queue.write_queue_settings(
    text, text, integer, interval, interval, interval, interval, interval, integer, interval,
    integer, integer, interval, integer, boolean);
DROP FUNCTION IF EXISTS postkit_queue.configure_queue(
    text, text, integer, interval, interval, interval, interval, interval, integer, interval,
    integer, integer, interval, integer, boolean, text[]);
DROP FUNCTION IF EXISTS postkit_queue.claim_limited(
    text, text, integer, integer, integer, interval, integer, boolean);
-- schema: a0ca8fa6f737d69f
