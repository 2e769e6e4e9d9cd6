-- The statements of the install script (postkit.queue.schema renders them around the schema's
-- and the migrations' files). Placeholders in double braces are filled in when it renders:
-- {{latest}} the newest version, {{known}} the (version, checksum) pairs this Postkit
-- knows, {{versions}} the (version, name, checksum) rows it records, {{lowest}} and
-- {{version}} the range of installed versions a block runs for, {{statements}} its body,
-- {{lock_key}} the advisory lock of a first install.

-- name: pin_search_path
-- The script resolves every name in pg_catalog, whatever the installer's search_path: an
-- install runs as a superuser or the schema's owner, and a function planted in public (a
-- public.format(text, name) is a better match than pg_catalog.format(text, VARIADIC "any"))
-- would otherwise run with those rights. It also keeps PostgreSQL's notices to itself ("column
-- checksum already exists, skipping" is no news to an operator). The installer's own settings
-- are saved first and put back at the end, since install() may run inside the caller's
-- transaction.
DO $postkit_pin$ BEGIN PERFORM
    pg_catalog.set_config('postkit_queue.installer_search_path',
        coalesce(nullif(
            pg_catalog.current_setting('postkit_queue.installer_search_path', true), ''),
            pg_catalog.current_setting('search_path')), true),
    pg_catalog.set_config('postkit_queue.installer_messages',
        coalesce(nullif(
            pg_catalog.current_setting('postkit_queue.installer_messages', true), ''),
            pg_catalog.current_setting('client_min_messages')), true),
    pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true),
    pg_catalog.set_config('client_min_messages', 'warning', true);
END $postkit_pin$;

-- name: lock
-- Before anything is created, a schema that already exists must be one a Postkit install made:
-- owned by a superuser, postkit_queue_owner or this installer, and every object in it by its
-- owner or a superuser. A schema someone else created first (a database owner may create
-- schemas) would otherwise receive a superuser's install: its tables, its triggers, its jobs.
--
-- Then concurrent installers wait for each other instead of racing on CREATE. Once the schema
-- exists they queue on its migrations table, which no caller of the queue may lock (callers hold
-- no table privileges). The very first install takes an advisory lock, which any role could
-- hold: it waits for it at most 60 seconds, then says who holds it. The checks read pg_class
-- rather than calling to_regclass: a name looked up and not found before the wait stays "not
-- found" in this backend's catalog cache after the first installer commits.
DO $postkit_lock$
DECLARE
    v_schema oid;
    v_owner  oid;
    v_holder text;
    v_until  timestamptz := clock_timestamp() + interval '60 seconds';
BEGIN
    -- A superuser's session acting as another role (SET ROLE, or a role a database owner set as
    -- the database's default with ALTER DATABASE ... SET role) would create everything as that
    -- role, which would then own every tenant's jobs.
    IF current_user <> session_user
       AND (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user) THEN
        RAISE EXCEPTION 'postkit: this superuser session acts as role %: install as the '
                        'superuser itself (RESET ROLE; and check pg_db_role_setting for a '
                        'role setting of this database)', current_user USING ERRCODE = 'PKQ12';
    END IF;
    SELECT n.oid, n.nspowner INTO v_schema, v_owner FROM pg_namespace n
    WHERE n.nspname = 'postkit_queue';
    IF FOUND THEN
        IF NOT (SELECT r.rolsuper OR r.rolname = 'postkit_queue_owner' OR r.rolname = current_user
                FROM pg_roles r WHERE r.oid = v_owner) THEN
            RAISE EXCEPTION 'postkit: schema postkit_queue belongs to %, which is neither a superuser, '
                            'postkit_queue_owner nor this installer: a Postkit install did not '
                            'create it. Inspect it, then drop it or change its owner.',
                v_owner::regrole USING ERRCODE = 'PKQ12';
        END IF;
        SELECT string_agg(o.name, ', ') INTO v_holder FROM (
            SELECT c.oid::regclass::text AS name, c.relowner AS owner FROM pg_class c
            WHERE c.relnamespace = v_schema
            UNION ALL SELECT p.oid::regprocedure::text, p.proowner FROM pg_proc p
            WHERE p.pronamespace = v_schema
            UNION ALL SELECT t.oid::regtype::text, t.typowner FROM pg_type t
            WHERE t.typnamespace = v_schema) o
        JOIN pg_roles r ON r.oid = o.owner
        WHERE o.owner <> v_owner AND NOT r.rolsuper;
        IF v_holder IS NOT NULL THEN
            RAISE EXCEPTION 'postkit: schema postkit_queue holds objects that neither its owner nor a '
                            'superuser created: %. Inspect them before installing.', v_holder
                USING ERRCODE = 'PKQ12';
        END IF;
        IF EXISTS (SELECT 1 FROM pg_class c
                   WHERE c.relnamespace = v_schema AND c.relname = 'migrations') THEN
            LOCK TABLE postkit_queue.migrations IN SHARE ROW EXCLUSIVE MODE;
            RETURN;
        END IF;
    END IF;
    WHILE NOT pg_try_advisory_xact_lock({{lock_key}}) LOOP
        IF clock_timestamp() > v_until THEN
            SELECT string_agg(format('pid %s (role %s)', a.pid, a.usename), ', ') INTO v_holder
            FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.database = (
                SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
              AND (l.classid::bigint << 32) + l.objid::bigint = {{lock_key}};
            RAISE EXCEPTION 'postkit: another session has held the install lock for 60 seconds: '
                            '%. If it is not an install, end it (pg_terminate_backend).',
                coalesce(v_holder, 'unknown') USING ERRCODE = 'PKQ12';
        END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$postkit_lock$;

-- name: prepare
CREATE SCHEMA IF NOT EXISTS postkit_queue;
CREATE TABLE IF NOT EXISTS postkit_queue.migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text,
    applied_at timestamptz NOT NULL DEFAULT now()
);
-- An install from before checksums were recorded has none: it is refused below, since what it
-- ran cannot be known.
ALTER TABLE postkit_queue.migrations ADD COLUMN IF NOT EXISTS checksum text;

