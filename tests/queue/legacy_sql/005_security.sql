-- Postkit queue, migration 5: least privilege and opt-in tenant isolation.
--
-- Every function of the queue is SECURITY INVOKER (PostgreSQL's default): it runs with the
-- caller's privileges, so row-level security and table privileges apply to it exactly as they
-- would to the caller's own SQL. No function here is SECURITY DEFINER; there is no path by
-- which a role gains rights through Postkit. What a role may do is decided by its table
-- privileges, which grant_access hands out per kind of role:
--
--   producer  push jobs (and read its own jobs)          INSERT, SELECT on jobs
--   worker    pull, settle, extend, release, tick        + UPDATE, DELETE on jobs, writes to the
--                                                           dead-letter queue, archive, counters;
--                                                           firing schedules
--   operator  everything: redrive, purge, cancel,        + every table
--             pause, settings, schedules, retention
--
-- Tenant isolation: enable_tenant_isolation() turns on row-level security on every table, with
-- one rule: a role sees the rows of the namespaces assigned to it (assign_namespace), and of
-- those only. The queue's owner (the role that installed it) is exempt, as table owners are.

-- Which roles may use which namespaces, once isolation is on.
CREATE TABLE postkit_queue.tenants (
    namespace text NOT NULL,
    role      name NOT NULL,
    PRIMARY KEY (namespace, role)
);

-- The namespaces the current role may use: those assigned to it or to a role it is a member of.
CREATE FUNCTION postkit_queue.my_namespaces()
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(t.namespace), '{}')
    FROM postkit_queue.tenants t
    WHERE pg_has_role(t.role, 'MEMBER')
$$;

-- grant_access: give a role what one kind of Postkit user needs, and nothing more.
-- p_access is 'producer', 'worker' or 'operator' (each includes the one before).
CREATE FUNCTION postkit_queue.grant_access(p_role name, p_access text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_access IS NULL OR p_access NOT IN ('producer', 'worker', 'operator') THEN
        RAISE EXCEPTION 'postkit: access must be producer, worker or operator, got %',
            coalesce(p_access, 'NULL') USING ERRCODE = 'PKQ11';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = p_role) THEN
        RAISE EXCEPTION 'postkit: no role named %', p_role USING ERRCODE = 'PKQ11';
    END IF;
    -- Role names go through format('%I'): quoted as identifiers, never spliced as SQL.
    EXECUTE format('GRANT USAGE ON SCHEMA postkit_queue TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA postkit_queue TO %I', p_role);
    EXECUTE format('GRANT SELECT ON postkit_queue.migrations, postkit_queue.queue_settings, '
                   'postkit_queue.tenants TO %I', p_role);
    EXECUTE format('GRANT SELECT, INSERT ON postkit_queue.jobs TO %I', p_role);
    EXECUTE format('GRANT USAGE ON SEQUENCE postkit_queue.jobs_id_seq TO %I', p_role);
    IF p_access IN ('worker', 'operator') THEN
        EXECUTE format('GRANT UPDATE, DELETE ON postkit_queue.jobs TO %I', p_role);
        EXECUTE format('GRANT SELECT, INSERT ON postkit_queue.dead_letters, '
                       'postkit_queue.completed_jobs TO %I', p_role);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON postkit_queue.queue_stats TO %I', p_role);
        EXECUTE format('GRANT SELECT, UPDATE ON postkit_queue.schedules TO %I', p_role);
    END IF;
    IF p_access = 'operator' THEN
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON postkit_queue.jobs, '
                       'postkit_queue.dead_letters, postkit_queue.completed_jobs, '
                       'postkit_queue.queue_stats, postkit_queue.queue_settings, '
                       'postkit_queue.schedules TO %I', p_role);
    END IF;
END
$$;

-- enable_tenant_isolation: turn on row-level security on every queue table. From then on a
-- role other than the owner sees, pulls, settles and redrives only the rows of its own
-- namespaces, whether it calls the functions or writes SQL by hand. Idempotent.
CREATE FUNCTION postkit_queue.enable_tenant_isolation()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['jobs', 'dead_letters', 'completed_jobs', 'queue_stats',
                                   'queue_settings', 'schedules'] LOOP
        EXECUTE format('ALTER TABLE postkit_queue.%I ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON postkit_queue.%I', v_table);
        -- The scalar subquery (cast, so that ANY reads it as an array, not as a set of rows)
        -- makes my_namespaces() run once per statement, not once per row.
        EXECUTE format('CREATE POLICY tenant_isolation ON postkit_queue.%I '
                       'USING (namespace = ANY ((SELECT postkit_queue.my_namespaces())::text[])) '
                       'WITH CHECK '
                       '(namespace = ANY ((SELECT postkit_queue.my_namespaces())::text[]))',
                       v_table);
    END LOOP;
    -- Each role sees only its own assignments.
    ALTER TABLE postkit_queue.tenants ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS own_assignments ON postkit_queue.tenants;
    CREATE POLICY own_assignments ON postkit_queue.tenants
        USING (pg_has_role(role, 'MEMBER'));
END
$$;

-- assign_namespace: let p_role (and its members) use p_namespace once isolation is on.
CREATE FUNCTION postkit_queue.assign_namespace(p_namespace text, p_role name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = p_role) THEN
        RAISE EXCEPTION 'postkit: no role named %', p_role USING ERRCODE = 'PKQ11';
    END IF;
    INSERT INTO postkit_queue.tenants (namespace, role) VALUES (p_namespace, p_role)
    ON CONFLICT DO NOTHING;
END
$$;
