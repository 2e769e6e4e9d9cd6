-- Workers: which workers and tickers run, for operators.
--
-- Each worker (and each `postkit tick`) registers when it starts, heartbeats while it runs, and
-- deregisters when it stops cleanly. One that stops heartbeating (killed, cut off) reads as lost
-- once its last heartbeat is older than three of its own heartbeat intervals, and its row goes
-- once it is older than the retention prune_workers is given. The table holds a row per worker,
-- never one per job: reading the registry costs O(workers of the namespace), whatever the
-- backlog.

-- register_worker: record that a worker (p_kind 'worker') or a ticker ('ticker') runs, with what
-- it serves, and its first heartbeat. Registering again under the same id (a restarted worker
-- that kept its id) replaces the row. One upsert on the primary key.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.register_worker(
    p_namespace          text,
    p_worker_id          text,
    p_kind               text,
    p_host               text,
    p_pid                bigint,
    p_queues             text[],
    p_concurrency        integer,
    p_version            text,
    p_heartbeat_interval interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, true);
    IF p_kind IS NULL OR p_kind NOT IN ('worker', 'ticker') THEN
        RAISE EXCEPTION 'postkit: kind must be worker or ticker, got %', coalesce(p_kind, 'NULL')
            USING ERRCODE = 'PKQ14';
    END IF;
    PERFORM postkit_queue.check_name('host', p_host, true);
    PERFORM postkit_queue.check_name('version', p_version, true);
    -- A bigint, so that a pid out of the column's range is this error rather than a failed
    -- function lookup.
    IF p_pid IS NULL OR p_pid NOT BETWEEN 1 AND 2147483647 THEN
        RAISE EXCEPTION 'postkit: pid must be between 1 and 2147483647, got %',
            coalesce(p_pid::text, 'NULL') USING ERRCODE = 'PKQ14';
    END IF;
    IF p_concurrency IS NULL OR p_concurrency NOT BETWEEN 0 AND 100000 THEN
        RAISE EXCEPTION 'postkit: concurrency must be between 0 and 100000, got %',
            coalesce(p_concurrency::text, 'NULL') USING ERRCODE = 'PKQ14';
    END IF;
    PERFORM postkit_queue.check_queue_names(p_queues);
    IF p_heartbeat_interval IS NULL THEN
        RAISE EXCEPTION 'postkit: heartbeat_interval must not be null' USING ERRCODE = 'PKQ05';
    END IF;
    PERFORM postkit_queue.check_duration('heartbeat_interval', p_heartbeat_interval, false,
                                         interval '1 day');
    INSERT INTO postkit_queue.workers AS w (
        namespace, worker_id, kind, host, pid, queues, concurrency, version,
        heartbeat_interval, started_at, heartbeat_at)
    VALUES (p_namespace, p_worker_id, p_kind, p_host, p_pid, p_queues, p_concurrency, p_version,
            p_heartbeat_interval, v_now, v_now)
    ON CONFLICT (namespace, worker_id) DO UPDATE
    SET kind = EXCLUDED.kind, host = EXCLUDED.host, pid = EXCLUDED.pid,
        queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency,
        version = EXCLUDED.version, heartbeat_interval = EXCLUDED.heartbeat_interval,
        started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at;
END
$$;

-- worker_heartbeat: the worker is alive. False when its row is gone (pruned while the worker
-- was cut off for longer than the retention): the worker registers again. One primary-key
-- update.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.worker_heartbeat(p_namespace text, p_worker_id text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, true);
    UPDATE postkit_queue.workers w SET heartbeat_at = postkit_queue.clock()
    WHERE w.namespace = p_namespace AND w.worker_id = p_worker_id;
    RETURN FOUND;
END
$$;

-- deregister_worker: the worker stopped cleanly. False when it was not registered.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.deregister_worker(p_namespace text, p_worker_id text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('worker_id', p_worker_id, true);
    DELETE FROM postkit_queue.workers w
    WHERE w.namespace = p_namespace AND w.worker_id = p_worker_id;
    RETURN FOUND;
END
$$;

-- workers: the registry of a namespace, oldest start first; lost marks a worker whose last
-- heartbeat is older than three of its heartbeat intervals. A range scan of the primary key.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.workers(p_namespace text)
RETURNS TABLE (
    worker_id text, kind text, host text, pid integer, queues text[], concurrency integer,
    version text, heartbeat_interval interval, started_at timestamptz,
    heartbeat_at timestamptz, lost boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    RETURN QUERY
    SELECT w.worker_id, w.kind, w.host, w.pid, w.queues, w.concurrency, w.version,
           w.heartbeat_interval, w.started_at, w.heartbeat_at,
           w.heartbeat_at < postkit_queue.clock() - 3 * w.heartbeat_interval
    FROM postkit_queue.workers w
    WHERE w.namespace = p_namespace
    ORDER BY w.started_at, w.worker_id;
END
$$;

-- running_jobs: what the namespace's workers run now: each running job's id, queue, worker,
-- attempt and claim, soonest deadline first, up to p_limit; running_for is how long ago it was
-- claimed, by the queue's clock. A range scan of jobs_deadline_idx: the running rows alone,
-- as many as the workers' slots, whatever the backlog. It reads no payload.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.running_jobs(p_namespace text, p_limit integer DEFAULT 1000)
RETURNS TABLE (
    id bigint, queue text, worker_id text, attempts integer, max_attempts integer,
    claimed_at timestamptz, visible_until timestamptz, running_for interval)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    RETURN QUERY
    SELECT j.id, j.queue, j.worker_id, j.attempts, j.max_attempts, j.claimed_at,
           j.visible_until, v_now - j.claimed_at
    FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.state = 'running'
    ORDER BY j.visible_until, j.id
    LIMIT p_limit;
END
$$;

-- prune_workers: delete the rows of the namespace's lost workers whose last heartbeat is older
-- than p_older_than. Never a worker that is not lost, whatever p_older_than: a short retention
-- (zero, or less than a slow worker's three heartbeat intervals) must not forget workers that
-- run. Returns how many went.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.prune_workers(
    p_namespace text, p_older_than interval DEFAULT interval '1 day')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_deleted bigint;
    v_now     timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF p_older_than IS NULL THEN
        RAISE EXCEPTION 'postkit: older_than must not be null' USING ERRCODE = 'PKQ05';
    END IF;
    PERFORM postkit_queue.check_duration('older_than', p_older_than, true, interval '3650 days');
    -- Lost for three heartbeats as the difference of two timestamps, which is IMMUTABLE:
    -- Citus refuses a STABLE operator over a column in a modification, and timestamptz minus
    -- an interval is STABLE (it reads the time zone). v_now - p_older_than, over no column,
    -- Citus computes once, before it sends the DELETE.
    DELETE FROM postkit_queue.workers w
    WHERE w.namespace = p_namespace
      AND w.heartbeat_at < v_now - p_older_than
      AND v_now - w.heartbeat_at > 3 * w.heartbeat_interval;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;