-- name: check_versions
-- Which versions are installed, and were they installed from files this Postkit knows? The
-- answer waits in a transaction-local setting for the blocks below.
DO $postkit_install$
DECLARE
    v_recorded record;
BEGIN
    FOR v_recorded IN SELECT m.version, m.name, m.checksum FROM postkit_queue.migrations m
                      WHERE m.version <= {{latest}} ORDER BY m.version LOOP
        IF NOT EXISTS (SELECT FROM (VALUES {{known}}) AS k(version, checksum)
                       WHERE k.version = v_recorded.version
                         AND k.checksum = v_recorded.checksum) THEN
            RAISE EXCEPTION 'postkit: migration % (%) in this database is not the one this '
                            'Postkit ships (checksum %): it was installed by another version. '
                            'Reinstall the schema or use the matching Postkit.',
                v_recorded.version, v_recorded.name, coalesce(v_recorded.checksum, 'none')
                USING ERRCODE = 'PKQ12';
        END IF;
    END LOOP;
    PERFORM pg_catalog.set_config('postkit_queue.installed_version', (
        SELECT coalesce(pg_catalog.max(m.version), 0) FROM postkit_queue.migrations m)::text,
        true);
END
$postkit_install$;

-- name: when_older
-- Runs its statements when the installed version is between {{lowest}} and {{version}}.
DO $postkit_install$
BEGIN
    IF pg_catalog.current_setting('postkit_queue.installed_version')::integer
       NOT BETWEEN {{lowest}} AND {{version}} THEN
        RETURN;
    END IF;
{{statements}}
END
$postkit_install$;

-- name: record_versions
INSERT INTO postkit_queue.migrations (version, name, checksum)
SELECT v.version, v.name, v.checksum FROM (VALUES {{versions}}) AS v(version, name, checksum)
WHERE v.version > pg_catalog.current_setting('postkit_queue.installed_version')::integer;

-- name: apply_privileges
-- Ownership and grants, for everything above (security.sql).
DO $postkit_install$ BEGIN PERFORM postkit_queue.apply_privileges(); END $postkit_install$;

-- name: tenant_isolation
-- An upgrade of a database under tenant isolation gives its tables the current policies,
-- whatever version turned isolation on. Only an upgrade: the policies change with a version,
-- and rewriting them takes locks that wait for every transaction on the queue's tables.
SELECT postkit_queue.enable_tenant_isolation() WHERE postkit_queue.tenant_isolation_on();

-- name: restore_search_path
DO $postkit_restore$ BEGIN PERFORM
    pg_catalog.set_config('search_path',
        pg_catalog.current_setting('postkit_queue.installer_search_path'), true),
    pg_catalog.set_config('client_min_messages',
        pg_catalog.current_setting('postkit_queue.installer_messages'), true),
    pg_catalog.set_config('postkit_queue.installer_search_path', '', true),
    pg_catalog.set_config('postkit_queue.installer_messages', '', true);
END $postkit_restore$;
