-- Security: the owner, the API, grants and tenant isolation.
--
-- Who may do what. Callers reach the tables only through the functions:
--
--   * The schema, its tables and its functions belong to one owner: the role postkit_queue_owner
--     (NOLOGIN, no members, no special attributes) when a superuser installs, else the
--     non-superuser that installed the schema. Nobody logs in as it.
--   * The API functions (listed in postkit_queue.api below, with the access kind each needs)
--     are SECURITY DEFINER: they run as the owner, with search_path pinned, and enforce the
--     rules. Every other function is an internal helper that no caller may execute.
--   * A caller holds USAGE on the schema and EXECUTE on the API functions of its access kind
--     (grant_access), and nothing on the tables or sequences: it cannot read, write or lock
--     them by hand.
--   * Tenant isolation is row-level security forced on the owner too, so that it holds inside
--     the functions; the policy asks who the caller is (as caller() does), not who runs the
--     function.
--
-- apply_privileges() is the current truth of ownership and grants; every install runs it last,
-- so that functions a later version adds are owned, fenced and granted the same way. An upgrade
-- of a database under tenant isolation then runs enable_tenant_isolation() again, for the
-- current policies (install.sql).

-- The role the session acts as: the one SET ROLE chose, else the one that logged in. Inside a
-- SECURITY DEFINER function current_user is the owner, so policies and checks ask this instead.
-- The role setting can only name a role the session is a member of, so it cannot be forged.
CREATE OR REPLACE FUNCTION postkit_queue.caller()
RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce(nullif(current_setting('role'), 'none'), session_user)::name;
END
$$;

-- Whether the caller sees every namespace: a role that holds the privileges of the schema's
-- owner, that is a superuser, the owner itself (the non-superuser that installed it), or a
-- member that inherits from it (it could turn row-level security off anyway). Asked of the
-- catalog each time (pg_has_role), so a superuser demoted, or a member removed, stops seeing
-- everything at once.
CREATE OR REPLACE FUNCTION postkit_queue.caller_sees_all()
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pg_has_role(postkit_queue.caller(),
                       (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                        WHERE n.nspname = 'postkit_queue'), 'USAGE');
END
$$;

-- Whether tenant isolation is on: jobs has the policy enable_tenant_isolation writes. Row-level
-- security alone does not say so: a policy of the operator's own (or a test's) turns it on too.
CREATE OR REPLACE FUNCTION postkit_queue.tenant_isolation_on()
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN EXISTS (SELECT FROM pg_catalog.pg_policy p
                   WHERE p.polrelid = 'postkit_queue.jobs'::regclass
                     AND p.polname = 'tenant_isolation');
END
$$;

-- The namespaces assigned to the caller or to a role it is a member of. The join with pg_roles
-- skips assignments whose role was dropped since the last install.
CREATE OR REPLACE FUNCTION postkit_queue.my_namespaces()
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(t.namespace), '{}')
            FROM postkit_queue.tenants t
            JOIN pg_catalog.pg_roles r ON r.oid = t.role_oid
            WHERE pg_catalog.pg_has_role(postkit_queue.caller(), r.oid, 'MEMBER'));
END
$$;

