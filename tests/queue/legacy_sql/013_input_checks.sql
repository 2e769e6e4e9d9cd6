-- Postkit queue, migration 13: input checks that refuse what they should.
--
-- Each check here has a twin in the SDK (postkit/queue/limits.py), which runs it before it
-- sends anything, so that a bad argument never aborts the caller's transaction; a test proves
-- the two agree at every boundary. What changed:
--
--   * Durations are checked by their effect. PostgreSQL compares intervals field by field
--     normalized with 30-day months and 24-hour days, so '-1 years +360 days 11:00:00' compared
--     as 11 hours while adding it to a time moves the clock back about five days: a claim born
--     expired, a dead letter pruned at once. A duration must now have no negative field
--     (months, days and time each zero or positive). Then its effect is zero or positive from
--     any starting time, in any time zone, and zero exactly when every field is: the check is
--     exact and needs no reference time. A check against a fixed reference time would not be:
--     '-1 months +31 days' moves 2000-03-01 forward two days but 2000-02-01 not at all. The
--     upper bound is still compared normalized; a month there counts 30 days, at most a day off
--     a calendar month, which a sanity limit of hours or years can afford.
--   * Arrays must be one-dimensional with lower bound 1, and the arrays of ids and claim tokens
--     may hold no NULL: a 2-D unique_keys array read every key as NULL, and one starting at 0
--     gave each job its neighbour's key.
--   * A payload is measured at its real size. pg_column_size of a value read from a table
--     column is its compressed size: a 20 MB value of one repeated letter passed as a few
--     hundred kilobytes.
--   * Names refuse control and format characters (Unicode Cc and Cf: tab, newline, escape,
--     zero-width spaces and joiners, bidi controls, the byte order mark...), and a name made
--     only of space separators (Unicode Zs, Zl, Zp: also U+00A0 and U+3000) is blank.
--   * A bare job id no longer settles a claim. Without a claim token, the worker_id the job was
--     claimed under decides; with neither, a NULL matched the NULL worker_id of every claim
--     taken without one, so any caller that had the id settled it. ack, nack, fail,
--     extend_visibility and release now refuse a call with neither (PKQ13), and a claim taken
--     without a worker_id can only be settled with its claim token.
--   * set_paused refuses a NULL instead of failing on the NOT NULL column.

