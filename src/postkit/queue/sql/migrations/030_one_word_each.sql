-- Migration 30: one word for each outcome (docs/concepts.md). The counters of dead-lettered
-- jobs are named so: queue_stats.dead becomes dead_lettered, and stats, outcomes_since and
-- outcome_series return dead_lettered_* and dead_lettered where they returned failed_* and
-- failed (a function's result columns change only by dropping it). tick_timeouts says rescued
-- for a job it returned to its queue, as its counters always did. One verb writes a queue's
-- settings, configure_queue: update_queue_settings, its former name, goes.
DO $migration$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_attribute a
               WHERE a.attrelid = 'postkit_queue.queue_stats'::pg_catalog.regclass
                 AND a.attname = 'dead' AND NOT a.attisdropped) THEN
        ALTER TABLE postkit_queue.queue_stats RENAME COLUMN dead TO dead_lettered;
    END IF;
    -- PostgreSQL 18 names a NOT NULL constraint after its column, and a rename keeps the name.
    IF EXISTS (SELECT FROM pg_catalog.pg_constraint c
               WHERE c.conrelid = 'postkit_queue.queue_stats'::pg_catalog.regclass
                 AND c.conname = 'queue_stats_dead_not_null') THEN
        ALTER TABLE postkit_queue.queue_stats
            RENAME CONSTRAINT queue_stats_dead_not_null TO queue_stats_dead_lettered_not_null;
    END IF;
END
$migration$;
DROP FUNCTION IF EXISTS postkit_queue.stats(text, text, integer, text, integer);
DROP FUNCTION IF EXISTS postkit_queue.outcomes_since(text, timestamptz);
DROP FUNCTION IF EXISTS postkit_queue.outcome_series(text, timestamptz, text);
DROP FUNCTION IF EXISTS postkit_queue.update_queue_settings(
    text, text, integer, interval, interval, interval, interval, interval, integer, text[],
    interval, integer, integer, interval, integer, boolean);
-- schema: b022090a16f31b0d
