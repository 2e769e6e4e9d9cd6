-- Postkit queue, migration 14: a queue purge deletes what its prompt counted, and every purge
-- checks for operator access.
--
-- `postkit queue purge` counted a queue's waiting jobs, asked, then called purge_queue, which
-- deleted every waiting job, those pushed while the operator read the prompt included. Now the
-- command reads one cutoff from the queue's clock, counts the jobs created by then, and
-- deletes only those: the jobs pushed after the cutoff stay, and the count shown is the most
-- that can go (fewer when a worker claims some meanwhile).

-- purge_queue_before: delete (or, with p_dry_run, count) the pending and scheduled jobs of a
-- queue created at or before p_created_before. Running jobs are left to their workers. One
-- range scan of jobs_pull_idx (namespace, queue, ...) WHERE state = 'pending'; SKIP LOCKED
-- steps over a job a puller is claiming, which is about to run anyway.
CREATE FUNCTION postkit_queue.purge_queue_before(
    p_namespace      text,
    p_queue          text,
    p_created_before timestamptz,
    p_dry_run        boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
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
    DELETE FROM postkit_queue.jobs j
    WHERE (j.namespace, j.id) IN (
        SELECT p.namespace, p.id FROM postkit_queue.jobs p
        WHERE p.namespace = p_namespace AND p.queue = p_queue AND p.state = 'pending'
          AND p.created_at <= p_created_before
        FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

-- The dead-letter purges check for operator access too, as cancel and the queue purges do: an
-- EXECUTE granted by hand is not enough to destroy jobs or dead letters.
CREATE OR REPLACE FUNCTION postkit_queue.purge_dead_letters(
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
    PERFORM postkit_queue.require_operator('purge dead letters');
    DELETE FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace AND (p_queue IS NULL OR d.queue = p_queue)
      AND d.failed_at < postkit_queue.clock() - p_older_than;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

CREATE OR REPLACE FUNCTION postkit_queue.purge_dead_letters_before(
    p_namespace text, p_failed_before timestamptz, p_queue text DEFAULT NULL)
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
    PERFORM postkit_queue.require_operator('purge dead letters');
    -- The same predicate as dead_letters' p_failed_before.
    DELETE FROM postkit_queue.dead_letters d
    WHERE d.namespace = p_namespace AND (p_queue IS NULL OR d.queue = p_queue)
      AND d.failed_at < p_failed_before;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- An operator's call (migration 9's API registry).
INSERT INTO postkit_queue.api (name, access) VALUES ('purge_queue_before', 'operator');
