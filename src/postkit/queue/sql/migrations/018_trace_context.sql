-- Migration 18: a job carries its producer's trace context (trace_context, a W3C propagation
-- carrier), which its dead letter, its archived completion and a redriven job keep. push and
-- push_batch take it and get_job and jobs return it: their argument or result lists change, so
-- the old signatures go before the current functions are defined (an install older than
-- version 3 has no push_batch and no jobs yet).
DROP FUNCTION postkit_queue.push(
    text, text, jsonb, interval, integer, integer, text, interval, interval);
DROP FUNCTION IF EXISTS postkit_queue.push_batch(text, text, jsonb, interval, integer, integer, text[]);
DROP FUNCTION postkit_queue.get_job(text, bigint);
DROP FUNCTION IF EXISTS postkit_queue.jobs(text, text, text, integer, bigint);
ALTER TABLE postkit_queue.jobs ADD COLUMN trace_context jsonb;
ALTER TABLE postkit_queue.dead_letters ADD COLUMN trace_context jsonb;
ALTER TABLE postkit_queue.completed_jobs ADD COLUMN trace_context jsonb;
-- schema: f0c7f3096f529fc4
