-- Citus: the optional step that spreads the queue over a Citus cluster, sharded by namespace
-- (docs/scaling.md), and the check that keeps grants off a queue placed there. On plain
-- PostgreSQL nothing calls the step, and the check finds no Citus.

-- Whether the queue's tables are placed on a Citus cluster (jobs is in pg_dist_partition).
CREATE OR REPLACE FUNCTION postkit_queue.on_citus()
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_placed boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        -- Dynamic: the catalog exists only where Citus is installed.
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p '
                'WHERE p.logicalrelid = ''postkit_queue.jobs''::regclass)' INTO v_placed;
    END IF;
    RETURN v_placed;
END
$$;

-- Whether this node is the coordinator of a Citus cluster: its group is 0 in Citus's
-- pg_dist_local_group (each worker node has a group of its own). A server without Citus has
-- no such catalog and counts as its own coordinator.
CREATE OR REPLACE FUNCTION postkit_queue.on_citus_coordinator()
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_group integer := 0;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL THEN
        -- Dynamic: the catalog exists only where Citus is installed.
        EXECUTE 'SELECT g.groupid FROM pg_catalog.pg_dist_local_group g' INTO v_group;
    END IF;
    RETURN coalesce(v_group, 0) = 0;
END
$$;

-- refuse_roles_on_citus: grants and tenant assignments record roles by OID (grants, tenants,
-- and tenant isolation's policy), and each node of a Citus cluster gives a role its
-- own OID, so that a check on a worker node would ask about another role, or none. Until roles
-- are known there by something every node shares, a queue placed on Citus takes neither, and
-- distribute_on_citus refuses a queue that holds some.
CREATE OR REPLACE FUNCTION postkit_queue.refuse_roles_on_citus(p_action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF postkit_queue.on_citus() THEN
        RAISE EXCEPTION 'postkit: cannot % on a queue placed on Citus: roles are recorded by '
                        'OID, which differs between the nodes (docs/scaling.md)', p_action
            USING ERRCODE = 'PKQ11';
    END IF;
END
$$;

-- distribute_on_citus: run once, as the schema's owner or a superuser, on a Citus coordinator
-- after `postkit install` (`postkit install --citus` does both). In one transaction:
--   * jobs, and every other table with a namespace column, distributed by namespace and
--     co-located with jobs, so that each namespace's rows of every table live on one node;
--     tenants (roles' namespace assignments) and the tables without a namespace become
--     reference tables, whole on every node;
--   * every function registered with Citus, which creates it on every node: one that takes
--     the namespace first with p_namespace as its distribution argument, so that a call
--     `SELECT ... FROM postkit_queue.f(namespace, ...)` made alone is delegated to the node
--     that owns the namespace and runs there whole; the calls that make jobs ready for others
--     (push, push_batch, redrive...) without it, so that they run on the coordinator, where
--     their notifications reach the listeners; the helpers without it, so that they exist
--     where the delegated bodies call them (Citus does not see calls inside PL/pgSQL bodies
--     as dependencies);
--   * the queue's owner given LOGIN, since Citus reaches the other nodes as the current user.
-- The catalog, not a list, says what to distribute, so a table or a function added later is
-- covered: after an upgrade, run it again; a table Citus already holds (pg_dist_partition) is
-- left as it is, and every function is registered again, the new ones included.
-- tests/citus checks that the SQL follows the rules that make the delegation work. Returns
-- what it placed, and how.
CREATE OR REPLACE FUNCTION postkit_queue.distribute_on_citus()
RETURNS TABLE (object text, placement text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_table     regclass;
    v_sharded   boolean;
    v_placed    boolean;
    v_function  regprocedure;
    v_delegated boolean;
    v_owner     name;
BEGIN
    IF to_regproc('pg_catalog.create_distributed_table') IS NULL
       OR to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RAISE EXCEPTION 'postkit: distribute_on_citus runs on a Citus coordinator, and this '
                        'server has no Citus (CREATE EXTENSION citus first); on plain '
                        'PostgreSQL the install needs no such step' USING ERRCODE = 'PKQ12';
    END IF;
    IF EXISTS (SELECT FROM postkit_queue.grants) OR EXISTS (SELECT FROM postkit_queue.tenants)
       OR postkit_queue.tenant_isolation_on() THEN
        RAISE EXCEPTION 'postkit: this queue has grants, tenant assignments or tenant '
                        'isolation, which record roles by OID, and each Citus node gives a '
                        'role its own: distribute a queue without them (docs/scaling.md)'
            USING ERRCODE = 'PKQ12';
    END IF;
    -- One connection per node for this transaction's commands, so that the shards created
    -- here are visible to the steps after them and a failure rolls back everything.
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    FOR v_table, v_sharded IN
        SELECT c.oid::regclass,
               c.relname <> 'tenants' AND EXISTS (
                   SELECT FROM pg_attribute a
                   WHERE a.attrelid = c.oid AND a.attname = 'namespace' AND NOT a.attisdropped)
        FROM pg_class c
        WHERE c.relnamespace = 'postkit_queue'::regnamespace AND c.relkind = 'r'
        -- jobs first: the other sharded tables are co-located with it.
        ORDER BY c.relname <> 'jobs', c.relname
    LOOP
        object := v_table::text;
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p '
                'WHERE p.logicalrelid = $1)' INTO v_placed USING v_table;
        IF v_placed THEN
            placement := 'already placed';
        ELSIF v_sharded THEN
            EXECUTE 'SELECT pg_catalog.create_distributed_table($1, $2, colocate_with => $3)'
                USING v_table, 'namespace',
                      CASE WHEN v_table = 'postkit_queue.jobs'::regclass THEN 'default'
                           ELSE 'postkit_queue.jobs' END;
            placement := 'sharded by namespace, co-located with postkit_queue.jobs';
        ELSE
            EXECUTE 'SELECT pg_catalog.create_reference_table($1)' USING v_table;
            placement := 'a reference table, whole on every node';
        END IF;
        RETURN NEXT;
    END LOOP;
    -- A function whose statements Citus routes only with the namespace known is planned afresh
    -- for each call on Citus: push_batch's one INSERT ... SELECT of a batch's rows. On one
    -- server it keeps its generic plan, planned once per session (a plan per call cost batch
    -- pushes of 100 a fifth of their rate: docs/scaling.md). An upgrade's CREATE OR REPLACE
    -- sets it back: run this again after an upgrade. tests/citus reads this statement to check
    -- the function's statements as Citus plans them.
    ALTER FUNCTION postkit_queue.push_batch(
        text, text, jsonb, interval, integer, integer, text[], jsonb, text[], jsonb, interval)
        SET plan_cache_mode = force_custom_plan;
    -- Citus runs a statement on a shard of another node through a connection it opens as the
    -- current user, and inside every function that is the queue's owner: a call in a
    -- transaction block, which Citus does not delegate, plans each statement on the
    -- coordinator and sends it to the node of the namespace. So the owner logs in (no
    -- password: pg_hba.conf lets its connections in from the cluster's nodes alone), as
    -- owner_role allows where Citus is.
    SELECT r.rolname INTO v_owner FROM pg_roles r
    JOIN pg_namespace n ON n.nspowner = r.oid
    WHERE n.nspname = 'postkit_queue' AND NOT r.rolcanlogin;
    IF FOUND THEN
        EXECUTE format('ALTER ROLE %I LOGIN', v_owner);
    END IF;
    -- Notifications from the coordinator only (send_notification). The same holds after an
    -- upgrade only once this runs again.
    ALTER FUNCTION postkit_queue.send_notification(text, text)
        SET postkit_queue.placement = 'citus';
    -- The calls that make jobs ready for others run on the coordinator, where the listeners
    -- are, so that their notifications reach them whether the call comes in a transaction
    -- block or alone: Citus plans each of their statements there and sends it to the node of
    -- the namespace, as it does for any call in a transaction block. The calls of a worker's
    -- loop (pull, ack, nack, release, tick_timeouts...) stay delegated: a wake-up they raise
    -- (a retry due at once, a rescued job, a freed flow slot, a kept result) reaches the
    -- listeners when the call is made in a transaction block, and else at their fallback poll.
    -- tests/citus checks that every other function that may notify is listed here.
    -- wait_for_slot and stop_waiting run there too: they record the calling backend, the
    -- listener's (pg_backend_pid), which a delegated call would take for a node's.
    FOR v_function, v_delegated, placement IN
        SELECT p.oid::regprocedure, w.delegated,
               CASE WHEN w.delegated THEN 'delegated to the node of its namespace'
                    WHEN n.namespaced THEN 'runs on the coordinator, each statement sent to '
                                           'the node of its namespace'
                    ELSE 'created on every node, runs where it is called' END
        FROM pg_proc p,
             LATERAL (SELECT coalesce((p.proargnames)[1] = 'p_namespace', false)) n(namespaced),
             LATERAL (SELECT n.namespaced AND p.proname <> ALL (ARRAY[
                          'push', 'push_batch', 'redrive', 'set_paused', 'pause_queue',
                          'resume_queue', 'configure_queue', 'write_queue_settings',
                          'fire_schedule', 'fire_schedule_run', 'cancel', 'cancel_queue',
                          'cancel_tree', 'cancel_run', 'purge_queue', 'purge_queue_before',
                          'send_event', 'wait_for_slot', 'stop_waiting'])) w(delegated)
        WHERE p.pronamespace = 'postkit_queue'::regnamespace
          AND p.proname <> 'distribute_on_citus'
        ORDER BY p.oid::regprocedure::text
    LOOP
        object := v_function::text;
        IF v_delegated THEN
            EXECUTE 'SELECT pg_catalog.create_distributed_function($1, $2, '
                    'colocate_with := ''postkit_queue.jobs'')'
                USING v_function, 'p_namespace';
        ELSE
            EXECUTE 'SELECT pg_catalog.create_distributed_function($1)' USING v_function;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
