-- Batches: many jobs per call.
--
-- The batch calls: push many jobs of one queue, claim from several queues, acknowledge many
-- claims all or nothing. Each is one function with the locks and fences of its single-job twin
-- in lifecycle.sql.

-- push_batch: push many jobs to one queue in one call: one INSERT, one notification. Payloads
-- arrive as one JSON array; unique keys, if given, as an array of the same length (NULL
-- entries: no key). Returns one row per payload, in order: its new id, or NULL when its
-- unique key matched a live job (or an earlier payload of the same batch). The checks make one
-- pass over the keys and one over the payload sizes (the per-entry checks run only to name the
-- offending entry), and the identity sequence is looked up once per call. Trace contexts, if
-- given, arrive as one JSON array of the same length: each entry a trace context (as push
-- takes it) or null (none), so a batch may carry the contexts of several producers. Group
-- keys (push's group_key), if given, as an array of the same length (NULL entries: no group).
-- Parents (push's depends_on), if given, as one JSON array of the same length: each entry an
-- array of job ids, or null (none). A batch with parents pushes each job as push does, one
-- after another, since each locks its own parents (dependencies.sql).
--
-- A batch without unique keys takes a plain multi-row INSERT: ON CONFLICT's speculative
-- insertion (insert, check against jobs_unique_key_idx, confirm with a WAL record of its own)
-- cost about 1.5 ms of the 9 ms a 1,000-payload batch took on the 2-core benchmark machine.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.push_batch(
    p_namespace    text,
    p_queue        text,
    p_payloads     jsonb,
    p_delay        interval DEFAULT NULL,
    p_priority     integer  DEFAULT 0,
    p_max_attempts integer  DEFAULT NULL,
    p_unique_keys  text[]   DEFAULT NULL,
    p_trace_contexts jsonb  DEFAULT NULL,
    p_group_keys   text[]   DEFAULT NULL,
    p_depends_on   jsonb    DEFAULT NULL,
    p_wait_for_room interval DEFAULT NULL)
RETURNS TABLE (ordinality bigint, id bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
-- Planned once per session, as the other hot paths. Its INSERT ... SELECT of many rows is not
-- a statement Citus routes with the namespace unbound: distribute_on_citus (citus.sql) gives
-- it custom plans there, a cost this server does not pay (docs/scaling.md).
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
    v_entry    record;
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
    -- Group keys pair with payloads by position just as unique keys do.
    PERFORM postkit_queue.check_array('group_keys', p_group_keys, true, 'PKQ01');
    IF p_group_keys IS NOT NULL
       AND cardinality(p_group_keys) <> jsonb_array_length(p_payloads) THEN
        RAISE EXCEPTION 'postkit: % group keys for % payloads', cardinality(p_group_keys),
            jsonb_array_length(p_payloads) USING ERRCODE = 'PKQ01';
    END IF;
    IF EXISTS (SELECT FROM unnest(p_group_keys) AS k
               WHERE k IS NOT NULL AND NOT coalesce(postkit_queue.is_name(k), false)) THEN
        PERFORM postkit_queue.check_name('group_key', k, false) FROM unnest(p_group_keys) AS k;
    END IF;
    IF p_trace_contexts IS NOT NULL AND (jsonb_typeof(p_trace_contexts) <> 'array'
       OR jsonb_array_length(p_trace_contexts) <> jsonb_array_length(p_payloads)) THEN
        RAISE EXCEPTION 'postkit: trace_contexts must be a JSON array of one entry (a trace '
                        'context or null) per payload, got a JSON % for % payloads',
            CASE jsonb_typeof(p_trace_contexts)
                WHEN 'array' THEN 'array of ' || jsonb_array_length(p_trace_contexts)
                ELSE jsonb_typeof(p_trace_contexts) END,
            jsonb_array_length(p_payloads) USING ERRCODE = 'PKQ15';
    END IF;
    -- One pass over the contexts; check_trace_context names the first bad entry.
    IF EXISTS (SELECT FROM jsonb_array_elements(p_trace_contexts) AS t
               WHERE jsonb_typeof(t.value) <> 'null'
                 AND NOT coalesce(postkit_queue.is_trace_context(t.value), false)) THEN
        PERFORM postkit_queue.check_trace_context(format('trace_contexts[%s]', t.ordinality),
                                                  t.value)
        FROM jsonb_array_elements(p_trace_contexts) WITH ORDINALITY AS t
        WHERE jsonb_typeof(t.value) <> 'null'
        ORDER BY t.ordinality;
    END IF;
    PERFORM postkit_queue.check_priority(p_priority);
    PERFORM postkit_queue.check_max_attempts(p_max_attempts);
    PERFORM postkit_queue.check_duration('delay', p_delay, true, interval '3650 days');
    PERFORM postkit_queue.check_duration('wait_for_room', p_wait_for_room, true, interval '1 hour');
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
    PERFORM postkit_queue.check_room(
        p_namespace, p_queue, v_policy.max_pending, jsonb_array_length(p_payloads),
        p_wait_for_room);

    IF p_depends_on IS NOT NULL THEN
        IF jsonb_typeof(p_depends_on) <> 'array'
           OR jsonb_array_length(p_depends_on) <> jsonb_array_length(p_payloads) THEN
            RAISE EXCEPTION 'postkit: depends_on must be a JSON array of one entry (a list of '
                            'job ids, or null) per payload' USING ERRCODE = 'PKQ19';
        END IF;
        FOR v_entry IN
            SELECT e.ordinality, e.payload, nullif(e.trace_context, 'null') AS trace_context,
                   postkit_queue.parent_ids(format('depends_on[%s]', e.ordinality), e.parents)
                       AS parents
            FROM ROWS FROM (jsonb_array_elements(p_payloads),
                            jsonb_array_elements(p_trace_contexts),
                            jsonb_array_elements(p_depends_on))
                 WITH ORDINALITY AS e(payload, trace_context, parents, ordinality)
            ORDER BY e.ordinality
        LOOP
            ordinality := v_entry.ordinality;
            id := postkit_queue.push(
                p_namespace, p_queue, v_entry.payload, p_delay, p_priority, p_max_attempts,
                p_unique_keys[v_entry.ordinality], NULL, NULL, v_entry.trace_context,
                p_group_keys[v_entry.ordinality], v_entry.parents);
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;
    IF p_unique_keys IS NULL THEN
        -- No keys, so nothing to deduplicate: a plain multi-row INSERT. ON CONFLICT would
        -- insert every row speculatively (and log its confirmation) only to find that the
        -- arbiter index's predicate leaves it out. Each payload still takes its id from the
        -- identity sequence up front, in payload order, and the result reads those ids back
        -- without a RETURNING to join against. ROWS FROM pairs each payload with its trace
        -- context by position (none at all: every context NULL).
        RETURN QUERY
        WITH input AS (
            SELECT e.ordinality, e.payload, nullif(e.trace_context, 'null') AS trace_context,
                   nextval(v_sequence) AS id
            FROM ROWS FROM (jsonb_array_elements(p_payloads),
                            jsonb_array_elements(p_trace_contexts))
                 WITH ORDINALITY AS e(payload, trace_context, ordinality)
        ), inserted AS (
            INSERT INTO postkit_queue.jobs AS j (
                id, namespace, queue, payload, priority, run_at, max_attempts, created_at,
                trace_context, group_key)
            OVERRIDING SYSTEM VALUE
            SELECT i.id, p_namespace, p_queue, i.payload, p_priority,
                   v_now + coalesce(p_delay, interval '0'), v_attempts, v_now, i.trace_context,
                   p_group_keys[i.ordinality]
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
            SELECT e.ordinality, e.payload, p_unique_keys[e.ordinality] AS unique_key,
                   nullif(e.trace_context, 'null') AS trace_context, nextval(v_sequence) AS id
            FROM ROWS FROM (jsonb_array_elements(p_payloads),
                            jsonb_array_elements(p_trace_contexts))
                 WITH ORDINALITY AS e(payload, trace_context, ordinality)
        ), inserted AS (
            INSERT INTO postkit_queue.jobs AS j (
                id, namespace, queue, payload, priority, run_at, max_attempts, unique_key,
                created_at, trace_context, group_key)
            OVERRIDING SYSTEM VALUE
            SELECT i.id, p_namespace, p_queue, i.payload, p_priority,
                   v_now + coalesce(p_delay, interval '0'), v_attempts, i.unique_key, v_now,
                   i.trace_context, p_group_keys[i.ordinality]
            FROM input i
            ORDER BY i.ordinality
            ON CONFLICT (namespace, queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id
        )
        SELECT i.ordinality, inserted.id
        FROM input i LEFT JOIN inserted ON inserted.id = i.id
        ORDER BY i.ordinality;
    END IF;
    -- One waiting worker per job, in a queue whose limit holds its workers back.
    PERFORM postkit_queue.notify(p_namespace, p_queue,
                                 p_wake => jsonb_array_length(p_payloads));
END
$$;

-- pull_any: claim up to p_limit jobs from several queues. Without p_weights it empties them in
-- the order given: the first queue is emptied before the second is tried. With p_weights (one
-- per queue, 1 to 1000) the queues share the claim by weight, whatever their order in the list:
--   * Each call tries the queues in a weighted random order (each queue's key is
--     random() ^ (1 / weight), highest first), so a queue of weight 3 comes first three times
--     as often as one of weight 1. It keeps no state between calls: a client in any language,
--     on any connection, gets the same shares, as Sidekiq's weighted queues do.
--   * Of the claim's p_limit jobs, each queue may first take its part, limit * weight / total,
--     rounded down; the jobs that rounding leaves go one each to the first queues in the order.
--     A claim of 4 from weights 3 and 1 takes 3 and 1; a claim of 1 takes its job from one
--     queue, chosen by weight.
--   * Work conserving: what a queue leaves of its part (it has fewer ready jobs) goes to the
--     others, in the same order, in a second pass over the queues that gave their whole part.
-- The claims of a queue with flow limits take turns on its flow_state row until the
-- transaction ends (flow.sql), so pull_any takes the turns of the listed queues with limits
-- first, all of them and in one order (by name): two callers listing such queues in opposite
-- orders would otherwise each hold one turn and wait for the other's. A queue whose only limit
-- is fair takes no turn: its claims overlap (fair.sql). A queue whose row does not exist yet
-- (its settings written by hand) takes its turn when it is pulled.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.pull_any(
    p_namespace          text,
    p_queues             text[],
    p_worker_id          text      DEFAULT NULL,
    p_visibility_timeout interval  DEFAULT NULL,
    p_limit              integer   DEFAULT 1,
    p_weights            integer[] DEFAULT NULL)
RETURNS SETOF postkit_queue.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_order   text[] := p_queues;  -- the queues in the order this call tries them
    v_weights integer[];           -- their weights, in that order
    v_part    integer[];           -- what each may take in the first pass, in that order
    v_short   boolean[];           -- it gave less than its part: it has no more to give now
    v_bad     integer;             -- a weight out of bounds
    v_total   integer;
    v_left    integer;
    v_claimed integer := 0;
    v_got     integer;
BEGIN
    IF p_queues IS NULL OR cardinality(p_queues) = 0 THEN
        RAISE EXCEPTION 'postkit: queues must name at least one queue' USING ERRCODE = 'PKQ01';
    END IF;
    PERFORM postkit_queue.check_array('queues', p_queues, false, 'PKQ01');
    PERFORM postkit_queue.check_limit(p_limit, 1000);
    IF p_weights IS NOT NULL THEN
        PERFORM postkit_queue.check_array('weights', p_weights, false, 'PKQ17');
        IF cardinality(p_weights) <> cardinality(p_queues) THEN
            RAISE EXCEPTION 'postkit: weights must hold one weight per queue (% queues, % weights)',
                cardinality(p_queues), cardinality(p_weights) USING ERRCODE = 'PKQ17';
        END IF;
        SELECT w INTO v_bad FROM unnest(p_weights) AS w WHERE w NOT BETWEEN 1 AND 1000 LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'postkit: a queue''s weight must be between 1 and 1000, got %', v_bad
                USING ERRCODE = 'PKQ17';
        END IF;
        -- The weighted random order: the keys are drawn in a subquery of their own, which the
        -- planner keeps apart (its target list is volatile), so that both arrays follow one
        -- draw per queue.
        SELECT array_agg(r.queue ORDER BY r.draw DESC, r.n),
               array_agg(r.weight ORDER BY r.draw DESC, r.n)
        INTO v_order, v_weights
        FROM (SELECT u.queue, u.weight, u.n,
                     pg_catalog.power(pg_catalog.random(), 1.0 / u.weight) AS draw
              FROM unnest(p_queues, p_weights) WITH ORDINALITY AS u(queue, weight, n)) r;
        v_total := (SELECT sum(w) FROM unnest(v_weights) AS w);
        SELECT array_agg((p_limit::bigint * w / v_total)::integer ORDER BY n)
        INTO v_part
        FROM unnest(v_weights) WITH ORDINALITY AS u(w, n);
        v_left := p_limit - (SELECT sum(p) FROM unnest(v_part) AS p);
        FOR i IN 1 .. v_left LOOP
            v_part[i] := v_part[i] + 1;
        END LOOP;
    END IF;
    IF cardinality(p_queues) > 1 AND current_setting('transaction_isolation') = 'read committed'
    THEN
        -- (Under another isolation level the claim refuses a limited queue: claim_limited.)
        PERFORM FROM postkit_queue.flow_state f
        JOIN postkit_queue.queue_settings s ON s.namespace = p_namespace AND s.queue = f.queue
        WHERE f.namespace = p_namespace AND f.queue = ANY (p_queues) AND NOT s.paused
          AND (s.concurrency IS NOT NULL OR s.rate_limit IS NOT NULL
               OR s.group_concurrency IS NOT NULL OR s.group_ordered)
        ORDER BY f.queue
        FOR UPDATE OF f;
    END IF;
    IF v_part IS NOT NULL THEN
        -- The first pass: each queue its part. A queue that gave less has no more to give now,
        -- and the second pass passes it over.
        FOR i IN 1 .. cardinality(v_order) LOOP
            v_short[i] := false;
            CONTINUE WHEN v_part[i] = 0;
            RETURN QUERY
            SELECT * FROM postkit_queue.pull(
                p_namespace, v_order[i], p_worker_id, p_visibility_timeout, v_part[i]);
            GET DIAGNOSTICS v_got = ROW_COUNT;
            v_claimed := v_claimed + v_got;
            v_short[i] := v_got < v_part[i];
        END LOOP;
    END IF;
    -- Without weights, the only pass; with them, the second, over what the first left.
    FOR i IN 1 .. cardinality(v_order) LOOP
        EXIT WHEN v_claimed >= p_limit;
        CONTINUE WHEN v_short[i];
        RETURN QUERY
        SELECT * FROM postkit_queue.pull(
            p_namespace, v_order[i], p_worker_id, p_visibility_timeout, p_limit - v_claimed);
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_claimed := v_claimed + v_got;
    END LOOP;
END
$$;

-- ack_batch: acknowledge many claims at once, all or nothing. Every job must still be held by
-- the caller (its claim token matches, pairwise); then all are acknowledged and it returns
-- true. If any claim is stale, nothing changes and it returns false. Rows are locked in id
-- order, so two overlapping batches cannot deadlock.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.ack_batch(
    p_namespace text, p_job_ids bigint[], p_claim_tokens uuid[], p_worker_id text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_held integer;
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
          AND postkit_queue.holds_claim(j.state, j.worker_id, j.claim_token, p_worker_id,
                                        c.token)
        ORDER BY j.id
        FOR UPDATE OF j) held;
    IF v_held <> cardinality(p_job_ids) THEN
        RETURN false;
    END IF;
    -- Every claim is held and its row locked: the settle is ack_many's, which finds each row
    -- by its id and the token just checked.
    PERFORM postkit_queue.ack_many(p_namespace, p_job_ids, p_claim_tokens);
    RETURN true;
END
$$;
