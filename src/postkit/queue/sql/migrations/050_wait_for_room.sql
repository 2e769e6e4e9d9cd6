-- Migration 50: a push to a queue at its max_pending may wait for room (push and push_batch
-- take p_wait_for_room, check_room p_wait), so their old signatures go before the current
-- functions are defined. No table changes.
DROP FUNCTION IF EXISTS postkit_queue.push(
    text, text, jsonb, interval, integer, integer, text, interval, interval, jsonb, text,
    bigint[]);
DROP FUNCTION IF EXISTS postkit_queue.push_batch(
    text, text, jsonb, interval, integer, integer, text[], jsonb, text[], jsonb);
DROP FUNCTION IF EXISTS postkit_queue.check_room(text, text, integer, integer);
-- schema: e5ab670ac93233bb
