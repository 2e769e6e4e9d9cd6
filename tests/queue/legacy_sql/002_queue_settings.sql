-- Postkit queue, migration 2: per-queue settings.
--
-- A queue may override the defaults its jobs get when push and pull do not say: max_attempts,
-- the visibility timeout of a claim, and the base and cap of nack's exponential backoff.
-- A job's own push arguments still win over its queue's settings.

CREATE TABLE postkit_queue.queue_settings (
    namespace          text        NOT NULL,
    queue              text        NOT NULL,
    max_attempts       integer     CHECK (max_attempts BETWEEN 1 AND 1000),
    visibility_timeout interval,
    backoff_base       interval,
    backoff_cap        interval,
    paused             boolean     NOT NULL DEFAULT false,
    retain_completed   interval,
    retain_dead        interval,
    max_payload_bytes  integer     CHECK (max_payload_bytes BETWEEN 1 AND 104857600),
    updated_at         timestamptz NOT NULL,
    -- Serves queue_policy: one primary-key lookup per push, pull or nack that uses a default.
    PRIMARY KEY (namespace, queue)
);

CREATE OR REPLACE FUNCTION postkit_queue.queue_policy(
    p_namespace text, p_queue text,
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(s.max_attempts, 20),
           coalesce(s.visibility_timeout, interval '30 seconds'),
           coalesce(s.backoff_base, interval '1 second'),
           coalesce(s.backoff_cap, interval '1 hour'),
           coalesce(s.paused, false),
           s.retain_completed,
           coalesce(s.retain_dead, interval '30 days'),
           coalesce(s.max_payload_bytes, 1048576)
    FROM (SELECT) AS defaults
    LEFT JOIN postkit_queue.queue_settings s
           ON s.namespace = p_namespace AND s.queue = p_queue
$$;

-- configure_queue: set a queue's defaults and retention. NULL puts a setting back to the
-- built-in default (max_attempts 20, visibility timeout 30 s, backoff 1 s doubling up to 1 h;
-- completed jobs deleted at once; dead letters kept 30 days; payloads up to 1 MiB). Pausing is
-- separate (pause_queue). Returns the policy now in force.
CREATE FUNCTION postkit_queue.configure_queue(
    p_namespace          text,
    p_queue              text,
    p_max_attempts       integer  DEFAULT NULL,
    p_visibility_timeout interval DEFAULT NULL,
    p_backoff_base       interval DEFAULT NULL,
    p_backoff_cap        interval DEFAULT NULL,
    p_retain_completed   interval DEFAULT NULL,
    p_retain_dead        interval DEFAULT NULL,
    p_max_payload_bytes  integer  DEFAULT NULL,
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_max_attempts(p_max_attempts);
    PERFORM postkit_queue.check_duration(
        'visibility_timeout', p_visibility_timeout, false, interval '12 hours');
    PERFORM postkit_queue.check_duration('backoff_base', p_backoff_base, false, interval '1 day');
    PERFORM postkit_queue.check_duration('backoff_cap', p_backoff_cap, false, interval '30 days');
    PERFORM postkit_queue.check_duration(
        'retain_completed', p_retain_completed, false, interval '3650 days');
    PERFORM postkit_queue.check_duration('retain_dead', p_retain_dead, false, interval '3650 days');
    IF p_max_payload_bytes IS NOT NULL AND p_max_payload_bytes NOT BETWEEN 1 AND 104857600 THEN
        RAISE EXCEPTION 'postkit: max_payload_bytes must be between 1 and 104857600 (100 MiB), '
                        'got %', p_max_payload_bytes USING ERRCODE = 'PKQ02';
    END IF;

    INSERT INTO postkit_queue.queue_settings AS s (
        namespace, queue, max_attempts, visibility_timeout, backoff_base, backoff_cap,
        retain_completed, retain_dead, max_payload_bytes, updated_at)
    VALUES (p_namespace, p_queue, p_max_attempts, p_visibility_timeout, p_backoff_base,
            p_backoff_cap, p_retain_completed, p_retain_dead, p_max_payload_bytes,
            postkit_queue.clock())
    ON CONFLICT (namespace, queue) DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts,
        visibility_timeout = EXCLUDED.visibility_timeout,
        backoff_base = EXCLUDED.backoff_base,
        backoff_cap = EXCLUDED.backoff_cap,
        retain_completed = EXCLUDED.retain_completed,
        retain_dead = EXCLUDED.retain_dead,
        max_payload_bytes = EXCLUDED.max_payload_bytes,
        updated_at = EXCLUDED.updated_at;

    SELECT * INTO max_attempts, visibility_timeout, backoff_base, backoff_cap, paused,
                  retain_completed, retain_dead, max_payload_bytes
    FROM postkit_queue.queue_policy(p_namespace, p_queue);
END
$$;
