-- Migration 28: tenant isolation's policy reads the assignments from the tenants table, which
-- only the owner reads, instead of calling tenant_access, whose body held them as constants
-- that every role could read in pg_proc: each tenant learnt the others' namespaces. The
-- policies that call tenant_access go before it does; one stands in on jobs, so that the
-- install's last step (tenant_isolation, an upgrade under isolation) writes the current ones
-- in the same transaction. tenant_policy takes the table whose rows the policy's subquery
-- compares. A claim holds its queue's claims_lock shared, and a change of flow limits takes it
-- exclusive, so that a limit counts the claims made without it. get_job says whether a running
-- job's claim has expired (claim_expired), a new column of its result; schedules and
-- schedule_runs return a page (p_after, p_limit), for the dashboard. configure_queue keeps the
-- settings it is not given and resets those p_reset names, as update_queue_settings (now its
-- alias) did; the former body, which wrote every setting, is write_queue_settings.
DO $migration$
DECLARE
    v_table text;
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_policy p
               WHERE p.polrelid = 'postkit_queue.jobs'::pg_catalog.regclass
                 AND p.polname = 'tenant_isolation') THEN
        FOREACH v_table IN ARRAY ARRAY['jobs', 'dead_letters', 'completed_jobs', 'job_results',
                                       'queue_stats', 'queue_settings', 'flow_state',
                                       'schedules', 'workers', 'wakeups'] LOOP
            EXECUTE pg_catalog.format('DROP POLICY IF EXISTS tenant_isolation ON postkit_queue.%I',
                                      v_table);
        END LOOP;
        CREATE POLICY tenant_isolation ON postkit_queue.jobs USING (false);
    END IF;
END
$migration$;
DROP FUNCTION IF EXISTS postkit_queue.write_tenant_access();
DROP FUNCTION IF EXISTS postkit_queue.tenant_access(text, name);
DROP FUNCTION IF EXISTS postkit_queue.tenant_policy();
DROP FUNCTION IF EXISTS postkit_queue.get_job(text, bigint);
DROP FUNCTION IF EXISTS postkit_queue.schedules(text);
DROP FUNCTION IF EXISTS postkit_queue.schedule_runs(text);
DROP FUNCTION IF EXISTS postkit_queue.configure_queue(
    text, text, integer, interval, interval, interval, interval, interval, integer, interval,
    integer, integer, interval, integer, boolean);
-- schema: 17070cd5b20dc662
