-- Operations: statistics, listings, settings, pause, purge, redrive, retention.
--
-- Operating the queue: statistics that stay fast at millions of rows, listings with keyset
-- pagination, queue settings, pause and purge, cancel, dead-letter redrive and purge, and
-- retention. Like the state machine, each operation is one function that validates its input,
-- takes the locks it needs and says so below. The ones that destroy jobs also require operator
-- access (require_operator), beyond EXECUTE.

-- stats: per queue, how many jobs are pending (ready now), scheduled (delayed), running,
-- dead, waiting (for their parents) and cancelled (kept for the queue's retain_dead); the age of the oldest ready job; outcomes in the last minute and hour; mean attempts
-- of completed jobs; the queue's concurrency limit and, while its rate limit holds claims
-- back, when the next claim may be made; its max_pending, the backpressure limit that its
-- pending and scheduled jobs stand against (a push past it is refused: check_room). Queues come in name order; p_after and p_limit page
-- through them (the queues named after p_after, at most p_limit of them: a namespace of
-- thousands of queues is read a page at a time). Live counts are exact up to p_cap and then reported as p_cap with
-- counts_capped = true: each count is an index range scan that stops at p_cap rows, so stats
-- stays fast on a backlog of millions (a full COUNT(*) would read every row).
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.stats(
    p_namespace text, p_queue text DEFAULT NULL, p_cap integer DEFAULT 100000,
    p_after text DEFAULT NULL, p_limit integer DEFAULT NULL)
RETURNS TABLE (
    queue text, paused boolean, pending bigint, scheduled bigint, running bigint, dead bigint,
    counts_capped boolean, oldest_ready_age interval,
    completed_last_minute bigint, completed_last_hour bigint,
    dead_lettered_last_minute bigint, dead_lettered_last_hour bigint,
    retried_last_hour bigint, rescued_last_hour bigint, mean_attempts numeric,
    concurrency integer, rate_limited_until timestamptz, waiting bigint, cancelled bigint,
    max_pending integer)
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
    v_minute     timestamptz := date_trunc('minute', v_now);
    v_queue      text;
    v_priorities smallint[];
    v_policy     record;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    PERFORM postkit_queue.check_limit(p_cap, 10000000);
    PERFORM postkit_queue.check_name('after', p_after, false);
    IF p_limit IS NOT NULL THEN
        PERFORM postkit_queue.check_limit(p_limit, 10000);
    END IF;
    FOR v_queue IN
        SELECT q FROM (
            SELECT q FROM postkit_queue.queues(p_namespace) AS q
            WHERE p_queue IS NULL OR q = p_queue
            UNION SELECT p_queue WHERE p_queue IS NOT NULL) listed(q)
        WHERE p_after IS NULL OR q > p_after
        ORDER BY 1
        LIMIT p_limit
    LOOP
        queue := v_queue;
        v_policy := postkit_queue.queue_policy(p_namespace, v_queue);
        paused := v_policy.paused;
        -- The flow limits in force now (flow.sql): the concurrency limit the running count
        -- stands against, and until when the rate limit holds claims back (NULL: it does not).
        concurrency := v_policy.concurrency;
        max_pending := v_policy.max_pending;
        rate_limited_until := postkit_queue.rate_slot_at(
            p_namespace, v_queue, v_policy.rate_limit, v_policy.rate_period, v_now);
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
        -- jobs_waiting_idx, partial on waiting_on, which only a waiting job has.
        SELECT count(*) INTO waiting FROM (
            SELECT 1 FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.waiting_on IS NOT NULL
            LIMIT p_cap) parked;
        -- cancelled_jobs_queue_idx.
        SELECT count(*) INTO cancelled FROM (
            SELECT 1 FROM postkit_queue.cancelled_jobs c
            WHERE c.namespace = p_namespace AND c.queue = v_queue
            LIMIT p_cap) ended;
        counts_capped := greatest(pending, scheduled, running, dead, waiting, cancelled) >= p_cap;
        -- The oldest ready job: the earliest run_at of each priority, then the earliest of those.
        SELECT v_now - min(first.run_at) INTO oldest_ready_age
        FROM unnest(v_priorities) AS p(priority)
        CROSS JOIN LATERAL (
            SELECT j.run_at FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = v_queue AND j.state = 'pending'
              AND j.priority = p.priority
            ORDER BY j.run_at LIMIT 1) first
        WHERE first.run_at <= v_now;
        -- Primary-key range scan of queue_stats: at most 60 minutes x 8 slots. The counters
        -- are kept per minute, so "the last minute" is the current minute's count plus the
        -- previous minute's weighted by the part of it still within the last 60 seconds (a
        -- sliding window): it does not fall to 0 as each minute begins.
        SELECT round(coalesce(sum(s.completed * w.weight), 0))::bigint,
               coalesce(sum(s.completed), 0),
               round(coalesce(sum(s.dead_lettered * w.weight), 0))::bigint,
               coalesce(sum(s.dead_lettered), 0),
               coalesce(sum(s.retried), 0),
               coalesce(sum(s.rescued), 0),
               round(sum(s.completed_attempts)::numeric / nullif(sum(s.completed), 0), 2)
        INTO completed_last_minute, completed_last_hour, dead_lettered_last_minute,
             dead_lettered_last_hour, retried_last_hour, rescued_last_hour, mean_attempts
        FROM postkit_queue.queue_stats s
        CROSS JOIN LATERAL (SELECT CASE
            WHEN s.minute >= v_minute THEN 1.0
            WHEN s.minute >= v_minute - interval '1 minute'
                THEN 1.0 - extract(epoch FROM v_now - v_minute) / 60
            ELSE 0.0 END) AS w(weight)
        WHERE s.namespace = p_namespace AND s.queue = v_queue
          AND s.minute > v_now - interval '1 hour';
        RETURN NEXT;
    END LOOP;
END
$$;

