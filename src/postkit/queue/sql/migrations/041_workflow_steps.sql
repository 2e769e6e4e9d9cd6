-- Migration 41: workflow steps (workflows.sql). A run is a job whose handler records each step
-- it completes (record_step, fenced by the claim, in the transaction that checkpoints it), and
-- reads them back when it resumes (workflow_steps): workflow_steps keeps them, the jobs table
-- gains has_steps, which tells a run's end to give its steps their retention (finish_steps),
-- and prune deletes them after. prune's result list changes, so its old signature goes before
-- the current functions are defined.
ALTER TABLE postkit_queue.jobs ADD COLUMN has_steps boolean;
CREATE TABLE postkit_queue.workflow_steps (
    namespace   text        NOT NULL,
    run_id      bigint      NOT NULL,
    position    integer     NOT NULL,
    name        text        NOT NULL,
    result      jsonb,
    attempt     integer     NOT NULL,
    recorded_at timestamptz NOT NULL,
    expires_at  timestamptz,
    PRIMARY KEY (namespace, run_id, position)
);
CREATE INDEX workflow_steps_expires_at_idx ON postkit_queue.workflow_steps (namespace, expires_at)
    WHERE expires_at IS NOT NULL;
DROP FUNCTION IF EXISTS postkit_queue.prune(text, integer);
-- schema: 7614fb3c1c30edbb
