-- Helpers of the state machine: the clock, policies, input checks, the fence, counters.
--
-- Internal helpers of the state machine: the clock, a queue's policy, the input checks, the
-- claim fence, notifications and the outcome counters. No caller may execute these
-- (security.sql); the API functions call them.
--
-- Why the hot helpers are PL/pgSQL: a SQL-language function that pins search_path cannot be
-- inlined, and PostgreSQL before 18 plans its body again on every call (queue_policy alone cost
-- about 150 us per push that way), while PL/pgSQL keeps each statement's plan for the session.
-- Functions that run queries set plan_cache_mode = force_generic_plan: each statement is
-- planned once per session instead of afresh on each of its first five calls (about 250 us per
-- pull); tests/queue/test_plans_without_statistics.py checks those generic plans.

-- The clock every function reads: the statement's time (stable within a statement and, unlike
-- now(), not frozen at the start of a long caller transaction), moved by
-- postkit_queue.clock_offset in a superuser's session (the test suite's seam for deadlines and
-- delays). Any other session that sets the offset gets an error instead of a clock it could use
-- to store run_at = -infinity or to expire other workers' claims; an offset that is infinite or
-- over a century is refused too.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.clock() RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_setting text := current_setting('postkit_queue.clock_offset', true);
    v_now     timestamptz;
