-- Postkit queue, migration 8: push_batch without unique keys inserts without ON CONFLICT.
--
-- Most batches carry no unique keys, yet every row went through ON CONFLICT's speculative
-- insertion: inserted, checked against jobs_unique_key_idx (whose predicate leaves a row
-- without a key out), then confirmed with a WAL record of its own; and the per-payload result
-- joined RETURNING back to the input. For 1,000 payloads that was about 1.5 ms of the 9 ms the
-- statement took on the 2-core benchmark machine (best of 60 calls, each rolled back). A batch
-- without keys now takes a plain multi-row INSERT; a batch with keys is unchanged. Checks,
-- results and the one notification are as before.

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
