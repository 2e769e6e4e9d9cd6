-- Postkit queue, migration 7: a paused queue does not keep its workers awake.
--
-- A worker between jobs asks next_run_at when the first job of its queues falls due, and
-- sleeps until then or until a notification. next_run_at counted the jobs of paused queues
-- too, so a paused queue with a due job answered "due now" on every call, and the worker
-- went round pull (which hands out nothing from a paused queue) and next_run_at without
-- sleeping for as long as the pause lasted. Paused queues are now left out: their workers
-- sleep, and resume_queue's notification wakes them.

CREATE OR REPLACE FUNCTION postkit_queue.next_run_at(p_namespace text, p_queues text[])
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    -- The skip scan of migration 1 (per queue, one probe of jobs_pull_idx per distinct
    -- priority, and the first run_at within each), over the queues that are not paused: one
    -- primary-key probe of queue_settings per queue, as queue_policy makes.
    RETURN (
        WITH RECURSIVE active(queue) AS (
            SELECT q.queue FROM unnest(p_queues) AS q(queue)
            WHERE NOT EXISTS (SELECT FROM postkit_queue.queue_settings s
                              WHERE s.namespace = p_namespace AND s.queue = q.queue
                                AND s.paused)
        ), priorities(queue, priority) AS (
            SELECT a.queue, (SELECT j.priority FROM postkit_queue.jobs j
                             WHERE j.namespace = p_namespace AND j.queue = a.queue
                               AND j.state = 'pending'
                             ORDER BY j.priority DESC LIMIT 1)
            FROM active a
            UNION ALL
            SELECT p.queue, (SELECT j.priority FROM postkit_queue.jobs j
                             WHERE j.namespace = p_namespace AND j.queue = p.queue
                               AND j.state = 'pending' AND j.priority < p.priority
                             ORDER BY j.priority DESC LIMIT 1)
            FROM priorities p WHERE p.priority IS NOT NULL
        )
        SELECT min(first.run_at)
        FROM priorities p
        CROSS JOIN LATERAL (
            SELECT j.run_at FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p.queue AND j.state = 'pending'
              AND j.priority = p.priority
            ORDER BY j.run_at LIMIT 1) first
        WHERE p.priority IS NOT NULL);
END
$$;
