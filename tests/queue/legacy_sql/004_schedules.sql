-- Postkit queue, migration 4: recurring jobs.
--
-- A schedule pushes a job to a queue on a 5-field cron expression in a time zone, or every
-- fixed interval. The SDK parses cron expressions (with croniter) and computes each next run
-- time; the database owns the state: which schedules are due, and firing each due run exactly
-- once however many tickers run at once.
--
-- Catch-up policy: a ticker fires a due schedule once and moves it to its first run time after
-- now. Runs missed while nothing was ticking collapse into that one run, never a burst.

CREATE TABLE postkit_queue.schedules (
    namespace    text        NOT NULL,
    name         text        NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    cron         text,
    timezone     text        NOT NULL DEFAULT 'UTC',
    every        interval,
    priority     smallint    NOT NULL DEFAULT 0,
    max_attempts integer,
    paused       boolean     NOT NULL DEFAULT false,
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_job_id  bigint,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, name),
    CHECK ((cron IS NULL) <> (every IS NULL))
);

-- Serves due_schedules: the active schedules of a namespace, earliest next run first.
CREATE INDEX schedules_due_idx ON postkit_queue.schedules (namespace, next_run_at)
    WHERE NOT paused;

-- save_schedule: create a schedule, or replace the one with this name. Exactly one of p_cron
-- (with p_timezone) and p_every is given; p_next_run_at is its first run, computed by the
-- caller from the cron expression (or now + p_every).
CREATE FUNCTION postkit_queue.save_schedule(
    p_namespace    text,
    p_name         text,
    p_queue        text,
    p_payload      jsonb,
    p_next_run_at  timestamptz,
    p_cron         text     DEFAULT NULL,
    p_timezone     text     DEFAULT 'UTC',
    p_every        interval DEFAULT NULL,
    p_priority     integer  DEFAULT 0,
    p_max_attempts integer  DEFAULT NULL)
RETURNS SETOF postkit_queue.schedules
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('schedule name', p_name, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    IF (p_cron IS NULL) = (p_every IS NULL) THEN
        RAISE EXCEPTION 'postkit: a schedule needs exactly one of a cron expression and an '
                        'interval' USING ERRCODE = 'PKQ10';
    END IF;
    IF p_cron IS NOT NULL AND btrim(p_cron) = '' THEN
        RAISE EXCEPTION 'postkit: the cron expression is empty' USING ERRCODE = 'PKQ10';
    END IF;
    IF p_timezone IS NULL OR NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = p_timezone) THEN
        RAISE EXCEPTION 'postkit: unknown time zone %', coalesce(p_timezone, 'NULL')
            USING ERRCODE = 'PKQ10';
    END IF;
    PERFORM postkit_queue.check_duration('every', p_every, false, interval '3650 days');
    IF p_every IS NOT NULL AND p_every < interval '1 second' THEN
        RAISE EXCEPTION 'postkit: a schedule runs at most every second, got %', p_every
            USING ERRCODE = 'PKQ05';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'postkit: payload must not be null' USING ERRCODE = 'PKQ02';
    END IF;
    IF p_next_run_at IS NULL OR NOT isfinite(p_next_run_at) THEN
        RAISE EXCEPTION 'postkit: next_run_at must be a time' USING ERRCODE = 'PKQ10';
    END IF;
    PERFORM postkit_queue.check_priority(p_priority);
    PERFORM postkit_queue.check_max_attempts(p_max_attempts);

    RETURN QUERY
    INSERT INTO postkit_queue.schedules AS s (
        namespace, name, queue, payload, cron, timezone, every, priority, max_attempts,
        next_run_at, created_at, updated_at)
    VALUES (p_namespace, p_name, p_queue, p_payload, p_cron, p_timezone, p_every, p_priority,
            p_max_attempts, p_next_run_at, v_now, v_now)
    ON CONFLICT (namespace, name) DO UPDATE
    SET queue = EXCLUDED.queue, payload = EXCLUDED.payload, cron = EXCLUDED.cron,
        timezone = EXCLUDED.timezone, every = EXCLUDED.every, priority = EXCLUDED.priority,
        max_attempts = EXCLUDED.max_attempts, next_run_at = EXCLUDED.next_run_at,
        updated_at = EXCLUDED.updated_at
    RETURNING s.*;
END
$$;

-- schedules: every schedule of a namespace, by name.
CREATE FUNCTION postkit_queue.schedules(p_namespace text)
RETURNS SETOF postkit_queue.schedules
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    RETURN QUERY
    SELECT * FROM postkit_queue.schedules s WHERE s.namespace = p_namespace ORDER BY s.name;
END
$$;

-- set_schedule_paused: pause or resume a schedule. A resumed schedule fires once if it became
-- due while paused (the catch-up policy). Returns false when there is no such schedule.
CREATE FUNCTION postkit_queue.set_schedule_paused(
    p_namespace text, p_name text, p_paused boolean)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('schedule name', p_name, true);
    UPDATE postkit_queue.schedules s
    SET paused = p_paused, updated_at = postkit_queue.clock()
    WHERE s.namespace = p_namespace AND s.name = p_name;
    RETURN FOUND;
END
$$;

-- delete_schedule: returns false when there is no such schedule.
CREATE FUNCTION postkit_queue.delete_schedule(p_namespace text, p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('schedule name', p_name, true);
    DELETE FROM postkit_queue.schedules s WHERE s.namespace = p_namespace AND s.name = p_name;
    RETURN FOUND;
END
$$;

-- due_schedules: lock and return up to p_limit active schedules whose next run is due. The
-- locks last until the caller's transaction ends; a concurrent ticker skips locked rows (SKIP
-- LOCKED) and, after this one commits, finds them no longer due.
CREATE FUNCTION postkit_queue.due_schedules(p_namespace text, p_limit integer DEFAULT 100)
RETURNS SETOF postkit_queue.schedules
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    -- A range scan of schedules_due_idx.
    RETURN QUERY
    SELECT * FROM postkit_queue.schedules s
    WHERE s.namespace = p_namespace AND NOT s.paused AND s.next_run_at <= postkit_queue.clock()
    ORDER BY s.next_run_at
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED;
END
$$;

-- fire_schedule: push the schedule's job for the run due at p_due_at and move the schedule to
-- p_next_run_at. Fenced on p_due_at: if the schedule was fired (or changed) since the caller
-- read it, nothing happens and it returns NULL, so each run fires exactly once. Returns the
-- pushed job's id.
CREATE FUNCTION postkit_queue.fire_schedule(
    p_namespace text, p_name text, p_due_at timestamptz, p_next_run_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_schedule postkit_queue.schedules;
    v_job_id   bigint;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('schedule name', p_name, true);
    IF p_next_run_at IS NULL OR p_next_run_at <= p_due_at THEN
        RAISE EXCEPTION 'postkit: the next run (%) must come after the one firing (%)',
            p_next_run_at, p_due_at USING ERRCODE = 'PKQ10';
    END IF;
    SELECT * INTO v_schedule FROM postkit_queue.schedules s
    WHERE s.namespace = p_namespace AND s.name = p_name AND s.next_run_at = p_due_at
      AND NOT s.paused
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_job_id := postkit_queue.push(
        p_namespace, v_schedule.queue, v_schedule.payload, NULL, v_schedule.priority,
        v_schedule.max_attempts);
    UPDATE postkit_queue.schedules s
    SET next_run_at = p_next_run_at, last_run_at = postkit_queue.clock(),
        last_job_id = v_job_id
    WHERE s.namespace = p_namespace AND s.name = p_name;
    RETURN v_job_id;
END
$$;
