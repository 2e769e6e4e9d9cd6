-- Migration 19: the dashboard's reads (namespaces, outcome_series, running_jobs, schedule_runs,
-- search_dead_letters). jobs() lists each state off an index, with a cursor of the columns it
-- orders by, and returns each job's age: its argument list and its result change (versions
-- before 3 have no jobs() to drop).
DROP FUNCTION IF EXISTS postkit_queue.jobs(text, text, text, integer, bigint);
-- schema: a8bbbfd932a45b0c
