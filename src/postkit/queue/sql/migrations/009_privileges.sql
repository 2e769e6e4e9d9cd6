-- Migration 9: callers reach the tables only through the functions (security.sql applies the
-- ownership, the API list and the grants); assignments and grants are kept by role OID; the
-- notification channels are keyed by a secret.

CREATE TABLE postkit_queue.api (
    name   text PRIMARY KEY,
    access text NOT NULL CHECK (access IN ('producer', 'worker', 'operator'))
);

CREATE TABLE postkit_queue.grants (
    role_oid oid  PRIMARY KEY,
    access   text NOT NULL CHECK (access IN ('producer', 'worker', 'operator'))
);

-- Assignments by role OID; an assignment whose role is gone is dropped.
DROP POLICY IF EXISTS own_assignments ON postkit_queue.tenants;
ALTER TABLE postkit_queue.tenants ADD COLUMN role_oid oid;
UPDATE postkit_queue.tenants t SET role_oid = r.oid
FROM pg_catalog.pg_roles r WHERE r.rolname = t.role;
DELETE FROM postkit_queue.tenants WHERE role_oid IS NULL;
ALTER TABLE postkit_queue.tenants DROP CONSTRAINT tenants_pkey;
ALTER TABLE postkit_queue.tenants DROP COLUMN role;
ALTER TABLE postkit_queue.tenants ALTER COLUMN role_oid SET NOT NULL;
ALTER TABLE postkit_queue.tenants ADD PRIMARY KEY (namespace, role_oid);

CREATE TABLE postkit_queue.channel_key (
    key text NOT NULL
);
INSERT INTO postkit_queue.channel_key (key)
VALUES (pg_catalog.md5(pg_catalog.gen_random_uuid()::text || pg_catalog.clock_timestamp()::text));

-- Until this migration grant_access granted table privileges. Record each such role's access
-- kind and take the table and function privileges back: apply_privileges grants the functions
-- of that kind instead.
INSERT INTO postkit_queue.grants (role_oid, access)
SELECT r.oid,
       CASE WHEN has_table_privilege(r.oid, 'postkit_queue.queue_settings', 'UPDATE')
                THEN 'operator'
            WHEN has_table_privilege(r.oid, 'postkit_queue.jobs', 'UPDATE') THEN 'worker'
            ELSE 'producer' END
FROM pg_catalog.pg_roles r
WHERE NOT r.rolsuper
  AND r.oid <> (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                WHERE n.nspname = 'postkit_queue')
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c, aclexplode(c.relacl) acl
              WHERE c.relnamespace = 'postkit_queue'::regnamespace AND acl.grantee = r.oid
                AND c.relname = 'jobs' AND acl.privilege_type = 'INSERT');

DO $$
DECLARE
    v_grant record;
BEGIN
    FOR v_grant IN
        SELECT DISTINCT c.oid::regclass AS name, r.rolname
        FROM pg_catalog.pg_class c, aclexplode(c.relacl) acl
        JOIN pg_catalog.pg_roles r ON r.oid = acl.grantee
        WHERE c.relnamespace = 'postkit_queue'::regnamespace AND acl.grantee <> c.relowner
    LOOP
        EXECUTE format('REVOKE ALL ON %s FROM %I', v_grant.name, v_grant.rolname);
    END LOOP;
    FOR v_grant IN
        SELECT DISTINCT r.rolname
        FROM pg_catalog.pg_proc p, aclexplode(p.proacl) acl
        JOIN pg_catalog.pg_roles r ON r.oid = acl.grantee
        WHERE p.pronamespace = 'postkit_queue'::regnamespace AND acl.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE ALL ON ALL ROUTINES IN SCHEMA postkit_queue FROM %I',
                       v_grant.rolname);
    END LOOP;
END
$$;
