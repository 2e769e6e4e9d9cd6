-- Migration 16: a job's state is the job_state type (types.sql); the claim's check gets a name
-- that says what it checks. The partial indexes and checks that compare the state are rebuilt
-- around the type change, and record_outcomes takes an outcome instead of text.
DROP FUNCTION postkit_queue.record_outcomes(postkit_queue.jobs[], text, timestamptz);
DROP INDEX postkit_queue.jobs_pull_idx, postkit_queue.jobs_deadline_idx;
ALTER TABLE postkit_queue.jobs
    DROP CONSTRAINT jobs_state_check,
    DROP CONSTRAINT jobs_check,
    ALTER COLUMN state DROP DEFAULT,
    ALTER COLUMN state TYPE postkit_queue.job_state USING state::postkit_queue.job_state,
    ALTER COLUMN state SET DEFAULT 'pending',
    ADD CONSTRAINT jobs_state_check CHECK (state IN ('pending', 'running')),
    ADD CONSTRAINT jobs_claim_check
        CHECK ((state = 'running') = (claim_token IS NOT NULL AND visible_until IS NOT NULL));
CREATE INDEX jobs_pull_idx ON postkit_queue.jobs (namespace, queue, priority DESC, run_at, id)
    WHERE state = 'pending';
CREATE INDEX jobs_deadline_idx ON postkit_queue.jobs (namespace, visible_until)
    WHERE state = 'running';
