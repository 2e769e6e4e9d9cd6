-- The state machine: push, pull, ack, nack, fail, release, extend, rescue.
--
-- Each move of one job in the diagram below is one function here; the batch forms are in
-- batches.sql, and the operator's cancel, purge and redrive in operations.sql. Lifecycle of a job:
--
--     push ──> pending ──pull──> running ──ack──> (deleted: completed jobs leave the hot table)
--                 ^                 │
--                 │                 ├──nack, attempts left────────> pending (run_at = now + backoff)
--                 │                 ├──nack, attempts spent───────> dead_letters
--                 │                 ├──fail───────────────────────> dead_letters
--                 ├─────────────────┤  release (a worker shutting down; the attempt is returned)
--                 └──tick_timeouts──┤  (claim expired, attempts left)
--                                   └──tick_timeouts, attempts spent> dead_letters
--
-- The states are the job_state type (types.sql): a pending job whose run_at is in the future
-- is reported as scheduled, and a dead-lettered one as dead.
--
-- Each function takes the namespace first, validates its input before it writes, takes the row
-- lock it needs and checks the claim (the fence, holds_claim), so a client in any language gets
-- the same guarantees. Every value arrives as a parameter; no function builds SQL from strings.
-- The calls made once per job (push, pull, ack, ack_many, extend_visibility, tick_timeouts)
-- test the common, well-formed call in one expression and run the check_* helpers, which raise
-- the precise error, only when it fails: each helper call costs about 10 us.
--
-- Errors raised here use SQLSTATEs of the class 'PKQ'. Each one maps to one Python exception in
-- postkit.errors (tests/test_errors.py keeps the two lists in step).

