-- Migration 32: progress (report_progress). A running job's handler reports a fraction from 0
-- to 1 and a note, which get_job returns with when it was said: the jobs table gains the three,
-- and get_job's result list changes, so its old signature goes before the current functions
-- are defined.
ALTER TABLE postkit_queue.jobs
    ADD COLUMN progress float8 CHECK (progress BETWEEN 0 AND 1),
    ADD COLUMN progress_note text CHECK (char_length(progress_note) <= 200),
    ADD COLUMN progress_at timestamptz;
DROP FUNCTION IF EXISTS postkit_queue.get_job(text, bigint);
-- schema: 3c40e3be19b68dd9
