-- Types: the states of a job and the outcomes of an attempt.
--
-- The vocabulary of the queue, defined once (docs/concepts.md is its glossary, and
-- tests/test_glossary.py holds the code to it). postkit.queue.records defines the same values
-- as Python enums, and tests/test_records.py keeps the two in step.
--
-- Each type is created when missing, so that an upgrade gets it before the functions that name
-- it; a new label is a migration's ALTER TYPE ... ADD VALUE.

-- Where a job is in its lifecycle (the diagram is at the top of lifecycle.sql):
--   pending    claimable now (run_at has passed)
--   scheduled  pending, but not before run_at: a delayed push, a retry waiting out its backoff
--   running    claimed by a worker, until its claim's deadline (visible_until)
--   dead       dead-lettered: in postkit_queue.dead_letters, not in the jobs table
--   waiting    pushed with parents (depends_on) not all completed yet: never claimed, never
--              counted as ready, until the last parent's ack makes it pending (dependencies.sql)
--   cancelled  cancelled before it completed (by an operator), or because a parent was
--              dead-lettered or cancelled: in postkit_queue.cancelled_jobs, not in the jobs table
-- The jobs table stores pending, running and waiting (a scheduled job is a pending row with a
-- future run_at); listings and get_job report all six. Version 31 added waiting and cancelled,
-- last (ALTER TYPE ... ADD VALUE appends).
DO $postkit_types$
BEGIN
    IF pg_catalog.to_regtype('postkit_queue.job_state') IS NULL THEN
        CREATE TYPE postkit_queue.job_state AS ENUM (
            'pending', 'scheduled', 'running', 'dead', 'waiting', 'cancelled');
    END IF;
    -- What a settle or a rescue did. The counters per queue and minute (queue_stats) count the
    -- first four; nack and tick_timeouts return them as text:
    --   completed      acked: the job succeeded and left the queue
    --   retried        nacked with attempts left: pending again after a backoff
    --   rescued        its claim expired with attempts left (tick_timeouts): pending again
    --   dead_lettered  moved to dead_letters (fail, attempts spent, or a poison pill's last
    --                  claim expired)
    --   stale          the caller no longer held the claim: nothing changed
    IF pg_catalog.to_regtype('postkit_queue.outcome') IS NULL THEN
        CREATE TYPE postkit_queue.outcome AS ENUM (
            'completed', 'retried', 'rescued', 'dead_lettered', 'stale');
    END IF;
END
$postkit_types$;
