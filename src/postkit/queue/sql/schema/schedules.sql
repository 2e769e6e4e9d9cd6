-- Schedules: recurring jobs.
--
-- Recurring jobs. A schedule pushes a job to a queue on a 5-field cron expression in a time
-- zone, or every fixed interval. The SDK computes each next run time with croniter; the
-- database owns the state: which schedules are due, and firing each due run exactly once
-- however many tickers run at once.
--
-- Catch-up policy: a ticker fires a due schedule once and moves it to its first run time after
-- now. Runs missed while nothing was ticking collapse into that one run, never a burst.
--
-- Every value the SQL accepts is one the tickers can use: save_schedule accepts exactly the
-- cron expressions the SDK accepts (cron_problem, mirrored by postkit.queue's cron check) and
-- refuses one that can never fire; a schedule whose next run a ticker still cannot compute (a
-- time zone its Python does not know) is marked broken by that ticker (mark_schedule_broken) and
-- skipped until it is saved again, while the others fire; so is one whose job its queue
-- refuses (fire_schedule_run). Run times stay within a century of the queue's clock, inside
-- what every driver reads.

-- cron_value: the number a token of a cron field names: digits, or in the month and
-- day-of-week fields a three-letter name (jan = 1, sun = 0). NULL for anything else.
CREATE OR REPLACE FUNCTION postkit_queue.cron_value(p_token text, p_field integer)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN p_token ~ '^[0-9]{1,4}$' THEN p_token::integer
        WHEN p_field = 4 THEN pg_catalog.array_position(
            ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov',
                  'dec'], p_token)
        WHEN p_field = 5 THEN pg_catalog.array_position(
            ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], p_token) - 1
    END
$$;

