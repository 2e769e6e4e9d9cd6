-- Postkit queue, migration 3: operating the queue.
--
-- Statistics that stay fast at millions of rows, an archive for completed jobs and retention
-- for everything, listing with keyset pagination, dead-letter redrive and purge, cancel, pause
-- and purge of queues, pull_any, and batch push and ack. Like the state machine, each operation
-- is one function that validates its input, takes the locks it needs and says so below.

-- Completed jobs of queues whose retain_completed is set; pruned when expires_at passes.
CREATE TABLE postkit_queue.completed_jobs (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL,
    attempts     integer     NOT NULL,
    worker_id    text,
    errors       jsonb       NOT NULL,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, job_id)
);

-- Serves prune(): the archived jobs of a namespace whose retention ran out.
CREATE INDEX completed_jobs_expires_at_idx ON postkit_queue.completed_jobs (namespace, expires_at);

-- Outcome counters per queue and minute. Each settling transaction adds to one row of one of
-- eight slots (chosen by backend pid), so concurrent workers rarely wait on the same row lock;
-- stats() adds the slots up. Rows older than two hours are pruned.
CREATE TABLE postkit_queue.queue_stats (
    namespace          text        NOT NULL,
    queue              text        NOT NULL,
    minute             timestamptz NOT NULL,
    slot               smallint    NOT NULL,
    completed          bigint      NOT NULL DEFAULT 0,
    retried            bigint      NOT NULL DEFAULT 0,
    rescued            bigint      NOT NULL DEFAULT 0,
    dead               bigint      NOT NULL DEFAULT 0,
    completed_attempts bigint      NOT NULL DEFAULT 0,
    -- Serves stats() (one namespace's recent minutes) and the upsert below.
    PRIMARY KEY (namespace, queue, minute, slot)
);

-- Serves queues() (one index probe per queue that has dead letters) and stats() (each queue's
-- dead count stops at the cap), however many dead letters other queues of the namespace hold.
CREATE INDEX dead_letters_queue_idx ON postkit_queue.dead_letters (namespace, queue, job_id)
    WHERE redriven_job_id IS NULL;

CREATE OR REPLACE FUNCTION postkit_queue.record_outcomes(
    p_jobs postkit_queue.jobs[], p_outcome text, p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- One upsert per queue of the batch, however many jobs it settled.
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
    ON CONFLICT (namespace, queue, minute, slot) DO UPDATE
    SET completed = s.completed + EXCLUDED.completed,
        retried = s.retried + EXCLUDED.retried,
        rescued = s.rescued + EXCLUDED.rescued,
        dead = s.dead + EXCLUDED.dead,
        completed_attempts = s.completed_attempts + EXCLUDED.completed_attempts;

    IF p_outcome = 'completed' THEN
        -- Archive the jobs of queues that keep completed jobs (retain_completed is set).
        INSERT INTO postkit_queue.completed_jobs (
            namespace, job_id, queue, payload, priority, attempts, worker_id, errors,
            created_at, completed_at, expires_at)
        SELECT j.namespace, j.id, j.queue, j.payload, j.priority, j.attempts, j.worker_id,
               j.errors, j.created_at, p_at, p_at + keep.retain_completed
        FROM unnest(p_jobs) AS j
        CROSS JOIN LATERAL (
            SELECT (postkit_queue.queue_policy(j.namespace, j.queue)).retain_completed) keep
        WHERE keep.retain_completed IS NOT NULL;
    END IF;
END
$$;

-- The queues a namespace has: configured ones, ones with live jobs, dead letters or recent
-- outcomes. Live queues come from a skip scan of jobs_pull_idx (one index probe per distinct
-- queue, however many jobs) plus the running rows, which are bounded by the workers' slots;
-- queues with dead letters from a skip scan of dead_letters_queue_idx.
CREATE FUNCTION postkit_queue.queues(p_namespace text)
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE pending_queues(queue) AS (
        (SELECT j.queue FROM postkit_queue.jobs j
         WHERE j.namespace = p_namespace AND j.state = 'pending'
         ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.state = 'pending' AND j.queue > q.queue
                ORDER BY j.queue LIMIT 1)
        FROM pending_queues q
        WHERE q.queue IS NOT NULL
    ), dead_queues(queue) AS (
        (SELECT d.queue FROM postkit_queue.dead_letters d
         WHERE d.namespace = p_namespace AND d.redriven_job_id IS NULL
         ORDER BY d.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT d.queue FROM postkit_queue.dead_letters d
                WHERE d.namespace = p_namespace AND d.redriven_job_id IS NULL
                  AND d.queue > q.queue
                ORDER BY d.queue LIMIT 1)
        FROM dead_queues q
        WHERE q.queue IS NOT NULL
    )
    SELECT queue FROM pending_queues WHERE queue IS NOT NULL
    UNION
    SELECT j.queue FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.state = 'running'
    UNION
    SELECT s.queue FROM postkit_queue.queue_settings s WHERE s.namespace = p_namespace
    UNION
    SELECT s.queue FROM postkit_queue.queue_stats s
    WHERE s.namespace = p_namespace AND s.minute >= postkit_queue.clock() - interval '1 hour'
    UNION
    SELECT queue FROM dead_queues WHERE queue IS NOT NULL
$$;

-- stats: per queue, how many jobs are pending (ready now), scheduled (delayed), running and
-- dead; the age of the oldest ready job; outcomes in the last minute and hour; mean attempts
-- of completed jobs. Live counts are exact up to p_cap and then reported as p_cap with
-- counts_capped = true: each count is an index range scan that stops at p_cap rows, so stats
-- stays fast on a backlog of millions (a full COUNT(*) would read every row).
CREATE FUNCTION postkit_queue.stats(
    p_namespace text, p_queue text DEFAULT NULL, p_cap integer DEFAULT 100000)
RETURNS TABLE (
    queue text, paused boolean, pending bigint, scheduled bigint, running bigint, dead bigint,
    counts_capped boolean, oldest_ready_age interval,
    completed_last_minute bigint, completed_last_hour bigint,
    failed_last_minute bigint, failed_last_hour bigint,
    retried_last_hour bigint, rescued_last_hour bigint, mean_attempts numeric)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
-- Each count must stop at p_cap rows, which only a plain index scan does: a bitmap scan reads
-- the whole index range before the LIMIT applies, and a sequential scan may read the whole
-- table. Without these, a generic plan on a million-job backlog read every row.
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now        timestamptz := postkit_queue.clock();
    v_queue      text;
    v_priorities smallint[];
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    PERFORM postkit_queue.check_limit(p_cap, 10000000);
    FOR v_queue IN
        SELECT q FROM postkit_queue.queues(p_namespace) AS q
        WHERE p_queue IS NULL OR q = p_queue
        UNION SELECT p_queue WHERE p_queue IS NOT NULL
        ORDER BY 1
    LOOP
        queue := v_queue;
        paused := (postkit_queue.queue_policy(p_namespace, v_queue)).paused;
        -- The distinct priorities of the queue's pending jobs: a skip scan of jobs_pull_idx,
        -- one index probe per priority. Within one priority the index is ordered by run_at,
        -- so "ready" and "scheduled" are each one contiguous range of it.
        WITH RECURSIVE priorities(priority) AS (
            (SELECT j.priority FROM postkit_queue.jobs j
             WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'pending'
             ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM postkit_queue.jobs j
                    WHERE j.namespace = p_namespace AND j.queue = v_queue
                      AND j.state = 'pending' AND j.priority < p.priority
                    ORDER BY j.priority DESC LIMIT 1)
            FROM priorities p WHERE p.priority IS NOT NULL
        )
        SELECT array_agg(p.priority) INTO v_priorities
        FROM priorities p WHERE p.priority IS NOT NULL;
        v_priorities := coalesce(v_priorities, '{}');
        -- Range scans of jobs_pull_idx, priority by priority, stopping at p_cap rows in all.
        SELECT count(*) INTO pending FROM (
            SELECT 1 FROM unnest(v_priorities) AS p(priority)
            CROSS JOIN LATERAL (
                SELECT 1 FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'pending'
                  AND j.priority = p.priority AND j.run_at <= v_now
                LIMIT p_cap) ready
            LIMIT p_cap) counted;
        SELECT count(*) INTO scheduled FROM (
            SELECT 1 FROM unnest(v_priorities) AS p(priority)
            CROSS JOIN LATERAL (
                SELECT 1 FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'pending'
                  AND j.priority = p.priority AND j.run_at > v_now
                LIMIT p_cap) later
            LIMIT p_cap) counted;
        SELECT count(*) INTO running FROM (
            SELECT 1 FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'running'
            LIMIT p_cap) claimed;
        SELECT count(*) INTO dead FROM (
            SELECT 1 FROM postkit_queue.dead_letters d
            WHERE d.namespace = p_namespace AND d.queue = v_queue
              AND d.redriven_job_id IS NULL
            LIMIT p_cap) buried;
        counts_capped := greatest(pending, scheduled, running, dead) >= p_cap;
        -- The oldest ready job: the earliest run_at of each priority, then the earliest of those.
        SELECT v_now - min(first.run_at) INTO oldest_ready_age
        FROM unnest(v_priorities) AS p(priority)
        CROSS JOIN LATERAL (
            SELECT j.run_at FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'pending'
              AND j.priority = p.priority
            ORDER BY j.run_at LIMIT 1) first
        WHERE first.run_at <= v_now;
        -- Primary-key range scan of queue_stats: at most 60 minutes x 8 slots.
        SELECT coalesce(sum(s.completed) FILTER (WHERE s.minute >= date_trunc('minute', v_now)), 0),
               coalesce(sum(s.completed), 0),
               coalesce(sum(s.dead) FILTER (WHERE s.minute >= date_trunc('minute', v_now)), 0),
               coalesce(sum(s.dead), 0),
               coalesce(sum(s.retried), 0),
               coalesce(sum(s.rescued), 0),
               round(sum(s.completed_attempts)::numeric / nullif(sum(s.completed), 0), 2)
        INTO completed_last_minute, completed_last_hour, failed_last_minute, failed_last_hour,
             retried_last_hour, rescued_last_hour, mean_attempts
        FROM postkit_queue.queue_stats s
        WHERE s.namespace = p_namespace AND s.queue = v_queue
          AND s.minute > v_now - interval '1 hour';
        RETURN NEXT;
    END LOOP;
END
$$;

-- jobs: list the jobs of a queue in one state ('pending' = ready now, 'scheduled', 'running'
-- or 'dead'), oldest id first, p_limit at a time. Keyset pagination: pass the last id of a
-- page as p_after_id to get the next.
CREATE FUNCTION postkit_queue.jobs(
    p_namespace text, p_queue text, p_state text,
    p_limit integer DEFAULT 100, p_after_id bigint DEFAULT 0)
RETURNS TABLE (
    namespace text, id bigint, queue text, state text, payload jsonb, priority smallint,
    run_at timestamptz, attempts integer, max_attempts integer, unique_key text,
    worker_id text, claim_token uuid, claimed_at timestamptz, visible_until timestamptz,
    errors jsonb, created_at timestamptz, failed_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    IF p_state IS NULL OR p_state NOT IN ('pending', 'scheduled', 'running', 'dead') THEN
        RAISE EXCEPTION 'postkit: state must be pending, scheduled, running or dead, got %',
            coalesce(p_state, 'NULL') USING ERRCODE = 'PKQ09';
    END IF;
    IF p_state = 'dead' THEN
        RETURN QUERY
        SELECT d.namespace, d.job_id, d.queue, 'dead', d.payload, d.priority, NULL::timestamptz,
               d.attempts, d.max_attempts, d.unique_key, d.worker_id, NULL::uuid,
               NULL::timestamptz, NULL::timestamptz, d.errors, d.created_at, d.failed_at
        FROM postkit_queue.dead_letters d
        WHERE d.namespace = p_namespace AND d.queue = p_queue
          AND d.job_id > coalesce(p_after_id, 0) AND d.redriven_job_id IS NULL
        ORDER BY d.job_id
        LIMIT p_limit;
        RETURN;
    END IF;
    -- A primary-key range scan from the cursor, filtered to the queue and state.
    RETURN QUERY
    SELECT j.namespace, j.id, j.queue, j.state, j.payload, j.priority, j.run_at, j.attempts,
           j.max_attempts, j.unique_key, j.worker_id, j.claim_token, j.claimed_at,
           j.visible_until, j.errors, j.created_at, NULL::timestamptz
    FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.queue = p_queue
      AND j.id > coalesce(p_after_id, 0)
      AND CASE p_state
              WHEN 'running' THEN j.state = 'running'
              WHEN 'pending' THEN j.state = 'pending' AND j.run_at <= v_now
              ELSE j.state = 'pending' AND j.run_at > v_now
          END
    ORDER BY j.id
    LIMIT p_limit;
END
$$;

-- redrive: retry dead letters as new jobs with fresh attempts, into their own queue or
-- p_to_queue. Picks p_job_ids, or else every dead letter matching the filters (queue, failed
-- between, error substring), up to p_limit. Each dead letter is redriven at most once: the row
-- is locked (FOR UPDATE waits for a concurrent operator) and re-checked, so a second operator
-- finds it already redriven and skips it. The dead letter stays, linked to its new job.
-- With p_dry_run nothing changes and new_job_id is NULL: what would be retried.
CREATE FUNCTION postkit_queue.redrive(
    p_namespace      text,
    p_job_ids        bigint[]    DEFAULT NULL,
    p_queue          text        DEFAULT NULL,
    p_failed_after   timestamptz DEFAULT NULL,
    p_failed_before  timestamptz DEFAULT NULL,
    p_error_contains text        DEFAULT NULL,
    p_to_queue       text        DEFAULT NULL,
    p_limit          integer     DEFAULT 1000,
    p_dry_run        boolean     DEFAULT false)
RETURNS TABLE (job_id bigint, queue text, new_job_id bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now  timestamptz := postkit_queue.clock();
    v_dead postkit_queue.dead_letters;
    v_id   bigint;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    PERFORM postkit_queue.check_name('to_queue', p_to_queue, false);
    PERFORM postkit_queue.check_limit(p_limit, 100000);
    FOR v_dead IN
        SELECT * FROM postkit_queue.dead_letters d
        WHERE d.namespace = p_namespace AND d.redriven_job_id IS NULL
          AND (p_job_ids IS NULL OR d.job_id = ANY (p_job_ids))
          AND (p_queue IS NULL OR d.queue = p_queue)
          AND (p_failed_after IS NULL OR d.failed_at >= p_failed_after)
          AND (p_failed_before IS NULL OR d.failed_at < p_failed_before)
          AND (p_error_contains IS NULL
               OR strpos(lower(coalesce(d.error, '')), lower(p_error_contains)) > 0)
        ORDER BY d.job_id
        LIMIT p_limit
        FOR UPDATE
    LOOP
        job_id := v_dead.job_id;
        queue := coalesce(p_to_queue, v_dead.queue);
        new_job_id := NULL;
        IF NOT p_dry_run THEN
            INSERT INTO postkit_queue.jobs (
                namespace, queue, payload, priority, run_at, max_attempts, created_at)
            VALUES (p_namespace, coalesce(p_to_queue, v_dead.queue), v_dead.payload,
                    v_dead.priority, v_now, v_dead.max_attempts, v_now)
            RETURNING id INTO v_id;
            UPDATE postkit_queue.dead_letters d
            SET redriven_job_id = v_id, redriven_at = v_now
            WHERE d.namespace = p_namespace AND d.job_id = v_dead.job_id;
            PERFORM postkit_queue.notify(p_namespace, coalesce(p_to_queue, v_dead.queue));
            new_job_id := v_id;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- purge_dead_letters: delete the dead letters of a namespace (of one queue) that failed more
-- than p_older_than ago. Returns how many were deleted.
CREATE FUNCTION postkit_queue.purge_dead_letters(
    p_namespace text, p_older_than interval, p_queue text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_deleted bigint;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    IF p_older_than IS NULL THEN
        RAISE EXCEPTION 'postkit: older_than must not be null' USING ERRCODE = 'PKQ05';
    END IF;
    PERFORM postkit_queue.check_duration('older_than', p_older_than, true, interval '3650 days');
    DELETE FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace AND (p_queue IS NULL OR d.queue = p_queue)
      AND d.failed_at < postkit_queue.clock() - p_older_than;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- Operator actions that a worker's table privileges would otherwise allow (a worker may delete
-- jobs, since ack does) check for the operator grant explicitly: write access to the queue
-- settings, which grant_access gives operators only. Owners and superusers pass.
CREATE FUNCTION postkit_queue.require_operator(p_action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT has_table_privilege('postkit_queue.queue_settings', 'UPDATE') THEN
        RAISE EXCEPTION 'postkit: permission denied to %: the role needs operator access '
                        '(postkit_queue.grant_access(role, ''operator''))', p_action
            USING ERRCODE = '42501';
    END IF;
END
$$;

-- cancel: remove a pending or scheduled job. Returns false when no such live job exists. A
-- running job cannot be cancelled (its worker holds the claim): that raises PKQ08.
CREATE FUNCTION postkit_queue.cancel(p_namespace text, p_job_id bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_state text;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.require_operator('cancel a job');
    -- Lock the row so a concurrent pull cannot claim it between the check and the delete.
    SELECT j.state INTO v_state FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_state = 'running' THEN
        RAISE EXCEPTION 'postkit: job % is running and cannot be cancelled; it is settled by '
                        'its worker (or reclaimed when its claim expires)', p_job_id
            USING ERRCODE = 'PKQ08';
    END IF;
    DELETE FROM postkit_queue.jobs j WHERE j.namespace = p_namespace AND j.id = p_job_id;
    RETURN true;
END
$$;

-- pause_queue / resume_queue: while a queue is paused, pull and pull_any hand out nothing
-- from it; pushes are still accepted. Returns whether the queue is now paused.
CREATE FUNCTION postkit_queue.set_paused(p_namespace text, p_queue text, p_paused boolean)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
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

CREATE FUNCTION postkit_queue.pause_queue(p_namespace text, p_queue text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT postkit_queue.set_paused(p_namespace, p_queue, true) $$;

CREATE FUNCTION postkit_queue.resume_queue(p_namespace text, p_queue text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT postkit_queue.set_paused(p_namespace, p_queue, false) $$;

-- purge_queue: delete every pending and scheduled job of a queue. Running jobs are left to
-- their workers. Rows a pull is claiming right now are skipped (SKIP LOCKED). Returns how many
-- were deleted.
CREATE FUNCTION postkit_queue.purge_queue(p_namespace text, p_queue text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_deleted bigint;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.require_operator('purge a queue');
    DELETE FROM postkit_queue.jobs j
    WHERE (j.namespace, j.id) IN (
        SELECT p.namespace, p.id FROM postkit_queue.jobs p
        WHERE p.namespace = p_namespace AND p.queue = p_queue AND p.state = 'pending'
        FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- pull_any: claim up to p_limit jobs from several queues, emptying them in the order given.
CREATE FUNCTION postkit_queue.pull_any(
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

-- push_batch: push many jobs to one queue in one call: one INSERT, one notification. Payloads
-- arrive as one JSON array; unique keys, if given, as an array of the same length (NULL
-- entries: no key). Returns one row per payload, in order: its new id, or NULL when its
-- unique key matched a live job (or an earlier payload of the same batch).
CREATE FUNCTION postkit_queue.push_batch(
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
AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := postkit_queue.clock();
    v_attempts integer;
    v_policy   record;
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
    PERFORM postkit_queue.check_name('unique_key', k, false) FROM unnest(p_unique_keys) AS k;
    PERFORM postkit_queue.check_priority(p_priority);
    PERFORM postkit_queue.check_max_attempts(p_max_attempts);
    PERFORM postkit_queue.check_duration('delay', p_delay, true, interval '10 years');
    SELECT * INTO v_policy FROM postkit_queue.queue_policy(p_namespace, p_queue);
    v_attempts := coalesce(p_max_attempts, v_policy.max_attempts);
    PERFORM postkit_queue.check_payload(p_queue, e.value, v_policy.max_payload_bytes)
    FROM jsonb_array_elements(p_payloads) AS e;

    -- One multi-row INSERT. Each payload takes its id from the jobs' identity sequence up
    -- front, so the result can say, per payload, whether it was inserted: the ones
    -- jobs_unique_key_idx turned away (as in push) are missing from RETURNING.
    RETURN QUERY
    WITH input AS (
        SELECT e.ordinality, e.value AS payload, p_unique_keys[e.ordinality] AS unique_key,
               nextval(pg_get_serial_sequence('postkit_queue.jobs', 'id')) AS id
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

-- ack_batch: acknowledge many claims at once, all or nothing. Every job must still be held by
-- the caller (its claim token matches, pairwise); then all are acknowledged and it returns
-- true. If any claim is stale, nothing changes and it returns false. Rows are locked in id
-- order, so two overlapping batches cannot deadlock.
CREATE FUNCTION postkit_queue.ack_batch(
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

-- prune: retention, in bounded batches so no single call holds locks for long. Deletes up to
-- p_limit archived completed jobs and up to p_limit dead letters whose retention ran out, and
-- outcome counters older than two hours. The worker runtime calls it on its tick. Returns how
-- many rows of each kind it deleted.
CREATE FUNCTION postkit_queue.prune(p_namespace text, p_limit integer DEFAULT 1000)
RETURNS TABLE (completed_jobs bigint, dead_letters bigint, stats_rows bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_limit(p_limit, 100000);
    -- Each DELETE takes its batch from a range scan of the expires_at index, oldest first (the
    -- ORDER BY keeps the scan on the index in plpgsql's generic plan too, where the LIMIT is
    -- unknown and a sequential scan would otherwise look as cheap).
    DELETE FROM postkit_queue.completed_jobs c
    WHERE (c.namespace, c.job_id) IN (
        SELECT e.namespace, e.job_id FROM postkit_queue.completed_jobs e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS completed_jobs = ROW_COUNT;
    DELETE FROM postkit_queue.dead_letters d
    WHERE (d.namespace, d.job_id) IN (
        SELECT e.namespace, e.job_id FROM postkit_queue.dead_letters e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS dead_letters = ROW_COUNT;
    DELETE FROM postkit_queue.queue_stats s
    WHERE s.namespace = p_namespace AND s.minute < v_now - interval '2 hours';
    GET DIAGNOSTICS stats_rows = ROW_COUNT;
    RETURN NEXT;
END
$$;