BEGIN
    IF v_setting IS NULL OR v_setting = '' THEN
        RETURN statement_timestamp();
    END IF;
    IF NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r
                     WHERE r.rolname = session_user), false) THEN
        RAISE EXCEPTION 'postkit: postkit_queue.clock_offset is a test setting: only a '
                        'superuser''s session may move the queue''s clock'
            USING ERRCODE = '42501';
    END IF;
    BEGIN
        v_now := statement_timestamp() + v_setting::interval;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow
                   OR interval_field_overflow THEN
        v_now := NULL;
    END;
    -- Within a century: every time the queue stores from this clock stays one that every
    -- driver reads (Python's datetime ends at year 9999).
    IF v_now IS NULL OR NOT isfinite(v_now)
       OR v_now NOT BETWEEN statement_timestamp() - interval '100 years'
                        AND statement_timestamp() + interval '100 years' THEN
        RAISE EXCEPTION 'postkit: postkit_queue.clock_offset must be a finite interval of at '
                        'most 100 years, got %', v_setting USING ERRCODE = 'PKQ05';
    END IF;
    RETURN v_now;
END
$$;

-- The built-in defaults of a queue's policy that push reads without calling queue_policy. A
-- SQL-standard function of one constant is inlined and folded into the statement that calls it.
CREATE OR REPLACE FUNCTION postkit_queue.default_max_attempts()
RETURNS integer
LANGUAGE sql IMMUTABLE
RETURN 20;

CREATE OR REPLACE FUNCTION postkit_queue.default_max_payload_bytes()
RETURNS integer
LANGUAGE sql IMMUTABLE
RETURN 1048576;

-- A queue's policy: its settings row (queue_settings) over the built-in defaults: max_attempts
-- 20, visibility timeout 30 s, backoff from 1 s to 1 h, not paused, completed jobs deleted at
-- once (retain_completed NULL), dead letters kept 30 days, payloads up to 1 MiB, results not
-- kept (retain_results NULL), no flow limits (NULL, group_ordered false), claims in pull order
-- (fair false), no limit on pending jobs (max_pending NULL). Every function asks
-- here, so the defaults live in one place (keeps_completed, keep_completed and
-- record_outcomes read the two retentions and the limits without a default off
-- queue_settings itself).
CREATE OR REPLACE FUNCTION postkit_queue.queue_policy(
    p_namespace text, p_queue text,
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer,
    OUT retain_results interval, OUT concurrency integer, OUT rate_limit integer,
    OUT rate_period interval, OUT group_concurrency integer, OUT group_ordered boolean,
    OUT fair boolean, OUT max_pending integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    -- A primary-key probe of queue_settings; a queue without a row gets every default.
    SELECT s.max_attempts, s.visibility_timeout, s.backoff_base, s.backoff_cap, s.paused,
           s.retain_completed, s.retain_dead, s.max_payload_bytes, s.retain_results,
           s.concurrency, s.rate_limit, s.rate_period, s.group_concurrency, s.group_ordered,
           s.fair, s.max_pending
    INTO max_attempts, visibility_timeout, backoff_base, backoff_cap, paused,
         retain_completed, retain_dead, max_payload_bytes, retain_results,
         concurrency, rate_limit, rate_period, group_concurrency, group_ordered, fair,
         max_pending
    FROM postkit_queue.queue_settings s
    WHERE s.namespace = p_namespace AND s.queue = p_queue;
    max_attempts := coalesce(max_attempts, postkit_queue.default_max_attempts());
    visibility_timeout := coalesce(visibility_timeout, interval '30 seconds');
    backoff_base := coalesce(backoff_base, interval '1 second');
    backoff_cap := coalesce(backoff_cap, interval '1 hour');
    paused := coalesce(paused, false);
    retain_dead := coalesce(retain_dead, interval '30 days');
    max_payload_bytes := coalesce(max_payload_bytes,
                                  postkit_queue.default_max_payload_bytes());
    group_ordered := coalesce(group_ordered, false);
    fair := coalesce(fair, false);
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Input checks. Each raises before anything is written, with a message a person can act on, and
-- has a twin in the SDK (postkit/queue/limits.py), which runs it before it sends anything, so
-- that a bad argument never aborts the caller's transaction; tests/queue/test_limits.py proves
-- the two agree at every boundary.
--
--   * Durations are checked by their effect. PostgreSQL compares intervals field by field
--     normalized with 30-day months and 24-hour days, so '-1 years +360 days 11:00:00' compares
--     as 11 hours while adding it to a time moves the clock back about five days. A duration
--     has no negative field (months, days and time each zero or positive): then its effect is
--     zero or positive from any starting time, in any time zone, and zero exactly when every
--     field is, so the check is exact without a reference time ('-1 months +31 days' moves
--     2000-03-01 forward two days but 2000-02-01 not at all). The upper bound is compared
--     normalized; a month there counts 30 days, at most a day off a calendar month, which a
--     sanity limit of hours or years can afford.
--   * Arrays are one-dimensional with lower bound 1, and the arrays of ids and claim tokens hold
--     no NULL: a 2-D array would read every key as NULL, and one starting at 0 would give each
--     job its neighbour's key.
--   * A payload is measured at its real size, not pg_column_size's compressed one.
--   * Names refuse control and format characters (Unicode Cc and Cf: tab, newline, escape,
--     zero-width spaces and joiners, bidi controls, the byte order mark...), and a name made
--     only of space separators (Unicode Zs, Zl, Zp: also U+00A0 and U+3000) is blank.
--   * A bare job id never settles a claim: ack, nack, fail, extend_visibility and release
--     refuse a call with neither claim token nor worker_id (PKQ13), and a claim taken without a
--     worker_id can only be settled with its claim token.
-- ---------------------------------------------------------------------------------------------

-- A queue's flow limits (configure_queue; flow.sql), each NULL or in range: concurrency 1 to
-- 100000; a rate of 1 to 100000 claims per period of more than zero and at most a day, the limit
-- and its period both given or neither; group_concurrency 1 to 10000; group_ordered with a
-- group_concurrency of at most 1 (ordered means one job of a key at a time).
CREATE OR REPLACE FUNCTION postkit_queue.check_flow_limits(
    p_concurrency integer, p_rate_limit integer, p_rate_period interval,
    p_group_concurrency integer, p_group_ordered boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_concurrency IS NOT NULL AND p_concurrency NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'postkit: concurrency must be between 1 and 100000, got %',
            p_concurrency USING ERRCODE = 'PKQ17';
    END IF;
    IF (p_rate_limit IS NULL) <> (p_rate_period IS NULL) THEN
        RAISE EXCEPTION 'postkit: a rate is a number of claims and a period, both or neither '
                        '(got % claims per %)', coalesce(p_rate_limit::text, 'NULL'),
            coalesce(p_rate_period::text, 'NULL') USING ERRCODE = 'PKQ17';
    END IF;
    IF p_rate_limit IS NOT NULL AND p_rate_limit NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'postkit: a rate limit must be between 1 and 100000 claims per period, '
                        'got %', p_rate_limit USING ERRCODE = 'PKQ17';
    END IF;
    PERFORM postkit_queue.check_duration('rate_period', p_rate_period, false, interval '1 day');
    IF p_group_concurrency IS NOT NULL AND p_group_concurrency NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'postkit: group_concurrency must be between 1 and 10000, got %',
            p_group_concurrency USING ERRCODE = 'PKQ17';
    END IF;
    IF p_group_ordered AND p_group_concurrency > 1 THEN
        RAISE EXCEPTION 'postkit: group_ordered runs one job of a key at a time, so '
                        'group_concurrency must be 1 or unset, got %', p_group_concurrency
            USING ERRCODE = 'PKQ17';
    END IF;
END
$$;

-- A name (namespace, queue, worker id...): at most 128 characters, not blank, no control or
-- format character; NULL only where p_allow_null.
CREATE OR REPLACE FUNCTION postkit_queue.check_name(p_what text, p_value text, p_required boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_control text;
BEGIN
    IF p_value IS NULL THEN
        IF p_required THEN
            RAISE EXCEPTION 'postkit: % must not be null', p_what USING ERRCODE = 'PKQ01';
        END IF;
        RETURN;
    END IF;
    IF postkit_queue.is_name(p_value) THEN
        RETURN;
    END IF;
    IF char_length(p_value) > 128 THEN
        RAISE EXCEPTION 'postkit: % is % characters long; the limit is 128',
            p_what, char_length(p_value) USING ERRCODE = 'PKQ01';
    END IF;
    v_control := substring(p_value FROM '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]');
    IF v_control IS NOT NULL THEN
        RAISE EXCEPTION 'postkit: % must not contain control or format characters (U+% at position %)',
            p_what, lpad(upper(to_hex(ascii(v_control))), greatest(4, length(to_hex(ascii(v_control)))), '0'), strpos(p_value, v_control)
            USING ERRCODE = 'PKQ01';
    END IF;
    RAISE EXCEPTION 'postkit: % must not be empty or blank', p_what USING ERRCODE = 'PKQ01';
END
$$;

-- The name rule, once, for the fast paths. A SQL-standard function body is parsed when the
-- function is created, so every name in it is bound then and no caller's search_path can reach
-- it; and a body of one expression is inlined into the calling statement, so the fast paths pay
-- nothing for calling it. At most 128 characters, none of them a control or format character,
-- and at least one that is not a space separator. NULL for NULL. The character classes are
-- postkit/queue/limits.py's CONTROL_RANGES (NUL aside: text cannot hold it) and BLANK_RANGES.
CREATE OR REPLACE FUNCTION postkit_queue.is_name(p_value text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN char_length(p_value) <= 128
   AND p_value !~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'
   AND p_value ~ '[^\u0020\u00a0\u1680\u2000-\u200a\u2028-\u2029\u202f\u205f\u3000]';

-- A payload must be there (the JSON value null is fine) and fit the queue's max_payload_bytes
-- (1 MiB unless configured): a runaway payload would bloat the table every worker scans.
CREATE OR REPLACE FUNCTION postkit_queue.check_payload(p_queue text, p_payload jsonb, p_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_size integer;
BEGIN
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'postkit: payload must not be null (use the JSON value null instead)'
            USING ERRCODE = 'PKQ02';
    END IF;
    v_size := postkit_queue.payload_size(p_payload);
    IF v_size > p_max THEN
        RAISE EXCEPTION 'postkit: the payload is % bytes; queue % takes at most % '
                        '(configure_queue max_payload_bytes)',
            v_size, p_queue, p_max USING ERRCODE = 'PKQ02';
    END IF;
END
$$;

-- Backpressure (queue_settings.max_pending): a push of p_adding jobs to queue p_queue, which
-- may hold at most p_max pending jobs (ready or scheduled), is refused when it would hold more
-- (PKQ23): a runaway producer meets resistance before the disk does. It counts the queue's
-- pending jobs in jobs_pull_idx, stopping at p_max: a push pays for what the queue holds, up to
-- its limit, so a limit suits a queue that is meant to stay short. Pushes that commit together
-- may each see room for themselves: the count sees committed jobs only.
--
-- p_wait (push's wait_for_room) is how long a push to a full queue waits for room before it is
-- refused: it counts again after 10 ms, then twice as long each time up to half a second, each
-- count a new statement that sees what committed meanwhile (claims make room) in READ
-- COMMITTED; VOLATILE for that, as a STABLE function would keep its caller's snapshot. The
-- caller's transaction waits with it and holds what it has written. Under REPEATABLE READ or
-- SERIALIZABLE the transaction's snapshot never sees room made after it began, so a full
-- queue refuses at once; so does a push of more jobs than the queue may ever hold.
CREATE OR REPLACE FUNCTION postkit_queue.check_room(
    p_namespace text, p_queue text, p_max integer, p_adding integer,
    p_wait interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pending  integer;
    v_deadline timestamptz := clock_timestamp() + coalesce(p_wait, interval '0');
    v_pause    float8 := 0.01;
BEGIN
    IF p_max IS NULL THEN
        RETURN;
    END IF;
    LOOP
        PERFORM FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
        LIMIT p_max;
        GET DIAGNOSTICS v_pending = ROW_COUNT;
        IF v_pending + p_adding <= p_max THEN
            RETURN;
        END IF;
        EXIT WHEN p_wait IS NULL OR p_adding > p_max OR clock_timestamp() >= v_deadline
                  OR current_setting('transaction_isolation') <> 'read committed';
        PERFORM pg_sleep(least(v_pause,
                               extract(epoch FROM v_deadline - clock_timestamp())::float8));
        v_pause := least(v_pause * 2, 0.5);
    END LOOP;
    IF p_wait IS NULL OR p_wait = interval '0' THEN
        RAISE EXCEPTION 'postkit: queue % is full: % pending jobs, and it holds at most % '
                        '(max_pending); % more refused', p_queue, v_pending, p_max, p_adding
            USING ERRCODE = 'PKQ23';
    END IF;
    RAISE EXCEPTION 'postkit: queue % is full: % pending jobs, and it holds at most % '
                    '(max_pending); % more refused%', p_queue, v_pending, p_max, p_adding,
        CASE WHEN p_adding > p_max THEN ', more than it may ever hold'
             WHEN current_setting('transaction_isolation') <> 'read committed'
             THEN ' without waiting: under ' || current_setting('transaction_isolation')
                  || ' the transaction would never see room made after it began'
             ELSE ' after waiting ' || p_wait || ' for room' END
        USING ERRCODE = 'PKQ23';
END
$$;

-- A payload's real size: the bytes of its jsonb value, uncompressed. A value straight from
-- the client is never compressed, and pg_column_size reads its size without touching it; a
-- value read from a table column may be (pg_column_compression says so), and only then is it
-- rebuilt, uncompressed, to be measured.
CREATE OR REPLACE FUNCTION postkit_queue.payload_size(p_payload jsonb)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_column_compression(p_payload) IS NULL THEN
        RETURN pg_column_size(p_payload);
    END IF;
    RETURN pg_column_size(p_payload::text::jsonb);
END
$$;

-- A job's result (what its handler returned, given to ack): any JSON value, at most 1 MiB as
-- JSON text, measured as PostgreSQL writes the jsonb value (", " and ": " between the parts,
-- numbers in plain notation), which the SDK computes before it sends one
-- (postkit/queue/limits.py, result_bytes). The text, not the stored size: a client that knows
-- the rule can tell from the value alone whether it fits. The rule, once, for the fast paths
-- (inlined, as is_name); NULL for NULL.
CREATE OR REPLACE FUNCTION postkit_queue.is_result(p_value jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN octet_length(p_value::text) <= 1048576;

-- The result rule, with the precise error: NULL (no result) or is_result.
CREATE OR REPLACE FUNCTION postkit_queue.check_result(p_what text, p_value jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR postkit_queue.is_result(p_value) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'postkit: % is % bytes as JSON text; the limit is 1048576 (1 MiB)',
        p_what, octet_length(p_value::text) USING ERRCODE = 'PKQ16';
END
$$;

-- The results of a batch of acks: NULL (none), or a JSON array of one entry per job id, each
-- the job's result or null (none), each entry as check_result takes it.
CREATE OR REPLACE FUNCTION postkit_queue.check_results(p_results jsonb, p_jobs integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_results IS NULL THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_results) <> 'array' OR jsonb_array_length(p_results) <> p_jobs THEN
        RAISE EXCEPTION 'postkit: results must be a JSON array of one entry (a result or null) '
                        'per job id, got a JSON % for % job ids',
            CASE jsonb_typeof(p_results)
                WHEN 'array' THEN 'array of ' || jsonb_array_length(p_results)
                ELSE jsonb_typeof(p_results) END,
            p_jobs USING ERRCODE = 'PKQ16';
    END IF;
    -- One pass over the entries; check_result names the first one too big.
    IF EXISTS (SELECT FROM jsonb_array_elements(p_results) AS e
               WHERE NOT postkit_queue.is_result(e.value)) THEN
        PERFORM postkit_queue.check_result(format('results[%s]', e.ordinality), e.value)
        FROM jsonb_array_elements(p_results) WITH ORDINALITY AS e
        ORDER BY e.ordinality;
    END IF;
END
$$;

-- A trace context: the W3C propagation carrier of the producer's span, {"traceparent":
-- "00-<trace id>-<span id>-<flags>", "tracestate": "..."} as OpenTelemetry's propagator writes
-- it, which the worker links the handler's span to. A JSON object whose values are all strings,
-- at most 1024 bytes as JSON text (a traceparent is 55 characters): every job row carries it, so
-- it must stay small. Its strings are not parsed here; a worker ignores a context it cannot
-- read. The rule, once, for the fast paths (inlined, as is_name); NULL for NULL. The jsonpath
-- is strict: in lax mode an array of strings would pass as its strings.
CREATE OR REPLACE FUNCTION postkit_queue.is_trace_context(p_value jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN jsonb_typeof(p_value) = 'object'
   AND octet_length(p_value::text) <= 1024
   AND NOT p_value @? 'strict $.* ? (@.type() != "string")';

-- The trace context rule, with the precise error: NULL (no trace) or is_trace_context.
CREATE OR REPLACE FUNCTION postkit_queue.check_trace_context(p_what text, p_value jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key  text;
    v_type text;
BEGIN
    IF p_value IS NULL OR coalesce(postkit_queue.is_trace_context(p_value), false) THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_value) <> 'object' THEN
        RAISE EXCEPTION 'postkit: % must be a JSON object of strings (a W3C carrier such as '
                        '{"traceparent": "00-..."}), got a JSON %', p_what, jsonb_typeof(p_value)
            USING ERRCODE = 'PKQ15';
    END IF;
    IF octet_length(p_value::text) > 1024 THEN
        RAISE EXCEPTION 'postkit: % is % bytes as JSON text; the limit is 1024',
            p_what, octet_length(p_value::text) USING ERRCODE = 'PKQ15';
    END IF;
    SELECT e.key, jsonb_typeof(e.value) INTO v_key, v_type
    FROM jsonb_each(p_value) AS e
    WHERE jsonb_typeof(e.value) <> 'string'
    ORDER BY e.key
    LIMIT 1;
    RAISE EXCEPTION 'postkit: % must hold only string values; its % is a JSON %',
        p_what, quote_literal(v_key), v_type USING ERRCODE = 'PKQ15';
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.check_priority(p_priority integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_priority IS NULL OR p_priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'postkit: priority must be between -32768 and 32767, got %', p_priority
            USING ERRCODE = 'PKQ03';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.check_max_attempts(p_max_attempts integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_max_attempts IS NOT NULL AND p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'postkit: max_attempts must be between 1 and 1000, got %', p_max_attempts
            USING ERRCODE = 'PKQ04';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.check_duration(
    p_what text, p_value interval, p_allow_zero boolean, p_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR coalesce(postkit_queue.is_duration(p_value, p_allow_zero, p_max), false)
    THEN
        RETURN;
    END IF;
    IF NOT isfinite(p_value) OR postkit_queue.longest_effect(p_value) > p_max THEN
        RAISE EXCEPTION 'postkit: % of % is too long; the limit is % (a month counts as 31 '
                        'days)', p_what, p_value, p_max
            USING ERRCODE = 'PKQ05';
    END IF;
    IF date_trunc('month', p_value) < interval '0' OR extract(day FROM p_value) < 0
       OR p_value - date_trunc('day', p_value) < interval '0' THEN
        RAISE EXCEPTION 'postkit: % of % has a negative part: its months, days and time must '
                        'each be zero or positive (a month is not always 30 days)',
            p_what, p_value USING ERRCODE = 'PKQ05';
    END IF;
    RAISE EXCEPTION 'postkit: % must be %, got %', p_what,
        CASE WHEN p_allow_zero THEN 'zero or positive' ELSE 'positive' END, p_value
        USING ERRCODE = 'PKQ05';
END
$$;

-- The longest a duration can move the clock: its months counted as 31 days each, their
-- longest, and its days and time as they are. Interval comparison counts a month as 30 days,
-- so '10 years 50 days' compares below '3650 days' while it moves the clock further than that
-- from any day; a limit compared with this is never passed, whatever the day the duration
-- starts. date_trunc('month', x) keeps x's months alone (interval subtraction is field by
-- field). Months past 100,000 (8,333 years, past every limit) count as 100,000, so that no
-- interval overflows the days; an infinite one is itself.
CREATE OR REPLACE FUNCTION postkit_queue.longest_effect(p_value interval)
RETURNS interval
LANGUAGE sql IMMUTABLE
RETURN CASE WHEN NOT pg_catalog.isfinite(p_value) THEN p_value
            ELSE pg_catalog.make_interval(
                     days => GREATEST(LEAST(extract(year FROM p_value) * 12
                                            + extract(month FROM p_value), 100000),
                                      -100000)::integer * 31)
                 + (p_value - pg_catalog.date_trunc('month', p_value)) END;

-- The duration rule, once, for the fast paths (inlined, as is_name): no negative field (see
-- Input checks above), positive or, where p_allow_zero, zero, and at most p_max by its longest
-- effect on the clock (longest_effect). NULL for NULL. x - date_trunc('day', x) keeps x's time
-- alone.
CREATE OR REPLACE FUNCTION postkit_queue.is_duration(p_value interval, p_allow_zero boolean, p_max interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN date_trunc('month', p_value) >= interval '0'
   AND extract(day FROM p_value) >= 0
   AND p_value - date_trunc('day', p_value) >= interval '0'
   AND postkit_queue.longest_effect(p_value) <= p_max
   AND (p_value > interval '0' OR (p_allow_zero AND p_value = interval '0'));

CREATE OR REPLACE FUNCTION postkit_queue.check_job_id(p_job_id bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_job_id IS NULL THEN
        RAISE EXCEPTION 'postkit: job_id must not be null' USING ERRCODE = 'PKQ06';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.check_limit(p_limit integer, p_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > p_max THEN
        RAISE EXCEPTION 'postkit: limit must be between 1 and %, got %', p_max, p_limit
            USING ERRCODE = 'PKQ07';
    END IF;
END
$$;

-- An array argument: NULL, or one-dimensional with lower bound 1 (positions pair its entries
-- with another array's), and without NULL entries unless p_nulls. The error code is the one
-- of the entries' kind (PKQ01 names, PKQ06 job ids, PKQ13 claim tokens).
CREATE OR REPLACE FUNCTION postkit_queue.check_array(
    p_what text, p_value anyarray, p_nulls boolean, p_errcode text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL OR cardinality(p_value) = 0 THEN
        RETURN;
    END IF;
    IF array_ndims(p_value) <> 1 OR array_lower(p_value, 1) <> 1 THEN
        RAISE EXCEPTION 'postkit: % must be a one-dimensional array starting at 1, got one '
                        'with dimensions %', p_what, array_dims(p_value) USING ERRCODE = p_errcode;
    END IF;
    IF NOT p_nulls AND array_position(p_value, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'postkit: % must not hold NULL (entry %)', p_what,
            array_position(p_value, NULL) USING ERRCODE = p_errcode;
    END IF;
END
$$;

-- A list of queue names (register_queues, register_worker): an array, one-dimensional from 1,
-- each entry a queue name. Empty is fine: a ticker serves no queue.
CREATE OR REPLACE FUNCTION postkit_queue.check_queue_names(p_queues text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    IF p_queues IS NULL THEN
        RAISE EXCEPTION 'postkit: queues must not be NULL' USING ERRCODE = 'PKQ01';
    END IF;
    PERFORM postkit_queue.check_array('queues', p_queues, false, 'PKQ01');
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM postkit_queue.check_name('queue', v_queue, true);
    END LOOP;
END
$$;

-- A settle names its claim by the claim token, or at least by the worker_id the job was
-- claimed under; a bare job id names none (see Input checks above).
CREATE OR REPLACE FUNCTION postkit_queue.check_claim(p_call text, p_worker_id text, p_claim_token uuid)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_worker_id IS NULL AND p_claim_token IS NULL THEN
        RAISE EXCEPTION 'postkit: % needs the claim token pull returned (or the worker_id the '
                        'job was claimed under): a bare job id does not say whose claim it '
                        'settles', p_call USING ERRCODE = 'PKQ13';
    END IF;
END
$$;

-- Is the caller still the holder of this claim? The claim token decides when the caller has
-- one: it is unique per claim, so a stale first attempt cannot settle a second attempt even
-- when the same worker_id took both. Without a token, the worker_id the caller claimed with
-- decides, and a claim taken without a worker_id is held by no worker_id. Never NULL: nack and
-- fail read NOT holds_claim(...), and a NULL there would read as "holds the claim".
-- It takes the job's columns, not its row: Citus deparses a whole-row argument with the row
-- type of the shard, which the function does not take (docs/scaling.md).
CREATE OR REPLACE FUNCTION postkit_queue.holds_claim(
    p_state postkit_queue.job_state, p_holder text, p_token uuid,
    p_worker_id text, p_claim_token uuid)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce(
        p_state = 'running'
        AND CASE WHEN p_claim_token IS NOT NULL
                 THEN p_token = p_claim_token
                      AND (p_worker_id IS NULL OR p_holder IS NOT DISTINCT FROM p_worker_id)
                 ELSE p_holder = p_worker_id
            END,
        false);
END
$$;

-- One entry of a job's error history: of its attempt p_attempt, claimed by p_worker_id.
CREATE OR REPLACE FUNCTION postkit_queue.error_entry(
    p_attempt integer, p_worker_id text, p_kind text, p_error text, p_at timestamptz)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object(
        'attempt', p_attempt,
        'kind', p_kind,
        -- Errors are capped at 8 KiB so that a runaway traceback cannot bloat the hot table.
        'error', left(p_error, 8192),
        'worker_id', p_worker_id,
        'at', p_at);
END
$$;

-- next_run_at: when the earliest pending job of these queues falls due (NULL: none pending).
-- A waiting worker sleeps no longer than this. For each queue, a skip scan of jobs_pull_idx
-- over its distinct priorities, and within each priority the first entry (the index is ordered
-- by run_at there): a few index probes however long the backlog, never a scan of it. Paused
-- queues are left out: pull hands out nothing from them, so counting their due jobs would keep
-- their workers from sleeping; resume_queue's notification wakes them.
--
-- Flow limits (flow.sql) hold ready jobs back, and a worker told they are due would ask again
-- at once, and again. So a queue with a concurrency or group limit counts only the jobs still
-- to fall due (a slot that frees notifies its waiting workers: record_outcomes), and a
-- rate-limited queue's jobs fall due no earlier than its next claim may be made (rate_slot_at).
-- While the rate holds a queue's claims back, its ready jobs fall due at that next slot even
-- when a concurrency or group limit holds them back too: no notification comes when a rate
-- slot opens. They stay due once it has opened, until a claim finds the window open
-- (flow_state.rate_held): a worker whose wait ended a moment before the slot, and that looks
-- again after it, still claims. Waking then costs one claim per slot at most, after which the
-- rate no longer holds claims back and the other limits alone decide again.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.next_run_at(p_namespace text, p_queues text[])
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_now      timestamptz := postkit_queue.clock();
    v_queue    text;
    v_settings record;
    v_slot     timestamptz;  -- the queue's next rate slot, NULL when it may claim now
    v_since    timestamptz;  -- only jobs due after this count
    v_priority smallint;
    v_first    timestamptz;
    v_earliest timestamptz;
BEGIN
    -- Per queue that is not paused (one primary-key probe of queue_settings, as queue_policy
    -- makes), the skip scan: one probe of jobs_pull_idx per distinct priority, and the first
    -- run_at within each, after v_since. Each statement reads one table of one namespace,
    -- which Citus routes with the namespace unbound, as in this generic plan (docs/scaling.md).
    FOREACH v_queue IN ARRAY coalesce(p_queues, '{}') LOOP
        SELECT s.paused, s.concurrency, s.group_concurrency, s.group_ordered, s.rate_limit,
               s.rate_period
        INTO v_settings
        FROM postkit_queue.queue_settings s
        WHERE s.namespace = p_namespace AND s.queue = v_queue;
        CONTINUE WHEN coalesce(v_settings.paused, false);
        v_slot := postkit_queue.rate_slot_at(p_namespace, v_queue, v_settings.rate_limit,
                                             v_settings.rate_period, v_now);
        v_since := CASE WHEN (v_settings.concurrency IS NOT NULL
                              OR v_settings.group_concurrency IS NOT NULL
                              OR v_settings.group_ordered) AND v_slot IS NULL
                        THEN v_now ELSE '-infinity' END;
        IF v_since = v_now AND v_settings.rate_limit IS NOT NULL THEN
            -- A slot that opened since the last claim (its primary-key row).
            PERFORM FROM postkit_queue.flow_state f
            WHERE f.namespace = p_namespace AND f.queue = v_queue AND f.rate_held;
            IF FOUND THEN
                v_since := '-infinity';
            END IF;
        END IF;
        -- The highest priority first, then each next lower one: two statements, so that each
        -- probe is an index condition, never a filter over the range above it.
        SELECT j.priority INTO v_priority FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'pending'
        ORDER BY j.priority DESC LIMIT 1;
        WHILE FOUND LOOP
            SELECT j.run_at INTO v_first FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'pending'
              AND j.priority = v_priority AND j.run_at > v_since
            ORDER BY j.run_at LIMIT 1;
            IF FOUND THEN
                v_earliest := least(v_earliest, greatest(v_first, v_slot));
            END IF;
            SELECT j.priority INTO v_priority FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'pending'
              AND j.priority < v_priority
            ORDER BY j.priority DESC LIMIT 1;
        END LOOP;
    END LOOP;
    RETURN v_earliest;
END
$$;

-- request_wakeup: a worker about to wait for work on these queues asks to be notified by the
-- next transaction that makes a job of one of them ready (notify, below). Call it before the
-- last look for jobs (next_run_at), in a transaction of its own: the request must be committed
-- before that look. Returns whether it made a request that was not there: only then may a
-- transaction in progress have pushed without seeing one, and the worker looks again soon
-- (WorkListener.wait_for_work). A request already made, or taken by a transaction still in
-- progress (which notifies when it commits, or restores the request when it rolls back), is
-- left as it is, so a worker that waits again before any push writes nothing. A lost request
-- costs a fallback poll, never a job: its commit does not wait for the WAL flush.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.request_wakeup(p_namespace text, p_queues text[])
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now   timestamptz := postkit_queue.clock();
    v_queue text;
    v_made  boolean := false;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_queue_names(p_queues);
    -- In name order: two workers inserting their first requests for the same queues wait for
    -- each other in one order, never in a cycle.
    FOR v_queue IN SELECT DISTINCT q.queue FROM unnest(p_queues) AS q(queue) ORDER BY 1 LOOP
        PERFORM FROM postkit_queue.wakeups w
        WHERE w.namespace = p_namespace AND w.queue = v_queue;
        IF NOT FOUND THEN
            INSERT INTO postkit_queue.wakeups (namespace, queue, requested_at)
            VALUES (p_namespace, v_queue, v_now)
            ON CONFLICT (namespace, queue) DO NOTHING;
            v_made := true;
            CONTINUE;
        END IF;
        PERFORM FROM postkit_queue.wakeups w
        WHERE w.namespace = p_namespace AND w.queue = v_queue AND w.requested_at IS NULL
        FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE postkit_queue.wakeups w SET requested_at = v_now
            WHERE w.namespace = p_namespace AND w.queue = v_queue;
            v_made := true;
        END IF;
    END LOOP;
    IF v_made THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN v_made;
END
$$;

-- Every notification the schema raises goes through here, so that one place decides where
-- notifications are raised; it returns whether it raised one. A session may SET
-- postkit_queue.notify = off (a bulk load, a benchmark of the cost); waiting workers then find
-- the jobs at their next fallback poll, and waiters for results at their next read (every
-- second). On Citus (distribute_on_citus gives this function postkit_queue.placement = citus),
-- a delegated call runs on a worker node, where no listener is, and a NOTIFY there would fail
-- the two-phase commit of a transaction that spans nodes: only the coordinator notifies
-- (docs/scaling.md).
CREATE OR REPLACE FUNCTION postkit_queue.send_notification(p_channel text, p_payload text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(current_setting('postkit_queue.notify', true), '') <> 'off'
       AND (current_setting('postkit_queue.placement', true) IS DISTINCT FROM 'citus'
            OR postkit_queue.on_citus_coordinator()) THEN
        PERFORM pg_notify(p_channel, p_payload);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- wait_for_slot: a worker about to wait for work on these queues asks to be woken, alone, when
-- a slot frees or a job becomes ready in each of them that a concurrency or group limit holds
-- back (notify, below). Its listener's backend waits in slot_waiters; the transaction that
-- wakes it notifies that backend's own channel (postkit_wake_<pid>, WorkListener.wake_channel),
-- so the release of a concurrency-1 queue wakes one of its waiting workers, not all of them.
-- Call it on the connection that LISTENs, with request_wakeup. Returns whether it waits on
-- any queue: then the listener calls stop_waiting when its wait ends, whatever ended it. A
-- queue without such a limit is not recorded: its pushes notify through request_wakeup's
-- requests.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.wait_for_slot(p_namespace text, p_queues text[])
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queue   text;
    v_waiting boolean := false;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_queue_names(p_queues);
    FOR v_queue IN
        SELECT s.queue FROM postkit_queue.queue_settings s
        WHERE s.namespace = p_namespace AND s.queue = ANY (p_queues)
          AND (s.concurrency IS NOT NULL OR s.group_concurrency IS NOT NULL OR s.group_ordered)
        ORDER BY 1
    LOOP
        v_waiting := true;
        -- A plain read first: a row that a waking transaction still in progress deletes is
        -- left to it (it notifies this backend when it commits), never waited for.
        PERFORM FROM postkit_queue.slot_waiters w
        WHERE w.namespace = p_namespace AND w.queue = v_queue AND w.pid = pg_backend_pid();
        IF NOT FOUND THEN
            INSERT INTO postkit_queue.slot_waiters (namespace, queue, pid, since)
            VALUES (p_namespace, v_queue, pg_backend_pid(), clock_timestamp())
            ON CONFLICT (namespace, queue, pid) DO NOTHING;
            -- A lost row costs a notification to every listener of the queue (notify).
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
    END LOOP;
    RETURN v_waiting;
END
$$;

-- stop_waiting: the calling backend waits for no slot of the namespace any more (wait_for_slot):
-- its listener's wait ended, and a slot must wake a worker that still waits. A row
-- that a waking transaction still in progress holds is skipped, never waited for: that one
-- deletes it and notifies this backend, a wake-up the worker takes as a look for work. Returns
-- how many rows it deleted.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.stop_waiting(p_namespace text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queue   text;
    v_deleted integer := 0;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    FOR v_queue IN
        SELECT w.queue FROM postkit_queue.slot_waiters w
        WHERE w.namespace = p_namespace AND w.pid = pg_backend_pid()
        FOR UPDATE SKIP LOCKED
    LOOP
        DELETE FROM postkit_queue.slot_waiters w
        WHERE w.namespace = p_namespace AND w.queue = v_queue AND w.pid = pg_backend_pid();
        v_deleted := v_deleted + 1;
    END LOOP;
    RETURN v_deleted;
END
$$;

-- Wake the workers waiting on a queue, when the current transaction commits: every change that
-- makes a job ready or frees a slot calls it, after its write.
--
-- A queue without a concurrency or group limit notifies its channel only when a worker asked
-- to be woken (request_wakeup, above), and only the transaction that takes the request (clears
-- it) does. PostgreSQL holds NOTIFY's lock, one for the whole database, from the start of a
-- notifying commit to its end, WAL flush included, so notifying commits run one at a time: 16
-- producers pushing a job each lost three quarters of their rate to it, and while workers
-- drained, their queue on that lock fed itself (benchmarks/results/producers.md). Now a
-- producer that finds no request (every worker busy, or one woken already) reads one row and
-- commits as any transaction does, and each request costs one notifying commit.
--
-- The request is taken with SKIP LOCKED: a transaction that finds it taken by another still in
-- progress leaves the notification to that one and never waits for it. If that one is long,
-- or rolls back (which restores the request), the jobs committed meanwhile are found by the
-- waiting worker's next look (WorkListener.wait_for_work: after a new request it looks again
-- 2 ms later, then 4, 8...). The same looks find the job of a transaction that read no request
-- because it pushed while the request was being made. A notification that cannot be raised
-- here (notify = off, a Citus worker node) leaves the request for one that can.
--
-- A queue with a concurrency or group limit is held back: its workers' look (next_run_at)
-- leaves its ready jobs out, since the limit may hold them back, so no look finds a job that
-- no notification announced, and every change notifies, without a request. It wakes at most
-- p_wake of the workers waiting for its slots (wait_for_slot), the longest waiting first, each
-- on its listener's own channel: a slot freed wakes one worker, where a notification on the
-- queue's channel woke every worker that listens there to claim it (a herd of empty claims).
-- The rows are taken with SKIP LOCKED, so that two releases wake two workers. A backend that
-- is gone (pg_stat_get_activity finds no such process) is not counted. With no worker
-- waiting, or p_wake NULL (a limit changed, a queue resumed: every worker may claim), it
-- notifies the queue's channel: busy workers read that notification when they next wait, as
-- they read every notification sent meanwhile.
-- p_held_back says whether the queue has such a limit, when the caller read it already (push
-- reads the queue's settings row anyway); NULL: read it here.
CREATE OR REPLACE FUNCTION postkit_queue.notify(
    p_namespace text, p_queue text, p_held_back boolean DEFAULT NULL, p_wake integer DEFAULT 1)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_held_back boolean := p_held_back;
    v_pid       integer;
    v_woken     integer := 0;
BEGIN
    IF v_held_back IS NULL THEN
        -- A primary-key probe of queue_settings.
        SELECT s.concurrency IS NOT NULL OR s.group_concurrency IS NOT NULL OR s.group_ordered
        INTO v_held_back
        FROM postkit_queue.queue_settings s
        WHERE s.namespace = p_namespace AND s.queue = p_queue;
    END IF;
    IF NOT coalesce(v_held_back, false) THEN
        -- A primary-key probe of wakeups.
        PERFORM FROM postkit_queue.wakeups w
        WHERE w.namespace = p_namespace AND w.queue = p_queue AND w.requested_at IS NOT NULL
        FOR UPDATE SKIP LOCKED;
        IF FOUND AND postkit_queue.send_notification(
                postkit_queue.channel_name(p_namespace, p_queue), '') THEN
            UPDATE postkit_queue.wakeups w SET requested_at = NULL
            WHERE w.namespace = p_namespace AND w.queue = p_queue;
        END IF;
        RETURN;
    END IF;
    IF p_wake <= 0 THEN
        RETURN;  -- nothing became ready (an empty batch)
    ELSIF p_wake IS NOT NULL THEN
        -- The primary key's range of the queue: its waiting workers, a few rows.
        FOR v_pid IN
            SELECT w.pid FROM postkit_queue.slot_waiters w
            WHERE w.namespace = p_namespace AND w.queue = p_queue
            ORDER BY w.since, w.pid
            FOR UPDATE SKIP LOCKED
        LOOP
            -- A node that cannot notify (notify = off, a Citus worker node) leaves every row.
            EXIT WHEN NOT postkit_queue.send_notification('postkit_wake_' || v_pid, '');
            DELETE FROM postkit_queue.slot_waiters w
            WHERE w.namespace = p_namespace AND w.queue = p_queue AND w.pid = v_pid;
            IF EXISTS (SELECT FROM pg_stat_get_activity(v_pid)) THEN
                v_woken := v_woken + 1;
                EXIT WHEN v_woken >= p_wake;
            END IF;
        END LOOP;
    END IF;
    IF v_woken = 0 THEN
        PERFORM postkit_queue.send_notification(
            postkit_queue.channel_name(p_namespace, p_queue), '');
    END IF;
END
$$;

-- claims_lock: the advisory lock key of one queue's claims. Every claim holds it shared until
-- its transaction ends, taken before it reads the queue's policy; a write of the queue's flow
-- limits takes it exclusive (write_queue_settings), so that it waits for the claims in
-- flight, which chose their jobs under the old policy, and each claim after it reads the new
-- one and counts what they claimed among the running jobs. Without it, a claim made without a
-- limit could commit after the limit was set and after a limited claim had counted the
-- running jobs, and the queue would run more than its limit. A hash: two queues that share a
-- key only wait for each other's limit changes. The high bit set keeps it apart from the
-- small integers an application uses as advisory lock keys.
CREATE OR REPLACE FUNCTION postkit_queue.claims_lock(p_namespace text, p_queue text)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.hashtextextended(p_namespace || pg_catalog.chr(31) || p_queue, 7)
           | (-9223372036854775807 - 1)
$$;

-- The channel of one queue (internal: notify uses it; callers ask channel()).
CREATE OR REPLACE FUNCTION postkit_queue.channel_name(p_namespace text, p_queue text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN 'postkit_' || md5((SELECT k.key FROM postkit_queue.channel_key k)
                             || chr(31) || p_namespace || chr(31) || p_queue);
END
$$;

-- The channel of a namespace's results (internal: notify_results uses it; callers ask
-- results_channel()). The md5 of the key and the namespace alone: no name holds chr(31)
-- (check_name), so it is never a queue's channel.
CREATE OR REPLACE FUNCTION postkit_queue.results_channel_name(p_namespace text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN 'postkit_results_' || md5((SELECT k.key FROM postkit_queue.channel_key k)
                                     || chr(31) || p_namespace);
END
$$;

-- Tell those who wait for results (wait_for_result) that these jobs settled, when the
-- current transaction commits: a job of a queue that keeps results completed (its result is
-- kept) or was dead-lettered. The payload is the job ids, comma-separated, at most 300 of them
-- per notification (each id is at most 20 characters: well within PostgreSQL's 8000-byte
-- payload), so that a waiter wakes only for its own job.
CREATE OR REPLACE FUNCTION postkit_queue.notify_results(p_namespace text, p_job_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.send_notification(postkit_queue.results_channel_name(p_namespace),
                                            string_agg(c.id::text, ',' ORDER BY c.n))
    FROM unnest(p_job_ids) WITH ORDINALITY AS c(id, n)
    GROUP BY (c.n - 1) / 300;
END
$$;

-- Called by every state change that ends attempts, with one namespace's settled jobs (their
-- queues and attempts, pairwise) and their outcome (the outcome type: completed, retried,
-- rescued, dead_lettered): adds them to the queue's counters, without touching the state
-- machine, and wakes the workers of a queue whose flow limits the settle frees. It takes arrays
-- so that a batch of acks costs one call. One upsert per queue of the batch, in queue order:
-- two workers that share a counter slot and settle batches spanning the same queues lock those
-- rows in the same order, so they queue up instead of deadlocking. The loop's query reads no
-- table, and each statement in it touches one row of one namespace: statements Citus routes
-- with the namespace unbound, as in this generic plan (docs/scaling.md).
CREATE OR REPLACE FUNCTION postkit_queue.record_outcomes(
    p_namespace text, p_outcome postkit_queue.outcome, p_at timestamptz,
    p_queues text[], p_attempts integer[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queue    text;
    v_jobs     bigint;
    v_attempts bigint;
    v_limited  boolean;
BEGIN
    FOR v_queue, v_jobs, v_attempts IN
        SELECT u.queue, count(*), sum(u.attempts)
        FROM unnest(p_queues, p_attempts) AS u(queue, attempts)
        GROUP BY u.queue
        ORDER BY u.queue
    LOOP
        INSERT INTO postkit_queue.queue_stats AS s (
            namespace, queue, minute, slot, completed, retried, rescued, dead_lettered,
            completed_attempts)
        VALUES (
            p_namespace, v_queue, date_trunc('minute', p_at), pg_backend_pid() % 8,
            CASE WHEN p_outcome = 'completed' THEN v_jobs ELSE 0 END,
            CASE WHEN p_outcome = 'retried' THEN v_jobs ELSE 0 END,
            CASE WHEN p_outcome = 'rescued' THEN v_jobs ELSE 0 END,
            CASE WHEN p_outcome = 'dead_lettered' THEN v_jobs ELSE 0 END,
            CASE WHEN p_outcome = 'completed' THEN v_attempts ELSE 0 END)
        ON CONFLICT (namespace, queue, minute, slot) DO UPDATE
        SET completed = s.completed + EXCLUDED.completed,
            retried = s.retried + EXCLUDED.retried,
            rescued = s.rescued + EXCLUDED.rescued,
            dead_lettered = s.dead_lettered + EXCLUDED.dead_lettered,
            completed_attempts = s.completed_attempts + EXCLUDED.completed_attempts;
        -- A job that completes or dies frees its slot in a queue with a concurrency or group
        -- limit: the queue's waiting workers wake to claim again (next_run_at leaves such a
        -- queue's ready jobs out, so they would otherwise sleep until their fallback poll). One
        -- primary-key probe of queue_settings per queue. A retry (nack) and a rescue notify
        -- already.
        IF p_outcome IN ('completed', 'dead_lettered') THEN
            SELECT s.concurrency IS NOT NULL OR s.group_concurrency IS NOT NULL
                   OR s.group_ordered
            INTO v_limited
            FROM postkit_queue.queue_settings s
            WHERE s.namespace = p_namespace AND s.queue = v_queue;
            IF v_limited THEN
                PERFORM postkit_queue.notify(p_namespace, v_queue, true, v_jobs::integer);
            END IF;
        END IF;
    END LOOP;
END
$$;

-- Whether a queue keeps its completed jobs or their results: retain_completed and
-- retain_results have no built-in default (NULL, not kept), so only a queue with a settings
-- row keeps either. A settle asks once per queue of its batch, and calls keep_completed only
-- for the jobs of queues that keep something: a batch of queues that keep neither pays one
-- primary-key probe per queue and no write.
CREATE OR REPLACE FUNCTION postkit_queue.keeps_completed(p_namespace text, p_queue text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_keeps boolean;
BEGIN
    SELECT s.retain_completed IS NOT NULL OR s.retain_results IS NOT NULL INTO v_keeps
    FROM postkit_queue.queue_settings s
    WHERE s.namespace = p_namespace AND s.queue = p_queue;
    RETURN coalesce(v_keeps, false);
END
$$;

-- Archive one completed job (its queue's retain_completed) and keep its result
-- (retain_results; p_result is what its ack was given, NULL or the JSON null: none). A
-- completed job of a queue that keeps results gets its row either way, so that its result reads
-- as completed. Returns whether it kept a result: the caller tells the waiters
-- (notify_results), once per batch. It takes the job's columns, not its row (docs/scaling.md).
CREATE OR REPLACE FUNCTION postkit_queue.keep_completed(
    p_namespace text, p_at timestamptz, p_result jsonb, p_job_id bigint, p_queue text,
    p_payload jsonb, p_priority smallint, p_attempts integer, p_worker_id text, p_errors jsonb,
    p_created_at timestamptz, p_trace_context jsonb)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_retain_completed interval;
    v_retain_results   interval;
BEGIN
    SELECT s.retain_completed, s.retain_results INTO v_retain_completed, v_retain_results
    FROM postkit_queue.queue_settings s
    WHERE s.namespace = p_namespace AND s.queue = p_queue;
    IF v_retain_completed IS NOT NULL THEN
        INSERT INTO postkit_queue.completed_jobs (
            namespace, job_id, queue, payload, priority, attempts, worker_id, errors,
            created_at, completed_at, expires_at, trace_context)
        VALUES (
            p_namespace, p_job_id, p_queue, p_payload, p_priority, p_attempts, p_worker_id,
            p_errors, p_created_at, p_at, p_at + v_retain_completed, p_trace_context);
    END IF;
    IF v_retain_results IS NULL THEN
        RETURN false;
    END IF;
    INSERT INTO postkit_queue.job_results (
        namespace, job_id, queue, result, attempts, completed_at, expires_at)
    VALUES (
        p_namespace, p_job_id, p_queue, nullif(p_result, 'null'), p_attempts, p_at,
        p_at + v_retain_results);
    RETURN true;
END
$$;

-- Move a claimed job, already locked by the caller, to the dead-letter queue. Waiters for the
-- results of its queue, if it keeps them, are told (notify_results): the dead letter's error is
-- the job's result. Its waiting descendants are cancelled.
CREATE OR REPLACE FUNCTION postkit_queue.bury(
    p_namespace text, p_job_id bigint, p_reason text, p_errors jsonb, p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job    postkit_queue.jobs;
    v_policy record;
BEGIN
    DELETE FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
    RETURNING j.* INTO v_job;
    IF NOT FOUND THEN
        RETURN;  -- callers hold the row's lock, so it is there; nothing to bury otherwise
    END IF;
    v_policy := postkit_queue.queue_policy(p_namespace, v_job.queue);
    INSERT INTO postkit_queue.dead_letters (
        namespace, job_id, queue, payload, priority, attempts, max_attempts, unique_key,
        worker_id, reason, error, errors, created_at, failed_at, expires_at, trace_context,
        group_key)
    VALUES (
        p_namespace, v_job.id, v_job.queue, v_job.payload, v_job.priority, v_job.attempts,
        v_job.max_attempts, v_job.unique_key, v_job.worker_id, p_reason,
        p_errors -> -1 ->> 'error', p_errors, v_job.created_at, p_at,
        p_at + v_policy.retain_dead, v_job.trace_context, v_job.group_key);
    PERFORM postkit_queue.record_outcomes(
        p_namespace, 'dead_lettered', p_at, ARRAY[v_job.queue], ARRAY[v_job.attempts]);
    IF v_policy.retain_results IS NOT NULL THEN
        PERFORM postkit_queue.notify_results(p_namespace, ARRAY[v_job.id]);
    END IF;
    IF v_job.has_steps THEN
        PERFORM postkit_queue.finish_steps(p_namespace, v_job.id, v_job.queue, p_at);
    END IF;
    -- Its waiting children can never run: they are cancelled (dependencies.sql).
    IF v_job.has_children THEN
        PERFORM postkit_queue.cancel_descendants(
            p_namespace, ARRAY[v_job.id], 'dead-lettered', p_at);
    END IF;
END
$$;
