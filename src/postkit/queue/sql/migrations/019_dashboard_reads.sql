-- Migration 19: the dashboard's reads (namespaces, outcome_series, running_jobs, schedule_runs,
-- count_dead_letters, search_dead_letters, job_lineage, get_queue_policy), and a dead-letter
-- purge that may be narrowed to chosen ids and a time window: purge_dead_letters_before takes
-- two more arguments (versions before 14 have none to drop). jobs() lists each state off an index,
-- with a cursor of the columns it orders by, and returns each job's age: its argument list and
-- its result change (versions before 3 have no jobs() to drop).
DROP FUNCTION IF EXISTS postkit_queue.jobs(text, text, text, integer, bigint);
DROP FUNCTION IF EXISTS postkit_queue.purge_dead_letters_before(text, timestamptz, text);
-- job_lineage finds the dead letter a job was redriven from through this one (tables.sql).
CREATE INDEX dead_letters_redriven_idx ON postkit_queue.dead_letters (namespace, redriven_job_id)
    WHERE redriven_job_id IS NOT NULL;
-- schema: e6f4d817f1348aea