-- push: add a job. Returns its id, or NULL when unique_key matched a live job (deduplicated).
-- Runs in the caller's transaction, so the job exists exactly when the caller's own writes do.
-- A delay is at most 3650 days, said in days because '10 years' compares as 3600 of them.
-- p_trace_context is the producer's trace context (check_trace_context), kept with the job.
-- p_group_key puts the job in a group of its queue, for the queue's group limits (flow.sql).
-- p_depends_on lists the job's parents: it waits until each has completed (dependencies.sql).
--
-- A push runs inside the application's own transaction, so its cost is the application's:
-- the common push (no delay, attempts, key or backoff of its own) is three statements, each
-- planned once per session: a primary-key probe of the queue's settings row (its max_attempts,
-- payload limit and flow limits), the INSERT, and a primary-key probe of wakeups (notify's,
-- which it calls only when a worker waits or the queue's limits need it). The names of a queue
-- that has a settings row were checked when the row was written (every function that writes
-- one checks them, and no caller may write the table), so only a push to a queue without one
-- pays for check_name's regular expressions. Any other call, any call that fails a check, and
-- any push to a queue with a limit on its pending jobs (max_pending: check_room, which refuses
-- a push to a full queue, PKQ23) takes the second path, where each check raises its precise
-- error.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.push(
    p_namespace    text,
    p_queue        text,
    p_payload      jsonb,
    p_delay        interval DEFAULT NULL,
    p_priority     integer  DEFAULT 0,
    p_max_attempts integer  DEFAULT NULL,
    p_unique_key   text     DEFAULT NULL,
    p_backoff_base interval DEFAULT NULL,
    p_backoff_cap  interval DEFAULT NULL,
    p_trace_context jsonb   DEFAULT NULL,
    p_group_key    text     DEFAULT NULL,
    p_depends_on   bigint[] DEFAULT NULL,
    p_wait_for_room interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now          timestamptz;
    v_id           bigint;
    v_policy       record;
    v_max_attempts integer;
    v_max_payload  integer;
    v_max_pending  integer;  -- backpressure (check_room): pushes to such a queue take the checks
    v_held_back    boolean;  -- a concurrency or group limit (notify)
    v_parents      bigint[];  -- the parents it waits for (lock_parents)
    v_depends_on   bigint[];  -- p_depends_on without duplicates, in its order
BEGIN
    SELECT s.max_attempts, s.max_payload_bytes, s.max_pending,
           s.concurrency IS NOT NULL OR s.group_concurrency IS NOT NULL OR s.group_ordered
    INTO v_max_attempts, v_max_payload, v_max_pending, v_held_back
    FROM postkit_queue.queue_settings s
    WHERE s.namespace = p_namespace AND s.queue = p_queue;
    -- A payload straight from the client is never compressed, and then pg_column_size is
    -- payload_size.
    IF (FOUND OR coalesce(postkit_queue.is_name(p_namespace)
                          AND postkit_queue.is_name(p_queue), false))
       AND p_payload IS NOT NULL AND p_priority BETWEEN -32768 AND 32767
       AND p_delay IS NULL AND p_max_attempts IS NULL AND p_unique_key IS NULL
       AND p_backoff_base IS NULL AND p_backoff_cap IS NULL AND p_depends_on IS NULL
       AND v_max_pending IS NULL AND p_wait_for_room IS NULL
       AND (p_trace_context IS NULL
            OR coalesce(postkit_queue.is_trace_context(p_trace_context), false))
       AND (p_group_key IS NULL OR coalesce(postkit_queue.is_name(p_group_key), false))
       AND pg_column_compression(p_payload) IS NULL
       AND pg_column_size(p_payload)
           <= coalesce(v_max_payload, postkit_queue.default_max_payload_bytes())
       AND coalesce(current_setting('postkit_queue.clock_offset', true), '') = '' THEN
        v_now := statement_timestamp();  -- clock(), without a test's offset
        INSERT INTO postkit_queue.jobs AS j (
            namespace, queue, payload, priority, run_at, max_attempts, created_at,
            trace_context, group_key)
        VALUES (
            p_namespace, p_queue, p_payload, p_priority, v_now,
            coalesce(v_max_attempts, postkit_queue.default_max_attempts()), v_now, p_trace_context,
            p_group_key)
        RETURNING j.id INTO v_id;
        -- notify's first probe, here, so that a push no worker waits for calls nothing more.
        PERFORM FROM postkit_queue.wakeups w
        WHERE w.namespace = p_namespace AND w.queue = p_queue AND w.requested_at IS NOT NULL;
        IF FOUND OR v_held_back THEN
            PERFORM postkit_queue.notify(p_namespace, p_queue, coalesce(v_held_back, false));
        END IF;
        RETURN v_id;
    END IF;

    v_now := postkit_queue.clock();
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_name('unique_key', p_unique_key, false);
    PERFORM postkit_queue.check_name('group_key', p_group_key, false);
    PERFORM postkit_queue.check_priority(p_priority);
    PERFORM postkit_queue.check_max_attempts(p_max_attempts);
    PERFORM postkit_queue.check_duration('delay', p_delay, true, interval '3650 days');
    PERFORM postkit_queue.check_duration('backoff_base', p_backoff_base, false, interval '1 day');
    PERFORM postkit_queue.check_duration('backoff_cap', p_backoff_cap, false, interval '30 days');
    PERFORM postkit_queue.check_duration('wait_for_room', p_wait_for_room, true, interval '1 hour');
    PERFORM postkit_queue.check_trace_context('trace_context', p_trace_context);
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    PERFORM postkit_queue.check_payload(p_queue, p_payload, v_policy.max_payload_bytes);
    PERFORM postkit_queue.check_room(
        p_namespace, p_queue, v_policy.max_pending, 1, p_wait_for_room);
    IF p_depends_on IS NOT NULL THEN
        v_parents := postkit_queue.lock_parents(p_namespace, p_depends_on);
        v_depends_on := array(SELECT p.id FROM unnest(p_depends_on) WITH ORDINALITY AS p(id, n)
                              GROUP BY p.id ORDER BY min(p.n));
    END IF;

    -- The partial unique index jobs_unique_key_idx arbitrates duplicates; ON CONFLICT makes the
    -- check and the insert one atomic step even when two transactions push the same key.
    INSERT INTO postkit_queue.jobs AS j (
        namespace, queue, payload, priority, run_at, max_attempts, unique_key,
        backoff_base, backoff_cap, created_at, trace_context, group_key, depends_on, state,
        waiting_on)
    VALUES (
        p_namespace, p_queue, p_payload, p_priority, v_now + coalesce(p_delay, interval '0'),
        coalesce(p_max_attempts, v_policy.max_attempts),
        p_unique_key, p_backoff_base, p_backoff_cap, v_now, p_trace_context, p_group_key,
        nullif(v_depends_on, '{}'),
        (CASE WHEN cardinality(v_parents) > 0 THEN 'waiting' ELSE 'pending' END)
            ::postkit_queue.job_state,
        nullif(cardinality(v_parents), 0))
    ON CONFLICT (namespace, queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO v_id;
    IF v_id IS NULL THEN
        RETURN NULL;
    ELSIF cardinality(v_parents) > 0 THEN
        PERFORM postkit_queue.add_children(p_namespace, v_parents, v_id);
    ELSE
        PERFORM postkit_queue.notify(p_namespace, p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- pull: claim up to p_limit ready jobs of one queue, highest priority first, then oldest run_at.
-- Every claim counts an attempt and gets a new claim token. The claim is an ordinary row update,
-- so it sticks when the caller commits and never happened if the caller rolls back.
--
-- A session that is working through a backlog resumes where its last claim ended. Every claim
-- leaves the job's entry in jobs_pull_idx behind as a dead one, right at the head of the range
-- the next claim scans from, until VACUUM removes it. Claiming from the head each time walks all
-- of them: 16-job claims from a backlog of 300,000 ran at 1,360 a second after a VACUUM's worth
-- of quiet and at 500 a second 16 seconds of claims later (pgbench, two clients), and while a
-- long transaction holds back the horizon even VACUUM cannot help.
--
-- So the session remembers (in a session setting named after the queue) the key of the last
-- job it claimed, (priority, run_at, id), and when it last claimed from the head. Within a
-- second of that it claims, in order: jobs of a higher priority (a short range when there are
-- none), then jobs of the remembered priority past the remembered key, which skips the dead
-- entries of everything it claimed before. Only when those do not fill p_limit, or the second
-- is up, does it claim from the head again. Jobs that come due in order are found either way.
-- The cost falls on a job whose key lies behind the session's resume point: one whose push
-- committed after later-pushed jobs were claimed (run_at and id are taken when the push
-- statement runs), or whose claim rolled back. While a backlog keeps every claim full, such a
-- job waits up to a second longer than strict order would have it wait; never longer.
-- access: worker
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
-- The claim walks jobs_pull_idx in order whatever the statistics say.
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
    v_locked     bigint;       -- a job a scan locked
    v_job        postkit_queue.jobs;
    v_claimed    boolean := false;
    v_limited    boolean;      -- the queue has flow limits (flow.sql)
    v_token      bytea;        -- this call's random half of each claim token
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace) AND postkit_queue.is_name(p_queue)
                    AND (p_worker_id IS NULL OR postkit_queue.is_name(p_worker_id))
                    AND p_limit BETWEEN 1 AND 1000, false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_name('queue', p_queue, true);
        PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
        PERFORM postkit_queue.check_limit(p_limit, 1000);
    END IF;
    -- Shared until the transaction ends: a change of the queue's flow limits waits for this
    -- claim, and a claim that waited for one reads the new policy (claims_lock).
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(postkit_queue.claims_lock(p_namespace, p_queue));
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    v_timeout := coalesce(p_visibility_timeout, v_policy.visibility_timeout);
    IF NOT coalesce(postkit_queue.is_duration(v_timeout, false, interval '12 hours'), false) THEN
        PERFORM postkit_queue.check_duration('visibility_timeout', v_timeout, false,
                                             interval '12 hours');
    END IF;
    IF v_policy.paused THEN
        RETURN;  -- a paused queue hands out nothing; pushes are still accepted
    END IF;
    v_limited := v_policy.concurrency IS NOT NULL OR v_policy.rate_limit IS NOT NULL
                 OR v_policy.group_concurrency IS NOT NULL OR v_policy.group_ordered
                 OR v_policy.fair;
    IF v_limited THEN
        -- A queue with flow limits, or a fair one, takes its turn and chooses its jobs in
        -- flow.sql; the claim below writes them, at the time of the turn.
        SELECT c.ids, c.claimed_at INTO v_ids, v_now
        FROM postkit_queue.claim_limited(
            p_namespace, p_queue, p_limit, v_policy.concurrency, v_policy.rate_limit,
            v_policy.rate_period, v_policy.group_concurrency, v_policy.group_ordered,
            v_policy.fair) AS c;
    ELSE
        -- Each step below is a range scan of jobs_pull_idx. FOR UPDATE SKIP LOCKED steps over rows
        -- another transaction is claiming right now, so concurrent pullers never wait on each
        -- other and never receive the same job; the locked row is re-checked (state still
        -- 'pending') before it is taken. Rows this transaction locked in an earlier step are not
        -- skipped by SKIP LOCKED, hence the id <> ALL (v_ids). Each scan is a loop over one
        -- table's rows, not an ARRAY(SELECT ...): a subquery is not a statement Citus can route
        -- with the namespace unbound, as in this generic plan (docs/scaling.md).
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
            FOR v_locked IN
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.priority > v_priority AND j.run_at <= v_now
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
            LOOP
                v_ids[cardinality(v_ids) + 1] := v_locked;
            END LOOP;
            IF cardinality(v_ids) < p_limit THEN
                FOR v_locked IN
                SELECT j.id FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
                  AND j.priority = v_priority AND (j.run_at, j.id) > (v_run_at, v_id)
                  AND j.run_at <= v_now AND j.id <> ALL (v_ids)
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT p_limit - cardinality(v_ids)
                FOR UPDATE SKIP LOCKED
                LOOP
                    v_ids[cardinality(v_ids) + 1] := v_locked;
                END LOOP;
            END IF;
        END IF;
        IF cardinality(v_ids) < p_limit THEN
            FOR v_locked IN
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.run_at <= v_now AND j.id <> ALL (v_ids)
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT p_limit - cardinality(v_ids)
            FOR UPDATE SKIP LOCKED
            LOOP
                v_ids[cardinality(v_ids) + 1] := v_locked;
            END LOOP;
            v_head_at := v_now;
        END IF;
    END IF;

    -- The claim itself: primary-key lookups of the locked ids, never a join the planner could
    -- turn into a scan of the table. The resume point moves to the last job in claim order.
    -- Each claim token is this call's 64 random bits followed by the job's id: unique among the
    -- jobs of the call, and, by the random half, between two claims of one job. One random
    -- value per call, drawn here and not per row in the UPDATE: gen_random_uuid() costs about
    -- 4 us a row, a tenth of a claim (docs/performance.md).
    v_token := uuid_send(gen_random_uuid());
    FOR v_job IN
        UPDATE postkit_queue.jobs j
        SET state         = 'running',
            attempts      = j.attempts + 1,
            worker_id     = p_worker_id,
            claim_token   = encode(overlay(v_token PLACING int8send(j.id) FROM 9 FOR 8),
                                   'hex')::uuid,
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
    IF v_priority IS NOT NULL AND NOT v_limited THEN
        PERFORM set_config(v_resume_key, concat_ws(' ', v_priority,
            (extract(epoch FROM v_run_at) * 1000000)::bigint, v_id,
            (extract(epoch FROM v_head_at) * 1000000)::bigint), false);
    END IF;
END
$$;

-- ack: the job succeeded; it leaves the queue. Returns false, and changes nothing, when the
-- caller no longer holds the claim. A claim whose deadline passed still holds until
-- tick_timeouts rescues it: the work is done and nobody else has the job, so the ack counts.
-- p_result is the job's result (what its handler returned; NULL or the JSON null: none, checked
-- by check_result), kept when the job's queue keeps results (record_outcomes); a stale ack
-- keeps none.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.ack(
    p_namespace   text,
    p_job_id      bigint,
    p_worker_id   text  DEFAULT NULL,
    p_claim_token uuid  DEFAULT NULL,
    p_result      jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_job postkit_queue.jobs;
    v_now timestamptz;
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace) AND p_job_id IS NOT NULL
                    AND (p_worker_id IS NULL OR postkit_queue.is_name(p_worker_id))
                    AND (p_claim_token IS NOT NULL OR p_worker_id IS NOT NULL)
                    AND (p_result IS NULL OR postkit_queue.is_result(p_result)), false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_job_id(p_job_id);
        PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
        PERFORM postkit_queue.check_claim('ack', p_worker_id, p_claim_token);
        PERFORM postkit_queue.check_result('result', p_result);
    END IF;
    -- The DELETE locks the row by primary key. If a ticker or another settle holds it, we wait,
    -- then re-check the fence against the row as they left it.
    DELETE FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j.state, j.worker_id, j.claim_token, p_worker_id,
                                    p_claim_token)
    RETURNING j.* INTO v_job;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_now := postkit_queue.clock();
    IF v_job.has_children THEN
        PERFORM postkit_queue.release_children(p_namespace, ARRAY[v_job.id], v_now);
        IF v_job.depends_on IS NOT NULL THEN
            PERFORM postkit_queue.keep_ancestry(
                p_namespace, v_job.id, v_job.queue, v_job.depends_on, v_now);
        END IF;
    END IF;
    IF v_job.has_steps THEN
        PERFORM postkit_queue.finish_steps(p_namespace, v_job.id, v_job.queue, v_now);
    END IF;
    IF postkit_queue.keeps_completed(p_namespace, v_job.queue)
       AND postkit_queue.keep_completed(
           p_namespace, v_now, p_result, v_job.id, v_job.queue, v_job.payload, v_job.priority,
           v_job.attempts, v_job.worker_id, v_job.errors, v_job.created_at, v_job.trace_context)
    THEN
        PERFORM postkit_queue.notify_results(p_namespace, ARRAY[v_job.id]);
    END IF;
    PERFORM postkit_queue.record_outcomes(
        p_namespace, 'completed', v_now, ARRAY[v_job.queue], ARRAY[v_job.attempts]);
    RETURN true;
END
$$;

-- ack_many: acknowledge many claims in one call and one statement. Each job is fenced on its
-- own claim token; the ones the caller no longer holds are skipped, not an error. Returns the
-- ids acknowledged. A row a ticker or another settle holds is waited for and re-checked, as in
-- ack. Workers batch their acks through this (or ack_and_pull, in queries.sql), which turns a
-- commit per job into a commit per batch. p_results, if given, is a JSON array of one entry
-- per job id: its result, or null (none), each as ack's p_result (check_results); a skipped
-- job's result is not kept.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.ack_many(
    p_namespace text, p_job_ids bigint[], p_claim_tokens uuid[], p_results jsonb DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now      timestamptz := postkit_queue.clock();
    v_job      postkit_queue.jobs;
    v_acked    bigint[] := '{}';
    v_queues   text[] := '{}';
    v_attempts integer[] := '{}';
    v_kept     bigint[] := '{}';  -- the acked jobs whose results are kept
    v_parents  bigint[] := '{}';  -- the acked jobs that waiting jobs depend on
    v_queue    text;              -- the queue of the job before, and whether it keeps anything
    v_keeps    boolean;
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace), false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    END IF;
    IF p_job_ids IS NULL OR p_claim_tokens IS NULL
       OR cardinality(p_job_ids) <> cardinality(p_claim_tokens) THEN
        RAISE EXCEPTION 'postkit: ack_many needs one claim token per job id'
            USING ERRCODE = 'PKQ06';
    END IF;
    IF p_results IS NOT NULL THEN
        PERFORM postkit_queue.check_results(p_results, cardinality(p_job_ids));
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
    -- Primary-key lookups for the listed ids, each fenced by its current
    -- claim token being one of the tokens given (tokens are unique per claim). A loop over the
    -- DELETE's rows, not a CTE: Citus routes only a plain statement with the namespace unbound,
    -- as in this generic plan (docs/scaling.md).
    FOR v_job IN
        DELETE FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id = ANY (p_job_ids)
          AND j.claim_token = ANY (p_claim_tokens)
        RETURNING j.*
    LOOP
        v_acked[cardinality(v_acked) + 1] := v_job.id;
        v_queues[cardinality(v_queues) + 1] := v_job.queue;
        v_attempts[cardinality(v_attempts) + 1] := v_job.attempts;
        IF v_job.has_steps THEN
            PERFORM postkit_queue.finish_steps(p_namespace, v_job.id, v_job.queue, v_now);
        END IF;
        IF v_job.has_children THEN
            v_parents[cardinality(v_parents) + 1] := v_job.id;
            IF v_job.depends_on IS NOT NULL THEN
                PERFORM postkit_queue.keep_ancestry(
                    p_namespace, v_job.id, v_job.queue, v_job.depends_on, v_now);
            END IF;
        END IF;
        -- Whether the job's queue keeps anything, asked once per queue of the batch.
        IF v_job.queue IS DISTINCT FROM v_queue THEN
            v_queue := v_job.queue;
            v_keeps := postkit_queue.keeps_completed(p_namespace, v_queue);
        END IF;
        -- The job's result is the entry of p_results at its id's position in p_job_ids.
        IF v_keeps AND postkit_queue.keep_completed(
               p_namespace, v_now,
               p_results -> (array_position(p_job_ids, v_job.id) - 1), v_job.id, v_job.queue,
               v_job.payload, v_job.priority, v_job.attempts, v_job.worker_id, v_job.errors,
               v_job.created_at, v_job.trace_context) THEN
            v_kept[cardinality(v_kept) + 1] := v_job.id;
        END IF;
    END LOOP;
    IF cardinality(v_acked) = 0 THEN
        RETURN '{}';
    END IF;
    IF cardinality(v_parents) > 0 THEN
        PERFORM postkit_queue.release_children(p_namespace, v_parents, v_now);
    END IF;
    IF cardinality(v_kept) > 0 THEN
        PERFORM postkit_queue.notify_results(p_namespace, v_kept);
    END IF;
    PERFORM postkit_queue.record_outcomes(p_namespace, 'completed', v_now, v_queues, v_attempts);
    RETURN v_acked;
