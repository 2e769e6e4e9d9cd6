-- Migration 19: the dashboard's reads (namespaces, outcome_series, running_jobs, schedule_runs,
-- count_dead_letters, search_dead_letters, job_lineage). jobs() lists each state off an index,
-- with a cursor of the columns it orders by, and returns each job's age: its argument list and
-- its result change (versions before 3 have no jobs() to drop).
DROP FUNCTION IF EXISTS postkit_queue.jobs(text, text, text, integer, bigint);
-- job_lineage finds the dead letter a job was redriven from through this one (tables.sql).
CREATE INDEX dead_letters_redriven_idx ON postkit_queue.dead_letters (namespace, redriven_job_id)
    WHERE redriven_job_id IS NOT NULL;
-- schema: b0152febecbe8c8a
