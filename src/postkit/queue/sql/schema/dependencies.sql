-- Dependencies: jobs that wait for jobs.
--
-- A job pushed with parents (push's p_depends_on, push_batch's p_depends_on) is waiting until
-- every parent has completed:
--
--     push(depends_on) ──> waiting ──last parent's ack──> pending ──> ... (lifecycle.sql)
--                             │
--                             └──a parent dead-lettered, cancelled or purged──> cancelled
--
-- - A waiting job is never claimed, counted as ready or rate-limited: every claim, count and
--   look (next_run_at) reads state 'pending' only.
-- - Each parent's ack takes one off the child's waiting_on, in the ack's own transaction; the
--   last makes the child pending at once and wakes its queue's waiting worker (notify), and
--   deletes the child's edges. An ack reads only its own edges (job_dependencies, by parent),
--   never the child's other parents: a fan-in of n parents costs n small updates of one row,
--   whatever n, and one delete of its n edges.
-- - A parent dead-lettered (bury), cancelled or purged cancels its waiting descendants,
--   transitively, each recorded in cancelled_jobs with why ('parent 17 was dead-lettered'). A
--   parent redriven later is a new job: the descendants stay cancelled.
-- - Parents are in the child's namespace, and exist before it: a dependency never crosses a
--   namespace, and no cycle can be made. A parent that completed counts as done while its
--   completion is recorded (its queue's retain_results or retain_completed); one unknown,
--   dead-lettered or cancelled is refused (PKQ19), and nothing is pushed.
-- - A job's tree is the job and what descends from it: job_tree walks it down generation by
--   generation, through the waiting jobs' edges, the released jobs' depends_on (a GIN index)
--   and, past a completed job that had children, its row in job_ancestry; cancel_tree cancels
--   the live part of it.
--
-- The race between a child's push and its parent's ack is settled by the parent's row lock:
-- lock_parents marks each live parent (has_children) with an UPDATE, so an ack that deletes the
-- parent either comes after the push's commit and sees the mark and the edge, or came before and
-- the push finds the parent gone and reads its completion instead.

-- The most parents one job may have.
CREATE OR REPLACE FUNCTION postkit_queue.max_parents() RETURNS integer
LANGUAGE sql IMMUTABLE
RETURN 10000;

-- dependency_problem: why a push with these parents would be refused, or NULL when it would
-- not: the SDK asks before it pushes, so that a refusal leaves the caller's transaction usable
-- (a refusal by push itself aborts it). Reads only; takes no lock.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.dependency_problem(p_namespace text, p_parents bigint[])
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parent bigint;
    v_state  text;
    v_live   bigint[];
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF p_parents IS NULL OR array_position(p_parents, NULL) IS NOT NULL
       OR coalesce(array_ndims(p_parents), 1) <> 1 THEN
        RETURN 'depends_on must be a list of job ids, without NULL';
    END IF;
    IF cardinality(p_parents) > postkit_queue.max_parents() THEN
        RETURN format('a job may depend on at most %s jobs, got %s',
                      postkit_queue.max_parents(), cardinality(p_parents));
    END IF;
    -- A live parent (pending, scheduled, running or waiting), the usual one, is one a child may
    -- wait for: one statement reads them all, by primary key. The others get job_result's
    -- probes, which say whether they completed.
    SELECT array_agg(j.id) INTO v_live FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = ANY (p_parents);
    FOR v_parent IN
        SELECT p.id FROM unnest(p_parents) AS p(id)
        EXCEPT SELECT l.id FROM unnest(coalesce(v_live, '{}')) AS l(id)
        ORDER BY 1
    LOOP
        SELECT r.state INTO v_state FROM postkit_queue.job_result(p_namespace, v_parent) AS r;
        IF v_state IN ('dead', 'cancelled', 'unknown') THEN
            RETURN postkit_queue.parent_refusal(v_parent, v_state);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- parent_ids: one entry of push_batch's depends_on (p_what names it) as push takes it: a JSON
-- array of job ids (integers in bigint's range, as push's p_depends_on takes them), or JSON
-- null (no parents: NULL).
CREATE OR REPLACE FUNCTION postkit_queue.parent_ids(p_what text, p_entry jsonb)
RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_entry IS NULL OR jsonb_typeof(p_entry) = 'null' THEN
        RETURN NULL;
    END IF;
    -- The CASE casts only what the pattern let through: an integer of at most 19 digits,
    -- which numeric holds exactly, compared with bigint's bounds before the cast to bigint.
    IF jsonb_typeof(p_entry) = 'array' AND NOT EXISTS (
           SELECT FROM jsonb_array_elements(p_entry) AS e
           WHERE CASE WHEN jsonb_typeof(e.value) = 'number'
                           AND e.value::text ~ '^-?[0-9]{1,19}$'
                      THEN e.value::text::numeric
                           NOT BETWEEN -9223372036854775808 AND 9223372036854775807
                      ELSE true END) THEN
        RETURN array(SELECT e.value::text::bigint FROM jsonb_array_elements(p_entry) AS e);
    END IF;
    RAISE EXCEPTION 'postkit: % must be a list of job ids or null, got %', p_what,
        left(p_entry::text, 100) USING ERRCODE = 'PKQ19';
END
$$;

-- The message that refuses a parent that job_result says is in state p_state: 'dead',
-- 'cancelled' or 'unknown'.
CREATE OR REPLACE FUNCTION postkit_queue.parent_refusal(p_parent bigint, p_state text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE p_state
    WHEN 'dead' THEN format('job %s was dead-lettered: a job cannot depend on it', p_parent)
    WHEN 'cancelled' THEN format('job %s was cancelled: a job cannot depend on it', p_parent)
    ELSE format('job %s is unknown in this namespace (never pushed, or completed in a queue '
                'that keeps neither results nor completed jobs, or pruned): a job cannot '
                'depend on it', p_parent) END;

-- lock_parents: for a child's push, the parents it must wait for: each live one, locked and
-- marked (has_children) so that its ack, dead letter or cancel looks for its children, in id
-- order (two pushes that share parents lock them in the same order). A parent that completed
-- is satisfied already; any other raises PKQ19. Returns the live parents' ids, without
-- duplicates.
CREATE OR REPLACE FUNCTION postkit_queue.lock_parents(p_namespace text, p_parents bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_problem text;
    v_parent  bigint;
    v_waits   bigint[] := '{}';
BEGIN
    -- A list of the wrong shape is refused before any parent is locked.
    IF p_parents IS NULL OR array_position(p_parents, NULL) IS NOT NULL
       OR coalesce(array_ndims(p_parents), 1) <> 1
       OR cardinality(p_parents) > postkit_queue.max_parents() THEN
        RAISE EXCEPTION 'postkit: %', postkit_queue.dependency_problem(p_namespace, p_parents)
            USING ERRCODE = 'PKQ19';
    END IF;
    FOR v_parent IN SELECT DISTINCT p.id FROM unnest(p_parents) AS p(id) ORDER BY p.id LOOP
        -- The row lock orders this push and the parent's ack: an ack in progress (its DELETE
        -- holds the row) is waited for, and then the row is gone.
        UPDATE postkit_queue.jobs j SET has_children = true
        WHERE j.namespace = p_namespace AND j.id = v_parent;
        IF FOUND THEN
            v_waits[cardinality(v_waits) + 1] := v_parent;
        END IF;
    END LOOP;
    -- A new statement reads what the acks waited for committed (READ COMMITTED).
    v_problem := postkit_queue.dependency_problem(
        p_namespace, array(SELECT p.id FROM unnest(p_parents) AS p(id)
                           WHERE p.id <> ALL (v_waits)));
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'postkit: %', v_problem USING ERRCODE = 'PKQ19';
    END IF;
    RETURN v_waits;
END
$$;

-- add_children: record the edges from p_parents (lock_parents' result) to a waiting child.
-- One single-row INSERT per parent: Citus routes each with the namespace unbound, which it
-- does not for an INSERT ... SELECT (docs/scaling.md).
CREATE OR REPLACE FUNCTION postkit_queue.add_children(
    p_namespace text, p_parents bigint[], p_child bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parent bigint;
BEGIN
    FOREACH v_parent IN ARRAY p_parents LOOP
        INSERT INTO postkit_queue.job_dependencies (namespace, parent_id, child_id)
        VALUES (p_namespace, v_parent, p_child);
    END LOOP;
END
$$;

-- release_children: the parents p_parent_ids completed (their acks, in this transaction):
-- each of their waiting children has one parent fewer to wait for, and one with none left
-- becomes pending now (or at its own run_at, if later) and wakes its queue; its edges go then,
-- those from its parents that completed before included. The children are updated in id
-- order, so two acks that complete parents of the same children lock them in the same order
-- instead of deadlocking.
CREATE OR REPLACE FUNCTION postkit_queue.release_children(
    p_namespace text, p_parent_ids bigint[], p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_children bigint[] := '{}';
    v_child    bigint;
    v_parents  bigint;
    v_queue    text;
    v_queues   text[] := '{}';
    v_parent   bigint;
    v_found    bigint[];
    v_released boolean;
    v_parent_ids bigint[];  -- a released child's parents
BEGIN
    -- A statement per parent, its edges by equality on the primary key's prefix: with
    -- parent_id = ANY (...) a planner that deems the table small (no statistics yet) reads the
    -- namespace's every edge instead, at each ack.
    FOREACH v_parent IN ARRAY p_parent_ids LOOP
        SELECT array_agg(d.child_id) INTO v_found FROM postkit_queue.job_dependencies d
        WHERE d.namespace = p_namespace AND d.parent_id = v_parent;
        v_children := v_children || v_found;
    END LOOP;
    FOR v_child, v_parents IN
        SELECT c.id, count(*) FROM unnest(v_children) AS c(id) GROUP BY c.id ORDER BY c.id
    LOOP
        -- A child cancelled meanwhile is gone, and its edges with it.
        UPDATE postkit_queue.jobs j
        SET waiting_on = CASE WHEN j.waiting_on > v_parents THEN j.waiting_on - v_parents END,
            state = CASE WHEN j.waiting_on > v_parents THEN j.state ELSE 'pending' END,
            run_at = CASE WHEN j.waiting_on > v_parents THEN j.run_at
                          ELSE greatest(j.run_at, p_at) END
        WHERE j.namespace = p_namespace AND j.id = v_child AND j.state = 'waiting'
        -- The parents only when released: a fan-in child's list of 10,000 is 80 kB, read
        -- once, not at each of its parents' acks.
        RETURNING j.state = 'pending', j.queue,
                  CASE WHEN j.state = 'pending' THEN j.depends_on END
        INTO v_released, v_queue, v_parent_ids;
        IF v_released THEN
            -- Released: its edges go, each by its primary key.
            FOREACH v_parent IN ARRAY v_parent_ids LOOP
                DELETE FROM postkit_queue.job_dependencies d
                WHERE d.namespace = p_namespace AND d.parent_id = v_parent
                  AND d.child_id = v_child;
            END LOOP;
            IF v_queue <> ALL (v_queues) THEN
                v_queues[cardinality(v_queues) + 1] := v_queue;
            END IF;
        END IF;
    END LOOP;
    FOREACH v_queue IN ARRAY v_queues LOOP
        -- Any number of children: every waiting worker of their queue may claim.
        PERFORM postkit_queue.notify(p_namespace, v_queue, p_wake => NULL);
    END LOOP;
END
$$;

-- drop_edges: the waiting job p_child_id, whose parents are p_parent_ids, was cancelled: its
-- edges go, from its live parents and its completed ones alike, each by its primary key (as
-- release_children deletes them).
CREATE OR REPLACE FUNCTION postkit_queue.drop_edges(
    p_namespace text, p_child_id bigint, p_parent_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parent bigint;
BEGIN
    FOREACH v_parent IN ARRAY p_parent_ids LOOP
        DELETE FROM postkit_queue.job_dependencies d
        WHERE d.namespace = p_namespace AND d.parent_id = v_parent AND d.child_id = p_child_id;
    END LOOP;
END
$$;

-- cancel_descendants: the parents p_parent_ids were dead-lettered, cancelled or purged
-- (p_fate says which): each of their waiting children is cancelled, with the reason 'parent N
-- was <fate>', with its edges, and so on down to the last generation (each a child's 'parent M
-- was cancelled'). A child with an edge from one of these parents is still waiting (that
-- parent never completed), unless another parent's cascade cancelled it first: it is skipped
-- then. Returns how many it cancelled.
CREATE OR REPLACE FUNCTION postkit_queue.cancel_descendants(
    p_namespace text, p_parent_ids bigint[], p_fate text, p_at timestamptz)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parents   bigint[] := p_parent_ids;
    v_fate      text := p_fate;
    v_parent    bigint;
    v_child     bigint;
    v_job       postkit_queue.jobs;
    v_next      bigint[];
    v_cancelled integer := 0;
BEGIN
    WHILE cardinality(v_parents) > 0 LOOP
        v_next := '{}';
        FOR v_parent, v_child IN
            SELECT e.parent_id, e.child_id FROM postkit_queue.job_dependencies e
            WHERE e.namespace = p_namespace AND e.parent_id = ANY (v_parents)
            ORDER BY e.child_id, e.parent_id
        LOOP
            DELETE FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.id = v_child AND j.state = 'waiting'
            RETURNING j.* INTO v_job;
            IF FOUND THEN
                PERFORM postkit_queue.drop_edges(p_namespace, v_job.id, v_job.depends_on);
                PERFORM postkit_queue.record_cancel(
                    p_namespace, v_job.id, v_job.queue, v_job.payload, v_job.priority,
                    v_job.attempts, v_job.depends_on, v_job.created_at,
                    format('parent %s was %s', v_parent, v_fate), p_at);
                v_cancelled := v_cancelled + 1;
                IF v_job.has_children THEN
                    v_next[cardinality(v_next) + 1] := v_job.id;
                END IF;
            END IF;
        END LOOP;
        v_parents := v_next;
        v_fate := 'cancelled';
    END LOOP;
    RETURN v_cancelled;
END
$$;

-- record_cancel: keep a cancelled job (cancelled_jobs) for its queue's retain_dead, and tell
-- the waiters for its queue's results, if it keeps them. It takes the job's columns, not its
-- row (docs/scaling.md).
CREATE OR REPLACE FUNCTION postkit_queue.record_cancel(
    p_namespace text, p_job_id bigint, p_queue text, p_payload jsonb, p_priority smallint,
    p_attempts integer, p_depends_on bigint[], p_created_at timestamptz, p_reason text,
    p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_policy record;
BEGIN
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    INSERT INTO postkit_queue.cancelled_jobs (
        namespace, job_id, queue, payload, priority, attempts, depends_on, reason,
        cancelled_by, created_at, cancelled_at, expires_at)
    VALUES (
        p_namespace, p_job_id, p_queue, p_payload, p_priority, p_attempts, p_depends_on,
        p_reason, postkit_queue.caller(), p_created_at, p_at, p_at + v_policy.retain_dead)
    ON CONFLICT (namespace, job_id) DO NOTHING;
    IF v_policy.retain_results IS NOT NULL THEN
        PERFORM postkit_queue.notify_results(p_namespace, ARRAY[p_job_id]);
    END IF;
END
$$;

-- keep_ancestry: job p_job_id, which has parents (p_depends_on) and children, completed: its
-- row in job_ancestry keeps the link from its parents to the children it released for its
-- queue's retain_dead, so that job_tree and cancel_tree walk down through it. Only such a job
-- gets one: a root starts a walk and a job without children ends it.
CREATE OR REPLACE FUNCTION postkit_queue.keep_ancestry(
    p_namespace text, p_job_id bigint, p_queue text, p_depends_on bigint[], p_at timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_policy record;
BEGIN
    v_policy := postkit_queue.queue_policy(p_namespace, p_queue);
    INSERT INTO postkit_queue.job_ancestry (namespace, job_id, queue, depends_on, expires_at)
    VALUES (p_namespace, p_job_id, p_queue, p_depends_on, p_at + v_policy.retain_dead)
    ON CONFLICT (namespace, job_id) DO NOTHING;
END
$$;

-- job_tree: job p_root_id and what descends from it through depends_on (its children, theirs, and
-- so on), generation by generation (its live jobs, then its completed ones, each in id order), at
-- most p_limit rows: each job with its depth (the root 0; a job two paths reach, at the nearer),
-- its queue, its state (as job_result says it) and its parents. A descendant is listed while it is
-- live, or completed with children of its own (job_ancestry, for its queue's retain_dead): the
-- walk goes on through it to the children it released. A branch ends at a job that completed
-- without children, and at one dead-lettered or cancelled, whose waiting descendants were
-- cancelled with it. No row: the root is unknown and nothing descends from it. Each generation
-- costs three index probes for all its jobs: its edges (job_dependencies' primary key) and the two
-- depends_on indexes (jobs_depends_on_idx, job_ancestry_depends_on_idx).
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.job_tree(
    p_namespace text, p_root_id bigint, p_limit integer DEFAULT 1000)
RETURNS TABLE (job_id bigint, depth integer, queue text, state text, depends_on bigint[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now        timestamptz := postkit_queue.clock();
    v_queue      text;
    v_state      text;
    v_parents    bigint[];
    v_generation bigint[] := ARRAY[p_root_id];
    v_seen       bigint[] := ARRAY[p_root_id];
    v_next       bigint[];
    v_waiting    bigint[];
    v_live       bigint[];
    v_completed  bigint[];
    v_depth      integer := 0;
    v_left       integer := p_limit - 1;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_root_id);
    PERFORM postkit_queue.check_limit(p_limit, 100000);
    -- The root: live, or as job_result says; a completed root that its queue keeps no record
    -- of has its ancestry row, if it had parents.
    SELECT j.queue, CASE WHEN j.state IN ('running', 'waiting') THEN j.state::text
                         WHEN j.run_at > v_now THEN 'scheduled' ELSE 'pending' END,
           j.depends_on
    INTO v_queue, v_state, v_parents
    FROM postkit_queue.jobs j WHERE j.namespace = p_namespace AND j.id = p_root_id;
    IF NOT FOUND THEN
        SELECT r.queue, r.state INTO v_queue, v_state
        FROM postkit_queue.job_result(p_namespace, p_root_id) r;
        SELECT a.queue, a.depends_on INTO v_queue, v_parents
        FROM postkit_queue.job_ancestry a
        WHERE a.namespace = p_namespace AND a.job_id = p_root_id;
        IF FOUND THEN
            v_state := 'completed';
        END IF;
    END IF;
    LOOP
        -- The next generation: the jobs whose parents include one of this one's, each listed
        -- once (v_seen): the waiting ones by their edges, the released ones and the completed
        -- ones by their depends_on. A statement per table: Citus routes only a plain statement
        -- (docs/scaling.md). A child released meanwhile is found by one or the other: its
        -- edges go in the transaction that sets its waiting_on to NULL.
        SELECT array_agg(d.child_id) INTO v_waiting FROM postkit_queue.job_dependencies d
        WHERE d.namespace = p_namespace AND d.parent_id = ANY (v_generation);
        SELECT array_agg(j.id) INTO v_live FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.depends_on && v_generation
          AND j.waiting_on IS NULL;
        SELECT array_agg(a.job_id) INTO v_completed FROM postkit_queue.job_ancestry a
        WHERE a.namespace = p_namespace AND a.depends_on && v_generation;
        v_next := array(
            SELECT g.id
            FROM unnest(coalesce(v_waiting, '{}') || coalesce(v_live, '{}')
                        || coalesce(v_completed, '{}')) g(id)
            EXCEPT SELECT s.id FROM unnest(v_seen) s(id)
            ORDER BY 1 LIMIT v_left);
        IF v_depth = 0 THEN
            -- An unknown root is listed only when something descends from it.
            IF v_state = 'unknown' AND cardinality(v_next) = 0 THEN
                RETURN;
            END IF;
            RETURN QUERY SELECT p_root_id, 0, v_queue, v_state, v_parents;
        END IF;
        EXIT WHEN cardinality(v_next) = 0;
        v_depth := v_depth + 1;
        RETURN QUERY
        SELECT j.id, v_depth, j.queue,
               CASE WHEN j.state IN ('running', 'waiting') THEN j.state::text
                    WHEN j.run_at > v_now THEN 'scheduled' ELSE 'pending' END,
               j.depends_on
        FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id = ANY (v_next)
        ORDER BY j.id;
        RETURN QUERY
        SELECT a.job_id, v_depth, a.queue, 'completed'::text, a.depends_on
        FROM postkit_queue.job_ancestry a
        WHERE a.namespace = p_namespace AND a.job_id = ANY (v_next)
        ORDER BY a.job_id;
        v_seen := v_seen || v_next;
        v_left := v_left - cardinality(v_next);
        v_generation := v_next;
        EXIT WHEN v_left <= 0;
    END LOOP;
END
$$;

-- cancel_tree: cancel the live jobs of job p_root_id's tree (job_tree: the root and its
-- descendants, through the completed ones that released them), each as cancel does, with its
-- waiting descendants; at most p_limit of them. Returns how many jobs it cancelled; call it
-- again while it returns p_limit or more. The walk reads the tree first, then cancel_job takes
-- each job's row lock: a job whose ack is in progress is waited for, and then is gone (its
-- children, released by that ack, are left: cancel the tree again to reach them). A job pushed
-- into the tree while it walks is left.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.cancel_tree(
    p_namespace text, p_root_id bigint, p_limit integer DEFAULT 10000)
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
    PERFORM postkit_queue.check_job_id(p_root_id);
    PERFORM postkit_queue.check_limit(p_limit, 100000);
    PERFORM postkit_queue.require_operator('cancel a tree of jobs');
    FOR v_id IN
        SELECT t.job_id FROM postkit_queue.job_tree(p_namespace, p_root_id, 100000) t
        WHERE t.state IN ('pending', 'scheduled', 'running', 'waiting')
    LOOP
        EXIT WHEN v_cancelled >= p_limit;
        v_cancelled := v_cancelled + postkit_queue.cancel_job(p_namespace, v_id, v_now);
    END LOOP;
    RETURN v_cancelled;
END
$$;

-- parent_results: the parents of job p_job_id (live, dead or cancelled), each with what
-- job_result says of it: its state, and its result once it completed in a queue that keeps
-- results (NULL otherwise). In the order the job's push listed them, without duplicates. No
-- row: the job has no parents, or is unknown.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.parent_results(p_namespace text, p_job_id bigint)
RETURNS TABLE (parent_id bigint, state text, result jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parents bigint[];
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    SELECT j.depends_on INTO v_parents FROM postkit_queue.jobs j
    WHERE j.namespace = p_namespace AND j.id = p_job_id;
    IF NOT FOUND THEN
        SELECT c.depends_on INTO v_parents FROM postkit_queue.cancelled_jobs c
        WHERE c.namespace = p_namespace AND c.job_id = p_job_id;
    END IF;
    RETURN QUERY
    SELECT p.id, r.state, r.result
    FROM unnest(v_parents) WITH ORDINALITY AS p(id, n)
    CROSS JOIN LATERAL postkit_queue.job_result(p_namespace, p.id) AS r
    ORDER BY p.n;
END
$$;

-- waiting_children: the jobs that wait for job p_job_id, in id order, at most p_limit, each
-- with its queue and how many parents it still waits for. A job's children are known while it
-- has not finished: its ack releases them (they run as any job then, or wait for their other
-- parents), and its dead letter or cancel cancels them. A primary-key probe of the job, a
-- range scan of its edges (job_dependencies), then one primary-key probe per child.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.waiting_children(
    p_namespace text, p_job_id bigint, p_limit integer DEFAULT 100)
RETURNS TABLE (child_id bigint, queue text, waiting_on integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_job_id(p_job_id);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    -- A completed parent's edges stay while its children wait for others: they no longer wait
    -- for it.
    PERFORM FROM postkit_queue.jobs j WHERE j.namespace = p_namespace AND j.id = p_job_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT e.child_id, c.queue, c.waiting_on
    FROM (SELECT d.child_id FROM postkit_queue.job_dependencies d
          WHERE d.namespace = p_namespace AND d.parent_id = p_job_id
          ORDER BY d.child_id LIMIT p_limit) e
    CROSS JOIN LATERAL (
        SELECT j.queue, j.waiting_on FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.id = e.child_id) c
    ORDER BY e.child_id;
END
$$;
