-- Migration 43: events for workflow runs (workflows.sql). send_event keeps an event for a live
-- run (workflow_events) and wakes it if it waits; wait_event takes it, or parks the run until
-- its deadline; a run's end deletes its events (finish_steps).
CREATE TABLE postkit_queue.workflow_events (
    namespace text        NOT NULL,
    run_id    bigint      NOT NULL,
    name      text        NOT NULL,
    payload   jsonb,
    key       text,
    sent_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, run_id, name)
);
-- schema: 245b2bc1649bb76e