END
$$;

-- nack: a temporary failure. With attempts left the job returns to pending after an
-- exponential backoff with jitter: base * 2^(attempt - 1) * (1 + random()), capped, so the first
-- retry comes after 1-2 s by default and the delay doubles up to 1 hour. p_backoff overrides
-- the computed delay. With no attempts left the job is dead-lettered.
-- Returns 'retried', 'dead_lettered', or 'stale' (the caller no longer holds the claim).
-- access: worker
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
    IF NOT FOUND OR NOT postkit_queue.holds_claim(
        v_job.state, v_job.worker_id, v_job.claim_token, p_worker_id, p_claim_token) THEN
        RETURN 'stale';
    END IF;

    v_errors := v_job.errors || postkit_queue.error_entry(
        v_job.attempts, v_job.worker_id, 'nack', p_error, v_now);
    IF v_job.attempts >= v_job.max_attempts THEN
        PERFORM postkit_queue.bury(p_namespace, v_job.id, 'attempts_exhausted', v_errors, v_now);
        RETURN 'dead_lettered';
    END IF;

    SELECT * INTO v_policy FROM postkit_queue.queue_policy(p_namespace, v_job.queue);
    -- Computed in seconds and capped before it becomes an interval: base * 2^40 overflows the
    -- interval type for any base above a few seconds, so the cap must apply first.
    v_delay := coalesce(p_backoff, make_interval(secs => least(
        extract(epoch FROM coalesce(v_job.backoff_cap, v_policy.backoff_cap))::float8,
        extract(epoch FROM coalesce(v_job.backoff_base, v_policy.backoff_base))::float8
            * power(2, least(v_job.attempts - 1, 40)) * (1 + random()))));

    UPDATE postkit_queue.jobs
    SET state = 'pending', run_at = v_now + v_delay, errors = v_errors,
        worker_id = NULL, claim_token = NULL, claimed_at = NULL, visible_until = NULL,
        progress = NULL, progress_note = NULL, progress_at = NULL
    WHERE namespace = p_namespace AND id = v_job.id;
    -- Waiting workers wake, find nothing ready yet, and sleep until this retry falls due.
    PERFORM postkit_queue.notify(p_namespace, v_job.queue);
    PERFORM postkit_queue.record_outcomes(
        p_namespace, 'retried', v_now, ARRAY[v_job.queue], ARRAY[v_job.attempts]);
    RETURN 'retried';