-- namespaces: the namespaces the caller may see, sorted. Under tenant isolation, a caller that
-- does not see everything gets those assigned to it (my_namespaces), whether or not they hold
-- anything yet. Anyone else gets every namespace that holds jobs, dead letters, queue
-- settings, outcome counters, schedules or registered workers, and every one assigned to a
-- role: a skip scan of each of those tables' primary keys, whose first column is the
-- namespace (one index probe per namespace, however many rows each holds), so a backlog of
-- millions costs what an empty one does. No namespace argument: it is what a dashboard asks
-- before it knows one.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.namespaces()
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_isolated boolean := postkit_queue.tenant_isolation_on();
BEGIN
    -- A skip scan would step, row by row, over the rows the policies hide from such a caller.
    IF v_isolated AND NOT postkit_queue.caller_sees_all() THEN
        RETURN QUERY SELECT DISTINCT n FROM unnest(postkit_queue.my_namespaces()) AS n ORDER BY n;
        RETURN;
    END IF;
    RETURN QUERY
    WITH RECURSIVE in_jobs(namespace) AS (
        (SELECT t.namespace FROM postkit_queue.jobs t ORDER BY t.namespace LIMIT 1)
        UNION ALL
        SELECT (SELECT t.namespace FROM postkit_queue.jobs t WHERE t.namespace > n.namespace
                ORDER BY t.namespace LIMIT 1)
        FROM in_jobs n WHERE n.namespace IS NOT NULL
    ), in_dead_letters(namespace) AS (
        (SELECT t.namespace FROM postkit_queue.dead_letters t ORDER BY t.namespace LIMIT 1)
        UNION ALL
        SELECT (SELECT t.namespace FROM postkit_queue.dead_letters t
                WHERE t.namespace > n.namespace ORDER BY t.namespace LIMIT 1)
        FROM in_dead_letters n WHERE n.namespace IS NOT NULL
    ), in_settings(namespace) AS (
        (SELECT t.namespace FROM postkit_queue.queue_settings t ORDER BY t.namespace LIMIT 1)
        UNION ALL
        SELECT (SELECT t.namespace FROM postkit_queue.queue_settings t
                WHERE t.namespace > n.namespace ORDER BY t.namespace LIMIT 1)
        FROM in_settings n WHERE n.namespace IS NOT NULL
    ), in_stats(namespace) AS (
        (SELECT t.namespace FROM postkit_queue.queue_stats t ORDER BY t.namespace LIMIT 1)
        UNION ALL
        SELECT (SELECT t.namespace FROM postkit_queue.queue_stats t
                WHERE t.namespace > n.namespace ORDER BY t.namespace LIMIT 1)
        FROM in_stats n WHERE n.namespace IS NOT NULL
    ), in_schedules(namespace) AS (
        (SELECT t.namespace FROM postkit_queue.schedules t ORDER BY t.namespace LIMIT 1)
        UNION ALL
        SELECT (SELECT t.namespace FROM postkit_queue.schedules t
                WHERE t.namespace > n.namespace ORDER BY t.namespace LIMIT 1)
        FROM in_schedules n WHERE n.namespace IS NOT NULL
    ), in_workers(namespace) AS (
        (SELECT t.namespace FROM postkit_queue.workers t ORDER BY t.namespace LIMIT 1)
        UNION ALL
        SELECT (SELECT t.namespace FROM postkit_queue.workers t
                WHERE t.namespace > n.namespace ORDER BY t.namespace LIMIT 1)
        FROM in_workers n WHERE n.namespace IS NOT NULL
    )
    SELECT found.namespace FROM (
        SELECT namespace FROM in_jobs
        UNION SELECT namespace FROM in_dead_letters
        UNION SELECT namespace FROM in_settings
        UNION SELECT namespace FROM in_stats
        UNION SELECT namespace FROM in_schedules
        UNION SELECT namespace FROM in_workers
        -- One row per assignment: the tenants table is small.
        UNION SELECT t.namespace FROM postkit_queue.tenants t
    ) found
    WHERE found.namespace IS NOT NULL
    ORDER BY found.namespace;
END
$$;

