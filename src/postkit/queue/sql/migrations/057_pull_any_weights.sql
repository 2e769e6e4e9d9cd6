-- Migration 57: pull_any shares a claim among its queues by weight when given p_weights
-- (batches.sql), so its old signature goes before the current function is defined. No table
-- changes.
DROP FUNCTION IF EXISTS postkit_queue.pull_any(text, text[], text, interval, integer);
-- schema: ba59a35bbf78c27c
