-- Workflows: a run is a job whose handler goes through named steps, each recorded once.
--
--     claim ──> replay the recorded steps (workflow_steps) ──> run the next one ──record_step──┐
--       ^                                                                                      │
--       └────────── a retry, a rescue or a restart replays; a recorded step never runs again ─┘
--
-- - A run is an ordinary job: claimed, fenced by its claim token, retried with backoff,
--   dead-lettered, cancelled and isolated by namespace by the rules of lifecycle.sql.
-- - record_step checkpoints step p_position of the run, in the caller's transaction, fenced by
--   the claim as an ack is: a caller whose claim went stale (rescued, cancelled, settled)
--   records nothing, and its transaction's other writes, which it rolls back then, never
--   commit. A step recorded in the transaction that made its database writes (a transactional
--   step) therefore commits exactly once; any other step may run again if its process dies
--   between running it and its checkpoint's commit (at least once).
-- - Steps are recorded in order, 0, 1, 2...: a step recorded at a position already taken is
--   refused (PKQ21), so that two transactions of one claim can never both commit a step, and
--   a replay that reaches a position with another name than the recorded one is told of it
--   (the SDK fails the run: the code changed under a run in flight).
-- - The row lock that record_step takes on the run's job (FOR SHARE) orders the checkpoint and
--   whatever else would change the claim (a rescue, a cancel): whichever commits first wins,
--   and the other sees what it left.
-- - A run that sleeps records the time it wakes as a step, and parks (park) in the same
--   transaction: it is a pending job due then, and holds nothing while it sleeps.
-- - A run that pushed jobs (a map) waits for them as a job waits for its parents
--   (await_jobs): the last one's ack makes it pending again.
-- - An event sent to a run (send_event) is kept until the run finishes; a run that waits for
--   one (wait_event) takes it, or parks until its deadline. Both lock the run's row first, so
--   that an event sent while the run parks wakes it: the sender either comes first (the run
--   then finds the event) or finds the run parked (and makes it due now).

-- The most steps one run may record: a run that loops without end fails instead of growing the
-- table without bound.
CREATE OR REPLACE FUNCTION postkit_queue.max_steps()
RETURNS integer
LANGUAGE sql IMMUTABLE
RETURN 100000;

-- lock_run: run p_run_id's row, locked until the caller's transaction ends (FOR UPDATE when
-- p_exclusive, else FOR SHARE), or NULL: there is no such live job or, when p_claim_token is
-- given, its claim is not that one (the caller's claim went stale: rescued, cancelled,
-- settled). Every function that changes a run goes through it first: the row lock orders it
-- against the others and against whatever else changes the claim (see the header).
CREATE OR REPLACE FUNCTION postkit_queue.lock_run(
    p_namespace text, p_run_id bigint, p_exclusive boolean, p_claim_token uuid DEFAULT NULL)
RETURNS postkit_queue.jobs
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job postkit_queue.jobs;
BEGIN
    IF p_exclusive THEN
        SELECT * INTO v_job FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id = p_run_id
        FOR UPDATE;
    ELSE
        SELECT * INTO v_job FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id = p_run_id
        FOR SHARE;
    END IF;
    IF NOT FOUND OR (p_claim_token IS NOT NULL AND NOT postkit_queue.holds_claim(
           v_job.state, v_job.worker_id, v_job.claim_token, NULL, p_claim_token)) THEN
        RETURN NULL;
    END IF;
    RETURN v_job;
END
$$;