-- assign_namespace: let p_role (and its members) use p_namespace once isolation is on, from the
-- next statement of every session: tenant isolation's policy reads the tenants table at each
-- statement, so an assignment takes no lock on the queue's tables and rewrites nothing.
CREATE OR REPLACE FUNCTION postkit_queue.assign_namespace(p_namespace text, p_role name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role_oid oid;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.refuse_roles_on_citus('assign a namespace to a role');
    SELECT r.oid INTO v_role_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'postkit: no role named %', coalesce(p_role, 'NULL')
            USING ERRCODE = 'PKQ11';
    END IF;
    INSERT INTO postkit_queue.tenants (namespace, role_oid) VALUES (p_namespace, v_role_oid)
    ON CONFLICT DO NOTHING;
END
$$;

-- require_operator: cancel and the purges check, beyond EXECUTE, that the caller was granted
-- operator access (or sees everything): an EXECUTE granted by hand is not enough to destroy jobs.
CREATE OR REPLACE FUNCTION postkit_queue.require_operator(p_action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT postkit_queue.caller_sees_all() AND NOT EXISTS (
        SELECT 1 FROM postkit_queue.grants g
        WHERE g.access = 'operator'
          AND pg_catalog.pg_has_role(postkit_queue.caller(), g.role_oid, 'MEMBER')) THEN
        RAISE EXCEPTION 'postkit: permission denied to %: the role needs operator access '
                        '(postkit_queue.grant_access(role, ''operator''))', p_action
            USING ERRCODE = '42501';
    END IF;
END
$$;

-- channel: the LISTEN channel of a queue ('postkit_' and an md5, so any names fit PostgreSQL's
-- 63-byte channel limit). Under tenant isolation only a caller that may use the namespace
-- learns it.
-- access: worker
CREATE OR REPLACE FUNCTION postkit_queue.channel(p_namespace text, p_queue text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF postkit_queue.tenant_isolation_on()
       AND NOT postkit_queue.caller_sees_all()
       AND NOT p_namespace = ANY (postkit_queue.my_namespaces()) THEN
        RAISE EXCEPTION 'postkit: permission denied for namespace %', p_namespace
            USING ERRCODE = '42501';
    END IF;
    RETURN postkit_queue.channel_name(p_namespace, p_queue);
END
$$;

-- results_channel: the LISTEN channel of a namespace's results ('postkit_results_' and an
-- md5), on which each settle that a waiter for a result may want is announced, with the job
-- ids as payload (notify_results). Under tenant isolation only a caller that may use the
-- namespace learns it, as with channel().
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.results_channel(p_namespace text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF postkit_queue.tenant_isolation_on()
       AND NOT postkit_queue.caller_sees_all()
       AND NOT p_namespace = ANY (postkit_queue.my_namespaces()) THEN
        RAISE EXCEPTION 'postkit: permission denied for namespace %', p_namespace
            USING ERRCODE = '42501';
    END IF;
    RETURN postkit_queue.results_channel_name(p_namespace);
END
$$;

-- The schema's version, for callers that may not read the migrations table.
-- access: producer
CREATE OR REPLACE FUNCTION postkit_queue.schema_version()
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT coalesce(max(m.version), 0) FROM postkit_queue.migrations m);
END
$$;

-- The owner the schema should have: its current owner, unless that is a superuser, in which
-- case postkit_queue_owner (created here when missing). A SECURITY DEFINER function owned by a
-- superuser would bypass row-level security and turn any flaw into a superuser's.
CREATE OR REPLACE FUNCTION postkit_queue.owner_role()
RETURNS oid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner oid := (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                    WHERE n.nspname = 'postkit_queue');
    v_role  pg_catalog.pg_roles%ROWTYPE;
    v_logs_in_for_citus boolean := false;
BEGIN
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = v_owner) THEN
        RETURN v_owner;
    END IF;
    SELECT * INTO v_role FROM pg_catalog.pg_roles r WHERE r.rolname = 'postkit_queue_owner';
    IF NOT FOUND THEN
        CREATE ROLE postkit_queue_owner NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE
            NOREPLICATION NOBYPASSRLS NOINHERIT;
        SELECT * INTO v_role FROM pg_catalog.pg_roles r WHERE r.rolname = 'postkit_queue_owner';
    END IF;
    -- A role of that name that someone could log in as, or act as through membership, would
    -- own every job: refuse to hand the queue to it. On a server with Citus it logs in, with
    -- no password: Citus connects to the other nodes as the current user, who is the owner
    -- inside the functions (distribute_on_citus gives it LOGIN; pg_hba.conf must let it in
    -- from the cluster's nodes alone). Reached only when the schema's owner is a superuser,
    -- so the installer is one and may read pg_authid.
    IF v_role.rolcanlogin AND to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        v_logs_in_for_citus := NOT EXISTS (SELECT FROM pg_catalog.pg_authid a
                                           WHERE a.oid = v_role.oid
                                             AND a.rolpassword IS NOT NULL);
    END IF;
    IF (v_role.rolcanlogin AND NOT v_logs_in_for_citus)
       OR v_role.rolsuper OR v_role.rolbypassrls OR v_role.rolcreaterole
       OR v_role.rolcreatedb OR v_role.rolreplication
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
                  WHERE m.roleid = v_role.oid OR m.member = v_role.oid) THEN
        RAISE EXCEPTION 'postkit: the role postkit_queue_owner exists but can log in (with a '
                        'password, where Citus is), has a special attribute, or has members or '
                        'roles of its own; it cannot own the queue. Drop it, or make it a '
                        'plain NOLOGIN role without members.'
            USING ERRCODE = 'PKQ11';
    END IF;
    RETURN v_role.oid;
END
$$;

-- Grant p_role_oid exactly the API of its access kind: EXECUTE on the functions of that kind and
-- the kinds below it, none on the others.
CREATE OR REPLACE FUNCTION postkit_queue.apply_grant(p_role_oid oid, p_access text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_function regprocedure;
    v_allowed  boolean;
    v_role     name := (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid = p_role_oid);
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA postkit_queue TO %I', v_role);
    FOR v_function, v_allowed IN
        SELECT p.oid::regprocedure,
               array_position(ARRAY['producer', 'worker', 'operator'], a.access)
                   <= array_position(ARRAY['producer', 'worker', 'operator'], p_access)
        FROM pg_catalog.pg_proc p
        JOIN postkit_queue.api a ON a.name = p.proname
        WHERE p.pronamespace = 'postkit_queue'::regnamespace
    LOOP
        EXECUTE format(CASE WHEN v_allowed THEN 'GRANT EXECUTE ON FUNCTION %s TO %I'
                            ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM %I' END,
                       v_function, v_role);
    END LOOP;
END
$$;

-- grant_access: give a role exactly what one kind of Postkit user needs: EXECUTE on the API
-- functions of that kind (each kind includes the one before), USAGE on the schema, nothing on
-- the tables. Granting another kind later replaces the first. Run by the owner or a superuser.
CREATE OR REPLACE FUNCTION postkit_queue.grant_access(p_role name, p_access text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role_oid oid;
BEGIN
    IF p_access IS NULL OR p_access NOT IN ('producer', 'worker', 'operator') THEN
        RAISE EXCEPTION 'postkit: access must be producer, worker or operator, got %',
            coalesce(p_access, 'NULL') USING ERRCODE = 'PKQ11';
    END IF;
    PERFORM postkit_queue.refuse_roles_on_citus('grant access to a role');
    SELECT r.oid INTO v_role_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'postkit: no role named %', coalesce(p_role, 'NULL')
            USING ERRCODE = 'PKQ11';
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = v_role_oid) THEN
        RAISE EXCEPTION 'postkit: % is a superuser, which no grant can limit', p_role
            USING ERRCODE = 'PKQ11';
    END IF;
    INSERT INTO postkit_queue.grants (role_oid, access) VALUES (v_role_oid, p_access)
    ON CONFLICT (role_oid) DO UPDATE SET access = excluded.access;
    PERFORM postkit_queue.apply_grant(v_role_oid, p_access);
END
$$;

-- revoke_access: take every Postkit privilege from a role. Returns false if it had none.
CREATE OR REPLACE FUNCTION postkit_queue.revoke_access(p_role name)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role_oid oid;
BEGIN
    SELECT r.oid INTO v_role_oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'postkit: no role named %', coalesce(p_role, 'NULL')
            USING ERRCODE = 'PKQ11';
    END IF;
    EXECUTE format('REVOKE ALL ON ALL ROUTINES IN SCHEMA postkit_queue FROM %I', p_role);
    EXECUTE format('REVOKE ALL ON SCHEMA postkit_queue FROM %I', p_role);
    DELETE FROM postkit_queue.grants g WHERE g.role_oid = v_role_oid;
    RETURN FOUND;
END
$$;

-- Make ownership and grants what this file's header says, whatever an upgrade's migrations
-- created: every object belongs to the owner, the API functions run as it, nothing else is
-- callable, and each recorded grant holds. Idempotent; every install runs it last. It takes no
-- lock that waits for the queue's transactions, so that an application may install at startup
-- while others work.
CREATE OR REPLACE FUNCTION postkit_queue.apply_privileges()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner    oid := postkit_queue.owner_role();
    v_owner_name name := (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid = v_owner);
    v_object   record;
BEGIN
    EXECUTE format('ALTER SCHEMA postkit_queue OWNER TO %I', v_owner_name);
    FOR v_object IN
        SELECT c.oid::regclass AS name, c.relkind
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'postkit_queue'::regnamespace AND c.relkind IN ('r', 'p', 'S', 'v')
          AND c.relowner <> v_owner
          -- An identity sequence follows its table.
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                          WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                            AND d.deptype = 'i')
    LOOP
        EXECUTE format(CASE WHEN v_object.relkind = 'S' THEN 'ALTER SEQUENCE %s OWNER TO %I'
                            ELSE 'ALTER TABLE %s OWNER TO %I' END,
                       v_object.name, v_owner_name);
    END LOOP;
    -- Callers hold nothing on the tables and sequences. A relation never granted has no ACL
    -- (PostgreSQL's default: the owner's privileges alone), while one whose grants were
    -- revoked stores that same list explicitly. Revoking from PUBLIC stores it on every
    -- relation, so that the catalogs say the same whichever grants a database has seen.
    FOR v_object IN
        SELECT c.oid::regclass AS name, c.relkind
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'postkit_queue'::regnamespace AND c.relkind IN ('r', 'p', 'S', 'v')
          AND c.relacl IS NULL
    LOOP
        EXECUTE format(CASE WHEN v_object.relkind = 'S' THEN 'REVOKE ALL ON SEQUENCE %s FROM PUBLIC'
                            ELSE 'REVOKE ALL ON TABLE %s FROM PUBLIC' END, v_object.name);
    END LOOP;
    -- The types (types.sql); a table's row type follows its table.
    FOR v_object IN
        SELECT t.oid::regtype AS name FROM pg_catalog.pg_type t
        WHERE t.typnamespace = 'postkit_queue'::regnamespace AND t.typtype = 'e'
          AND t.typowner <> v_owner
    LOOP
        EXECUTE format('ALTER TYPE %s OWNER TO %I', v_object.name, v_owner_name);
    END LOOP;
    FOR v_object IN
        SELECT p.oid::regprocedure AS name, p.proname, p.prokind,
               EXISTS (SELECT 1 FROM postkit_queue.api a WHERE a.name = p.proname) AS is_api,
               EXISTS (SELECT 1 FROM unnest(p.proconfig) AS s(setting)
                       WHERE s.setting LIKE 'search\_path=%') AS pinned
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'postkit_queue'::regnamespace
    LOOP
        IF v_object.is_api AND NOT v_object.pinned THEN
            -- A SECURITY DEFINER function that resolves names through its caller's search_path
            -- runs whatever the caller planted, as the owner.
            RAISE EXCEPTION 'postkit: API function % does not pin its search_path', v_object.name
                USING ERRCODE = 'PKQ12';
        END IF;
        EXECUTE format('ALTER ROUTINE %s OWNER TO %I', v_object.name, v_owner_name);
        EXECUTE format(CASE WHEN v_object.is_api THEN 'ALTER ROUTINE %s SECURITY DEFINER'
                            ELSE 'ALTER ROUTINE %s SECURITY INVOKER' END, v_object.name);
        -- PostgreSQL grants EXECUTE to PUBLIC on every new function; here nobody gets it but
        -- the roles the grants below name.
        EXECUTE format('REVOKE ALL ON ROUTINE %s FROM PUBLIC', v_object.name);
    END LOOP;
    -- Grants whose role is gone are forgotten; the others are applied again, which grants the
    -- functions added since.
    DELETE FROM postkit_queue.grants g
    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.role_oid);
    -- So are assignments: an OID reused later (after a restore into another cluster, say)
    -- must not inherit a dropped role's namespaces.
    DELETE FROM postkit_queue.tenants t
    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = t.role_oid);
    PERFORM postkit_queue.apply_grant(g.role_oid, g.access) FROM postkit_queue.grants g;