END
$$;

-- fail: a permanent failure. The job moves to the dead-letter queue at once, with its payload
-- and its whole error history. Returns false when the caller no longer holds the claim.
-- access: worker
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
    IF NOT FOUND OR NOT postkit_queue.holds_claim(
        v_job.state, v_job.worker_id, v_job.claim_token, p_worker_id, p_claim_token) THEN
        RETURN false;
    END IF;

    PERFORM postkit_queue.bury(
        p_namespace, v_job.id, 'failed',
        v_job.errors
            || postkit_queue.error_entry(v_job.attempts, v_job.worker_id, 'fail', p_error, v_now),
        v_now);
    RETURN true;
END
$$;

-- release: give a claimed job back at once without spending an attempt, for a worker that is
-- shutting down before it could run the job. Returns false when the caller no longer holds
-- the claim.
-- access: worker
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
        worker_id = NULL, claim_token = NULL, claimed_at = NULL, visible_until = NULL,
        progress = NULL, progress_note = NULL, progress_at = NULL
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j.state, j.worker_id, j.claim_token, p_worker_id,
                                    p_claim_token)
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    PERFORM postkit_queue.notify(p_namespace, v_queue);
    RETURN true;
END
$$;

-- extend_visibility: a slow but healthy worker keeps its claim. The deadline becomes
-- now + p_extension, never earlier than it already was, so a heartbeat every third of the
-- timeout keeps a job forever while a dead worker's job expires within one timeout.
-- access: worker
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
      AND postkit_queue.holds_claim(j.state, j.worker_id, j.claim_token, p_worker_id,
                                    p_claim_token);
    RETURN FOUND;