-- cron_problem: why p_cron is not a cron expression Postkit schedules, or NULL when it is.
--
-- The grammar (the SDK's protocol.cron_problem implements the same one, and a test runs both
-- over the same expressions): five fields separated by ASCII whitespace, minute (0-59), hour
-- (0-23), day of month (1-31), month (1-12 or jan-dec), day of week (0-7 or sun-sat, 7 is
-- Sunday). A field is a comma-separated list of items: *, a value, a range a-b (a <= b), each
-- of those with a step /n (1 <= n <= the field's span), or a/n (from a to the field's end).
-- The day of month also takes L (its last day) and ?, the day of week ? and v#n (the n-th
-- weekday v of the month, 1 <= n <= 5; a list of those, not mixed with other items). Letters
-- are case-insensitive. Every expression it accepts, croniter accepts with the same meaning.
--
-- An expression that can never fire is refused: with the day of week unrestricted, days of
-- month that none of its months has (30 and 31 in February, 31 in April). An n-th weekday
-- together with a restricted day of month is refused too: croniter requires both, and they
-- rarely meet (the first of a month is never a second Monday).
CREATE OR REPLACE FUNCTION postkit_queue.cron_problem(p_cron text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_names      constant text[] := ARRAY['minute', 'hour', 'day of month', 'month',
                                          'day of week'];
    v_low        constant integer[] := ARRAY[0, 0, 1, 1, 0];
    v_high       constant integer[] := ARRAY[59, 23, 31, 12, 7];
    v_month_days constant integer[] := ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    v_fields     text[];
    v_field      text;
    v_item       text;
    v_match      text[];
    v_lo         integer;
    v_hi         integer;
    v_step       integer;
    v_any        boolean[] := ARRAY[false, false, false, false, false];
    v_days       integer[] := '{}';
    v_months     integer[] := '{}';
    v_last_day   boolean := false;
    v_nth        boolean := false;
    v_plain_weekday boolean := false;
BEGIN
    IF p_cron IS NULL THEN
        RETURN 'the cron expression is null';
    END IF;
    IF p_cron !~ '^[ -~\t\n\r\v\f]*$' THEN
        RETURN format('the cron expression %s holds a character other than printable ASCII',
                      quote_literal(p_cron));
    END IF;
    v_fields := regexp_split_to_array(btrim(p_cron, E' \t\n\r\x0B\f'), '[ \t\n\r\v\f]+');
    IF cardinality(v_fields) <> 5 THEN
        RETURN format('not a 5-field cron expression (minute hour day-of-month month '
                      'day-of-week): %s', quote_literal(p_cron));
    END IF;
    FOR v_i IN 1..5 LOOP
        v_field := lower(v_fields[v_i]);
        IF v_field = '*' OR (v_field = '?' AND v_i IN (3, 5)) THEN
            v_any[v_i] := true;
            CONTINUE;
        END IF;
        FOREACH v_item IN ARRAY string_to_array(v_field, ',') LOOP
            IF v_i = 3 AND v_item = 'l' THEN
                v_last_day := true;
                CONTINUE;
            END IF;
            IF v_i = 5 THEN
                v_match := regexp_match(v_item, '^([0-9]{1,4}|[a-z]{3})#([0-9]{1,4})$');
                IF v_match IS NOT NULL THEN
                    v_lo := postkit_queue.cron_value(v_match[1], 5);
                    IF v_lo IS NULL OR v_lo > 7 OR v_match[2]::integer NOT BETWEEN 1 AND 5 THEN
                        RETURN format('%s in the day-of-week field of %s is not weekday#n '
                                      '(n from 1 to 5)', quote_literal(v_item),
                                      quote_literal(p_cron));
                    END IF;
                    v_nth := true;
                    CONTINUE;
                END IF;
            END IF;
            v_plain_weekday := v_plain_weekday OR v_i = 5;
            -- Groups: 1 the item before any step, 2 its start, 4 its end, 6 the step.
            v_match := regexp_match(
                v_item, '^(\*|([0-9]{1,4}|[a-z]{3})(-([0-9]{1,4}|[a-z]{3}))?)(/([0-9]{1,4}))?$');
            IF v_match IS NULL THEN
                RETURN format('%s in the %s field of %s is not a cron item', quote_literal(v_item),
                              v_names[v_i], quote_literal(p_cron));
            END IF;
            IF v_match[1] = '*' THEN
                v_lo := v_low[v_i];
                v_hi := v_high[v_i];
            ELSE
                v_lo := postkit_queue.cron_value(v_match[2], v_i);
                v_hi := CASE WHEN v_match[4] IS NOT NULL
                             THEN postkit_queue.cron_value(v_match[4], v_i)
                             WHEN v_match[6] IS NOT NULL THEN v_high[v_i]
                             ELSE v_lo END;
            END IF;
            IF v_lo IS NULL OR v_hi IS NULL OR v_lo < v_low[v_i] OR v_hi > v_high[v_i] THEN
                RETURN format('%s in the %s field of %s is out of range (%s to %s)',
                              quote_literal(v_item), v_names[v_i], quote_literal(p_cron),
                              v_low[v_i], v_high[v_i]);
            END IF;
            IF v_lo > v_hi THEN
                RETURN format('the range %s in the %s field of %s runs backwards',
                              quote_literal(v_item), v_names[v_i], quote_literal(p_cron));
            END IF;
            v_step := coalesce(v_match[6]::integer, 1);
            IF v_step NOT BETWEEN 1 AND v_high[v_i] - v_low[v_i] + 1 THEN
                RETURN format('the step of %s in the %s field of %s must be from 1 to %s',
                              quote_literal(v_item), v_names[v_i], quote_literal(p_cron),
                              v_high[v_i] - v_low[v_i] + 1);
            END IF;
            IF v_i = 3 THEN
                v_days := v_days || ARRAY(SELECT generate_series(v_lo, v_hi, v_step));
            ELSIF v_i = 4 THEN
                v_months := v_months || ARRAY(SELECT generate_series(v_lo, v_hi, v_step));
            END IF;
        END LOOP;
    END LOOP;
    IF v_nth AND v_plain_weekday THEN
        RETURN format('%s mixes n-th weekdays (#) with other days of the week: give one kind',
                      quote_literal(p_cron));
    END IF;
    IF v_nth AND NOT v_any[3] THEN
        RETURN format('%s names both days of the month and an n-th weekday (#), which may '
                      'never coincide: give one of them', quote_literal(p_cron));
    END IF;
    -- With both day fields restricted, cron runs on either (the union), and every weekday
    -- comes in every month; with the day of week unrestricted, the days of month alone decide.
    IF v_any[5] AND NOT v_any[3] AND NOT v_last_day AND NOT v_any[4] AND NOT EXISTS (
        SELECT 1 FROM unnest(v_days) d, unnest(v_months) m WHERE d <= v_month_days[m]) THEN
        RETURN format('%s never fires: none of its months has those days',
                      quote_literal(p_cron));
    END IF;
    RETURN NULL;
END
$$;

-- require_run_time: a schedule's run time must be a time, within a century of the queue's clock:
-- far enough for any cron expression or interval (the rarest expression, the fifth Friday of
-- February, comes every 28 years), and inside the range every driver can read (Python's
-- datetime ends at year 9999; PostgreSQL's timestamps go on to 294276 and 'infinity').
CREATE OR REPLACE FUNCTION postkit_queue.require_run_time(p_what text, p_at timestamptz)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_at IS NULL OR NOT isfinite(p_at)
       OR p_at NOT BETWEEN postkit_queue.clock() - interval '100 years'
                       AND postkit_queue.clock() + interval '100 years' THEN
        RAISE EXCEPTION 'postkit: % must be a time within 100 years of now, got %', p_what,
            coalesce(p_at::text, 'NULL') USING ERRCODE = 'PKQ10';
    END IF;
END
$$;

-- save_schedule: create a schedule, or replace the one with this name (which repairs a broken
-- one). Exactly one of p_cron (with p_timezone) and p_every is given; p_next_run_at is its
-- first run, computed by the caller from the cron expression (or now + p_every).
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.save_schedule(
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
    v_now     timestamptz := postkit_queue.clock();
    v_problem text;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('schedule name', p_name, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    IF (p_cron IS NULL) = (p_every IS NULL) THEN
        RAISE EXCEPTION 'postkit: a schedule needs exactly one of a cron expression and an '
                        'interval' USING ERRCODE = 'PKQ10';
    END IF;
    IF p_cron IS NOT NULL THEN
        v_problem := postkit_queue.cron_problem(p_cron);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'postkit: %', v_problem USING ERRCODE = 'PKQ10';
        END IF;
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
    -- A month has no fixed length: an interval of months is a cron expression's job.
    IF p_every IS NOT NULL AND (extract(month FROM p_every) <> 0
                                OR extract(year FROM p_every) <> 0) THEN
        RAISE EXCEPTION 'postkit: a schedule interval counts days, hours, minutes and seconds, '
                        'not months (got %); for a monthly run use a cron expression', p_every
            USING ERRCODE = 'PKQ05';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'postkit: payload must not be null' USING ERRCODE = 'PKQ02';
    END IF;
    PERFORM postkit_queue.require_run_time('next_run_at', p_next_run_at);
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
        updated_at = EXCLUDED.updated_at, broken_at = NULL, broken_reason = NULL
    RETURNING s.*;
END
$$;

-- schedules: the schedules of a namespace, by name: every one, or a page of p_limit after the
-- name p_after. A range scan of the primary key.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.schedules(
    p_namespace text, p_after text DEFAULT NULL, p_limit integer DEFAULT NULL)
RETURNS SETOF postkit_queue.schedules
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF p_limit IS NOT NULL THEN
        PERFORM postkit_queue.check_limit(p_limit, 10000);
    END IF;
    RETURN QUERY
    SELECT * FROM postkit_queue.schedules s
    WHERE s.namespace = p_namespace AND (p_after IS NULL OR s.name > p_after)
    ORDER BY s.name
    LIMIT p_limit;
END
$$;

-- schedule_runs: each schedule's last run and what became of its job, by schedule name:
-- 'pending', 'scheduled' or 'running' while the job is live (attempts so far, the last
-- attempt's error), 'dead' once it is a dead letter (failed_at as finished_at, the last
-- error), 'completed' when its queue archives completed jobs (completed_at). NULL when the
-- schedule never fired, or when its job left without a trace: completed in a queue that keeps
-- no archive (the usual end), cancelled, purged, or pruned after its retention. Three
-- primary-key lookups per schedule (jobs, dead_letters, completed_jobs; each LIMIT 1 keeps it
-- a lookup, never a join that reads a whole table), after a range scan of the schedules': of
-- every one, or of the page schedules() returns for the same p_after and p_limit.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.schedule_runs(
    p_namespace text, p_after text DEFAULT NULL, p_limit integer DEFAULT NULL)
RETURNS TABLE (
    name text, last_run_at timestamptz, last_job_id bigint, last_job_state text,
    attempts integer, finished_at timestamptz, error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF p_limit IS NOT NULL THEN
        PERFORM postkit_queue.check_limit(p_limit, 10000);
    END IF;
    RETURN QUERY
    SELECT s.name, s.last_run_at, s.last_job_id,
           CASE WHEN j.state = 'running' THEN 'running'
                WHEN j.state = 'pending' AND j.run_at > v_now THEN 'scheduled'
                WHEN j.state = 'pending' THEN 'pending'
                WHEN d.failed_at IS NOT NULL THEN 'dead'
                WHEN c.completed_at IS NOT NULL THEN 'completed' END,
           coalesce(j.attempts, d.attempts, c.attempts),
           coalesce(d.failed_at, c.completed_at),
           coalesce(d.error, j.errors -> -1 ->> 'error')
    FROM postkit_queue.schedules s
    LEFT JOIN LATERAL (
        SELECT l.state, l.run_at, l.attempts, l.errors FROM postkit_queue.jobs l
        WHERE l.namespace = p_namespace AND l.id = s.last_job_id LIMIT 1) j ON true
    LEFT JOIN LATERAL (
        SELECT l.failed_at, l.attempts, l.error FROM postkit_queue.dead_letters l
        WHERE l.namespace = p_namespace AND l.job_id = s.last_job_id LIMIT 1) d ON true
    LEFT JOIN LATERAL (
        SELECT l.completed_at, l.attempts FROM postkit_queue.completed_jobs l
        WHERE l.namespace = p_namespace AND l.job_id = s.last_job_id LIMIT 1) c ON true
    WHERE s.namespace = p_namespace AND (p_after IS NULL OR s.name > p_after)
    ORDER BY s.name
    LIMIT p_limit;
END
$$;

-- due_schedules: lock and return up to p_limit active schedules whose next run is due; broken
-- ones wait until they are saved again. The locks last until the caller's transaction ends; a
-- concurrent ticker skips locked rows (SKIP LOCKED) and, after this one commits, finds them no
-- longer due.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.due_schedules(
    p_namespace text, p_limit integer DEFAULT 100)
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
    WHERE s.namespace = p_namespace AND NOT s.paused AND s.broken_at IS NULL
      AND s.next_run_at <= postkit_queue.clock()
    ORDER BY s.next_run_at
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED;
END
$$;

-- next_schedule_at: the earliest next run of the namespace's active schedules; NULL when it
-- has none; broken schedules do not count, since they never fire. A worker asks at least once
-- a second and fires the schedule then, as it wakes for the earliest delayed job. One probe of
-- schedules_due_idx (namespace, next_run_at) WHERE NOT paused AND broken_at IS NULL, whose
-- predicate matches this one; it locks nothing, and a schedule another ticker is firing
-- still counts until that ticker commits.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.next_schedule_at(p_namespace text)
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

-- fire_schedule_run: push the schedule's job for the run due at p_due_at and move the schedule
-- to p_next_run_at. Fenced on p_due_at: if the schedule was fired (or changed, or marked broken)
-- since the caller read it, nothing happens and it returns no row, so each run fires exactly
-- once. Returns one row: the pushed job's id; or, when the queue refuses the job (a payload
-- over a max_payload_bytes set after the schedule was saved), a NULL id and the reason, the
-- schedule marked broken: one schedule's trouble must not abort the caller's whole tick.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.fire_schedule_run(
    p_namespace text, p_name text, p_due_at timestamptz, p_next_run_at timestamptz)
RETURNS TABLE (job_id bigint, broken_reason text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_schedule postkit_queue.schedules;
    v_job_id   bigint;
    v_reason   text;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('schedule name', p_name, true);
    IF p_next_run_at IS NULL OR p_next_run_at <= p_due_at THEN
        RAISE EXCEPTION 'postkit: the next run (%) must come after the one firing (%)',
            p_next_run_at, p_due_at USING ERRCODE = 'PKQ10';
    END IF;
    PERFORM postkit_queue.require_run_time('the next run', p_next_run_at);
    SELECT * INTO v_schedule FROM postkit_queue.schedules s
    WHERE s.namespace = p_namespace AND s.name = p_name AND s.next_run_at = p_due_at
      AND NOT s.paused AND s.broken_at IS NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- A subtransaction, so that a refused push rolls back alone; the row lock above is the
    -- outer transaction's and stays.
    BEGIN
        v_job_id := postkit_queue.push(
            p_namespace, v_schedule.queue, v_schedule.payload, NULL, v_schedule.priority,
            v_schedule.max_attempts);
    EXCEPTION WHEN OTHERS THEN
        IF SQLSTATE NOT LIKE 'PKQ%' THEN
            RAISE;
        END IF;
        v_reason := left('cannot push its job: ' || regexp_replace(SQLERRM, '^postkit: ', ''),
                         2000);
        UPDATE postkit_queue.schedules s
        SET broken_at = postkit_queue.clock(), broken_reason = v_reason
        WHERE s.namespace = p_namespace AND s.name = p_name;
        RETURN QUERY SELECT NULL::bigint, v_reason;
        RETURN;
    END;
    UPDATE postkit_queue.schedules s
    SET next_run_at = p_next_run_at, last_run_at = postkit_queue.clock(),
        last_job_id = v_job_id
    WHERE s.namespace = p_namespace AND s.name = p_name;
    RETURN QUERY SELECT v_job_id, NULL::text;
END
$$;

-- fire_schedule: fire_schedule_run for callers that want the job id alone: NULL when the run
-- was fenced out, or when its queue refused the job (the schedule is then broken).
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.fire_schedule(
    p_namespace text, p_name text, p_due_at timestamptz, p_next_run_at timestamptz)
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.job_id FROM postkit_queue.fire_schedule_run(p_namespace, p_name, p_due_at,
                                                         p_next_run_at) r
$$;

-- mark_schedule_broken: a ticker could not compute the next run of the schedule due at
-- p_due_at (its cron expression or time zone is one the ticker cannot use). The schedule stops
-- firing, keeps p_reason for the operator, and fires again once saved again (save_schedule).
-- Fenced on p_due_at like fire_schedule: returns false, changing nothing, when the schedule
-- moved on or changed since the caller read it.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.mark_schedule_broken(
    p_namespace text, p_name text, p_due_at timestamptz, p_reason text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('schedule name', p_name, true);
    IF p_reason IS NULL OR btrim(p_reason) = '' THEN
        RAISE EXCEPTION 'postkit: a broken schedule needs a reason' USING ERRCODE = 'PKQ10';
    END IF;
    UPDATE postkit_queue.schedules s
    SET broken_at = postkit_queue.clock(), broken_reason = left(p_reason, 2000)
    WHERE s.namespace = p_namespace AND s.name = p_name AND s.next_run_at = p_due_at
      AND s.broken_at IS NULL;
    RETURN FOUND;
END
$$;

-- set_schedule_paused: pause or resume a schedule. A resumed schedule fires once if it became
-- due while paused (the catch-up policy). Returns false when there is no such schedule.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.set_schedule_paused(
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
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.delete_schedule(p_namespace text, p_name text)
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