-- The name rule, once, for the fast paths (inlined: a SQL-standard body of one expression,
-- bound when created). At most 128 characters, none of them a control or format character,
-- and at least one that is not a space separator. NULL for NULL. The character classes are
-- postkit/queue/limits.py's CONTROL_RANGES (NUL aside: text cannot hold it) and BLANK_RANGES.
CREATE OR REPLACE FUNCTION postkit_queue.is_name(p_value text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN char_length(p_value) <= 128
   AND p_value !~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'
   AND p_value ~ '[^\u0020\u00a0\u1680\u2000-\u200a\u2028-\u2029\u202f\u205f\u3000]';

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

-- The duration rule, once, for the fast paths (inlined, as is_name): no negative field (see
-- the top of this file), positive or, where p_allow_zero, zero, and at most p_max. NULL for
-- NULL. date_trunc('month', x) keeps x's months alone, and x - date_trunc('day', x) its time
-- alone (interval subtraction is field by field).
CREATE FUNCTION postkit_queue.is_duration(p_value interval, p_allow_zero boolean, p_max interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN date_trunc('month', p_value) >= interval '0'
   AND extract(day FROM p_value) >= 0
   AND p_value - date_trunc('day', p_value) >= interval '0'
   AND p_value <= p_max
   AND (p_value > interval '0' OR (p_allow_zero AND p_value = interval '0'));

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
    IF NOT isfinite(p_value) OR p_value > p_max THEN
        RAISE EXCEPTION 'postkit: % of % is too long; the limit is %', p_what, p_value, p_max
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

-- An array argument: NULL, or one-dimensional with lower bound 1 (positions pair its entries
-- with another array's), and without NULL entries unless p_nulls. The error code is the one
-- of the entries' kind (PKQ01 names, PKQ06 job ids, PKQ13 claim tokens).
CREATE FUNCTION postkit_queue.check_array(
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

-- A payload's real size: the bytes of its jsonb value, uncompressed. A value straight from
-- the client is never compressed, and pg_column_size reads its size without touching it; a
-- value read from a table column may be (pg_column_compression says so), and only then is it
-- rebuilt, uncompressed, to be measured.
CREATE FUNCTION postkit_queue.payload_size(p_payload jsonb)
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

-- A settle names its claim by the claim token, or at least by the worker_id the job was
-- claimed under; a bare job id names none (see the top of this file).
CREATE FUNCTION postkit_queue.check_claim(p_call text, p_worker_id text, p_claim_token uuid)
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
CREATE OR REPLACE FUNCTION postkit_queue.holds_claim(
    p_job postkit_queue.jobs, p_worker_id text, p_claim_token uuid)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce(
        p_job.state = 'running'
        AND CASE WHEN p_claim_token IS NOT NULL
                 THEN p_job.claim_token = p_claim_token
                      AND (p_worker_id IS NULL
                           OR p_job.worker_id IS NOT DISTINCT FROM p_worker_id)
                 ELSE p_job.worker_id = p_worker_id
            END,
        false);
END
$$;

-- ---------------------------------------------------------------------------------------------
-- The calls that take those arguments.
-- ---------------------------------------------------------------------------------------------

-- push, as in migration 6 (its fast path unchanged); a delay is at most 3650 days, said in days
-- because '10 years' compares as 3600 of them.
CREATE OR REPLACE FUNCTION postkit_queue.push(
    p_namespace    text,
    p_queue        text,
    p_payload      jsonb,
    p_delay        interval DEFAULT NULL,
    p_priority     integer  DEFAULT 0,
    p_max_attempts integer  DEFAULT NULL,
    p_unique_key   text     DEFAULT NULL,
    p_backoff_base interval DEFAULT NULL,
    p_backoff_cap  interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now    timestamptz := postkit_queue.clock();
    v_id     bigint;
    v_policy record;
BEGIN
    -- The common push (two names, a payload, a priority, no other option) passes in one
    -- expression; anything else goes through every check, which raise the precise error.
    IF NOT coalesce(postkit_queue.is_name(p_namespace) AND postkit_queue.is_name(p_queue)
                    AND p_payload IS NOT NULL AND p_priority BETWEEN -32768 AND 32767
                    AND p_delay IS NULL
                    AND p_max_attempts IS NULL AND p_unique_key IS NULL
                    AND p_backoff_base IS NULL AND p_backoff_cap IS NULL, false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_name('queue', p_queue, true);
        PERFORM postkit_queue.check_name('unique_key', p_unique_key, false);
        PERFORM postkit_queue.check_priority(p_priority);
        PERFORM postkit_queue.check_max_attempts(p_max_attempts);
        PERFORM postkit_queue.check_duration('delay', p_delay, true, interval '3650 days');
        PERFORM postkit_queue.check_duration('backoff_base', p_backoff_base, false,
                                             interval '1 day');
        PERFORM postkit_queue.check_duration('backoff_cap', p_backoff_cap, false,
                                             interval '30 days');
    END IF;
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    PERFORM postkit_queue.check_payload(p_queue, p_payload, v_policy.max_payload_bytes);

    -- The partial unique index jobs_unique_key_idx arbitrates duplicates; ON CONFLICT makes the
    -- check and the insert one atomic step even when two transactions push the same key.
    INSERT INTO postkit_queue.jobs AS j (
        namespace, queue, payload, priority, run_at, max_attempts, unique_key,
        backoff_base, backoff_cap, created_at)
    VALUES (
        p_namespace, p_queue, p_payload, p_priority, v_now + coalesce(p_delay, interval '0'),
        coalesce(p_max_attempts, v_policy.max_attempts),
        p_unique_key, p_backoff_base, p_backoff_cap, v_now)
    ON CONFLICT (namespace, queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO v_id;
    IF v_id IS NOT NULL THEN
        PERFORM postkit_queue.notify(p_namespace, p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- push_batch, as in migration 8, and its unique_keys array checked.
CREATE OR REPLACE FUNCTION postkit_queue.push_batch(
    p_namespace    text,
    p_queue        text,
    p_payloads     jsonb,
    p_delay        interval DEFAULT NULL,
    p_priority     integer  DEFAULT 0,
    p_max_attempts integer  DEFAULT NULL,
    p_unique_keys  text[]   DEFAULT NULL)
RETURNS TABLE (ordinality bigint, id bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := postkit_queue.clock();
    v_attempts integer;
    v_policy   record;
    -- Looked up once: as a call in the SELECT list, pg_get_serial_sequence (STABLE, not
    -- IMMUTABLE) would search the catalog again for every payload.
    v_sequence regclass := pg_get_serial_sequence('postkit_queue.jobs', 'id')::regclass;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    IF p_payloads IS NULL OR jsonb_typeof(p_payloads) <> 'array' THEN
        RAISE EXCEPTION 'postkit: payloads must be a JSON array' USING ERRCODE = 'PKQ02';
    END IF;
    IF jsonb_array_length(p_payloads) > 100000 THEN
        RAISE EXCEPTION 'postkit: at most 100000 payloads per batch, got %',
            jsonb_array_length(p_payloads) USING ERRCODE = 'PKQ07';
    END IF;
    -- Positions pair each key with its payload: a 2-D array or one not starting at 1 would
    -- give keys to the wrong payloads (or none).
    PERFORM postkit_queue.check_array('unique_keys', p_unique_keys, true, 'PKQ01');
    IF p_unique_keys IS NOT NULL
       AND cardinality(p_unique_keys) <> jsonb_array_length(p_payloads) THEN
        RAISE EXCEPTION 'postkit: % unique keys for % payloads', cardinality(p_unique_keys),
            jsonb_array_length(p_payloads) USING ERRCODE = 'PKQ01';
    END IF;
    -- Each key as push checks it (a NULL entry means no key).
    IF EXISTS (SELECT FROM unnest(p_unique_keys) AS k
               WHERE k IS NOT NULL AND NOT coalesce(postkit_queue.is_name(k), false)) THEN
        PERFORM postkit_queue.check_name('unique_key', k, false) FROM unnest(p_unique_keys) AS k;
    END IF;
    PERFORM postkit_queue.check_priority(p_priority);
    PERFORM postkit_queue.check_max_attempts(p_max_attempts);
    PERFORM postkit_queue.check_duration('delay', p_delay, true, interval '3650 days');
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    v_attempts := coalesce(p_max_attempts, v_policy.max_attempts);
    -- One pass over the sizes; check_payload says which payload is too big. The elements
    -- jsonb_array_elements returns are new, uncompressed values: pg_column_size is their real
    -- size even when p_payloads was read compressed from a table.
    IF EXISTS (SELECT FROM jsonb_array_elements(p_payloads) AS e
               WHERE pg_column_size(e.value) > v_policy.max_payload_bytes) THEN
        PERFORM postkit_queue.check_payload(p_queue, e.value, v_policy.max_payload_bytes)
        FROM jsonb_array_elements(p_payloads) AS e;
    END IF;

    IF p_unique_keys IS NULL THEN
        -- No keys, so nothing to deduplicate: a plain multi-row INSERT. ON CONFLICT would
        -- insert every row speculatively (and log its confirmation) only to find that the
        -- arbiter index's predicate leaves it out. Each payload still takes its id from the
        -- identity sequence up front, in payload order, and the result reads those ids back
        -- without a RETURNING to join against.
        RETURN QUERY
        WITH input AS (
            SELECT e.ordinality, e.value AS payload, nextval(v_sequence) AS id
            FROM jsonb_array_elements(p_payloads) WITH ORDINALITY AS e
        ), inserted AS (
            INSERT INTO postkit_queue.jobs AS j (
                id, namespace, queue, payload, priority, run_at, max_attempts, created_at)
            OVERRIDING SYSTEM VALUE
            SELECT i.id, p_namespace, p_queue, i.payload, p_priority,
                   v_now + coalesce(p_delay, interval '0'), v_attempts, v_now
            FROM input i
            ORDER BY i.ordinality
        )
        SELECT i.ordinality, i.id FROM input i ORDER BY i.ordinality;
    ELSE
        -- One multi-row INSERT. Each payload takes its id from the jobs' identity sequence up
        -- front, so the result can say, per payload, whether it was inserted: the ones
        -- jobs_unique_key_idx turned away (as in push) are missing from RETURNING.
        RETURN QUERY
        WITH input AS (
            SELECT e.ordinality, e.value AS payload, p_unique_keys[e.ordinality] AS unique_key,
                   nextval(v_sequence) AS id
            FROM jsonb_array_elements(p_payloads) WITH ORDINALITY AS e
        ), inserted AS (
            INSERT INTO postkit_queue.jobs AS j (
                id, namespace, queue, payload, priority, run_at, max_attempts, unique_key,
                created_at)
            OVERRIDING SYSTEM VALUE
            SELECT i.id, p_namespace, p_queue, i.payload, p_priority,
                   v_now + coalesce(p_delay, interval '0'), v_attempts, i.unique_key, v_now
            FROM input i
            ORDER BY i.ordinality
            ON CONFLICT (namespace, queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id
        )
        SELECT i.ordinality, inserted.id
        FROM input i LEFT JOIN inserted ON inserted.id = i.id
        ORDER BY i.ordinality;
    END IF;
    PERFORM postkit_queue.notify(p_namespace, p_queue);
END
$$;

-- pull, as in migration 6, with the visibility timeout checked by its effect.
CREATE OR REPLACE FUNCTION postkit_queue.pull(
    p_namespace          text,
    p_queue              text,
    p_worker_id          text     DEFAULT NULL,
    p_visibility_timeout interval DEFAULT NULL,
    p_limit              integer  DEFAULT 1)
RETURNS SETOF postkit_queue.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
-- As in migration 1: the claim walks jobs_pull_idx in order whatever the statistics say.
SET enable_sort = off
AS $$
DECLARE
    v_now        timestamptz := postkit_queue.clock();
    v_policy     record;
    v_timeout    interval;
    v_resume_key text;
    v_resume     text;
    v_priority   smallint;     -- the resume point: the key of the last job claimed
    v_run_at     timestamptz;
    v_id         bigint;
    v_head_at    timestamptz;  -- when this session last claimed from the head of the queue
    v_ids        bigint[] := '{}';
    v_job        postkit_queue.jobs;
    v_claimed    boolean := false;
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace) AND postkit_queue.is_name(p_queue)
                    AND (p_worker_id IS NULL OR postkit_queue.is_name(p_worker_id))
                    AND p_limit BETWEEN 1 AND 1000, false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_name('queue', p_queue, true);
        PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
        PERFORM postkit_queue.check_limit(p_limit, 1000);
    END IF;
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    v_timeout := coalesce(p_visibility_timeout, v_policy.visibility_timeout);
    IF NOT coalesce(postkit_queue.is_duration(v_timeout, false, interval '12 hours'), false) THEN
        PERFORM postkit_queue.check_duration('visibility_timeout', v_timeout, false,
                                             interval '12 hours');
    END IF;
    IF v_policy.paused THEN
        RETURN;  -- a paused queue hands out nothing; pushes are still accepted
    END IF;

    -- Each step below is a range scan of jobs_pull_idx. FOR UPDATE SKIP LOCKED steps over rows
    -- another transaction is claiming right now, so concurrent pullers never wait on each
    -- other and never receive the same job; the locked row is re-checked (state still
    -- 'pending') before it is taken. Rows this transaction locked in an earlier step are not
    -- skipped by SKIP LOCKED, hence the id <> ALL (v_ids).
    v_resume_key := 'postkit_queue.resume_' || md5(p_namespace || chr(31) || p_queue);
    v_resume := current_setting(v_resume_key, true);
    IF v_resume <> '' THEN
        -- Timestamps as integer microseconds since the epoch: exact, whatever the DateStyle.
        v_priority := split_part(v_resume, ' ', 1)::smallint;
        v_run_at := timestamptz 'epoch'
                    + split_part(v_resume, ' ', 2)::bigint * interval '1 microsecond';
        v_id := split_part(v_resume, ' ', 3)::bigint;
        v_head_at := timestamptz 'epoch'
                     + split_part(v_resume, ' ', 4)::bigint * interval '1 microsecond';
    END IF;
    IF v_now - v_head_at BETWEEN interval '0' AND interval '1 second' THEN
        v_ids := ARRAY(
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.priority > v_priority AND j.run_at <= v_now
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED);
        IF cardinality(v_ids) < p_limit THEN
            v_ids := v_ids || ARRAY(
                SELECT j.id FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
                  AND j.priority = v_priority AND (j.run_at, j.id) > (v_run_at, v_id)
                  AND j.run_at <= v_now AND j.id <> ALL (v_ids)
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT p_limit - cardinality(v_ids)
                FOR UPDATE SKIP LOCKED);
        END IF;
    END IF;
    IF cardinality(v_ids) < p_limit THEN
        v_ids := v_ids || ARRAY(
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.run_at <= v_now AND j.id <> ALL (v_ids)
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT p_limit - cardinality(v_ids)
            FOR UPDATE SKIP LOCKED);
        v_head_at := v_now;
    END IF;

    -- The claim itself: primary-key lookups of the locked ids, never a join the planner could
    -- turn into a scan of the table. The resume point moves to the last job in claim order.
    FOR v_job IN
        UPDATE postkit_queue.jobs j
        SET state         = 'running',
            attempts      = j.attempts + 1,
            worker_id     = p_worker_id,
            claim_token   = gen_random_uuid(),
            claimed_at    = v_now,
            visible_until = v_now + v_timeout
        WHERE j.namespace = p_namespace AND j.id = ANY (v_ids)
        RETURNING j.*
    LOOP
        IF NOT v_claimed OR v_job.priority < v_priority
           OR (v_job.priority = v_priority AND (v_job.run_at, v_job.id) > (v_run_at, v_id)) THEN
            v_priority := v_job.priority;
            v_run_at := v_job.run_at;
            v_id := v_job.id;
            v_claimed := true;
        END IF;
        RETURN NEXT v_job;
    END LOOP;
    IF v_priority IS NOT NULL THEN
        PERFORM set_config(v_resume_key, concat_ws(' ', v_priority,
            (extract(epoch FROM v_run_at) * 1000000)::bigint, v_id,
            (extract(epoch FROM v_head_at) * 1000000)::bigint), false);
    END IF;
END
$$;

-- pull_any, as in migration 3, with its queues array checked.
CREATE OR REPLACE FUNCTION postkit_queue.pull_any(
    p_namespace          text,
    p_queues             text[],
    p_worker_id          text     DEFAULT NULL,
    p_visibility_timeout interval DEFAULT NULL,
    p_limit              integer  DEFAULT 1)
RETURNS SETOF postkit_queue.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue   text;
    v_claimed integer := 0;
    v_got     integer;
BEGIN
    IF p_queues IS NULL OR cardinality(p_queues) = 0 THEN
        RAISE EXCEPTION 'postkit: queues must name at least one queue' USING ERRCODE = 'PKQ01';
    END IF;
    PERFORM postkit_queue.check_array('queues', p_queues, false, 'PKQ01');
    PERFORM postkit_queue.check_limit(p_limit, 1000);
    FOREACH v_queue IN ARRAY p_queues LOOP
        RETURN QUERY
        SELECT * FROM postkit_queue.pull(
            p_namespace, v_queue, p_worker_id, p_visibility_timeout, p_limit - v_claimed);
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_claimed := v_claimed + v_got;
        EXIT WHEN v_claimed >= p_limit;
    END LOOP;
END
$$;

-- ack, as in migration 6, refusing a bare job id.
CREATE OR REPLACE FUNCTION postkit_queue.ack(
    p_namespace   text,
    p_job_id      bigint,
    p_worker_id   text DEFAULT NULL,
    p_claim_token uuid DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_job postkit_queue.jobs;
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace) AND p_job_id IS NOT NULL
                    AND (p_worker_id IS NULL OR postkit_queue.is_name(p_worker_id))
                    AND (p_claim_token IS NOT NULL OR p_worker_id IS NOT NULL), false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_job_id(p_job_id);
        PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
        PERFORM postkit_queue.check_claim('ack', p_worker_id, p_claim_token);
    END IF;
    -- The DELETE locks the row by primary key. If a ticker or another settle holds it, we wait,
    -- then re-check the fence against the row as they left it.
    DELETE FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j, p_worker_id, p_claim_token)
    RETURNING j.* INTO v_job;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM postkit_queue.record_outcomes(ARRAY[v_job], 'completed', postkit_queue.clock());
    RETURN true;
END
$$;

-- ack_many, as in migration 6, with both arrays checked.
CREATE OR REPLACE FUNCTION postkit_queue.ack_many(
    p_namespace text, p_job_ids bigint[], p_claim_tokens uuid[])
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_done postkit_queue.jobs[];
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace), false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    END IF;
    IF p_job_ids IS NULL OR p_claim_tokens IS NULL
       OR cardinality(p_job_ids) <> cardinality(p_claim_tokens) THEN
        RAISE EXCEPTION 'postkit: ack_many needs one claim token per job id'
            USING ERRCODE = 'PKQ06';
    END IF;
    IF cardinality(p_job_ids) = 0 THEN
        RETURN '{}';
    END IF;
    -- Both arrays as the SDK sends them (one dimension from 1, no NULL) pass in one expression.
    IF NOT coalesce(array_ndims(p_job_ids) = 1 AND array_lower(p_job_ids, 1) = 1
                    AND array_ndims(p_claim_tokens) = 1 AND array_lower(p_claim_tokens, 1) = 1
                    AND array_position(p_job_ids, NULL) IS NULL
                    AND array_position(p_claim_tokens, NULL) IS NULL, false) THEN
        PERFORM postkit_queue.check_array('job_ids', p_job_ids, false, 'PKQ06');
        PERFORM postkit_queue.check_array('claim_tokens', p_claim_tokens, false, 'PKQ13');
    END IF;
    -- As in migration 1: primary-key lookups for the listed ids, each fenced by its current
    -- claim token being one of the tokens given (tokens are unique per claim).
    WITH done AS (
        DELETE FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id = ANY (p_job_ids)
          AND j.claim_token = ANY (p_claim_tokens)
        RETURNING j AS job
    )
    SELECT array_agg(done.job) INTO v_done FROM done;
    IF v_done IS NULL THEN
        RETURN '{}';
    END IF;
    PERFORM postkit_queue.record_outcomes(v_done, 'completed', postkit_queue.clock());
    RETURN ARRAY(SELECT (unnest(v_done)).id);
END
$$;

-- ack_batch, as in migration 3, with both arrays checked.
CREATE OR REPLACE FUNCTION postkit_queue.ack_batch(
    p_namespace text, p_job_ids bigint[], p_claim_tokens uuid[], p_worker_id text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now   timestamptz := postkit_queue.clock();
    v_held  integer;
    v_done  postkit_queue.jobs[];
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
    IF p_job_ids IS NULL OR p_claim_tokens IS NULL
       OR cardinality(p_job_ids) <> cardinality(p_claim_tokens) THEN
        RAISE EXCEPTION 'postkit: ack_batch needs one claim token per job id'
            USING ERRCODE = 'PKQ06';
    END IF;
    -- The ids and tokens pair up by position.
    PERFORM postkit_queue.check_array('job_ids', p_job_ids, false, 'PKQ06');
    PERFORM postkit_queue.check_array('claim_tokens', p_claim_tokens, false, 'PKQ13');
    IF cardinality(p_job_ids) = 0 THEN
        RETURN true;
    END IF;
    SELECT count(*) INTO v_held FROM (
        SELECT 1 FROM postkit_queue.jobs j
        JOIN unnest(p_job_ids, p_claim_tokens) AS c(id, token) ON c.id = j.id
        WHERE j.namespace = p_namespace
          AND postkit_queue.holds_claim(j, p_worker_id, c.token)
        ORDER BY j.id
        FOR UPDATE OF j) held;
    IF v_held <> cardinality(p_job_ids) THEN
        RETURN false;
    END IF;
    WITH done AS (
        DELETE FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id = ANY (p_job_ids)
        RETURNING j AS job
    )
    SELECT array_agg(done.job) INTO v_done FROM done;
    PERFORM postkit_queue.record_outcomes(v_done, 'completed', v_now);
    RETURN true;
END
$$;

-- nack, as in migration 1, refusing a bare job id.
CREATE OR REPLACE FUNCTION postkit_queue.nack(
    p_namespace   text,
    p_job_id      bigint,
    p_error       text     DEFAULT NULL,
    p_worker_id   text     DEFAULT NULL,
    p_claim_token uuid     DEFAULT NULL,
    p_backoff     interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now    timestamptz := postkit_queue.clock();
    v_job    postkit_queue.jobs;
    v_errors jsonb;
    v_policy record;
    v_delay  interval;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
    PERFORM postkit_queue.check_duration('backoff', p_backoff, true, interval '30 days');
    PERFORM postkit_queue.check_claim('nack', p_worker_id, p_claim_token);

    SELECT * INTO v_job FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
    FOR UPDATE;
    IF NOT FOUND OR NOT postkit_queue.holds_claim(v_job, p_worker_id, p_claim_token) THEN
        RETURN 'stale';
    END IF;

    v_errors := v_job.errors || postkit_queue.error_entry(v_job, 'nack', p_error, v_now);
    IF v_job.attempts >= v_job.max_attempts THEN
        PERFORM postkit_queue.bury(v_job, 'attempts_exhausted', v_errors, v_now);
        RETURN 'dead_lettered';
    END IF;

    SELECT * INTO v_policy FROM postkit_queue.queue_policy(v_job.namespace, v_job.queue);
    -- Computed in seconds and capped before it becomes an interval: base * 2^40 overflows the
    -- interval type for any base above a few seconds, so the cap must apply first.
    v_delay := coalesce(p_backoff, make_interval(secs => least(
        extract(epoch FROM coalesce(v_job.backoff_cap, v_policy.backoff_cap))::float8,
        extract(epoch FROM coalesce(v_job.backoff_base, v_policy.backoff_base))::float8
            * power(2, least(v_job.attempts - 1, 40)) * (1 + random()))));

    UPDATE postkit_queue.jobs
    SET state = 'pending', run_at = v_now + v_delay, errors = v_errors,
        worker_id = NULL, claim_token = NULL, claimed_at = NULL, visible_until = NULL
    WHERE namespace = v_job.namespace AND id = v_job.id;
    -- Waiting workers wake, find nothing ready yet, and sleep until this retry falls due.
    PERFORM postkit_queue.notify(v_job.namespace, v_job.queue);
    PERFORM postkit_queue.record_outcomes(ARRAY[v_job], 'retried', v_now);
    RETURN 'retried';
END
$$;

-- fail, as in migration 1, refusing a bare job id.
CREATE OR REPLACE FUNCTION postkit_queue.fail(
    p_namespace   text,
    p_job_id      bigint,
    p_error       text DEFAULT NULL,
    p_worker_id   text DEFAULT NULL,
    p_claim_token uuid DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := postkit_queue.clock();
    v_job postkit_queue.jobs;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
    PERFORM postkit_queue.check_claim('fail', p_worker_id, p_claim_token);

    SELECT * INTO v_job FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
    FOR UPDATE;
    IF NOT FOUND OR NOT postkit_queue.holds_claim(v_job, p_worker_id, p_claim_token) THEN
        RETURN false;
    END IF;

    PERFORM postkit_queue.bury(
        v_job, 'failed',
        v_job.errors || postkit_queue.error_entry(v_job, 'fail', p_error, v_now), v_now);
    RETURN true;
END
$$;

-- extend_visibility, as in migration 6, with the extension checked by its effect and a bare
-- job id refused.
CREATE OR REPLACE FUNCTION postkit_queue.extend_visibility(
    p_namespace   text,
    p_job_id      bigint,
    p_extension   interval,
    p_worker_id   text DEFAULT NULL,
    p_claim_token uuid DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace) AND p_job_id IS NOT NULL
                    AND (p_worker_id IS NULL OR postkit_queue.is_name(p_worker_id))
                    AND (p_claim_token IS NOT NULL OR p_worker_id IS NOT NULL)
                    AND postkit_queue.is_duration(p_extension, false, interval '12 hours'),
                    false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_job_id(p_job_id);
        PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
        IF p_extension IS NULL THEN
            RAISE EXCEPTION 'postkit: extension must not be null' USING ERRCODE = 'PKQ05';
        END IF;
        PERFORM postkit_queue.check_duration('extension', p_extension, false,
                                             interval '12 hours');
        PERFORM postkit_queue.check_claim('extend_visibility', p_worker_id, p_claim_token);
    END IF;

    UPDATE postkit_queue.jobs j
    SET visible_until = greatest(j.visible_until, v_now + p_extension)
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j, p_worker_id, p_claim_token);
    RETURN FOUND;
END
$$;

-- release, as in migration 1, refusing a bare job id.
CREATE OR REPLACE FUNCTION postkit_queue.release(
    p_namespace   text,
    p_job_id      bigint,
    p_worker_id   text DEFAULT NULL,
    p_claim_token uuid DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
    PERFORM postkit_queue.check_claim('release', p_worker_id, p_claim_token);

    UPDATE postkit_queue.jobs j
    SET state = 'pending', attempts = j.attempts - 1, run_at = postkit_queue.clock(),
        worker_id = NULL, claim_token = NULL, claimed_at = NULL, visible_until = NULL
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j, p_worker_id, p_claim_token)
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM postkit_queue.notify(p_namespace, v_queue);
    RETURN true;
END
$$;

-- set_paused, as in migration 3, refusing a NULL.
CREATE OR REPLACE FUNCTION postkit_queue.set_paused(p_namespace text, p_queue text, p_paused boolean)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    IF p_paused IS NULL THEN
        RAISE EXCEPTION 'postkit: paused must be true or false, not null' USING ERRCODE = 'PKQ09';
    END IF;
    INSERT INTO postkit_queue.queue_settings AS s (namespace, queue, paused, updated_at)
    VALUES (p_namespace, p_queue, p_paused, postkit_queue.clock())
    ON CONFLICT (namespace, queue) DO UPDATE
    SET paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at;
    IF NOT p_paused THEN
        PERFORM postkit_queue.notify(p_namespace, p_queue);  -- waiting workers may pull again
    END IF;
    RETURN p_paused;
END
$$;
