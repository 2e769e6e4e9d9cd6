-- Migration 49: stats returns each queue's max_pending, the backpressure limit its pending and
-- scheduled jobs stand against; its result list changes, so the old signature goes before the
-- current functions are defined. No table changes.
DROP FUNCTION IF EXISTS postkit_queue.stats(text, text, integer, text, integer);
-- schema: 857b49a61b152144
