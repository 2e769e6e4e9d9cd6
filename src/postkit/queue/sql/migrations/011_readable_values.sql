-- Migration 11: every value the SQL API accepts is one its readers can use. Schedules get a
-- broken state; the ones saved before with a value no ticker can use are broken at once.
ALTER TABLE postkit_queue.schedules
    ADD COLUMN broken_at     timestamptz,
    ADD COLUMN broken_reason text;

DROP INDEX postkit_queue.schedules_due_idx;
CREATE INDEX schedules_due_idx ON postkit_queue.schedules (namespace, next_run_at)
    WHERE NOT paused AND broken_at IS NULL;

-- Data, once the functions are current:

-- An expression the validator refuses: broken now, rather than at the first tick that meets it;
-- saving the schedule again repairs it.
UPDATE postkit_queue.schedules s
SET broken_at = postkit_queue.clock(),
    broken_reason = 'saved with an invalid cron expression: '
                    || postkit_queue.cron_problem(s.cron)
WHERE s.cron IS NOT NULL AND postkit_queue.cron_problem(s.cron) IS NOT NULL;

-- A next run that no driver can read would make every read of the namespace's schedules fail:
-- it becomes now, and the schedule broken.
UPDATE postkit_queue.schedules s
SET broken_at = postkit_queue.clock(), next_run_at = postkit_queue.clock(),
    broken_reason = 'saved with a next run more than 100 years away: ' || s.next_run_at::text
WHERE NOT isfinite(s.next_run_at)
   OR s.next_run_at NOT BETWEEN postkit_queue.clock() - interval '100 years'
                            AND postkit_queue.clock() + interval '100 years';