-- The queues a namespace has: configured ones, ones with live jobs, dead letters, cancelled
-- jobs or recent outcomes. Live queues come from a skip scan of jobs_pull_idx (one index probe
-- per distinct queue, however many jobs) plus the running rows, which are bounded by the
-- workers' slots; queues with waiting jobs, dead letters or cancelled jobs from skip scans of
-- jobs_waiting_idx, dead_letters_queue_idx and cancelled_jobs_queue_idx.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.queues(p_namespace text)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
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
    ), waiting_queues(queue) AS (
        (SELECT j.queue FROM postkit_queue.jobs j
         WHERE j.namespace = p_namespace AND j.waiting_on IS NOT NULL
         ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.waiting_on IS NOT NULL
                  AND j.queue > q.queue
                ORDER BY j.queue LIMIT 1)
        FROM waiting_queues q
        WHERE q.queue IS NOT NULL
    ), cancelled_queues(queue) AS (
        (SELECT c.queue FROM postkit_queue.cancelled_jobs c
         WHERE c.namespace = p_namespace
         ORDER BY c.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT c.queue FROM postkit_queue.cancelled_jobs c
                WHERE c.namespace = p_namespace AND c.queue > q.queue
                ORDER BY c.queue LIMIT 1)
        FROM cancelled_queues q
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
    UNION
    SELECT queue FROM waiting_queues WHERE queue IS NOT NULL
    UNION
    SELECT queue FROM cancelled_queues WHERE queue IS NOT NULL;
END
$$;

-- known_queues: every queue name the namespace has used: queues() (live jobs, dead letters,
-- settings, which include the queues workers registered, and recent outcomes) and the queues
-- its schedules push to. Names only: producers may ask, so that their pushes get the typo guard.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.known_queues(p_namespace text)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT q FROM postkit_queue.queues(p_namespace) AS q
    UNION
    SELECT s.queue FROM postkit_queue.schedules s WHERE s.namespace = p_namespace;
END
$$;

-- register_queues: record that a worker serves these queues, so that the command line's typo
-- guard (known_queues) knows a healthy queue that gets a job a day. A queue already known keeps
-- its row (and its settings) untouched; a new one gets a settings row of built-in defaults,
-- which changes no behaviour. One INSERT, conflicts ignored on the primary key.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.register_queues(p_namespace text, p_queues text[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_added integer;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_queue_names(p_queues);
    INSERT INTO postkit_queue.queue_settings (namespace, queue, updated_at)
    SELECT p_namespace, q, postkit_queue.clock() FROM unnest(p_queues) AS q
    ORDER BY q  -- the same lock order in every worker
    ON CONFLICT (namespace, queue) DO NOTHING;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    RETURN v_added;
END
$$;

-- jobs: list the jobs of a queue in one state, p_limit at a time, each page read off an index
-- so that it costs the same on a backlog of any size:
--   * 'pending' (ready now) and 'scheduled' (run_at still to come): in pull order, highest
--     priority first, then run_at, then id (the order workers take them). A range scan of
--     jobs_pull_idx per priority: within one priority the index is ordered by (run_at, id),
--     and the ready and the scheduled jobs are each one contiguous range of it. A page reads
--     its own rows and one index probe per priority it moves on to.
--   * 'running': soonest claim deadline first (visible_until, then id), from jobs_deadline_idx:
--     the namespace's running rows, as many as its workers' slots; those of other queues are
--     stepped over.
--   * 'dead': the queue's dead letters not yet redriven, by id, from dead_letters_queue_idx.
--   * 'waiting': the queue's jobs waiting for parents, by id, from jobs_waiting_idx.
--   * 'cancelled': the queue's cancelled jobs, by id, from cancelled_jobs_queue_idx.
-- Keyset pagination: the cursor is the last job of a page: its id (p_after_id), with for a
-- pending or scheduled listing its priority and run_at (p_after_priority, p_after_at), for a
-- running one its visible_until (p_after_at). Without p_after_id a listing starts at the top.
-- A claim extended while an operator pages moves later in the running order, so a running job
-- may show on two pages; none that keeps running is skipped. age is how long ago each job was
-- created, by the queue's clock (now - age is the moment the listing was read).
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.jobs(
    p_namespace        text,
    p_queue            text,
    p_state            text,
    p_limit            integer     DEFAULT 100,
    p_after_id         bigint      DEFAULT NULL,
    p_after_priority   integer     DEFAULT NULL,
    p_after_at         timestamptz DEFAULT NULL)
RETURNS TABLE (
    namespace text, id bigint, queue text, state text, payload jsonb, priority smallint,
    run_at timestamptz, attempts integer, max_attempts integer, unique_key text,
    worker_id text, claim_token uuid, claimed_at timestamptz, visible_until timestamptz,
    errors jsonb, created_at timestamptz, failed_at timestamptz, trace_context jsonb,
    age interval)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now      timestamptz := postkit_queue.clock();
    v_left     integer := p_limit;
    v_found    integer;
    v_priority integer;
    -- A pending listing reads (run_at, id) > (v_after_at, v_after_id) AND run_at <= v_until
    -- within each priority: the ready range from its start, the scheduled one from just past
    -- now (no id is larger than the largest bigint), each from the cursor once it is further.
    v_until    timestamptz := CASE WHEN p_state = 'pending' THEN v_now ELSE 'infinity' END;
    v_start_at timestamptz := CASE WHEN p_state = 'pending' THEN '-infinity' ELSE v_now END;
    v_start_id bigint := CASE WHEN p_state = 'pending' THEN 0 ELSE 9223372036854775807 END;
    v_after_at timestamptz;
    v_after_id bigint;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    -- The job_state type's labels, compared as text so that a bad one is this error, not a
    -- cast's.
    IF p_state IS NULL
       OR NOT p_state = ANY (enum_range(NULL::postkit_queue.job_state)::text[]) THEN
        RAISE EXCEPTION 'postkit: state must be %, got %',
            array_to_string(enum_range(NULL::postkit_queue.job_state), ', '),
            coalesce(p_state, 'NULL') USING ERRCODE = 'PKQ09';
    END IF;
    IF p_after_id IS NOT NULL AND p_state NOT IN ('dead', 'waiting', 'cancelled')
       AND (p_after_at IS NULL OR (p_state <> 'running' AND p_after_priority IS NULL)) THEN
        RAISE EXCEPTION 'postkit: the cursor of a % listing is the last job''s id with its %',
            p_state, CASE WHEN p_state = 'running' THEN 'visible_until'
                          ELSE 'priority and run_at' END USING ERRCODE = 'PKQ09';
    END IF;
    IF p_state = 'dead' THEN
        RETURN QUERY
        SELECT d.namespace, d.job_id, d.queue, 'dead', d.payload, d.priority, NULL::timestamptz,
               d.attempts, d.max_attempts, d.unique_key, d.worker_id, NULL::uuid,
               NULL::timestamptz, NULL::timestamptz, d.errors, d.created_at, d.failed_at,
               d.trace_context, v_now - d.created_at
        FROM postkit_queue.dead_letters d
        WHERE d.namespace = p_namespace AND d.queue = p_queue
          AND d.job_id > coalesce(p_after_id, 0) AND d.redriven_job_id IS NULL
        ORDER BY d.job_id
        LIMIT p_limit;
        RETURN;
    END IF;
    IF p_state = 'cancelled' THEN
        RETURN QUERY
        SELECT c.namespace, c.job_id, c.queue, 'cancelled', c.payload, c.priority,
               NULL::timestamptz, c.attempts, c.attempts, NULL::text, NULL::text, NULL::uuid,
               NULL::timestamptz, NULL::timestamptz, '[]'::jsonb, c.created_at, c.cancelled_at,
               NULL::jsonb, v_now - c.created_at
        FROM postkit_queue.cancelled_jobs c
        WHERE c.namespace = p_namespace AND c.queue = p_queue
          AND c.job_id > coalesce(p_after_id, 0)
        ORDER BY c.job_id
        LIMIT p_limit;
        RETURN;
    END IF;
    IF p_state = 'waiting' THEN
        -- jobs_waiting_idx: the queue's waiting jobs in push order.
        RETURN QUERY
        SELECT j.namespace, j.id, j.queue, j.state::text, j.payload, j.priority, j.run_at,
               j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token,
               j.claimed_at, j.visible_until, j.errors, j.created_at, NULL::timestamptz,
               j.trace_context, v_now - j.created_at
        FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.waiting_on IS NOT NULL
          AND j.id > coalesce(p_after_id, 0)
        ORDER BY j.id
        LIMIT p_limit;
        RETURN;
    END IF;
    IF p_state = 'running' THEN
        RETURN QUERY
        SELECT j.namespace, j.id, j.queue, j.state::text, j.payload, j.priority, j.run_at,
               j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token,
               j.claimed_at, j.visible_until, j.errors, j.created_at, NULL::timestamptz,
               j.trace_context, v_now - j.created_at
        FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.state = 'running' AND j.queue = p_queue
          AND (j.visible_until, j.id)
              > (coalesce(p_after_at, '-infinity'), coalesce(p_after_id, 0))
        ORDER BY j.visible_until, j.id
        LIMIT p_limit;
        RETURN;
    END IF;
    IF p_after_id IS NULL THEN
        -- The highest priority of the queue's pending jobs: one probe of jobs_pull_idx.
        v_priority := (SELECT j.priority FROM postkit_queue.jobs j
                       WHERE j.namespace = p_namespace AND j.queue = p_queue
                         AND j.state = 'pending'
                       ORDER BY j.priority DESC LIMIT 1);
        v_after_at := v_start_at;
        v_after_id := v_start_id;
    ELSE
        v_priority := p_after_priority;
        IF (p_after_at, p_after_id) > (v_start_at, v_start_id) THEN
            v_after_at := p_after_at;
            v_after_id := p_after_id;
        ELSE
            v_after_at := v_start_at;
            v_after_id := v_start_id;
        END IF;
    END IF;
    WHILE v_priority IS NOT NULL LOOP
        RETURN QUERY
        SELECT j.namespace, j.id, j.queue, j.state::text, j.payload, j.priority, j.run_at,
               j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token,
               j.claimed_at, j.visible_until, j.errors, j.created_at, NULL::timestamptz,
               j.trace_context, v_now - j.created_at
        FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
          AND j.priority = v_priority AND (j.run_at, j.id) > (v_after_at, v_after_id)
          AND j.run_at <= v_until
        ORDER BY j.run_at, j.id
        LIMIT v_left;
        GET DIAGNOSTICS v_found = ROW_COUNT;
        v_left := v_left - v_found;
        EXIT WHEN v_left = 0;
        -- The next lower priority: one probe of jobs_pull_idx.
        v_priority := (SELECT j.priority FROM postkit_queue.jobs j
                       WHERE j.namespace = p_namespace AND j.queue = p_queue
                         AND j.state = 'pending' AND j.priority < v_priority
                       ORDER BY j.priority DESC LIMIT 1);
        v_after_at := v_start_at;
        v_after_id := v_start_id;
    END LOOP;
END
$$;

-- dead_letters: the newest dead letters of a namespace, newest first, filtered by queue, by
-- when they failed and by a substring of their last error (case-insensitive). Redriven ones are
-- left out unless p_include_redriven. Keyset pagination: pass the failed_at and job_id of the
-- last row of a page to get the next one. The substring filter reads dead letters until the
-- page is full, all of the namespace's when few match: search_dead_letters bounds that read.
-- Each call is planned for its own arguments (plan_cache_mode): a plan made for any arguments
-- cannot tell a queue of a few dead letters from one of thousands, and read the namespace's
-- failed_at range for the first.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.dead_letters(
    p_namespace         text,
    p_queue             text        DEFAULT NULL,
    p_limit             integer     DEFAULT 100,
    p_failed_after      timestamptz DEFAULT NULL,
    p_failed_before     timestamptz DEFAULT NULL,
    p_error_contains    text        DEFAULT NULL,
    p_include_redriven  boolean     DEFAULT false,
    p_after_failed_at   timestamptz DEFAULT NULL,
    p_after_job_id      bigint      DEFAULT NULL)
RETURNS SETOF postkit_queue.dead_letters
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    -- A range scan of dead_letters_failed_at_idx, newest first, from the page cursor.
    RETURN QUERY
    SELECT * FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace
      AND (p_queue IS NULL OR d.queue = p_queue)
      AND (p_failed_after IS NULL OR d.failed_at >= p_failed_after)
      AND (p_failed_before IS NULL OR d.failed_at < p_failed_before)
      AND (p_error_contains IS NULL
           OR strpos(lower(coalesce(d.error, '')), lower(p_error_contains)) > 0)
      AND (p_include_redriven OR d.redriven_job_id IS NULL)
      AND (p_after_failed_at IS NULL
           OR (d.failed_at, d.job_id) < (p_after_failed_at, coalesce(p_after_job_id, 0)))
    ORDER BY d.failed_at DESC, d.job_id DESC
    LIMIT p_limit;
END
$$;

-- count_dead_letters: how many dead letters match dead_letters' filters but the substring,
-- exact up to p_cap and then p_cap (a page's "N dead letters" and a purge's confirmation, which
-- counts with include_redriven). Counting stops at p_cap rows: a range scan of
-- dead_letters_queue_idx for one queue's dead letters not yet redriven (an index-only count, as
-- stats' dead count), else of dead_letters_failed_at_idx within the failed-at window. Planned
-- for its arguments, like dead_letters; and, like stats, never by a sequential scan (which
-- reads the whole table when few rows match) or a bitmap scan (which reads the whole range
-- before the cap applies).
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.count_dead_letters(
    p_namespace         text,
    p_queue             text        DEFAULT NULL,
    p_failed_after      timestamptz DEFAULT NULL,
    p_failed_before     timestamptz DEFAULT NULL,
    p_include_redriven  boolean     DEFAULT false,
    p_cap               integer     DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    PERFORM postkit_queue.check_limit(p_cap, 10000000);
    RETURN (
        SELECT count(*) FROM (
            SELECT 1 FROM postkit_queue.dead_letters d
            WHERE d.namespace = p_namespace
              AND (p_queue IS NULL OR d.queue = p_queue)
              AND (p_failed_after IS NULL OR d.failed_at >= p_failed_after)
              AND (p_failed_before IS NULL OR d.failed_at < p_failed_before)
              AND (p_include_redriven OR d.redriven_job_id IS NULL)
            LIMIT p_cap) counted);
END
$$;

-- search_dead_letters: dead_letters' substring filter, bounded. No index finds a substring, so
-- dead_letters(p_error_contains => ...) reads the namespace's dead letters until it fills its
-- page: all of them when few match. This one reads at most p_scan_limit per call: the
-- namespace's dead letters newest first, within the failed-at window and from the cursor (a
-- range scan of dead_letters_failed_at_idx), stopping once p_limit of them match. The queue,
-- the redriven filter and the substring (case-insensitive, in the last error) apply to the rows
-- read. The matches come back newest first, searched_to false. When the search stopped after
-- p_scan_limit rows with fewer matches, one more row follows, searched_to true: the last dead
-- letter it read (which may be the last match too). Its failed_at and job_id are the cursor to
-- search on, further back; without that row, nothing older matches.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.search_dead_letters(
    p_namespace         text,
    p_error_contains    text,
    p_queue             text        DEFAULT NULL,
    p_limit             integer     DEFAULT 100,
    p_failed_after      timestamptz DEFAULT NULL,
    p_failed_before     timestamptz DEFAULT NULL,
    p_include_redriven  boolean     DEFAULT false,
    p_after_failed_at   timestamptz DEFAULT NULL,
    p_after_job_id      bigint      DEFAULT NULL,
    p_scan_limit        integer     DEFAULT 2000)
RETURNS TABLE (
    namespace text, job_id bigint, queue text, payload jsonb, priority smallint,
    attempts integer, max_attempts integer, unique_key text, worker_id text, reason text,
    error text, errors jsonb, created_at timestamptz, failed_at timestamptz,
    expires_at timestamptz, redriven_job_id bigint, redriven_at timestamptz,
    trace_context jsonb, searched_to boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_needle text := lower(p_error_contains);
    v_ids    bigint[] := '{}';
    v_last   bigint;
    v_read   record;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    PERFORM postkit_queue.check_limit(p_scan_limit, 100000);
    IF p_error_contains IS NULL OR p_error_contains = '' THEN
        RAISE EXCEPTION 'postkit: error_contains must be a non-empty text to search for'
            USING ERRCODE = 'PKQ01';
    END IF;
    IF p_include_redriven IS NULL THEN
        RAISE EXCEPTION 'postkit: include_redriven must be true or false, not null'
            USING ERRCODE = 'PKQ09';
    END IF;
    -- The rows read are numbered in the scan, before the filters: the LIMIT bounds what is
    -- read, whatever matches. The result is the matches and the last row read, in order.
    FOR v_read IN
        SELECT m.job_id, m.n, m.matched
        FROM (
            SELECT r.job_id, r.n,
                   (p_queue IS NULL OR r.queue = p_queue)
                   AND (p_include_redriven OR r.redriven_job_id IS NULL)
                   AND strpos(lower(coalesce(r.error, '')), v_needle) > 0 AS matched
            FROM (
                SELECT d.job_id, d.queue, d.redriven_job_id, d.error,
                       row_number() OVER (ORDER BY d.failed_at DESC, d.job_id DESC) AS n
                FROM postkit_queue.dead_letters d
                WHERE d.namespace = p_namespace
                  AND d.failed_at >= coalesce(p_failed_after, '-infinity')
                  AND d.failed_at < coalesce(p_failed_before, 'infinity')
                  AND (d.failed_at, d.job_id)
                      < (coalesce(p_after_failed_at, 'infinity'), coalesce(p_after_job_id, 0))
                ORDER BY d.failed_at DESC, d.job_id DESC
                LIMIT p_scan_limit) r) m
        WHERE m.matched OR m.n = p_scan_limit
    LOOP
        IF v_read.matched THEN
            v_ids := v_ids || v_read.job_id;
        END IF;
        EXIT WHEN cardinality(v_ids) = p_limit;
        IF v_read.n = p_scan_limit THEN
            v_last := v_read.job_id;
        END IF;
    END LOOP;
    -- A primary-key lookup of each row found (LIMIT 1 keeps it a lookup, never a join that
    -- reads the table): the matches, then the last row read.
    RETURN QUERY
    SELECT d.namespace, d.job_id, d.queue, d.payload, d.priority, d.attempts, d.max_attempts,
           d.unique_key, d.worker_id, d.reason, d.error, d.errors, d.created_at, d.failed_at,
           d.expires_at, d.redriven_job_id, d.redriven_at, d.trace_context, found.searched_to
    FROM (SELECT m.id, false AS searched_to, m.n FROM unnest(v_ids) WITH ORDINALITY AS m(id, n)
          UNION ALL
          SELECT v_last, true, 0 WHERE v_last IS NOT NULL) found
    CROSS JOIN LATERAL (
        SELECT * FROM postkit_queue.dead_letters l
        WHERE l.namespace = p_namespace AND l.job_id = found.id LIMIT 1) d
    ORDER BY found.searched_to, found.n;
END
$$;

-- outcomes_since: per queue, the jobs completed, dead-lettered, retried and rescued from the
-- start of the minute of p_since on. The counters only grow while their minutes are kept
-- (prune deletes minutes older than 2 hours), so two calls with the same p_since, within the
-- hour, differ by exactly the outcomes between them: `postkit stats --watch` shows rates from
-- that difference (stats' last-hour sums lose a minute's counts whenever that minute leaves
-- the window). A primary-key range scan of queue_stats: at most 120 minutes x 8 slots per
-- queue.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.outcomes_since(p_namespace text, p_since timestamptz)
RETURNS TABLE (queue text, completed bigint, dead_lettered bigint, retried bigint,
               rescued bigint)
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
    SELECT s.queue, sum(s.completed)::bigint, sum(s.dead_lettered)::bigint, sum(s.retried)::bigint,
           sum(s.rescued)::bigint
    FROM postkit_queue.queue_stats s
    WHERE s.namespace = p_namespace AND s.minute >= date_trunc('minute', p_since)
    GROUP BY s.queue
    ORDER BY s.queue;
END
$$;

-- outcome_series: per queue (or of one queue) and minute, the jobs completed, dead-lettered,
-- retried and rescued from the start of the minute of p_since on, oldest minute first, for
-- charts of the last hour or two (the counters are kept two hours). A minute without outcomes
-- has no row. The queues come from a skip scan of queue_stats' primary key (one probe per
-- queue with counters), then each queue's minutes from one range scan of it: at most 8 slots
-- a minute per queue, however long prune has not run.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.outcome_series(
    p_namespace text, p_since timestamptz, p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, minute timestamptz, completed bigint, dead_lettered bigint,
               retried bigint, rescued bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    IF p_since IS NULL OR NOT isfinite(p_since) THEN
        RAISE EXCEPTION 'postkit: since must be a finite time, got %',
            coalesce(p_since::text, 'NULL') USING ERRCODE = 'PKQ05';
    END IF;
    RETURN QUERY
    WITH RECURSIVE counted(queue) AS (
        -- The first queue (from p_queue on, when one is asked for: then only that one).
        (SELECT s.queue FROM postkit_queue.queue_stats s
         WHERE s.namespace = p_namespace AND s.queue >= coalesce(p_queue, '')
         ORDER BY s.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT s.queue FROM postkit_queue.queue_stats s
                WHERE s.namespace = p_namespace AND s.queue > c.queue
                ORDER BY s.queue LIMIT 1)
        FROM counted c
        WHERE c.queue IS NOT NULL AND p_queue IS NULL
    )
    SELECT c.queue, m.minute, m.completed, m.dead_lettered, m.retried, m.rescued
    FROM counted c
    CROSS JOIN LATERAL (
        SELECT s.minute, sum(s.completed)::bigint AS completed, sum(s.dead_lettered)::bigint
                   AS dead_lettered,
               sum(s.retried)::bigint AS retried, sum(s.rescued)::bigint AS rescued
        FROM postkit_queue.queue_stats s
        WHERE s.namespace = p_namespace AND s.queue = c.queue
          AND s.minute >= date_trunc('minute', p_since)
        GROUP BY s.minute) m
    WHERE c.queue IS NOT NULL AND (p_queue IS NULL OR c.queue = p_queue)
    ORDER BY c.queue, m.minute;
END
$$;

-- write_queue_settings: (internal) write every setting of a queue at once, configure_queue's
-- last step: its defaults, retention and flow limits. NULL puts a setting back to the
-- built-in default (max_attempts 20, visibility timeout 30 s, backoff 1 s doubling up to
-- 1 h; completed jobs deleted at once; dead letters kept 30 days; payloads up to 1 MiB; results
-- not kept; no flow limit). p_retain_results keeps the result of each job completed from now on
-- (what its handler returned, given to ack) that long, for job_result. The flow limits
-- (flow.sql): p_concurrency running jobs at most, p_rate_limit claims per p_rate_period (both
-- or neither), p_group_concurrency running jobs per group key, p_group_ordered one job per key
-- at a time in push order (with p_group_concurrency unset or 1); p_fair shares the queue's
-- claims among its groups (fair.sql); p_max_pending refuses a push that would make the queue
-- hold more pending jobs (check_room). Pausing is separate (pause_queue). Returns the policy
-- now in force.
CREATE OR REPLACE FUNCTION postkit_queue.write_queue_settings(
    p_namespace          text,
    p_queue              text,
    p_max_attempts       integer  DEFAULT NULL,
    p_visibility_timeout interval DEFAULT NULL,
    p_backoff_base       interval DEFAULT NULL,
    p_backoff_cap        interval DEFAULT NULL,
    p_retain_completed   interval DEFAULT NULL,
    p_retain_dead        interval DEFAULT NULL,
    p_max_payload_bytes  integer  DEFAULT NULL,
    p_retain_results     interval DEFAULT NULL,
    p_concurrency        integer  DEFAULT NULL,
    p_rate_limit         integer  DEFAULT NULL,
    p_rate_period        interval DEFAULT NULL,
    p_group_concurrency  integer  DEFAULT NULL,
    p_group_ordered      boolean  DEFAULT NULL,
    p_fair               boolean  DEFAULT NULL,
    p_max_pending        integer  DEFAULT NULL,
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer,
    OUT retain_results interval, OUT concurrency integer, OUT rate_limit integer,
    OUT rate_period interval, OUT group_concurrency integer, OUT group_ordered boolean,
    OUT fair boolean, OUT max_pending integer)
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
    PERFORM postkit_queue.check_duration(
        'retain_results', p_retain_results, false, interval '3650 days');
    IF p_max_payload_bytes IS NOT NULL AND p_max_payload_bytes NOT BETWEEN 1 AND 104857600 THEN
        RAISE EXCEPTION 'postkit: max_payload_bytes must be between 1 and 104857600 (100 MiB), '
                        'got %', p_max_payload_bytes USING ERRCODE = 'PKQ02';
    END IF;
    IF p_max_pending IS NOT NULL AND p_max_pending NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'postkit: max_pending must be between 1 and 100000, got %',
            p_max_pending USING ERRCODE = 'PKQ17';
    END IF;
    PERFORM postkit_queue.check_flow_limits(
        p_concurrency, p_rate_limit, p_rate_period, p_group_concurrency, p_group_ordered);
    IF p_concurrency IS NOT NULL OR p_rate_limit IS NOT NULL OR p_group_concurrency IS NOT NULL
       OR p_group_ordered OR p_fair THEN
        -- Waits for the queue's claims in flight, and the claims after it wait for this
        -- transaction: each then counts what the others claimed (claims_lock).
        PERFORM pg_catalog.pg_advisory_xact_lock(postkit_queue.claims_lock(p_namespace, p_queue));
    END IF;

    INSERT INTO postkit_queue.queue_settings AS s (
        namespace, queue, max_attempts, visibility_timeout, backoff_base, backoff_cap,
        retain_completed, retain_dead, max_payload_bytes, updated_at, retain_results,
        concurrency, rate_limit, rate_period, group_concurrency, group_ordered, fair,
        max_pending)
    VALUES (p_namespace, p_queue, p_max_attempts, p_visibility_timeout, p_backoff_base,
            p_backoff_cap, p_retain_completed, p_retain_dead, p_max_payload_bytes,
            postkit_queue.clock(), p_retain_results, p_concurrency, p_rate_limit, p_rate_period,
            p_group_concurrency, coalesce(p_group_ordered, false), coalesce(p_fair, false),
            p_max_pending)
    ON CONFLICT (namespace, queue) DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts,
        visibility_timeout = EXCLUDED.visibility_timeout,
        backoff_base = EXCLUDED.backoff_base,
        backoff_cap = EXCLUDED.backoff_cap,
        retain_completed = EXCLUDED.retain_completed,
        retain_dead = EXCLUDED.retain_dead,
        max_payload_bytes = EXCLUDED.max_payload_bytes,
        updated_at = EXCLUDED.updated_at,
        retain_results = EXCLUDED.retain_results,
        concurrency = EXCLUDED.concurrency,
        rate_limit = EXCLUDED.rate_limit,
        rate_period = EXCLUDED.rate_period,
        group_concurrency = EXCLUDED.group_concurrency,
        group_ordered = EXCLUDED.group_ordered,
        fair = EXCLUDED.fair,
        max_pending = EXCLUDED.max_pending;
    IF p_concurrency IS NOT NULL OR p_rate_limit IS NOT NULL OR p_group_concurrency IS NOT NULL
       OR p_group_ordered OR p_fair THEN
        -- The row the queue's claims take turns on (flow.sql).
        INSERT INTO postkit_queue.flow_state (namespace, queue) VALUES (p_namespace, p_queue)
        ON CONFLICT (namespace, queue) DO NOTHING;
    END IF;
    -- Waiting workers look again, all of them: a limit raised or lifted may let them claim now.
    PERFORM postkit_queue.notify(p_namespace, p_queue, p_wake => NULL);

    SELECT p.max_attempts, p.visibility_timeout, p.backoff_base, p.backoff_cap, p.paused,
           p.retain_completed, p.retain_dead, p.max_payload_bytes, p.retain_results,
           p.concurrency, p.rate_limit, p.rate_period, p.group_concurrency, p.group_ordered,
           p.fair, p.max_pending
    INTO max_attempts, visibility_timeout, backoff_base, backoff_cap, paused,
         retain_completed, retain_dead, max_payload_bytes, retain_results,
         concurrency, rate_limit, rate_period, group_concurrency, group_ordered, fair,
         max_pending
    FROM postkit_queue.queue_policy(p_namespace, p_queue) AS p;
END
$$;

-- configure_queue: change the settings it is given, put back to their built-in defaults the ones
-- p_reset names, and keep the rest: one rule for every caller (the SDK's configure_queue and
-- `postkit queue configure` spell a reset the same way). The settings: max_attempts (20),
-- visibility_timeout (30 s), backoff_base and backoff_cap (1 s doubling up to 1 h),
-- retain_completed (completed jobs deleted at once), retain_dead (30 days),
-- max_payload_bytes (1 MiB), retain_results (none: p_retain_results keeps the result of each
-- job completed from now on that long, for job_result), and the flow limits (flow.sql), reset
-- by name too: 'concurrency', 'rate' (p_rate_limit claims per p_rate_period, given together),
-- 'group_concurrency', 'group_ordered' (one job per group key at a time, in push order), and
-- 'fair' (p_fair: the claims shared among the group keys, fair.sql), and 'max_pending'
-- (p_max_pending: a push that would make the queue hold more pending jobs is refused).
-- Pausing is separate (pause_queue). Returns the policy now in force.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.configure_queue(
    p_namespace          text,
    p_queue              text,
    p_max_attempts       integer  DEFAULT NULL,
    p_visibility_timeout interval DEFAULT NULL,
    p_backoff_base       interval DEFAULT NULL,
    p_backoff_cap        interval DEFAULT NULL,
    p_retain_completed   interval DEFAULT NULL,
    p_retain_dead        interval DEFAULT NULL,
    p_max_payload_bytes  integer  DEFAULT NULL,
    p_retain_results     interval DEFAULT NULL,
    p_concurrency        integer  DEFAULT NULL,
    p_rate_limit         integer  DEFAULT NULL,
    p_rate_period        interval DEFAULT NULL,
    p_group_concurrency  integer  DEFAULT NULL,
    p_group_ordered      boolean  DEFAULT NULL,
    p_reset              text[]   DEFAULT '{}',
    p_fair               boolean  DEFAULT NULL,
    p_max_pending        integer  DEFAULT NULL,
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer,
    OUT retain_results interval, OUT concurrency integer, OUT rate_limit integer,
    OUT rate_period interval, OUT group_concurrency integer, OUT group_ordered boolean,
    OUT fair boolean, OUT max_pending integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_settings CONSTANT text[] := ARRAY['max_attempts', 'visibility_timeout', 'backoff_base',
        'backoff_cap', 'retain_completed', 'retain_dead', 'max_payload_bytes', 'retain_results',
        'concurrency', 'rate', 'group_concurrency', 'group_ordered', 'fair', 'max_pending'];
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
    -- A rate is its limit and its period: given as a pair, or not at all.
    IF (p_rate_limit IS NULL) <> (p_rate_period IS NULL) THEN
        PERFORM postkit_queue.check_flow_limits(NULL, p_rate_limit, p_rate_period, NULL, NULL);
    END IF;
    -- The upsert creates the queue's settings row if need be and locks it until commit, so a
    -- concurrent update of the same queue waits here and then reads this one's result: two
    -- operators changing different settings of one queue at once both keep their change.
    INSERT INTO postkit_queue.queue_settings AS s (namespace, queue, updated_at)
    VALUES (p_namespace, p_queue, postkit_queue.clock())
    ON CONFLICT (namespace, queue) DO UPDATE SET updated_at = EXCLUDED.updated_at
    RETURNING s.* INTO v_current;

    -- write_queue_settings checks every value and writes the row (under the lock held above).
    SELECT * INTO max_attempts, visibility_timeout, backoff_base, backoff_cap, paused,
                  retain_completed, retain_dead, max_payload_bytes, retain_results,
                  concurrency, rate_limit, rate_period, group_concurrency, group_ordered, fair,
                  max_pending
    FROM postkit_queue.write_queue_settings(
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
             ELSE coalesce(p_max_payload_bytes, v_current.max_payload_bytes) END,
        CASE WHEN 'retain_results' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_retain_results, v_current.retain_results) END,
        CASE WHEN 'concurrency' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_concurrency, v_current.concurrency) END,
        CASE WHEN 'rate' = ANY (p_reset) THEN NULL
             WHEN p_rate_limit IS NOT NULL THEN p_rate_limit
             ELSE v_current.rate_limit END,
        CASE WHEN 'rate' = ANY (p_reset) THEN NULL
             WHEN p_rate_limit IS NOT NULL THEN p_rate_period
             ELSE v_current.rate_period END,
        CASE WHEN 'group_concurrency' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_group_concurrency, v_current.group_concurrency) END,
        CASE WHEN 'group_ordered' = ANY (p_reset) THEN false
             ELSE coalesce(p_group_ordered, v_current.group_ordered) END,
        CASE WHEN 'fair' = ANY (p_reset) THEN false
             ELSE coalesce(p_fair, v_current.fair) END,
        CASE WHEN 'max_pending' = ANY (p_reset) THEN NULL
             ELSE coalesce(p_max_pending, v_current.max_pending) END);
END
$$;

-- pause_queue / resume_queue: while a queue is paused, pull and pull_any hand out nothing
-- from it; pushes are still accepted. Returns whether the queue is paused.
-- access: operator
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
        -- Every waiting worker may pull again.
        PERFORM postkit_queue.notify(p_namespace, p_queue, p_wake => NULL);
    END IF;
    RETURN p_paused;
END
$$;

-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.pause_queue(p_namespace text, p_queue text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT postkit_queue.set_paused(p_namespace, p_queue, true) $$;

-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.resume_queue(p_namespace text, p_queue text)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT postkit_queue.set_paused(p_namespace, p_queue, false) $$;

-- purge_queue: delete every pending and scheduled job of a queue. Running jobs are left to
-- their workers, and waiting ones to their parents. Rows a pull is claiming right now are
-- skipped (SKIP LOCKED). The waiting descendants of a purged job are cancelled
-- (dependencies.sql). Returns how many were deleted.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.purge_queue(p_namespace text, p_queue text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_deleted bigint := 0;
    v_purged  bigint;
    v_queue   text;
    v_children boolean;
    v_steps   boolean;
    v_parents bigint[] := '{}';
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.require_operator('purge a queue');
    -- A loop over the DELETE's rows, not a CTE: Citus routes only a plain statement.
    FOR v_purged, v_queue, v_children, v_steps IN
        DELETE FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id IN (
            SELECT p.id FROM postkit_queue.jobs p
            WHERE p.namespace = p_namespace AND p.queue = p_queue AND p.state = 'pending'
            FOR UPDATE SKIP LOCKED)
        RETURNING j.id, j.queue, j.has_children, j.has_steps
    LOOP
        v_deleted := v_deleted + 1;
        IF v_children THEN
            v_parents[cardinality(v_parents) + 1] := v_purged;
        END IF;
        IF v_steps THEN
            PERFORM postkit_queue.finish_steps(
                p_namespace, v_purged, v_queue, postkit_queue.clock());
        END IF;
    END LOOP;
    IF cardinality(v_parents) > 0 THEN
        PERFORM postkit_queue.cancel_descendants(
            p_namespace, v_parents, 'purged', postkit_queue.clock());
    END IF;
    RETURN v_deleted;
END
$$;

-- purge_queue_before: delete (or, with p_dry_run, count) the pending and scheduled jobs of a
-- queue created at or before p_created_before. Running jobs are left to their workers. An
-- operator's purge reads one cutoff from the queue's clock, counts the jobs created by then and
-- deletes only those: jobs pushed while the operator read the prompt stay, and the count shown
-- is the most that can go (fewer when a worker claims some meanwhile). One range scan of
-- jobs_pull_idx (namespace, queue, ...) WHERE state = 'pending'; SKIP LOCKED steps over a job a
-- puller is claiming, which is about to run anyway. The waiting descendants of a purged job
-- are cancelled, as purge_queue cancels them.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.purge_queue_before(
    p_namespace      text,
    p_queue          text,
    p_created_before timestamptz,
    p_dry_run        boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count   bigint := 0;
    v_purged  bigint;
    v_queue   text;
    v_children boolean;
    v_steps   boolean;
    v_parents bigint[] := '{}';
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    IF p_created_before IS NULL OR NOT isfinite(p_created_before) THEN
        RAISE EXCEPTION 'postkit: created_before must be a finite time, got %',
            coalesce(p_created_before::text, 'NULL') USING ERRCODE = 'PKQ05';
    END IF;
    IF p_dry_run IS NULL THEN
        RAISE EXCEPTION 'postkit: dry_run must be true or false, got NULL'
            USING ERRCODE = 'PKQ09';
    END IF;
    PERFORM postkit_queue.require_operator('purge a queue');
    IF p_dry_run THEN
        SELECT count(*) INTO v_count FROM postkit_queue.jobs p
        WHERE p.namespace = p_namespace AND p.queue = p_queue AND p.state = 'pending'
          AND p.created_at <= p_created_before;
        RETURN v_count;
    END IF;
    FOR v_purged, v_queue, v_children, v_steps IN
        DELETE FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id IN (
            SELECT p.id FROM postkit_queue.jobs p
            WHERE p.namespace = p_namespace AND p.queue = p_queue AND p.state = 'pending'
              AND p.created_at <= p_created_before
            FOR UPDATE SKIP LOCKED)
        RETURNING j.id, j.queue, j.has_children, j.has_steps
    LOOP
        v_count := v_count + 1;
        IF v_children THEN
            v_parents[cardinality(v_parents) + 1] := v_purged;
        END IF;
        IF v_steps THEN
            PERFORM postkit_queue.finish_steps(
                p_namespace, v_purged, v_queue, postkit_queue.clock());
        END IF;
    END LOOP;
    IF cardinality(v_parents) > 0 THEN
        PERFORM postkit_queue.cancel_descendants(
            p_namespace, v_parents, 'purged', postkit_queue.clock());
    END IF;
    RETURN v_count;
END
$$;

-- cancel: cancel a job that has not finished, and keep it as cancelled (cancelled_jobs, for its
-- queue's retain_dead: job_result says 'cancelled'), with its waiting descendants
-- (dependencies.sql). A pending, scheduled or waiting one never runs. A running one is
-- cancelled at once, whatever its handler is doing: its row leaves the jobs table, so every
-- later call of its claim (ack, nack, fail, extend_visibility, report_progress, release) finds
-- the claim stale and changes nothing, and it is never retried; its worker learns of it from
-- a notification on the queue's channel, or at the latest when its next heartbeat's
-- extend_visibility answers false, and gives the handler's slot back. A
-- queue with a concurrency or group limit is told that the slot is free (notify). Returns
-- false when no such live job exists.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.cancel(p_namespace text, p_job_id bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.require_operator('cancel a job');
    RETURN postkit_queue.cancel_job(p_namespace, p_job_id, postkit_queue.clock()) > 0;
END
$$;

-- cancel_queue: cancel the live jobs of a queue (pending, scheduled, waiting or running), at
-- most p_limit of them, each as cancel does, with their waiting descendants in any queue; with
-- p_created_before only those pushed at or before it (a prompt's cutoff: a job pushed while
-- the operator answers is not one they agreed to cancel). Returns how many jobs it cancelled,
-- descendants included; call it again while it returns p_limit or more. One scan of the
-- queue's jobs, then cancel_job's row lock for each: a job whose ack is in progress is
-- waited for, and then is gone.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.cancel_queue(
    p_namespace text, p_queue text, p_created_before timestamptz DEFAULT NULL,
    p_limit integer DEFAULT 10000)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id        bigint;
    v_now       timestamptz := postkit_queue.clock();
    v_cancelled integer := 0;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_limit(p_limit, 100000);
    PERFORM postkit_queue.require_operator('cancel the jobs of a queue');
    FOR v_id IN
        SELECT j.id FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.queue = p_queue
          AND (p_created_before IS NULL OR j.created_at <= p_created_before)
        LIMIT p_limit
    LOOP
        v_cancelled := v_cancelled + postkit_queue.cancel_job(p_namespace, v_id, v_now);
    END LOOP;
    RETURN v_cancelled;
END
$$;

-- cancel_job: cancel's work, for cancel and cancel_queue (which check and require operator
-- access first): how many jobs it cancelled, the job's waiting descendants included; 0 when
-- no such live job exists (any more).
CREATE OR REPLACE FUNCTION postkit_queue.cancel_job(
    p_namespace text, p_job_id bigint, p_at timestamptz)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job postkit_queue.jobs;
BEGIN
    -- Lock the row so a concurrent pull cannot claim it between the check and the delete.
    SELECT * INTO v_job FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    DELETE FROM postkit_queue.jobs j WHERE j.namespace = p_namespace AND j.id = p_job_id;
    IF v_job.state = 'waiting' THEN
        PERFORM postkit_queue.drop_edges(p_namespace, v_job.id, v_job.depends_on);
    END IF;
    IF v_job.has_steps THEN
        PERFORM postkit_queue.finish_steps(p_namespace, v_job.id, v_job.queue, p_at);
    END IF;
    IF v_job.state = 'running' THEN
        PERFORM postkit_queue.notify(p_namespace, v_job.queue);
        -- Its worker listens on the queue's channel: 'cancelled <id>' tells it to look at the
        -- claim now (its heartbeat's extend_visibility, which answers false), not at its next
        -- heartbeat. The message is a hint only: a forged one costs one extend.
        PERFORM postkit_queue.send_notification(
            postkit_queue.channel_name(p_namespace, v_job.queue), 'cancelled ' || v_job.id);
    END IF;
    PERFORM postkit_queue.record_cancel(
        p_namespace, v_job.id, v_job.queue, v_job.payload, v_job.priority, v_job.attempts,
        v_job.depends_on, v_job.created_at, 'cancelled', p_at);
    IF v_job.has_children THEN
        RETURN 1 + postkit_queue.cancel_descendants(
            p_namespace, ARRAY[v_job.id], 'cancelled', p_at);
    END IF;
    RETURN 1;
END
$$;

-- redrive: retry dead letters as new jobs with fresh attempts, into their own queue or
-- p_to_queue. Picks p_job_ids, or else every dead letter matching the filters (queue, failed
-- between, error substring), up to p_limit. Each dead letter is redriven at most once: the row
-- is locked (FOR UPDATE waits for a concurrent operator) and re-checked, so a second operator
-- finds it already redriven and skips it. The dead letter stays, linked to its new job; the new
-- job keeps the dead letter's trace context, so its runs link to the push that started it all.
-- With p_dry_run nothing changes and new_job_id is NULL: what would be retried.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.redrive(
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
                namespace, queue, payload, priority, run_at, max_attempts, created_at,
                trace_context, group_key)
            VALUES (p_namespace, coalesce(p_to_queue, v_dead.queue), v_dead.payload,
                    v_dead.priority, v_now, v_dead.max_attempts, v_now, v_dead.trace_context,
                    v_dead.group_key)
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

-- job_lineage: the redrives a job is part of, in order: the dead letters it was retried from
-- (each redriven as the next), the job itself, then the jobs it was redriven as, each with
-- where it is now: 'pending', 'scheduled', 'running' or 'waiting' (live), 'dead' (a dead letter; with
-- redriven_job_id once retried), 'completed' (archived), or NULL (gone without a trace:
-- completed in a queue that keeps no archive, cancelled, purged or pruned). No row when the
-- job is nowhere and no redrive names it. Each step of the chain is one index probe: back
-- through dead_letters_redriven_idx, on through dead_letters' primary key (each a scalar
-- subquery, never a join that reads a table); then primary-key lookups of the three tables.
-- A redrive's new job always has a larger id than the dead letter it came from, so the chain
-- has no cycle; p_limit bounds how many steps each way it follows.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.job_lineage(
    p_namespace text, p_job_id bigint, p_limit integer DEFAULT 100)
RETURNS TABLE (
    job_id bigint, queue text, state text, attempts integer, created_at timestamptz,
    failed_at timestamptz, error text, redriven_job_id bigint, redriven_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_limit(p_limit, 1000);
    RETURN QUERY
    WITH RECURSIVE back(id, step) AS (
        SELECT p_job_id, 0
        UNION ALL
        SELECT (SELECT d.job_id FROM postkit_queue.dead_letters d
                WHERE d.namespace = p_namespace AND d.redriven_job_id = b.id
                LIMIT 1), b.step - 1
        FROM back b WHERE b.id IS NOT NULL AND b.step > -p_limit
    ), ahead(id, step) AS (
        SELECT p_job_id, 0
        UNION ALL
        SELECT (SELECT d.redriven_job_id FROM postkit_queue.dead_letters d
                WHERE d.namespace = p_namespace AND d.job_id = a.id
                LIMIT 1), a.step + 1
        FROM ahead a WHERE a.id IS NOT NULL AND a.step < p_limit
    ), chain(id, step) AS (
        SELECT b.id, b.step FROM back b WHERE b.id IS NOT NULL AND b.step < 0
        UNION ALL
        SELECT a.id, a.step FROM ahead a WHERE a.id IS NOT NULL
    )
    SELECT c.id, coalesce(j.queue, d.queue, f.queue),
           CASE WHEN j.state IN ('running', 'waiting') THEN j.state::text
                WHEN j.state = 'pending' AND j.run_at > v_now THEN 'scheduled'
                WHEN j.state = 'pending' THEN 'pending'
                WHEN d.failed_at IS NOT NULL THEN 'dead'
                WHEN f.completed_at IS NOT NULL THEN 'completed' END,
           coalesce(j.attempts, d.attempts, f.attempts),
           coalesce(j.created_at, d.created_at, f.created_at),
           d.failed_at, coalesce(d.error, j.errors -> -1 ->> 'error'), d.redriven_job_id,
           d.redriven_at
    FROM chain c
    LEFT JOIN LATERAL (
        SELECT l.queue, l.state, l.run_at, l.attempts, l.created_at, l.errors
        FROM postkit_queue.jobs l
        WHERE l.namespace = p_namespace AND l.id = c.id LIMIT 1) j ON true
    LEFT JOIN LATERAL (
        SELECT l.queue, l.failed_at, l.attempts, l.created_at, l.error, l.redriven_job_id,
               l.redriven_at
        FROM postkit_queue.dead_letters l
        WHERE l.namespace = p_namespace AND l.job_id = c.id LIMIT 1) d ON true
    LEFT JOIN LATERAL (
        SELECT l.queue, l.completed_at, l.attempts, l.created_at
        FROM postkit_queue.completed_jobs l
        WHERE l.namespace = p_namespace AND l.job_id = c.id LIMIT 1) f ON true
    -- A job found nowhere is a step of a chain that names it; alone, it is unknown.
    WHERE (SELECT count(*) FROM chain) > 1
       OR j.queue IS NOT NULL OR d.queue IS NOT NULL OR f.queue IS NOT NULL
    ORDER BY c.step;
END
$$;

-- purge_dead_letters: delete the dead letters of a namespace (of one queue) that failed more
-- than p_older_than ago. Returns how many were deleted. Like cancel and the queue purges, the
-- dead-letter purges require operator access: an EXECUTE granted by hand is not enough to
-- destroy jobs or dead letters.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.purge_dead_letters(
    p_namespace text, p_older_than interval, p_queue text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    IF p_older_than IS NULL THEN
        RAISE EXCEPTION 'postkit: older_than must not be null' USING ERRCODE = 'PKQ05';
    END IF;
    PERFORM postkit_queue.check_duration('older_than', p_older_than, true, interval '3650 days');
    -- The cutoff purge, with the cutoff read from the queue's clock now.
    RETURN postkit_queue.purge_dead_letters_before(
        p_namespace, postkit_queue.clock() - p_older_than, p_queue);
END
$$;

-- purge_dead_letters_before: delete the dead letters of a namespace that failed before
-- p_failed_before, retried or not: of one queue, among p_job_ids and failed at or after
-- p_failed_after, where given (count_dead_letters' filters). Returns how many were deleted.
-- The caller reads the cutoff once (from postkit_queue.clock()), counts with
-- count_dead_letters(p_failed_before => ..., p_include_redriven => true) and deletes with the
-- same cutoff: what it showed is what goes, whatever its own clock says and however long its
-- confirmation took.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.purge_dead_letters_before(
    p_namespace     text,
    p_failed_before timestamptz,
    p_queue         text        DEFAULT NULL,
    p_job_ids       bigint[]    DEFAULT NULL,
    p_failed_after  timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_deleted bigint;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, false);
    IF p_failed_before IS NULL THEN
        RAISE EXCEPTION 'postkit: failed_before must not be null' USING ERRCODE = 'PKQ05';
    END IF;
    IF pg_catalog.cardinality(p_job_ids) > 100000 THEN
        RAISE EXCEPTION 'postkit: at most 100000 job ids at once, got %',
            pg_catalog.cardinality(p_job_ids) USING ERRCODE = 'PKQ07';
    END IF;
    PERFORM postkit_queue.require_operator('purge dead letters');
    -- count_dead_letters' predicates (with p_include_redriven): a range scan of
    -- dead_letters_failed_at_idx, or primary-key probes with ids.
    DELETE FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace AND (p_queue IS NULL OR d.queue = p_queue)
      AND (p_job_ids IS NULL OR d.job_id = ANY (p_job_ids))
      AND d.failed_at < p_failed_before
      AND (p_failed_after IS NULL OR d.failed_at >= p_failed_after);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- get_queue_policy: the policy in force for a queue (its settings over the built-in
-- defaults), as configure_queue returns it, changing nothing. A primary-key probe of
-- queue_settings (queue_policy).
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.get_queue_policy(
    p_namespace text, p_queue text,
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer,
    OUT retain_results interval, OUT concurrency integer, OUT rate_limit integer,
    OUT rate_period interval, OUT group_concurrency integer, OUT group_ordered boolean,
    OUT fair boolean, OUT max_pending integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    SELECT p.max_attempts, p.visibility_timeout, p.backoff_base, p.backoff_cap, p.paused,
           p.retain_completed, p.retain_dead, p.max_payload_bytes, p.retain_results,
           p.concurrency, p.rate_limit, p.rate_period, p.group_concurrency, p.group_ordered,
           p.fair, p.max_pending
    INTO max_attempts, visibility_timeout, backoff_base, backoff_cap, paused,
         retain_completed, retain_dead, max_payload_bytes, retain_results,
         concurrency, rate_limit, rate_period, group_concurrency, group_ordered, fair,
         max_pending
    FROM postkit_queue.queue_policy(p_namespace, p_queue) AS p;
END
$$;

-- prune: retention, in bounded batches so no single call holds locks for long. Deletes up to
-- p_limit archived completed jobs, up to p_limit dead letters, up to p_limit job results, up
-- to p_limit cancelled jobs, up to p_limit ancestry rows (job_ancestry) and up to p_limit steps
-- of finished workflow runs (workflow_steps) whose retention ran out, and outcome counters
-- older than two hours. The worker runtime's prune service and postkit tick call it. Returns how many rows of
-- each kind it deleted.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.prune(p_namespace text, p_limit integer DEFAULT 1000)
RETURNS TABLE (completed_jobs bigint, dead_letters bigint, stats_rows bigint, results bigint,
               cancelled bigint, ancestry bigint, steps bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now    timestamptz := postkit_queue.clock();
    v_job_id bigint;
    v_batch  bigint[] := '{}';
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_limit(p_limit, 100000);
    -- Each batch is a range scan of the expires_at index, oldest first (the ORDER BY keeps the
    -- scan on the index in plpgsql's generic plan too, where the LIMIT is unknown and a
    -- sequential scan would otherwise look as cheap), locked and read into an array before
    -- the DELETE. Not a DELETE ... WHERE job_id IN (SELECT ... LIMIT n FOR UPDATE SKIP
    -- LOCKED): a plan that joins by nested loop runs that subquery again for each row, and
    -- each run skips the rows the DELETE already removed and locks the next ones, so the
    -- batch has no bound (row-level security's filters bring that plan: tests/
    -- one_namespace_per_call.py found it).
    FOR v_job_id IN
        SELECT e.job_id FROM postkit_queue.completed_jobs e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        v_batch := v_batch || v_job_id;
    END LOOP;
    DELETE FROM postkit_queue.completed_jobs c
    WHERE c.namespace = p_namespace AND c.job_id = ANY (v_batch);
    GET DIAGNOSTICS completed_jobs = ROW_COUNT;
    v_batch := '{}';
    FOR v_job_id IN
        SELECT e.job_id FROM postkit_queue.dead_letters e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        v_batch := v_batch || v_job_id;
    END LOOP;
    DELETE FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace AND d.job_id = ANY (v_batch);
    GET DIAGNOSTICS dead_letters = ROW_COUNT;
    v_batch := '{}';
    FOR v_job_id IN
        SELECT e.job_id FROM postkit_queue.job_results e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        v_batch := v_batch || v_job_id;
    END LOOP;
    DELETE FROM postkit_queue.job_results r
    WHERE r.namespace = p_namespace AND r.job_id = ANY (v_batch);
    GET DIAGNOSTICS results = ROW_COUNT;
    v_batch := '{}';
    FOR v_job_id IN
        SELECT e.job_id FROM postkit_queue.cancelled_jobs e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        v_batch := v_batch || v_job_id;
    END LOOP;
    DELETE FROM postkit_queue.cancelled_jobs c
    WHERE c.namespace = p_namespace AND c.job_id = ANY (v_batch);
    GET DIAGNOSTICS cancelled = ROW_COUNT;
    v_batch := '{}';
    FOR v_job_id IN
        SELECT e.job_id FROM postkit_queue.job_ancestry e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        v_batch := v_batch || v_job_id;
    END LOOP;
    DELETE FROM postkit_queue.job_ancestry a
    WHERE a.namespace = p_namespace AND a.job_id = ANY (v_batch);
    GET DIAGNOSTICS ancestry = ROW_COUNT;
    -- A run's steps by (run, position): the batch is of runs, each at most max_steps rows.
    v_batch := '{}';
    FOR v_job_id IN
        SELECT e.run_id FROM postkit_queue.workflow_steps e
        WHERE e.namespace = p_namespace AND e.expires_at < v_now
        ORDER BY e.expires_at
        LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        IF v_job_id <> ALL (v_batch) THEN
            v_batch := v_batch || v_job_id;
        END IF;
    END LOOP;
    DELETE FROM postkit_queue.workflow_steps s
    WHERE s.namespace = p_namespace AND s.run_id = ANY (v_batch) AND s.expires_at < v_now;
    GET DIAGNOSTICS steps = ROW_COUNT;
    DELETE FROM postkit_queue.queue_stats s
    WHERE s.namespace = p_namespace AND s.minute < v_now - interval '2 hours';
    GET DIAGNOSTICS stats_rows = ROW_COUNT;
    RETURN NEXT;
END
$$;
