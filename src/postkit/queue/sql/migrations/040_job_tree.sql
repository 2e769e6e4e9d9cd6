-- Migration 40: a job's tree (dependencies.sql). job_tree lists a job and what descends from
-- it, cancel_tree cancels the live part of it. The edges into a waiting job now stay until it
-- stops waiting (made pending, or cancelled), whether its parent is live or completed; the
-- jobs table gains an index of the released jobs' parents; and job_ancestry keeps the parents
-- of each completed job that had children, so that a walk goes on past it (ack and ack_many
-- write it, prune deletes it when its retention runs out). prune's result list changes, so
-- its old signature goes before the current functions are defined.
CREATE INDEX jobs_depends_on_idx ON postkit_queue.jobs USING gin (depends_on)
    WHERE depends_on IS NOT NULL AND waiting_on IS NULL;
CREATE TABLE postkit_queue.job_ancestry (
    namespace  text        NOT NULL,
    job_id     bigint      NOT NULL,
    queue      text        NOT NULL,
    depends_on bigint[]    NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, job_id)
);
CREATE INDEX job_ancestry_depends_on_idx ON postkit_queue.job_ancestry USING gin (depends_on);
CREATE INDEX job_ancestry_expires_at_idx ON postkit_queue.job_ancestry (namespace, expires_at);
DROP FUNCTION IF EXISTS postkit_queue.prune(text, integer);
-- schema: cda78dd6827b38c6
