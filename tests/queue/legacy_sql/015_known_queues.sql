-- Postkit queue, migration 15: the queues a namespace has used, for the command line's typo
-- guard.
--
-- The command line refuses a queue name the namespace never used (postkit queue pause sned_otp
-- would otherwise create a ghost queue). queues() knows a queue only while it has jobs, dead
-- letters, settings or outcomes in the last hour, so a healthy queue that gets a job a day was
-- "unknown" most of the day. Now every worker registers the queues it serves when it starts
-- (a settings row of built-in defaults, which changes no behaviour), and known_queues adds the
-- queues schedules push to.

-- register_queues: record that a worker serves these queues. A queue already known keeps its
-- row (and its settings) untouched; one INSERT, conflicts ignored on the primary key.
CREATE FUNCTION postkit_queue.register_queues(p_namespace text, p_queues text[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
    v_added integer;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    IF p_queues IS NULL THEN
        RAISE EXCEPTION 'postkit: queues must not be NULL' USING ERRCODE = 'PKQ01';
    END IF;
    PERFORM postkit_queue.check_array('queues', p_queues, false, 'PKQ01');
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM postkit_queue.check_name('queue', v_queue, true);
    END LOOP;
    INSERT INTO postkit_queue.queue_settings (namespace, queue, updated_at)
    SELECT p_namespace, q, postkit_queue.clock() FROM unnest(p_queues) AS q
    ORDER BY q  -- the same lock order in every worker
    ON CONFLICT (namespace, queue) DO NOTHING;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    RETURN v_added;
END
$$;

-- known_queues: every queue name the namespace has used: queues() (live jobs, dead letters,
-- settings, which include the queues workers registered, and recent outcomes) and the queues
-- its schedules push to. Names only: producers may ask, so that their pushes get the typo guard.
CREATE FUNCTION postkit_queue.known_queues(p_namespace text)
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q FROM postkit_queue.queues(p_namespace) AS q
    UNION
    SELECT s.queue FROM postkit_queue.schedules s WHERE s.namespace = p_namespace
$$;

-- Migration 9's API registry.
INSERT INTO postkit_queue.api (name, access) VALUES
    ('register_queues', 'worker'), ('known_queues', 'producer');
