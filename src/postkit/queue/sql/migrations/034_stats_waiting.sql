-- Migration 34: stats counts waiting and cancelled jobs (two columns at the end of its rows, so
-- a reader by position keeps working), its "last minute" is a sliding window of 60 seconds,
-- queues() lists the queues with waiting or cancelled jobs, and a push's check of its parents
-- reads job_result (parent_state is gone). The current functions replace the old ones.
DROP FUNCTION IF EXISTS postkit_queue.stats(text, text, integer, text, integer);
DROP FUNCTION IF EXISTS postkit_queue.parent_state(text, bigint);
-- schema: 5a6034bb65cdca79
