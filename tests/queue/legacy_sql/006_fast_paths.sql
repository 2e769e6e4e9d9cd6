-- Postkit queue, migration 6: fast paths for the calls made once per job or per batch.
--
-- Profiling push and pull one call per transaction (pgbench -M prepared, as in
-- benchmarks/floor.py) showed where their time went, before a single row was touched:
--
--   * SQL-language helpers that pin search_path (clock, queue_policy, channel, holds_claim,
--     error_entry, next_run_at) cannot be inlined, and PostgreSQL before 18 plans the body of
--     such a function again on every call: queue_policy alone cost about 150 us per push.
--     PL/pgSQL keeps each statement's plan for the session, so they become PL/pgSQL here, with
--     the same signatures and results.
--   * PL/pgSQL plans a statement with parameters afresh on each of its first five calls, and
--     on every later call for as long as the generic plan's estimate looks costlier than the
--     custom plans' average. For the claim it always did: about 250 us of planning per pull,
--     more than the claim itself. The functions below that run queries say
--     plan_cache_mode = force_generic_plan: each statement is planned once per session. Those
--     generic plans are what tests/queue/test_plans_without_statistics.py checks, for a
--     namespace the planner has statistics on and for one it has none for.
--   * Every check_* helper is a PL/pgSQL call with its own search_path, about 10 us each on the
--     first call of a transaction; push made eight of them. push, pull, ack, ack_many,
--     extend_visibility and tick_timeouts now test the common, well-formed call in one
--     expression and run the checks (which raise the precise error) only when it fails.
--
-- Together these took a push in its own transaction from about 650 us of server time to about
-- 290 us on the 2-core benchmark machine (pgbench -M prepared, synchronous_commit off to leave
-- the WAL flush out; a bare single-row INSERT takes about 90 us there, and the notification
-- about 60 us of the rest). The state machine is unchanged: same locks, fences and results.
--
-- It also fixes check_name, which treated the letter v as blank: PostgreSQL's E'' strings have
-- no \v escape, so E'\v' is the letter itself. The vertical tab is written as \x0B.