-- record_step: the run p_run_id, which the caller holds (p_claim_token), completed its step
-- p_position, named p_name, with the result p_result (NULL or the JSON null: none; the same
-- rules as a job's result, check_result). Returns false, and records nothing, when the caller
-- no longer holds the claim: its transaction must roll back whatever the step wrote. Raises
-- PKQ21 when the position is taken already, or the one before it is not.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.record_step(
    p_namespace   text,
    p_run_id      bigint,
    p_claim_token uuid,
    p_position    integer,
    p_name        text,
    p_result      jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job      postkit_queue.jobs;
    v_recorded text;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_run_id);
    PERFORM postkit_queue.check_claim('record a step', NULL, p_claim_token);
    PERFORM postkit_queue.check_name('step name', p_name, true);
    PERFORM postkit_queue.check_result('result', p_result);
    IF p_position IS NULL OR p_position NOT BETWEEN 0 AND postkit_queue.max_steps() - 1 THEN
        RAISE EXCEPTION 'postkit: a step''s position must be from 0 to %, got %',
            postkit_queue.max_steps() - 1, coalesce(p_position::text, 'NULL')
            USING ERRCODE = 'PKQ21';
    END IF;
    -- The claim's fence, under a share lock of the run's row that lasts until this transaction
    -- ends: a rescue (tick_timeouts' UPDATE) or a cancel (its DELETE) waits for the checkpoint,
    -- and one that came first has left no row that holds this claim.
    v_job := postkit_queue.lock_run(p_namespace, p_run_id, false, p_claim_token);
    IF v_job.id IS NULL THEN
        RETURN false;
    END IF;
    IF NOT coalesce(v_job.has_steps, false) THEN
        -- The run's first checkpoint: its end (ack, dead letter, cancel, purge) will give its
        -- steps their retention (finish_steps).
        UPDATE postkit_queue.jobs j SET has_steps = true
        WHERE j.namespace = p_namespace AND j.id = p_run_id;
    END IF;
    IF p_position > 0 THEN
        PERFORM FROM postkit_queue.workflow_steps s
        WHERE s.namespace = p_namespace AND s.run_id = p_run_id AND s.position = p_position - 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'postkit: run % has no step % recorded: steps are recorded in order',
                p_run_id, p_position - 1 USING ERRCODE = 'PKQ21';
        END IF;
    END IF;
    -- The primary key arbitrates two transactions of the claim that record the same position:
    -- the second waits for the first, then finds its row.
    INSERT INTO postkit_queue.workflow_steps (
        namespace, run_id, position, name, result, attempt, recorded_at)
    VALUES (
        p_namespace, p_run_id, p_position, p_name, nullif(p_result, 'null'::jsonb),
        v_job.attempts, postkit_queue.clock())
    ON CONFLICT (namespace, run_id, position) DO NOTHING;
    IF NOT FOUND THEN
        SELECT s.name INTO v_recorded FROM postkit_queue.workflow_steps s
        WHERE s.namespace = p_namespace AND s.run_id = p_run_id AND s.position = p_position;
        RAISE EXCEPTION 'postkit: step % of run % is recorded already (as %)',
            p_position, p_run_id, v_recorded USING ERRCODE = 'PKQ21';
    END IF;
    RETURN true;
END
$$;

-- workflow_steps: the steps run p_run_id recorded, in order: what a resumed run replays, and
-- what a reader follows. A primary-key range scan. No row: none recorded, or an unknown run.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.workflow_steps(p_namespace text, p_run_id bigint)
RETURNS TABLE (
    "position" integer, name text, result jsonb, attempt integer, recorded_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_run_id);
    RETURN QUERY
    SELECT s.position, s.name, s.result, s.attempt, s.recorded_at
    FROM postkit_queue.workflow_steps s
    WHERE s.namespace = p_namespace AND s.run_id = p_run_id
    ORDER BY s.position;
END
$$;

-- finish_steps: the run p_run_id (of queue p_queue) finished at p_at: completed, dead-lettered,
-- cancelled or purged. Its steps are kept for the queue's retain_dead from then, as its dead
-- letter or cancel would be, and prune deletes them after; its events go now. Primary-key
-- range scans.
CREATE OR REPLACE FUNCTION postkit_queue.finish_steps(
    p_namespace text, p_run_id bigint, p_queue text, p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_policy record;
BEGIN
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    UPDATE postkit_queue.workflow_steps s SET expires_at = p_at + v_policy.retain_dead
    WHERE s.namespace = p_namespace AND s.run_id = p_run_id;
    DELETE FROM postkit_queue.workflow_events e
    WHERE e.namespace = p_namespace AND e.run_id = p_run_id;
END
$$;

-- park: the run p_job_id, which the caller holds (p_claim_token), sleeps until p_until: its
-- claim ends, its attempt is given back (as release gives it back), and it is pending again
-- from p_until, when a worker claims it as any job due then. A durable sleep thus holds no
-- worker slot, no claim and no connection while it lasts, and costs a sleeping run nothing but
-- its row (no poll per run: the workers' next_run_at finds the earliest). Returns false, and
-- changes nothing, when the caller no longer holds the claim.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.park(
    p_namespace text, p_job_id bigint, p_claim_token uuid, p_until timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_claim('park', NULL, p_claim_token);
    IF p_until IS NULL OR NOT isfinite(p_until) THEN
        RAISE EXCEPTION 'postkit: a run parks until a finite time, got %',
            coalesce(p_until::text, 'NULL') USING ERRCODE = 'PKQ05';
    END IF;
    UPDATE postkit_queue.jobs j
    SET state = 'pending', attempts = j.attempts - 1,
        run_at = greatest(p_until, postkit_queue.clock()),
        worker_id = NULL, claim_token = NULL, claimed_at = NULL, visible_until = NULL,
        progress = NULL, progress_note = NULL, progress_at = NULL
    WHERE j.namespace = p_namespace AND j.id = p_job_id
      AND postkit_queue.holds_claim(j.state, j.worker_id, j.claim_token, NULL, p_claim_token)
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NULL THEN
        RETURN false;
    END IF;
    -- A worker that sleeps until the queue's next due job learns of an earlier one.
    PERFORM postkit_queue.notify(p_namespace, v_queue);
    RETURN true;
END
$$;

-- send_event: send the event p_name, with p_payload (NULL: none; a result's rules), to the live
-- run p_run_id: it is kept until the run finishes, and the run gets it when it waits for it
-- (wait_event), now or later. A run that waits already (parked until its deadline) is made due
-- now, and its queue woken; so is one that sleeps, which finds its sleep not over and parks
-- again. One event per name: the same p_key again returns false and changes nothing; another
-- send of the name raises PKQ22, as does a send to a run that is not live (finished or
-- unknown).
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.send_event(
    p_namespace text, p_run_id bigint, p_name text, p_payload jsonb DEFAULT NULL,
    p_key text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job  postkit_queue.jobs;
    v_key  text;
    v_now  timestamptz := postkit_queue.clock();
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_run_id);
    PERFORM postkit_queue.check_name('event name', p_name, true);
    PERFORM postkit_queue.check_name('key', p_key, false);
    PERFORM postkit_queue.check_result('payload', p_payload);
    -- The run's row first: a wait_event in progress is waited for (see the header).
    v_job := postkit_queue.lock_run(p_namespace, p_run_id, true);
    IF v_job.id IS NULL THEN
        RAISE EXCEPTION 'postkit: run % is not live in namespace % (finished, or unknown): it '
                        'can take no event', p_run_id, p_namespace USING ERRCODE = 'PKQ22';
    END IF;
    INSERT INTO postkit_queue.workflow_events (namespace, run_id, name, payload, key, sent_at)
    VALUES (p_namespace, p_run_id, p_name, nullif(p_payload, 'null'::jsonb), p_key, v_now)
    ON CONFLICT (namespace, run_id, name) DO NOTHING;
    IF NOT FOUND THEN
        SELECT e.key INTO v_key FROM postkit_queue.workflow_events e
        WHERE e.namespace = p_namespace AND e.run_id = p_run_id AND e.name = p_name;
        IF v_key IS NOT NULL AND v_key = p_key THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'postkit: run % has an event % already: one event per name (send it '
                        'with the same key to make a repeat a no-op)', p_run_id, p_name
            USING ERRCODE = 'PKQ22';
    END IF;
    -- has_steps: the run's end deletes its events (finish_steps).
    UPDATE postkit_queue.jobs j
    SET has_steps = true,
        run_at = CASE WHEN j.state = 'pending' THEN least(j.run_at, v_now) ELSE j.run_at END
    WHERE j.namespace = p_namespace AND j.id = p_run_id;
    IF v_job.state = 'pending' AND v_job.run_at > v_now THEN
        PERFORM postkit_queue.notify(p_namespace, v_job.queue);
    END IF;
    RETURN true;
END
$$;

-- wait_event: the run p_run_id, which the caller holds (p_claim_token), waits for its event
-- p_name until p_until (the deadline its step p_position - 1 recorded). Under the run's row
-- lock (see the header): an event sent is taken, recorded as step p_position (named 'event',
-- its result the payload) and returned as 'received'; past the deadline, the step is
-- recorded without one and 'timed_out' returned; else the run parks until the deadline, as
-- park does, and 'parked' is returned (an event sent meanwhile makes it due now). 'stale':
-- the caller no longer holds the claim; nothing changed.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.wait_event(
    p_namespace text, p_run_id bigint, p_claim_token uuid, p_position integer, p_name text,
    p_until timestamptz)
RETURNS TABLE (status text, payload jsonb)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job   postkit_queue.jobs;
    v_found boolean;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_run_id);
    PERFORM postkit_queue.check_claim('wait for an event', NULL, p_claim_token);
    PERFORM postkit_queue.check_name('event name', p_name, true);
    IF p_until IS NULL OR NOT isfinite(p_until) THEN
        RAISE EXCEPTION 'postkit: a run waits until a finite time, got %',
            coalesce(p_until::text, 'NULL') USING ERRCODE = 'PKQ05';
    END IF;
    v_job := postkit_queue.lock_run(p_namespace, p_run_id, true, p_claim_token);
    IF v_job.id IS NULL THEN
        status := 'stale';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT true, e.payload INTO v_found, payload FROM postkit_queue.workflow_events e
    WHERE e.namespace = p_namespace AND e.run_id = p_run_id AND e.name = p_name;
    IF coalesce(v_found, false) OR p_until <= postkit_queue.clock() THEN
        PERFORM postkit_queue.record_step(
            p_namespace, p_run_id, p_claim_token, p_position, 'event', payload);
        status := CASE WHEN v_found THEN 'received' ELSE 'timed_out' END;
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM postkit_queue.park(p_namespace, p_run_id, p_claim_token, p_until);
    status := 'parked';
    RETURN NEXT;
END
$$;

-- await_jobs: the run p_run_id, which the caller holds (p_claim_token), waits for the jobs
-- p_job_ids it pushed (a map's): they become its parents (depends_on, in their order, which
-- parent_results reads), and the run waits for the live ones as a job pushed with depends_on
-- waits (dependencies.sql), its claim ended and its attempt given back: the last one's ack
-- makes it pending, and a worker claims it then, with no poll. The status says what it did:
-- 'waiting', so it is now; 'ready', every one of them completed already (the run holds its
-- claim); 'failed', with the problem, one is unknown, dead-lettered or cancelled, or in a
-- queue that keeps no results, and nothing changed; 'stale', the caller no longer holds the
-- claim, and nothing changed. One that is dead-lettered or cancelled while the run waits
-- cancels the run, as it cancels any job that waits for it.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.await_jobs(
    p_namespace text, p_run_id bigint, p_claim_token uuid, p_job_ids bigint[])
RETURNS TABLE (status text, problem text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job    postkit_queue.jobs;
    v_waits  bigint[];
    v_live   bigint[];
    v_queues text[];
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_run_id);
    PERFORM postkit_queue.check_claim('await jobs', NULL, p_claim_token);
    v_job := postkit_queue.lock_run(p_namespace, p_run_id, true, p_claim_token);
    IF v_job.id IS NULL THEN
        status := 'stale';
        RETURN NEXT;
        RETURN;
    END IF;
    problem := postkit_queue.dependency_problem(p_namespace, p_job_ids);
    IF problem IS NOT NULL THEN
        status := 'failed';
        RETURN NEXT;
        RETURN;
    END IF;
    -- The run reads the results of the jobs it waits for (parent_results), once they all
    -- completed: a queue that keeps none would leave it reading none, or nothing at all. The
    -- live ones' queues in one read by primary key; the others' from what job_result says.
    SELECT array_agg(j.id), array_agg(DISTINCT j.queue) INTO v_live, v_queues
    FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = ANY (p_job_ids);
    v_queues := coalesce(v_queues, '{}') || array(
        SELECT r.queue
        FROM (SELECT p.id FROM unnest(p_job_ids) AS p(id)
              EXCEPT SELECT l.id FROM unnest(coalesce(v_live, '{}')) AS l(id)) AS gone
        CROSS JOIN LATERAL postkit_queue.job_result(p_namespace, gone.id) AS r);
    SELECT q.queue INTO problem FROM unnest(v_queues) AS q(queue)
    WHERE (postkit_queue.queue_policy(p_namespace, q.queue)).retain_results IS NULL
    LIMIT 1;
    IF problem IS NOT NULL THEN
        problem := format('its jobs are in queue %s, which keeps no results: a run reads the '
                          'results of the jobs it waits for, so their queue must keep them '
                          '(retain_results)', problem);
        status := 'failed';
        RETURN NEXT;
        RETURN;
    END IF;
    -- Each live job is marked (has_children) under its row lock, which orders this wait and
    -- the job's ack, as for a child's push (lock_parents).
    v_waits := postkit_queue.lock_parents(p_namespace, p_job_ids);
    UPDATE postkit_queue.jobs j
    SET depends_on = array(SELECT p.id FROM unnest(p_job_ids) WITH ORDINALITY AS p(id, n)
                           GROUP BY p.id ORDER BY min(p.n)),
        state = CASE WHEN cardinality(v_waits) > 0 THEN 'waiting'::postkit_queue.job_state
                     ELSE j.state END,
        waiting_on = nullif(cardinality(v_waits), 0),
        attempts = CASE WHEN cardinality(v_waits) > 0 THEN j.attempts - 1 ELSE j.attempts END,
        worker_id = CASE WHEN cardinality(v_waits) > 0 THEN NULL ELSE j.worker_id END,
        claim_token = CASE WHEN cardinality(v_waits) > 0 THEN NULL ELSE j.claim_token END,
        claimed_at = CASE WHEN cardinality(v_waits) > 0 THEN NULL ELSE j.claimed_at END,
        visible_until = CASE WHEN cardinality(v_waits) > 0 THEN NULL ELSE j.visible_until END
    WHERE j.namespace = p_namespace AND j.id = p_run_id;
    IF cardinality(v_waits) = 0 THEN
        status := 'ready';
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM postkit_queue.add_children(p_namespace, v_waits, p_run_id);
    status := 'waiting';
    RETURN NEXT;
END
$$;

-- cancel_run: cancel workflow run p_run_id with the live jobs of its tree (cancel_tree) and of
-- the trees of its maps' jobs (the ids each step named 'map' recorded, in order), at most
-- p_limit jobs. Returns how many it cancelled; call it again while it returns p_limit or more.
-- A map's job list is what the run's worker recorded under its claim (record_step): a worker
-- role, which may record steps, can claim and settle any job of its namespace already, so an
-- operator's cancel of what it listed gives it nothing more. An entry that is not a job id (a
-- step written by hand) is skipped: the run and the rest are cancelled all the same.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.cancel_run(
    p_namespace text, p_run_id bigint, p_limit integer DEFAULT 10000)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_root      bigint;
    v_cancelled integer;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_run_id);
    PERFORM postkit_queue.check_limit(p_limit, 100000);
    PERFORM postkit_queue.require_operator('cancel a workflow run');
    v_cancelled := postkit_queue.cancel_tree(p_namespace, p_run_id, p_limit);
    FOR v_root IN
        SELECT m.job_id FROM (
            SELECT s.position, e.n,
                   -- Nested, so that only a string of at most 19 digits is read as a number.
                   CASE WHEN jsonb_typeof(e.value) = 'number' AND e.value::text ~ '^[0-9]{1,19}$'
                        THEN CASE WHEN e.value::text::numeric BETWEEN 1 AND 9223372036854775807
                                  THEN e.value::text::bigint END
                   END AS job_id
            FROM postkit_queue.workflow_steps s
            CROSS JOIN LATERAL jsonb_array_elements(
                CASE WHEN jsonb_typeof(s.result -> 'jobs') = 'array' THEN s.result -> 'jobs'
                     ELSE '[]'::jsonb END) WITH ORDINALITY AS e(value, n)
            WHERE s.namespace = p_namespace AND s.run_id = p_run_id AND s.name = 'map'
              AND jsonb_typeof(s.result) = 'object'
        ) m
        WHERE m.job_id IS NOT NULL
        ORDER BY m.position, m.n
    LOOP
        EXIT WHEN v_cancelled >= p_limit;
        v_cancelled := v_cancelled
            + postkit_queue.cancel_tree(p_namespace, v_root, p_limit - v_cancelled);
    END LOOP;
    RETURN v_cancelled;
END
$$;
