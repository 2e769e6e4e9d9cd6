-- Postkit queue, migration 10: what the command line needs to change some settings of a queue
-- and to watch its outcomes.
--
-- configure_queue sets every setting at once (NULL restores the built-in default), so an
-- operator who only meant to raise max_attempts had to repeat every other setting or lose it.
-- update_queue_settings changes the settings it is given, restores the ones it is told to
-- reset, and keeps the rest; `postkit queue configure` calls it.

CREATE FUNCTION postkit_queue.update_queue_settings(
    p_namespace          text,
    p_queue              text,
    p_max_attempts       integer  DEFAULT NULL,
    p_visibility_timeout interval DEFAULT NULL,
    p_backoff_base       interval DEFAULT NULL,
    p_backoff_cap        interval DEFAULT NULL,
    p_retain_completed   interval DEFAULT NULL,
    p_retain_dead        interval DEFAULT NULL,
    p_max_payload_bytes  integer  DEFAULT NULL,
    p_reset              text[]   DEFAULT '{}',
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings CONSTANT text[] := ARRAY['max_attempts', 'visibility_timeout', 'backoff_base',
        'backoff_cap', 'retain_completed', 'retain_dead', 'max_payload_bytes'];
    v_unknown  text;
    v_current  postkit_queue.queue_settings;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    SELECT r INTO v_unknown FROM unnest(coalesce(p_reset, '{}')) AS r
    WHERE r IS NULL OR NOT r = ANY (v_settings) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'postkit: cannot reset %: the settings are %',
            coalesce(quote_literal(v_unknown), 'NULL'), array_to_string(v_settings, ', ')
            USING ERRCODE = 'PKQ01';
    END IF;
    -- The upsert creates the queue's settings row if need be and locks it until commit, so a
    -- concurrent update of the same queue waits here and then reads this one's result: two
    -- operators changing different settings of one queue at once both keep their change.
    INSERT INTO postkit_queue.queue_settings AS s (namespace, queue, updated_at)
    VALUES (p_namespace, p_queue, postkit_queue.clock())
    ON CONFLICT (namespace, queue) DO UPDATE SET updated_at = EXCLUDED.updated_at
    RETURNING s.* INTO v_current;

    -- configure_queue checks every value and writes the row (under the lock held above).
    SELECT * INTO max_attempts, visibility_timeout, backoff_base, backoff_cap, paused,
                  retain_completed, retain_dead, max_payload_bytes
    FROM postkit_queue.configure_queue(
        p_namespace, p_queue,
        CASE WHEN 'max_attempts' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_max_attempts, v_current.max_attempts) END,
        CASE WHEN 'visibility_timeout' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_visibility_timeout, v_current.visibility_timeout) END,
        CASE WHEN 'backoff_base' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_backoff_base, v_current.backoff_base) END,
        CASE WHEN 'backoff_cap' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_backoff_cap, v_current.backoff_cap) END,
        CASE WHEN 'retain_completed' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_retain_completed, v_current.retain_completed) END,
        CASE WHEN 'retain_dead' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_retain_dead, v_current.retain_dead) END,
        CASE WHEN 'max_payload_bytes' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_max_payload_bytes, v_current.max_payload_bytes) END);
END
$$;

-- outcomes_since: per queue, the jobs completed, dead-lettered, retried and rescued from the
-- start of the minute of p_since on. The counters only grow while their minutes are kept
-- (prune deletes minutes older than 2 hours), so two calls with the same p_since, within the
-- hour, differ by exactly the outcomes between them: `postkit stats --watch` shows rates from
-- that difference (stats' last-hour sums lose a minute's counts whenever that minute leaves
-- the window). A primary-key range scan of queue_stats: at most 120 minutes x 8 slots per
-- queue.
CREATE FUNCTION postkit_queue.outcomes_since(p_namespace text, p_since timestamptz)
RETURNS TABLE (queue text, completed bigint, failed bigint, retried bigint, rescued bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF p_since IS NULL THEN
        RAISE EXCEPTION 'postkit: since must not be NULL' USING ERRCODE = 'PKQ05';
    END IF;
    RETURN QUERY
    SELECT s.queue, sum(s.completed)::bigint, sum(s.dead)::bigint, sum(s.retried)::bigint,
           sum(s.rescued)::bigint
    FROM postkit_queue.queue_stats s
    WHERE s.namespace = p_namespace AND s.minute >= date_trunc('minute', p_since)
    GROUP BY s.queue
    ORDER BY s.queue;
END
$$;

-- Both are operators' calls (migration 9's API registry).
INSERT INTO postkit_queue.api (name, access) VALUES
    ('update_queue_settings', 'operator'), ('outcomes_since', 'operator');