-- The blank-name rule, once. A SQL-standard function body is parsed when the function is
-- created, so every name in it is bound then and no caller's search_path can reach it; and a
-- body of one expression is inlined into the calling statement, so the fast paths below pay
-- nothing for calling it. NULL for NULL.
CREATE FUNCTION postkit_queue.is_name(p_value text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN char_length(p_value) <= 128 AND btrim(p_value, E' \t\n\r\f\x0B') <> '';

CREATE OR REPLACE FUNCTION postkit_queue.check_name(p_what text, p_value text, p_required boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL THEN
        IF p_required THEN
            RAISE EXCEPTION 'postkit: % must not be null', p_what USING ERRCODE = 'PKQ01';
        END IF;
        RETURN;
    END IF;
    IF char_length(p_value) > 128 THEN
        RAISE EXCEPTION 'postkit: % is % characters long; the limit is 128',
            p_what, char_length(p_value) USING ERRCODE = 'PKQ01';
    END IF;
    IF NOT postkit_queue.is_name(p_value) THEN
        RAISE EXCEPTION 'postkit: % must not be empty or blank', p_what USING ERRCODE = 'PKQ01';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.clock() RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN statement_timestamp()
         + coalesce(nullif(current_setting('postkit_queue.clock_offset', true), '')::interval,
                    interval '0');
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.queue_policy(
    p_namespace text, p_queue text,
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    -- A primary-key probe of queue_settings; a queue without a row gets every default.
    SELECT s.max_attempts, s.visibility_timeout, s.backoff_base, s.backoff_cap, s.paused,
           s.retain_completed, s.retain_dead, s.max_payload_bytes
    INTO max_attempts, visibility_timeout, backoff_base, backoff_cap, paused,
         retain_completed, retain_dead, max_payload_bytes
    FROM postkit_queue.queue_settings s
    WHERE s.namespace = p_namespace AND s.queue = p_queue;
    max_attempts := coalesce(max_attempts, 20);
    visibility_timeout := coalesce(visibility_timeout, interval '30 seconds');
    backoff_base := coalesce(backoff_base, interval '1 second');
    backoff_cap := coalesce(backoff_cap, interval '1 hour');
    paused := coalesce(paused, false);
    retain_dead := coalesce(retain_dead, interval '30 days');
    max_payload_bytes := coalesce(max_payload_bytes, 1048576);
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.channel(p_namespace text, p_queue text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN 'postkit_' || md5(p_namespace || chr(31) || p_queue);
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.holds_claim(
    p_job postkit_queue.jobs, p_worker_id text, p_claim_token uuid)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN p_job.state = 'running'
       AND CASE WHEN p_claim_token IS NOT NULL
                THEN p_job.claim_token = p_claim_token
                     -- IS NOT DISTINCT FROM, not =: a job claimed without a worker_id must not
                     -- make this NULL, which nack and fail would read as "holds the claim".
                     AND (p_worker_id IS NULL OR p_job.worker_id IS NOT DISTINCT FROM p_worker_id)
                ELSE p_job.worker_id IS NOT DISTINCT FROM p_worker_id
           END;
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.error_entry(
    p_job postkit_queue.jobs, p_kind text, p_error text, p_at timestamptz)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object(
        'attempt', p_job.attempts,
        'kind', p_kind,
        -- Errors are capped at 8 KiB so that a runaway traceback cannot bloat the hot table.
        'error', left(p_error, 8192),
        'worker_id', p_job.worker_id,
        'at', p_at);
END
$$;

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
    -- The skip scan of migration 1, unchanged: per queue, one probe of jobs_pull_idx per
    -- distinct priority, and the first run_at within each.
    RETURN (
        WITH RECURSIVE priorities(queue, priority) AS (
            SELECT q.queue, (SELECT j.priority FROM postkit_queue.jobs j
                             WHERE j.namespace = p_namespace AND j.queue = q.queue
                               AND j.state = 'pending'
                             ORDER BY j.priority DESC LIMIT 1)
            FROM unnest(p_queues) AS q(queue)
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

-- Outcome counters and the archive, set-based as before. The upsert now takes its rows in
-- (namespace, queue) order: two workers that share a counter slot and settle batches spanning
-- the same queues lock those rows in the same order, so they queue up instead of deadlocking.
-- The archive joins queue_settings directly: retain_completed has no built-in default (NULL,
-- not archived), so only a queue with a settings row can keep completed jobs, and a batch of
-- a queue without one costs a single probe instead of a queue_policy call per job.
CREATE OR REPLACE FUNCTION postkit_queue.record_outcomes(
    p_jobs postkit_queue.jobs[], p_outcome text, p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    INSERT INTO postkit_queue.queue_stats AS s (
        namespace, queue, minute, slot, completed, retried, rescued, dead, completed_attempts)
    SELECT j.namespace, j.queue, date_trunc('minute', p_at), pg_backend_pid() % 8,
           count(*) FILTER (WHERE p_outcome = 'completed'),
           count(*) FILTER (WHERE p_outcome = 'retried'),
           count(*) FILTER (WHERE p_outcome = 'rescued'),
           count(*) FILTER (WHERE p_outcome = 'dead'),
           coalesce(sum(j.attempts) FILTER (WHERE p_outcome = 'completed'), 0)
    FROM unnest(p_jobs) AS j
    GROUP BY j.namespace, j.queue
    ORDER BY j.namespace, j.queue
    ON CONFLICT (namespace, queue, minute, slot) DO UPDATE
    SET completed = s.completed + EXCLUDED.completed,
        retried = s.retried + EXCLUDED.retried,
        rescued = s.rescued + EXCLUDED.rescued,
        dead = s.dead + EXCLUDED.dead,
        completed_attempts = s.completed_attempts + EXCLUDED.completed_attempts;

    IF p_outcome = 'completed' THEN
        INSERT INTO postkit_queue.completed_jobs (
            namespace, job_id, queue, payload, priority, attempts, worker_id, errors,
            created_at, completed_at, expires_at)
        SELECT j.namespace, j.id, j.queue, j.payload, j.priority, j.attempts, j.worker_id,
               j.errors, j.created_at, p_at, p_at + s.retain_completed
        FROM unnest(p_jobs) AS j
        JOIN postkit_queue.queue_settings s
          ON s.namespace = j.namespace AND s.queue = j.queue
        WHERE s.retain_completed IS NOT NULL;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- The state machine's hot calls, each as in its earlier migration but for the fast path.
-- ---------------------------------------------------------------------------------------------

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
        PERFORM postkit_queue.check_duration('delay', p_delay, true, interval '10 years');
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

-- pull: as in migration 1, claim up to p_limit ready jobs, highest priority first, then oldest
-- run_at; but a session that is working through a backlog resumes where its last claim ended.
--
-- Why: every claim leaves the job's entry in jobs_pull_idx behind as a dead one, right at the
-- head of the range the next claim scans from, until VACUUM removes it. Claiming from the head
-- each time walks all of them: 16-job claims from a backlog of 300,000 ran at 1,360 a second
-- after a VACUUM's worth of quiet and at 500 a second 16 seconds of claims later (pgbench, two
-- clients), and while a long transaction holds back the horizon even VACUUM cannot help.
--
-- How: the session remembers (in a session setting named after the queue) the key of the last
-- job it claimed, (priority, run_at, id), and when it last claimed from the head. Within a
-- second of that it claims, in order: jobs of a higher priority (a short range when there are
-- none), then jobs of the remembered priority past the remembered key, which skips the dead
-- entries of everything it claimed before. Only when those do not fill p_limit, or the second
-- is up, does it claim from the head again. Jobs that come due in order are found either way.
-- The cost falls on a job whose key lies behind the session's resume point: one whose push
-- committed after later-pushed jobs were claimed (run_at and id are taken when the push
-- statement runs), or whose claim rolled back. While a backlog keeps every claim full, such a
-- job waits up to a second longer than strict order would have it wait; never longer.
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
    IF NOT (v_timeout > interval '0' AND v_timeout <= interval '12 hours') THEN
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
                    AND (p_worker_id IS NULL OR postkit_queue.is_name(p_worker_id)), false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_job_id(p_job_id);
        PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
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
                    AND p_extension > interval '0' AND p_extension <= interval '12 hours',
                    false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_job_id(p_job_id);
        PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
        IF p_extension IS NULL THEN
            RAISE EXCEPTION 'postkit: extension must not be null' USING ERRCODE = 'PKQ05';
        END IF;
        PERFORM postkit_queue.check_duration('extension', p_extension, false,
                                             interval '12 hours');
    END IF;

    UPDATE postkit_queue.jobs j
    SET visible_until = greatest(j.visible_until, v_now + p_extension)
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j, p_worker_id, p_claim_token);
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.tick_timeouts(p_namespace text, p_limit integer DEFAULT 1000)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_sort = off  -- read expired claims off jobs_deadline_idx in order, as in pull
AS $$
DECLARE
    v_now    timestamptz := postkit_queue.clock();
    v_job    postkit_queue.jobs;
    v_errors jsonb;
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace) AND p_limit BETWEEN 1 AND 100000,
                    false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_limit(p_limit, 100000);
    END IF;

    -- As in migration 1: a range scan of jobs_deadline_idx; SKIP LOCKED hands each expired
    -- row to one ticker and leaves a row an ack is settling to that ack.
    FOR v_job IN
        SELECT * FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.state = 'running' AND j.visible_until < v_now
        ORDER BY j.visible_until
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        v_errors := v_job.errors || postkit_queue.error_entry(
            v_job, 'timeout',
            format('visibility timeout expired: the claim of %s ended at %s without ack, nack '
                   'or fail (attempt %s of %s)',
                   coalesce(v_job.worker_id, 'an unnamed worker'), v_job.visible_until,
                   v_job.attempts, v_job.max_attempts),
            v_now);
        job_id := v_job.id;
        IF v_job.attempts >= v_job.max_attempts THEN
            PERFORM postkit_queue.bury(v_job, 'timed_out', v_errors, v_now);
            outcome := 'dead_lettered';
        ELSE
            UPDATE postkit_queue.jobs
            SET state = 'pending', run_at = v_now, errors = v_errors,
                worker_id = NULL, claim_token = NULL, claimed_at = NULL, visible_until = NULL
            WHERE namespace = v_job.namespace AND id = v_job.id;
            PERFORM postkit_queue.notify(v_job.namespace, v_job.queue);
            PERFORM postkit_queue.record_outcomes(ARRAY[v_job], 'rescued', v_now);
            outcome := 'retried';
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- push_batch, as in migration 3, but with one pass over the keys and one over the payload sizes
-- instead of a check call per payload (the checks run only to name the offending entry), and the
-- identity sequence looked up once per call instead of once per payload.
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
    PERFORM postkit_queue.check_duration('delay', p_delay, true, interval '10 years');
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    v_attempts := coalesce(p_max_attempts, v_policy.max_attempts);
    -- One pass over the sizes; check_payload says which payload is too big.
    IF EXISTS (SELECT FROM jsonb_array_elements(p_payloads) AS e
               WHERE pg_column_size(e.value) > v_policy.max_payload_bytes) THEN
        PERFORM postkit_queue.check_payload(p_queue, e.value, v_policy.max_payload_bytes)
        FROM jsonb_array_elements(p_payloads) AS e;
    END IF;

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
    PERFORM postkit_queue.notify(p_namespace, p_queue);
END
$$;