END
$$;

-- report_progress: the handler of a running job says how far it got: p_fraction from 0 to 1,
-- and a note of at most 200 characters (NULL: none), read back by get_job with when it was
-- said. Fenced like extend_visibility: false, with nothing changed, when the caller no longer
-- holds the claim, so a stale worker writes nothing. One UPDATE of the job's row, of columns no
-- index holds (a HOT update where its page has room: the table's fillfactor keeps room); it
-- takes the row lock that only this job's own settle, heartbeat and rescue also take, never a
-- claim's, which locks pending rows. A retry, a release and a rescue clear it.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.report_progress(
    p_namespace   text,
    p_job_id      bigint,
    p_fraction    float8,
    p_note        text DEFAULT NULL,
    p_worker_id   text DEFAULT NULL,
    p_claim_token uuid DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
    PERFORM postkit_queue.check_claim('report_progress', p_worker_id, p_claim_token);
    -- NaN is neither below 0 nor above 1, so it is named.
    IF p_fraction IS NULL OR p_fraction = 'NaN' OR p_fraction < 0 OR p_fraction > 1 THEN
        RAISE EXCEPTION 'postkit: progress must be a fraction from 0 to 1, got %',
            coalesce(p_fraction::text, 'NULL') USING ERRCODE = 'PKQ20';
    END IF;
    IF char_length(p_note) > 200 THEN
        RAISE EXCEPTION 'postkit: a progress note is at most 200 characters, got %',
            char_length(p_note) USING ERRCODE = 'PKQ20';
    END IF;
    UPDATE postkit_queue.jobs j
    SET progress = p_fraction, progress_note = p_note, progress_at = postkit_queue.clock()
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j.state, j.worker_id, j.claim_token, p_worker_id,
                                    p_claim_token);
    RETURN FOUND;
