-- Postkit queue, migration 12: when the next schedule of a namespace falls due.
--
-- Schedules fired only when something ticked, about every 10 s from workers, so a schedule
-- due every 5 s fired every 10 s. A worker now asks, at least once a second, when the next
-- active schedule of its namespace falls due, and fires it then (tick_schedules), as it
-- already wakes for the earliest delayed job.

-- next_schedule_at: the earliest next run of the namespace's active schedules; NULL when it
-- has none; broken schedules (migration 11) do not count, since they never fire. One probe of
-- schedules_due_idx (namespace, next_run_at) WHERE NOT paused AND broken_at IS NULL, whose
-- predicate matches this one; it locks nothing, and a schedule another ticker is firing
-- still counts until that ticker commits.
CREATE FUNCTION postkit_queue.next_schedule_at(p_namespace text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    RETURN (SELECT s.next_run_at FROM postkit_queue.schedules s
            WHERE s.namespace = p_namespace AND NOT s.paused AND s.broken_at IS NULL
            ORDER BY s.next_run_at LIMIT 1);
END;
$$;

-- A worker's call (migration 9's API registry).
INSERT INTO postkit_queue.api (name, access) VALUES ('next_schedule_at', 'worker');
