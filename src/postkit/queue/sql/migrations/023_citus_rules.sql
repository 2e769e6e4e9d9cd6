-- Migration 23: the SQL follows the rules that let Citus route each call to the node that owns
-- its namespace (docs/scaling.md, tests/citus): holds_claim and error_entry take a job's
-- columns instead of its row, and so do record_outcomes (the counters, by queue), bury (the
-- job's id) and keep_completed (the archive and the results, split from record_outcomes);
-- every notification goes through send_notification; pull, ack_many, claim_limited and
-- next_run_at loop over one table's rows instead of a subquery or a CTE (ack_batch settles
-- through ack_many); every statement names the namespace it was given; and the functions that
-- read the queue's tables are PL/pgSQL.
-- Apart from the signatures dropped here, functions only: their current bodies are in
-- schema/, which every upgrade applies.
DROP FUNCTION IF EXISTS postkit_queue.holds_claim(postkit_queue.jobs, text, uuid);
DROP FUNCTION IF EXISTS postkit_queue.error_entry(postkit_queue.jobs, text, text, timestamptz);
DROP FUNCTION IF EXISTS postkit_queue.record_outcomes(
    postkit_queue.jobs[], postkit_queue.outcome, timestamptz, jsonb);
DROP FUNCTION IF EXISTS postkit_queue.bury(postkit_queue.jobs, text, jsonb, timestamptz);
-- schema: 14a6048368327f44