END
$$;

-- tick_timeouts: return expired claims to the queue, or dead-letter them when their attempts
-- are spent (a job whose worker crashes every time must not loop forever). Any number of
-- tickers may run at once: SKIP LOCKED hands each expired row to exactly one of them, and a
-- row an ack is settling right now is left to that ack. Returns one row per job it settled:
-- rescued (pending again) or dead_lettered.
-- access: worker
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

    -- A range scan of jobs_deadline_idx; SKIP LOCKED hands each expired
    -- row to one ticker and leaves a row an ack is settling to that ack.
    FOR v_job IN
        SELECT * FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.state = 'running' AND j.visible_until < v_now
        ORDER BY j.visible_until
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        v_errors := v_job.errors || postkit_queue.error_entry(
            v_job.attempts, v_job.worker_id, 'timeout',
            format('visibility timeout expired: the claim of %s ended at %s without ack, nack '
                   'or fail (attempt %s of %s)',
                   coalesce(v_job.worker_id, 'an unnamed worker'), v_job.visible_until,
                   v_job.attempts, v_job.max_attempts),
            v_now);
        job_id := v_job.id;
        IF v_job.attempts >= v_job.max_attempts THEN
            PERFORM postkit_queue.bury(p_namespace, v_job.id, 'timed_out', v_errors, v_now);
            outcome := 'dead_lettered';
        ELSE
            UPDATE postkit_queue.jobs
            SET state = 'pending', run_at = v_now, errors = v_errors,
                worker_id = NULL, claim_token = NULL, claimed_at = NULL, visible_until = NULL,
                progress = NULL, progress_note = NULL, progress_at = NULL
            WHERE namespace = p_namespace AND id = v_job.id;
            PERFORM postkit_queue.notify(p_namespace, v_job.queue);
            PERFORM postkit_queue.record_outcomes(
                p_namespace, 'rescued', v_now, ARRAY[v_job.queue], ARRAY[v_job.attempts]);
            outcome := 'rescued';
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Reads.
-- ---------------------------------------------------------------------------------------------

