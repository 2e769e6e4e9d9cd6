-- Postkit queue, migration 1: the jobs table, the dead-letter table and the state machine.
--
-- Lifecycle of a job:
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
-- Every state change is one function below. Each one takes the namespace first, validates its
-- input before it writes, takes the row lock it needs and checks the claim (the fence), so a
-- client in any language gets the same guarantees. Every value arrives as a parameter; no
-- function builds SQL from strings.
--
-- Errors raised here use SQLSTATEs of the class 'PKQ'. Each one maps to one Python exception in
-- postkit.errors (tests/test_errors.py keeps the two lists in step).

-- The clock every function reads. statement_timestamp() is stable within a statement and, unlike
-- now(), does not freeze at the start of a long caller transaction. A test session may shift it
-- with SET postkit_queue.clock_offset = '10 minutes' to exercise timeouts without sleeping.
CREATE FUNCTION postkit_queue.clock() RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT statement_timestamp()
         + coalesce(nullif(current_setting('postkit_queue.clock_offset', true), '')::interval,
                    interval '0')
$$;

CREATE TABLE postkit_queue.jobs (
    namespace     text        NOT NULL,
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    queue         text        NOT NULL,
    -- Only live jobs are stored here: 'pending' (waiting for run_at) or 'running' (claimed).
    -- Completed jobs are deleted and dead ones move to dead_letters, so the table the workers
    -- scan holds the backlog and nothing else.
    state         text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running')),
    payload       jsonb       NOT NULL,
    priority      smallint    NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL CHECK (max_attempts >= 1),
    unique_key    text,
    -- The claim. worker_id is the name the claimant gave; claim_token is new for every claim and
    -- is the fence: a stale worker holding an older token can never settle a newer attempt.
    worker_id     text,
    claim_token   uuid,
    claimed_at    timestamptz,
    visible_until timestamptz,
    -- Per-job retry policy; NULL means the queue's setting, then the built-in default.
    backoff_base  interval,
    backoff_cap   interval,
    -- One entry per failed attempt: {"attempt", "kind", "error", "worker_id", "at"}.
    errors        jsonb       NOT NULL DEFAULT '[]',
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (namespace, id),
    CHECK ((state = 'running') = (claim_token IS NOT NULL AND visible_until IS NOT NULL))
) WITH (
    -- Free space on each page, for the new row versions that claims and retries write.
    fillfactor = 70,
    -- The table churns: every job is inserted, updated and deleted within seconds. Vacuum and
    -- analyze it after 1-2% of it changed instead of PostgreSQL's default 20%, so dead index
    -- entries are cleared quickly and statistics follow the backlog.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Serves pull: one range scan over the pending rows of one (namespace, queue) in pull order.
-- Partial, so running rows never appear in it and the scan never steps over claimed work.
CREATE INDEX jobs_pull_idx ON postkit_queue.jobs (namespace, queue, priority DESC, run_at, id)
    WHERE state = 'pending';

-- Serves tick_timeouts: the running rows of a namespace, oldest deadline first.
CREATE INDEX jobs_deadline_idx ON postkit_queue.jobs (namespace, visible_until)
    WHERE state = 'running';

-- Serves push's deduplication: at most one live (pending or running) job per unique_key.
-- Completed and dead jobs leave this table, so the key becomes free again.
CREATE UNIQUE INDEX jobs_unique_key_idx ON postkit_queue.jobs (namespace, queue, unique_key)
    WHERE unique_key IS NOT NULL;

CREATE TABLE postkit_queue.dead_letters (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL,
    attempts     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    unique_key   text,
    worker_id    text,        -- the last worker that held the job
    -- 'failed': a worker called fail; 'attempts_exhausted': nack with no attempts left;
    -- 'timed_out': the last claim expired with no attempts left (a poison pill).
    reason       text        NOT NULL CHECK (reason IN ('failed', 'attempts_exhausted', 'timed_out')),
    error        text,        -- the last error, for a quick look
    errors       jsonb       NOT NULL,  -- every attempt's error, oldest first
    created_at   timestamptz NOT NULL,
    failed_at    timestamptz NOT NULL,
    -- When the dead letter may be pruned (the queue's retain_dead after failed_at).
    expires_at   timestamptz NOT NULL,
    -- Set once, when an operator retries the dead letter: the job it became.
    redriven_job_id bigint,
    redriven_at     timestamptz,
    PRIMARY KEY (namespace, job_id)
);

-- Serves dead_letters(): the newest dead letters of a namespace, optionally of one queue.
CREATE INDEX dead_letters_failed_at_idx
    ON postkit_queue.dead_letters (namespace, failed_at DESC, job_id DESC);

-- Serves prune(): the dead letters of a namespace whose retention ran out.
CREATE INDEX dead_letters_expires_at_idx ON postkit_queue.dead_letters (namespace, expires_at);

-- A queue's policy: the defaults its jobs get when the caller does not say, whether it is
-- paused, and how long finished jobs are kept (retain_completed NULL: deleted at once). Every
-- function asks here, so the defaults live in one place; migration 2 lets each queue override
-- them.
CREATE FUNCTION postkit_queue.queue_policy(
    p_namespace text, p_queue text,
    OUT max_attempts integer, OUT visibility_timeout interval,
    OUT backoff_base interval, OUT backoff_cap interval, OUT paused boolean,
    OUT retain_completed interval, OUT retain_dead interval, OUT max_payload_bytes integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 20, interval '30 seconds', interval '1 second', interval '1 hour', false,
           NULL::interval, interval '30 days', 1048576
$$;

-- Called by every state change that ends attempts, with the jobs and their outcome:
-- 'completed' (ack), 'retried' (nack with attempts left), 'rescued' (an expired claim returned
-- to the queue) or 'dead' (dead-lettered). A no-op here; migration 3 keeps statistics and
-- archives completed jobs in it, without touching the state machine. It takes an array so that
-- a batch of acks costs one call.
CREATE FUNCTION postkit_queue.record_outcomes(
    p_jobs postkit_queue.jobs[], p_outcome text, p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Validation. Each check raises before anything is written, with a message a person can act on.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION postkit_queue.check_name(p_what text, p_value text, p_required boolean)
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
    IF btrim(p_value, E' \t\n\r\f\v') = '' THEN  -- btrim alone strips only spaces
        RAISE EXCEPTION 'postkit: % must not be empty or blank', p_what USING ERRCODE = 'PKQ01';
    END IF;
    IF char_length(p_value) > 128 THEN
        RAISE EXCEPTION 'postkit: % is % characters long; the limit is 128',
            p_what, char_length(p_value) USING ERRCODE = 'PKQ01';
    END IF;
END
$$;

-- Durations (visibility timeout, extension, delay, backoff) must be finite, positive (or zero
-- where p_allow_zero) and at most p_max: 12 hours for claims, as in SQS; longer for delays.
CREATE FUNCTION postkit_queue.check_duration(
    p_what text, p_value interval, p_allow_zero boolean, p_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL THEN
        RETURN;
    END IF;
    IF NOT isfinite(p_value) OR p_value > p_max THEN
        RAISE EXCEPTION 'postkit: % of % is too long; the limit is %', p_what, p_value, p_max
            USING ERRCODE = 'PKQ05';
    END IF;
    IF p_value < interval '0' OR (p_value = interval '0' AND NOT p_allow_zero) THEN
        RAISE EXCEPTION 'postkit: % must be %, got %', p_what,
            CASE WHEN p_allow_zero THEN 'zero or positive' ELSE 'positive' END, p_value
            USING ERRCODE = 'PKQ05';
    END IF;
END
$$;

CREATE FUNCTION postkit_queue.check_priority(p_priority integer)
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

CREATE FUNCTION postkit_queue.check_max_attempts(p_max_attempts integer)
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

-- A payload must be there (the JSON value null is fine) and fit the queue's max_payload_bytes
-- (1 MiB unless configured): a runaway payload would bloat the table every worker scans.
-- pg_column_size is the stored size, read without serializing the value.
CREATE FUNCTION postkit_queue.check_payload(p_queue text, p_payload jsonb, p_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'postkit: payload must not be null (use the JSON value null instead)'
            USING ERRCODE = 'PKQ02';
    END IF;
    IF pg_column_size(p_payload) > p_max THEN
        RAISE EXCEPTION 'postkit: the payload is % bytes; queue % takes at most % '
                        '(configure_queue max_payload_bytes)',
            pg_column_size(p_payload), p_queue, p_max USING ERRCODE = 'PKQ02';
    END IF;
END
$$;

CREATE FUNCTION postkit_queue.check_job_id(p_job_id bigint)
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

CREATE FUNCTION postkit_queue.check_limit(p_limit integer, p_max integer)
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

-- Is the caller still the holder of this claim? The claim token decides when the caller has
-- one: it is unique per claim, so a stale first attempt cannot settle a second attempt even
-- when the same worker_id took both. Without a token, the worker_id the caller claimed with
-- decides (NULL matching NULL, for callers that never named themselves).
CREATE FUNCTION postkit_queue.holds_claim(
    p_job postkit_queue.jobs, p_worker_id text, p_claim_token uuid)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p_job.state = 'running'
       AND CASE WHEN p_claim_token IS NOT NULL
                THEN p_job.claim_token = p_claim_token
                     -- IS NOT DISTINCT FROM, not =: a job claimed without a worker_id must not
                     -- make this NULL, which nack and fail would read as "holds the claim".
                     AND (p_worker_id IS NULL OR p_job.worker_id IS NOT DISTINCT FROM p_worker_id)
                ELSE p_job.worker_id IS NOT DISTINCT FROM p_worker_id
           END
$$;

-- One entry of a job's error history.
CREATE FUNCTION postkit_queue.error_entry(
    p_job postkit_queue.jobs, p_kind text, p_error text, p_at timestamptz)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'attempt', p_job.attempts,
        'kind', p_kind,
        -- Errors are capped at 8 KiB so that a runaway traceback cannot bloat the hot table.
        'error', left(p_error, 8192),
        'worker_id', p_job.worker_id,
        'at', p_at)
$$;

-- Move a claimed job, already locked by the caller, to the dead-letter queue.
CREATE FUNCTION postkit_queue.bury(
    p_job postkit_queue.jobs, p_reason text, p_errors jsonb, p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM postkit_queue.jobs WHERE namespace = p_job.namespace AND id = p_job.id;
    INSERT INTO postkit_queue.dead_letters (
        namespace, job_id, queue, payload, priority, attempts, max_attempts, unique_key,
        worker_id, reason, error, errors, created_at, failed_at, expires_at)
    VALUES (
        p_job.namespace, p_job.id, p_job.queue, p_job.payload, p_job.priority, p_job.attempts,
        p_job.max_attempts, p_job.unique_key, p_job.worker_id, p_reason,
        p_errors -> -1 ->> 'error', p_errors, p_job.created_at, p_at,
        p_at + (postkit_queue.queue_policy(p_job.namespace, p_job.queue)).retain_dead);
    PERFORM postkit_queue.record_outcomes(ARRAY[p_job], 'dead', p_at);
END
$$;

-- The LISTEN/NOTIFY channel of one queue: 'postkit_' and an md5 of the namespace and queue, so
-- any names fit PostgreSQL's 63-byte channel limit and a listener hears only its own queues.
CREATE FUNCTION postkit_queue.channel(p_namespace text, p_queue text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'postkit_' || md5(p_namespace || chr(31) || p_queue)
$$;

-- Tell listeners of a queue that a job may be ready, when the current transaction commits.
-- PostgreSQL delivers identical notifications (same channel, same payload) of one transaction
-- once, so a transaction that pushes a thousand jobs to a queue sends one notification and takes
-- the commit-time notify lock once. A session may SET postkit_queue.notify = off (a bulk load,
-- a benchmark of the cost); waiting workers then find the jobs at their next fallback poll.
CREATE FUNCTION postkit_queue.notify(p_namespace text, p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(current_setting('postkit_queue.notify', true), '') <> 'off' THEN
        PERFORM pg_notify(postkit_queue.channel(p_namespace, p_queue), '');
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- The state machine.
-- ---------------------------------------------------------------------------------------------

-- push: add a job. Returns its id, or NULL when unique_key matched a live job (deduplicated).
-- Runs in the caller's transaction, so the job exists exactly when the caller's own writes do.
CREATE FUNCTION postkit_queue.push(
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
AS $$
DECLARE
    v_now    timestamptz := postkit_queue.clock();
    v_id     bigint;
    v_policy record;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_name('unique_key', p_unique_key, false);
    SELECT * INTO v_policy FROM postkit_queue.queue_policy(p_namespace, p_queue);
    PERFORM postkit_queue.check_payload(p_queue, p_payload, v_policy.max_payload_bytes);
    PERFORM postkit_queue.check_priority(p_priority);
    PERFORM postkit_queue.check_max_attempts(p_max_attempts);
    PERFORM postkit_queue.check_duration('delay', p_delay, true, interval '10 years');
    PERFORM postkit_queue.check_duration('backoff_base', p_backoff_base, false, interval '1 day');
    PERFORM postkit_queue.check_duration('backoff_cap', p_backoff_cap, false, interval '30 days');

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

-- pull: claim up to p_limit ready jobs of one queue, highest priority first, then oldest run_at.
-- Every claim counts an attempt and gets a new claim token. The claim is an ordinary row update,
-- so it sticks when the caller commits and never happened if the caller rolls back.
CREATE FUNCTION postkit_queue.pull(
    p_namespace          text,
    p_queue              text,
    p_worker_id          text     DEFAULT NULL,
    p_visibility_timeout interval DEFAULT NULL,
    p_limit              integer  DEFAULT 1)
RETURNS SETOF postkit_queue.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
-- The claim must walk jobs_pull_idx in order whatever the statistics say. For a namespace the
-- planner has no statistics on yet (a new one, or a burst faster than ANALYZE) it would
-- otherwise pick the primary key and sort every pending row of the namespace, on every pull.
-- The index already delivers the order, so a Sort is never the right plan here.
SET enable_sort = off
AS $$
DECLARE
    v_now     timestamptz := postkit_queue.clock();
    v_policy  record;
    v_timeout interval;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
    PERFORM postkit_queue.check_limit(p_limit, 1000);
    SELECT * INTO v_policy FROM postkit_queue.queue_policy(p_namespace, p_queue);
    v_timeout := coalesce(p_visibility_timeout, v_policy.visibility_timeout);
    PERFORM postkit_queue.check_duration('visibility_timeout', v_timeout, false, interval '12 hours');
    IF v_policy.paused THEN
        RETURN;  -- a paused queue hands out nothing; pushes are still accepted
    END IF;

    -- One range scan of jobs_pull_idx. FOR UPDATE SKIP LOCKED steps over rows another
    -- transaction is claiming right now, so concurrent pullers never wait on each other and
    -- never receive the same job; the locked row is re-checked (state still 'pending') before
    -- it is returned.
    RETURN QUERY
    WITH next AS (
        SELECT j.id
        FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace
          AND j.queue = p_queue
          AND j.state = 'pending'
          AND j.run_at <= v_now
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE postkit_queue.jobs j
    SET state         = 'running',
        attempts      = j.attempts + 1,
        worker_id     = p_worker_id,
        claim_token   = gen_random_uuid(),
        claimed_at    = v_now,
        visible_until = v_now + v_timeout
    -- The claimed ids, as one array: primary-key lookups, never a join the planner could turn
    -- into a scan of the table.
    WHERE j.namespace = p_namespace AND j.id = ANY (ARRAY(SELECT next.id FROM next))
    RETURNING j.*;
END
$$;

-- ack: the job succeeded; it leaves the queue. Returns false, and changes nothing, when the
-- caller no longer holds the claim. A claim whose deadline passed still holds until
-- tick_timeouts reclaims it: the work is done and nobody else has the job, so the ack counts.
CREATE FUNCTION postkit_queue.ack(
    p_namespace   text,
    p_job_id      bigint,
    p_worker_id   text DEFAULT NULL,
    p_claim_token uuid DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job postkit_queue.jobs;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
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

-- ack_many: acknowledge many claims in one call and one statement. Each job is fenced on its
-- own claim token; the ones the caller no longer holds are skipped, not an error. Returns the
-- ids acknowledged. A row a ticker or another settle holds is waited for and re-checked, as in
-- ack. Workers batch their acks through this (or ack_and_pull, in queries.sql), which turns a
-- commit per job into a commit per batch.
CREATE FUNCTION postkit_queue.ack_many(
    p_namespace text, p_job_ids bigint[], p_claim_tokens uuid[])
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_done postkit_queue.jobs[];
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF p_job_ids IS NULL OR p_claim_tokens IS NULL
       OR cardinality(p_job_ids) <> cardinality(p_claim_tokens) THEN
        RAISE EXCEPTION 'postkit: ack_many needs one claim token per job id'
            USING ERRCODE = 'PKQ06';
    END IF;
    IF cardinality(p_job_ids) = 0 THEN
        RETURN '{}';
    END IF;
    -- Primary-key lookups for the listed ids; a row is acknowledged when its current claim
    -- token is one of the tokens given. Tokens are unique per claim, so a token can only match
    -- the claim it was issued for, and a stale claim listed beside the current one of the same
    -- job cannot hide it. A matching token implies a running job (the table's CHECK ties
    -- claim_token to state 'running'); saying state = 'running' here as well would invite the
    -- planner to scan every running row through jobs_deadline_idx instead.
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

-- nack: a temporary failure. With attempts left the job returns to pending after an
-- exponential backoff with jitter: base * 2^(attempt - 1) * (1 + random()), capped, so the first
-- retry comes after 1-2 s by default and the delay doubles up to 1 hour. p_backoff overrides
-- the computed delay. With no attempts left the job is dead-lettered.
-- Returns 'retried', 'dead_lettered', or 'stale' (the caller no longer holds the claim).
CREATE FUNCTION postkit_queue.nack(
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

-- fail: a permanent failure. The job moves to the dead-letter queue at once, with its payload
-- and its whole error history. Returns false when the caller no longer holds the claim.
CREATE FUNCTION postkit_queue.fail(
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

-- extend_visibility: a slow but healthy worker keeps its claim. The deadline becomes
-- now + p_extension, never earlier than it already was, so a heartbeat every third of the
-- timeout keeps a job forever while a dead worker's job expires within one timeout.
CREATE FUNCTION postkit_queue.extend_visibility(
    p_namespace   text,
    p_job_id      bigint,
    p_extension   interval,
    p_worker_id   text DEFAULT NULL,
    p_claim_token uuid DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, false);
    IF p_extension IS NULL THEN
        RAISE EXCEPTION 'postkit: extension must not be null' USING ERRCODE = 'PKQ05';
    END IF;
    PERFORM postkit_queue.check_duration('extension', p_extension, false, interval '12 hours');

    UPDATE postkit_queue.jobs j
    SET visible_until = greatest(j.visible_until, v_now + p_extension)
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j, p_worker_id, p_claim_token);
    RETURN FOUND;
END
$$;

-- release: give a claimed job back at once without spending an attempt, for a worker that is
-- shutting down before it could run the job. Returns false when the caller no longer holds
-- the claim.
CREATE FUNCTION postkit_queue.release(
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

-- tick_timeouts: return expired claims to the queue, or dead-letter them when their attempts
-- are spent (a job whose worker crashes every time must not loop forever). Any number of
-- tickers may run at once: SKIP LOCKED hands each expired row to exactly one of them, and a
-- row an ack is settling right now is left to that ack. Returns one row per reclaimed job.
CREATE FUNCTION postkit_queue.tick_timeouts(p_namespace text, p_limit integer DEFAULT 1000)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_sort = off  -- read expired claims off jobs_deadline_idx in order, as in pull
AS $$
DECLARE
    v_now    timestamptz := postkit_queue.clock();
    v_job    postkit_queue.jobs;
    v_errors jsonb;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_limit(p_limit, 100000);

    -- Range scan of jobs_deadline_idx; the lock re-checks state and deadline on the live row.
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

-- ---------------------------------------------------------------------------------------------
-- Reads.
-- ---------------------------------------------------------------------------------------------

-- get_job: one live job, or a dead-lettered one (state 'dead'). No row: unknown or completed.
CREATE FUNCTION postkit_queue.get_job(p_namespace text, p_job_id bigint)
RETURNS TABLE (
    namespace text, id bigint, queue text, state text, payload jsonb, priority smallint,
    run_at timestamptz, attempts integer, max_attempts integer, unique_key text,
    worker_id text, claim_token uuid, claimed_at timestamptz, visible_until timestamptz,
    errors jsonb, created_at timestamptz, failed_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    -- Two primary-key lookups: a job is in exactly one of the two tables.
    RETURN QUERY
    SELECT j.namespace, j.id, j.queue, j.state, j.payload, j.priority, j.run_at, j.attempts,
           j.max_attempts, j.unique_key, j.worker_id, j.claim_token, j.claimed_at,
           j.visible_until, j.errors, j.created_at, NULL::timestamptz
    FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id
    UNION ALL
    SELECT d.namespace, d.job_id, d.queue, 'dead', d.payload, d.priority, NULL, d.attempts,
           d.max_attempts, d.unique_key, d.worker_id, NULL, NULL, NULL, d.errors, d.created_at,
           d.failed_at
    FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace AND d.job_id = p_job_id;
END
$$;

-- next_run_at: when the earliest pending job of these queues falls due (NULL: none pending).
-- A waiting worker sleeps no longer than this. For each queue, a skip scan of jobs_pull_idx
-- over its distinct priorities, and within each priority the first entry (the index is ordered
-- by run_at there): a few index probes however long the backlog, never a scan of it.
CREATE FUNCTION postkit_queue.next_run_at(p_namespace text, p_queues text[])
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
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
    WHERE p.priority IS NOT NULL
$$;

-- dead_letters: the newest dead letters of a namespace, newest first, filtered by queue, by
-- when they failed and by a substring of their last error (case-insensitive). Redriven ones are
-- left out unless p_include_redriven. Keyset pagination: pass the failed_at and job_id of the
-- last row of a page to get the next one.
CREATE FUNCTION postkit_queue.dead_letters(
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