END
$$;

-- The caller as the policy names it: caller()'s expression, inline (the role SET ROLE chose,
-- else the session's).
CREATE OR REPLACE FUNCTION postkit_queue.policy_caller()
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN 'COALESCE(NULLIF(pg_catalog.current_setting(''role''), ''none''), SESSION_USER)::name';
END
$$;

-- The policy of tenant isolation on p_table: the caller sees every namespace (caller_sees_all's
-- test, inline, against the owner's OID written in as a constant), or the row's namespace is
-- assigned to a role the caller is a member of. The assignments stay in the tenants table,
-- which only the owner reads: written into a function's body or the policy's text, as they
-- once were, they would be readable by every role (pg_proc and pg_policy are public), and each
-- tenant would learn the others' namespaces. An OR evaluates its arms in order, so a caller
-- that sees everything never reads tenants; a tenant's row costs a probe of tenants' primary
-- key (namespace first, usually one assignment) and a membership check, planned with the
-- statement, so that an assignment takes effect at every session's next statement. Citus
-- refuses a subquery in a policy on a distributed table; a queue placed on Citus takes no
-- isolation (refuse_roles_on_citus).
CREATE OR REPLACE FUNCTION postkit_queue.tenant_policy(p_table text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The row's column by its table's name: inside the subquery, a bare "namespace" would be
    -- the assignment's own.
    RETURN format('pg_catalog.pg_has_role(%1$s, %2$s::pg_catalog.oid, %3$L) '
                  'OR EXISTS (SELECT FROM postkit_queue.tenants assigned '
                  'WHERE assigned.namespace OPERATOR(pg_catalog.=) %5$I.namespace '
                  'AND pg_catalog.pg_has_role(%1$s, assigned.role_oid, %4$L))',
                  postkit_queue.policy_caller(),
                  (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                   WHERE n.nspname = 'postkit_queue'), 'USAGE', 'MEMBER', p_table);
END
$$;

-- enable_tenant_isolation: turn on row-level security on every queue table, forced on the owner
-- too, since the API functions run as the owner, with the policy tenant_policy writes. A
-- caller that does not see everything sees, pulls, settles and redrives only the rows of its
-- own namespaces. Idempotent. Writing a policy locks its table (ACCESS EXCLUSIVE) until the
-- transaction ends; assigning a namespace later writes no policy (tenant_policy).
CREATE OR REPLACE FUNCTION postkit_queue.enable_tenant_isolation()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_table  text;
    v_policy text;
BEGIN
    PERFORM postkit_queue.refuse_roles_on_citus('turn on tenant isolation');
    FOREACH v_table IN ARRAY ARRAY['jobs', 'dead_letters', 'completed_jobs', 'job_results',
                                   'job_dependencies', 'job_ancestry', 'cancelled_jobs',
                                   'queue_stats', 'queue_settings', 'flow_state', 'schedules',
                                   'workers', 'wakeups', 'slot_waiters', 'workflow_steps',
                                   'workflow_events', 'group_weights'] LOOP
        v_policy := postkit_queue.tenant_policy(v_table);
        EXECUTE format('ALTER TABLE postkit_queue.%I ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE format('ALTER TABLE postkit_queue.%I FORCE ROW LEVEL SECURITY', v_table);
        EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON postkit_queue.%I', v_table);
        EXECUTE format('CREATE POLICY tenant_isolation ON postkit_queue.%I '
                       'USING (%s) WITH CHECK (%s)', v_table, v_policy, v_policy);
    END LOOP;
    -- Only the owner reads the assignments (my_namespaces runs as the owner).
    ALTER TABLE postkit_queue.tenants ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS own_assignments ON postkit_queue.tenants;
END
$$;

-- The API list: every function a caller may execute, and the least access kind that may call
-- it (producer, worker, operator: each includes the ones before it). Each API function says
-- its own on the line above its CREATE FUNCTION (`-- access: worker`), in the file of its
-- body; the installer writes them here (schema.py, api_access), in access then name order.
-- apply_privileges grants by this list, and every install that changes the schema makes the
-- table hold exactly these rows.
WITH listed (name, access) AS (VALUES
{{api}}
), unlisted AS (
    DELETE FROM postkit_queue.api a WHERE NOT EXISTS (SELECT FROM listed l WHERE l.name = a.name)
)
INSERT INTO postkit_queue.api (name, access) SELECT l.name, l.access FROM listed l
ON CONFLICT (name) DO UPDATE SET access = EXCLUDED.access;