-- get_job: one live job (pending, running or waiting), a dead-lettered one (state 'dead') or a
-- cancelled one (state 'cancelled', failed_at its cancel). No row: unknown or completed.
-- depends_on: its parents; waiting_on: how many of them have not completed (waiting only);
-- progress, progress_note, progress_at: what its handler last reported (report_progress).
-- claim_expired: the job is running past its claim's deadline by the queue's clock, so no
-- worker holds it any more (its worker died, or is late with a heartbeat); it stays 'running'
-- until a tick_timeouts of the namespace (any worker's, or `postkit tick`) returns it to the
-- queue or dead-letters it.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.get_job(p_namespace text, p_job_id bigint)
RETURNS TABLE (
    namespace text, id bigint, queue text, state text, payload jsonb, priority smallint,
    run_at timestamptz, attempts integer, max_attempts integer, unique_key text,
    worker_id text, claim_token uuid, claimed_at timestamptz, visible_until timestamptz,
    errors jsonb, created_at timestamptz, failed_at timestamptz, trace_context jsonb,
    group_key text, claim_expired boolean, depends_on bigint[], waiting_on integer,
    progress float8, progress_note text, progress_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    -- Three primary-key lookups: a job is in at most one of the three tables.
    RETURN QUERY
    SELECT j.namespace, j.id, j.queue, j.state::text, j.payload, j.priority, j.run_at, j.attempts,
           j.max_attempts, j.unique_key, j.worker_id, j.claim_token, j.claimed_at,
           j.visible_until, j.errors, j.created_at, NULL::timestamptz, j.trace_context,
           j.group_key,
           j.state = 'running' AND j.visible_until <= postkit_queue.clock(), j.depends_on,
           j.waiting_on, j.progress, j.progress_note, j.progress_at
    FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
    UNION ALL
    SELECT d.namespace, d.job_id, d.queue, 'dead', d.payload, d.priority, NULL, d.attempts,
           d.max_attempts, d.unique_key, d.worker_id, NULL, NULL, NULL, d.errors, d.created_at,
           d.failed_at, d.trace_context, d.group_key, false, NULL, NULL, NULL, NULL, NULL
    FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace AND d.job_id = p_job_id
    UNION ALL
    SELECT c.namespace, c.job_id, c.queue, 'cancelled', c.payload, c.priority, NULL, c.attempts,
           c.attempts, NULL, NULL, NULL, NULL, NULL, '[]'::jsonb, c.created_at, c.cancelled_at,
           NULL, NULL, false, c.depends_on, NULL, NULL, NULL, NULL
    FROM postkit_queue.cancelled_jobs c
    WHERE c.namespace = p_namespace AND c.job_id = p_job_id;
END
$$;

-- job_result: what became of a job, for whoever waits on it: one row, always. Its state is
-- 'pending', 'scheduled', 'running' or 'waiting' while it is live (not finished); 'completed', with the
-- result its ack kept (NULL: none was given), while its queue keeps results (retain_results),
-- or without one while it keeps completed jobs (retain_completed); 'dead' as a dead letter,
-- with its last error and why it was dead-lettered; 'cancelled', with why (reason: 'cancelled'
-- by an operator, or 'parent 17 was dead-lettered'); 'unknown' when nothing is known: never
-- pushed (or in another namespace), completed in a queue that keeps neither, purged, or
-- pruned. finished_at is when it completed, was dead-lettered or cancelled, expires_at when
-- retention prunes that record. At most five primary-key probes, in the order a waiter's job
-- moves: the live jobs, the results, the archive of completed jobs, the dead letters, the
-- cancelled jobs (a job that is live, dead or cancelled is in no other of them).
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.job_result(p_namespace text, p_job_id bigint)
RETURNS TABLE (
    job_id bigint, queue text, state text, result jsonb, error text, reason text,
    attempts integer, finished_at timestamptz, expires_at timestamptz, redriven_job_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    IF NOT coalesce(postkit_queue.is_name(p_namespace) AND p_job_id IS NOT NULL, false) THEN
        PERFORM postkit_queue.check_name('namespace', p_namespace, true);
        PERFORM postkit_queue.check_job_id(p_job_id);
    END IF;
    job_id := p_job_id;
    SELECT j.queue,
           CASE WHEN j.state IN ('running', 'waiting') THEN j.state::text
                WHEN j.run_at > postkit_queue.clock() THEN 'scheduled'
                ELSE 'pending' END,
           j.attempts
    INTO queue, state, attempts
    FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id;
    IF FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT r.queue, 'completed', r.result, r.attempts, r.completed_at, r.expires_at
    INTO queue, state, result, attempts, finished_at, expires_at
    FROM postkit_queue.job_results r
    WHERE r.namespace = p_namespace AND r.job_id = p_job_id;
    IF FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT c.queue, 'completed', c.attempts, c.completed_at, c.expires_at
    INTO queue, state, attempts, finished_at, expires_at
    FROM postkit_queue.completed_jobs c
    WHERE c.namespace = p_namespace AND c.job_id = p_job_id;
    IF FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT d.queue, 'dead', d.error, d.reason, d.attempts, d.failed_at, d.expires_at,
           d.redriven_job_id
    INTO queue, state, error, reason, attempts, finished_at, expires_at, redriven_job_id
    FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace AND d.job_id = p_job_id;
    IF FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT c.queue, 'cancelled', c.reason, c.attempts, c.cancelled_at, c.expires_at
    INTO queue, state, reason, attempts, finished_at, expires_at
    FROM postkit_queue.cancelled_jobs c
    WHERE c.namespace = p_namespace AND c.job_id = p_job_id;
    IF NOT FOUND THEN
        state := 'unknown';
    END IF;
    RETURN NEXT;
END
$$;
