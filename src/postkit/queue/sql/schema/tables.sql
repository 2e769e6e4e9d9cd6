-- Tables: the state a fresh install creates.
--
-- An upgrade reaches exactly this state through the migrations (sql/migrations/), and
-- tests/queue/test_schema_upgrade.py compares the two. Nobody but the schema's owner reads or
-- writes these tables: callers go through the functions (security.sql).

-- The live jobs: pending (waiting for run_at) and running (claimed). Completed jobs are deleted
-- (or archived in completed_jobs) and dead ones move to dead_letters, so the table the workers
-- scan holds the backlog and nothing else.
CREATE TABLE postkit_queue.jobs (
    namespace     text        NOT NULL,
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    queue         text        NOT NULL,
    state         postkit_queue.job_state NOT NULL DEFAULT 'pending',
    payload       jsonb       NOT NULL,
    priority      smallint    NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL CHECK (max_attempts >= 1),
    unique_key    text,
    -- The claim. worker_id is the name the claimant gave; claim_token is new for every claim and
    -- is the fence: a stale worker holding an older token can never settle a newer attempt.
    worker_id     text,
    claim_token   uuid,
    claimed_at    timestamptz,
    visible_until timestamptz,
    -- Per-job retry policy; NULL means the queue's setting, then the built-in default.
    backoff_base  interval,
    backoff_cap   interval,
    -- One entry per failed attempt: {"attempt", "kind", "error", "worker_id", "at"}.
    errors        jsonb       NOT NULL DEFAULT '[]',
    created_at    timestamptz NOT NULL,
    -- The producer's trace context: the W3C propagation carrier of the span that pushed the job,
    -- {"traceparent": "00-...", "tracestate": "..."} (check_trace_context). NULL: pushed outside
    -- any trace. The worker links the span it runs the handler in to it.
    trace_context jsonb,
    -- The job's group (push's group_key): the jobs of one key of a queue with group limits
    -- (queue_settings.group_concurrency, group_ordered) run at most so many at a time, or one
    -- after another in push order. NULL: no group; no group limit applies. Last in the row,
    -- where version 21 added it.
    group_key     text,
    -- Dependencies (dependencies.sql), last in the row, where version 31 added them.
    -- depends_on: the parents the job was pushed with (NULL: none), which its handler reads
    -- the results of (parent_results). waiting_on: how many of them have not completed yet,
    -- set only while the job is waiting: each parent's ack takes one off, and the last makes
    -- the job pending, a counter so that no ack reads the other parents. has_children: some
    -- waiting job depends on this one; its ack, dead letter or cancel looks for them only
    -- then. A child's push sets it under the parent's row lock, which orders the push and the
    -- parent's ack (lock_parents).
    depends_on    bigint[],
    waiting_on    integer,
    has_children  boolean,
    -- What the running attempt's handler last reported (report_progress), last in the row,
    -- where version 32 added them: a fraction from 0 to 1, a note, and when. A retry, a release
    -- and a rescue clear them.
    progress      float8      CHECK (progress BETWEEN 0 AND 1),
    progress_note text        CHECK (char_length(progress_note) <= 200),
    progress_at   timestamptz,
    -- A workflow run (workflows.sql) that recorded a step, last in the row, where version 41
    -- added it: its ack, dead letter, cancel or purge gives its steps their retention then.
    has_steps     boolean,
    PRIMARY KEY (namespace, id),
    -- Compared as text: a label that ALTER TYPE ... ADD VALUE adds cannot be used in the
    -- transaction that adds it, which is the upgrade's (version 31).
    CONSTRAINT jobs_state_check CHECK (state::text IN ('pending', 'running', 'waiting')),
    CONSTRAINT jobs_waiting_check CHECK ((state::text = 'waiting') = (waiting_on IS NOT NULL)),
    CONSTRAINT jobs_claim_check
        CHECK ((state = 'running') = (claim_token IS NOT NULL AND visible_until IS NOT NULL))
) WITH (
    -- Free space on each page, for the new row versions that claims and retries write.
    fillfactor = 70,
    -- The table churns: every job is inserted, updated and deleted within seconds. Vacuum and
    -- analyze it after 1-2% of it changed instead of PostgreSQL's default 20%, so dead index
    -- entries are cleared quickly and statistics follow the backlog.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0,
    -- A VACUUM that finds empty pages at the table's end (a drained backlog) would cut them off
    -- under an ACCESS EXCLUSIVE lock, which stops every push and claim while it lasts: with 64
    -- producers pushing while workers drained, the worker's vacuum service sat in that phase
    -- (Timeout:VacuumTruncate) and the producers' commit tail grew. The pages stay, and the
    -- next pushes fill them.
    vacuum_truncate = false
);

-- Serves pull: one range scan over the pending rows of one (namespace, queue) in pull order.
-- Partial, so running rows never appear in it and the scan never steps over claimed work.
CREATE INDEX jobs_pull_idx ON postkit_queue.jobs (namespace, queue, priority DESC, run_at, id)
    WHERE state = 'pending';

-- Serves tick_timeouts: the running rows of a namespace, oldest deadline first.
CREATE INDEX jobs_deadline_idx ON postkit_queue.jobs (namespace, visible_until)
    WHERE state = 'running';

-- Serves push's deduplication: at most one live (pending or running) job per unique_key.
-- Completed and dead jobs leave this table, so the key becomes free again.
CREATE UNIQUE INDEX jobs_unique_key_idx ON postkit_queue.jobs (namespace, queue, unique_key)
    WHERE unique_key IS NOT NULL;

-- Serve the group limits at claim time (flow.sql): the live jobs of one group key in push
-- order (is a job the oldest of its key, for group_ordered), and the running ones of a key (how
-- many run now, for group_concurrency). Partial on group_key, so a job without one, the only
-- kind a queue without group limits has, never enters either and costs neither any write.
CREATE INDEX jobs_group_idx ON postkit_queue.jobs (namespace, queue, group_key, id)
    WHERE group_key IS NOT NULL;
CREATE INDEX jobs_group_running_idx ON postkit_queue.jobs (namespace, queue, group_key)
    WHERE state = 'running' AND group_key IS NOT NULL;

-- Serves a fair queue's claims (fair.sql): the groups with pending jobs, one probe each in
-- group order (the claim's round over the groups), and a group's ready jobs in pull order.
-- Partial on group_key, as the two above: a job without one never enters it.
CREATE INDEX jobs_fair_idx
    ON postkit_queue.jobs (namespace, queue, group_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_key IS NOT NULL;

-- Serves the waiting listing (jobs) and count (stats) of a queue, in push order, and the skip
-- scan of the queues with waiting jobs (queues). Partial: only a waiting job has
-- a waiting_on count, so the claim path never writes it.
CREATE INDEX jobs_waiting_idx ON postkit_queue.jobs (namespace, queue, id)
    WHERE waiting_on IS NOT NULL;

-- The edges of the dependency graph into the waiting jobs: one row per (parent, waiting
-- child), written by the child's push, kept while the child waits (whether its parent is live
-- or completed, so that job_tree finds a waiting child from either), and deleted when the child
-- stops waiting: made pending by its last parent's ack, or cancelled. Serves release_children,
-- cancel_descendants and job_tree: one range scan per parent; and the deletes of a child's
-- edges: one probe per parent (the child's depends_on names them).
CREATE TABLE postkit_queue.job_dependencies (
    namespace text   NOT NULL,
    parent_id bigint NOT NULL,
    child_id  bigint NOT NULL,
    PRIMARY KEY (namespace, parent_id, child_id)
);

-- The completed jobs that had children, each with its parents (depends_on), kept for its
-- queue's retain_dead: a completed job leaves the jobs table, and with it the link from its
-- parents to the children it released, which job_tree follows down from a root through it. A
-- job without parents needs no row (a walk starts at it), nor one without children (a walk
-- ends at it). Written by the ack that completes the job (keep_ancestry).
CREATE TABLE postkit_queue.job_ancestry (
    namespace  text        NOT NULL,
    job_id     bigint      NOT NULL,
    queue      text        NOT NULL,
    depends_on bigint[]    NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, job_id)
);

-- Serve job_tree's walk down a dependency tree: the jobs, released (pending or running) or
-- completed with children, whose parents include one of a generation's (a waiting one is found
-- by its edges, job_dependencies). Partial on the jobs table: a job without parents, the usual
-- kind, never enters it and costs it no write, nor does a waiting one, whose row each parent's
-- ack updates (a fan-in child of 10,000 parents would be indexed again at each of them).
CREATE INDEX job_ancestry_depends_on_idx ON postkit_queue.job_ancestry USING gin (depends_on);
CREATE INDEX jobs_depends_on_idx ON postkit_queue.jobs USING gin (depends_on)
    WHERE depends_on IS NOT NULL AND waiting_on IS NULL;

-- Serves prune(): the ancestry of a namespace whose retention ran out.
CREATE INDEX job_ancestry_expires_at_idx ON postkit_queue.job_ancestry (namespace, expires_at);

-- The steps of workflow runs (workflows.sql): one row per step a run completed, written by
-- record_step in the transaction that checkpoints it, read back by each resume of the run
-- (workflow_steps). Kept while the run is live, and for its queue's retain_dead once it
-- finished (expires_at, set then); prune deletes them after.
CREATE TABLE postkit_queue.workflow_steps (
    namespace   text        NOT NULL,
    run_id      bigint      NOT NULL,
    position    integer     NOT NULL,
    name        text        NOT NULL,
    result      jsonb,
    attempt     integer     NOT NULL,  -- the run's attempt that recorded it
    recorded_at timestamptz NOT NULL,
    expires_at  timestamptz,
    -- Serves record_step and workflow_steps: a run's steps in order.
    PRIMARY KEY (namespace, run_id, position)
);

-- The events sent to workflow runs (send_event): one per (run, name), kept until the run
-- finishes (finish_steps deletes them), so that one sent before the run waits for it is
-- delivered when it does (wait_event).
CREATE TABLE postkit_queue.workflow_events (
    namespace text        NOT NULL,
    run_id    bigint      NOT NULL,
    name      text        NOT NULL,
    payload   jsonb,
    key       text,  -- the sender's idempotency key: the same key again is no second event
    sent_at   timestamptz NOT NULL,
    -- Serves send_event and wait_event: one primary-key probe.
    PRIMARY KEY (namespace, run_id, name)
);

-- Serves prune(): the steps of finished runs whose retention ran out.
CREATE INDEX workflow_steps_expires_at_idx ON postkit_queue.workflow_steps (namespace, expires_at)
    WHERE expires_at IS NOT NULL;

-- Jobs cancelled before they completed: by an operator (cancel, cancel_queue, cancel_tree),
-- or because a parent was dead-lettered or cancelled (reason says which). Kept for the queue's
-- retain_dead, as dead letters are, so that job_result can say 'cancelled' and why.
CREATE TABLE postkit_queue.cancelled_jobs (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL,
    attempts     integer     NOT NULL,
    depends_on   bigint[],
    reason       text        NOT NULL,
    cancelled_by text        NOT NULL,  -- the role that cancelled it, or whose call cascaded
    created_at   timestamptz NOT NULL,
    cancelled_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, job_id)
);

-- Serves prune(): the cancelled jobs of a namespace whose retention ran out.
CREATE INDEX cancelled_jobs_expires_at_idx ON postkit_queue.cancelled_jobs (namespace, expires_at);

-- Serves the cancelled listing (jobs) and count (stats) of a queue, in id order, and the skip
-- scan of the queues with cancelled jobs (queues).
CREATE INDEX cancelled_jobs_queue_idx ON postkit_queue.cancelled_jobs (namespace, queue, job_id);

-- Jobs that ran out of attempts or were failed, with everything needed to look into them and
-- to retry them (redrive).
CREATE TABLE postkit_queue.dead_letters (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL,
    attempts     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    unique_key   text,
    worker_id    text,        -- the last worker that held the job
    -- 'failed': a worker called fail; 'attempts_exhausted': nack with no attempts left;
    -- 'timed_out': the last claim expired with no attempts left (a poison pill).
    reason       text        NOT NULL CHECK (reason IN ('failed', 'attempts_exhausted', 'timed_out')),
    error        text,        -- the last error, for a quick look
    errors       jsonb       NOT NULL,  -- every attempt's error, oldest first
    created_at   timestamptz NOT NULL,
    failed_at    timestamptz NOT NULL,
    -- When the dead letter may be pruned (the queue's retain_dead after failed_at).
    expires_at   timestamptz NOT NULL,
    -- Set once, when an operator retries the dead letter: the job it became.
    redriven_job_id bigint,
    redriven_at     timestamptz,
    trace_context   jsonb,       -- the job's; its redriven job keeps it
    group_key       text,        -- the job's; its redriven job keeps it (version 21)
    PRIMARY KEY (namespace, job_id)
);

-- Serves dead_letters(): the newest dead letters of a namespace, optionally of one queue.
CREATE INDEX dead_letters_failed_at_idx
    ON postkit_queue.dead_letters (namespace, failed_at DESC, job_id DESC);

-- Serves prune(): the dead letters of a namespace whose retention ran out.
CREATE INDEX dead_letters_expires_at_idx ON postkit_queue.dead_letters (namespace, expires_at);

-- Serves queues() (one index probe per queue that has dead letters) and stats() (each queue's
-- dead count stops at the cap), however many dead letters other queues of the namespace hold.
CREATE INDEX dead_letters_queue_idx ON postkit_queue.dead_letters (namespace, queue, job_id)
    WHERE redriven_job_id IS NULL;

-- Serves job_lineage: the dead letter a redriven job was retried from, one probe per redrive
-- of a lineage. Partial: a dead letter enters it only when an operator redrives it.
CREATE INDEX dead_letters_redriven_idx ON postkit_queue.dead_letters (namespace, redriven_job_id)
    WHERE redriven_job_id IS NOT NULL;

-- A queue's settings: what its jobs get when push and pull do not say (max_attempts, the
-- visibility timeout of a claim, the base and cap of nack's backoff), whether it is paused, how
-- long finished jobs and their results are kept, and its largest payload. A job's own push
-- arguments win over its queue's settings, which win over the built-in defaults
-- (queue_policy).
CREATE TABLE postkit_queue.queue_settings (
    namespace          text        NOT NULL,
    queue              text        NOT NULL,
    max_attempts       integer     CHECK (max_attempts BETWEEN 1 AND 1000),
    visibility_timeout interval,
    backoff_base       interval,
    backoff_cap        interval,
    paused             boolean     NOT NULL DEFAULT false,
    retain_completed   interval,
    retain_dead        interval,
    max_payload_bytes  integer     CHECK (max_payload_bytes BETWEEN 1 AND 104857600),
    updated_at         timestamptz NOT NULL,
    -- How long the results of completed jobs are kept (job_results); NULL: not kept. Last in
    -- the row, where version 20 added it.
    retain_results     interval,
    -- Flow control, enforced when jobs are claimed (flow.sql), across every worker; NULL: no
    -- limit. concurrency: at most this many of the queue's jobs running at once. rate_limit
    -- and rate_period: at most rate_limit claims in any rate_period. group_concurrency: at
    -- most this many running per group key; group_ordered: one at a time per key, in push
    -- order. Last in the row, where version 21 added them. The checks hold every row to what
    -- check_flow_limits accepts, even one written by hand: a rate period of 200,000 years, say,
    -- would put the windows that claims, stats and next_run_at compute past the end of time.
    concurrency        integer     CHECK (concurrency BETWEEN 1 AND 100000),
    rate_limit         integer     CHECK (rate_limit BETWEEN 1 AND 100000),
    rate_period        interval    CHECK (rate_period > interval '0'
                                          AND rate_period <= interval '1 day'),
    group_concurrency  integer     CHECK (group_concurrency BETWEEN 1 AND 10000),
    group_ordered      boolean     NOT NULL DEFAULT false,
    -- Whether the queue's claims are shared fairly among its group keys (fair.sql), by their
    -- weights (group_weights). Last in the row, where version 46 added it.
    fair               boolean     NOT NULL DEFAULT false,
    -- Backpressure: a push that would make the queue hold more pending jobs than this is
    -- refused (check_room); NULL: no limit. Version 46 added it.
    max_pending        integer     CHECK (max_pending BETWEEN 1 AND 100000),
    CONSTRAINT queue_settings_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT queue_settings_ordered_check
        CHECK (NOT group_ordered OR group_concurrency IS NULL OR group_concurrency = 1),
    -- Serves queue_policy: one primary-key lookup per push, pull or nack that uses a default.
    PRIMARY KEY (namespace, queue)
);

-- Completed jobs of queues whose retain_completed is set; pruned when expires_at passes.
CREATE TABLE postkit_queue.completed_jobs (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    priority     smallint    NOT NULL,
    attempts     integer     NOT NULL,
    worker_id    text,
    errors       jsonb       NOT NULL,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    trace_context jsonb,
    PRIMARY KEY (namespace, job_id)
);

-- Serves prune(): the archived jobs of a namespace whose retention ran out.
CREATE INDEX completed_jobs_expires_at_idx ON postkit_queue.completed_jobs (namespace, expires_at);

-- The results of the completed jobs of queues whose retain_results is set: what each job's
-- handler returned (NULL: no value), written by the ack that completed it (record_outcomes),
-- read back by job_result, pruned when expires_at passes. Beside the jobs table, not in it, so
-- that the table the workers scan never carries them.
CREATE TABLE postkit_queue.job_results (
    namespace    text        NOT NULL,
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    result       jsonb,
    attempts     integer     NOT NULL,  -- the attempt that completed it
    completed_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    -- Serves job_result: one primary-key probe per read.
    PRIMARY KEY (namespace, job_id)
);

-- Serves prune(): the results of a namespace whose retention ran out.
CREATE INDEX job_results_expires_at_idx ON postkit_queue.job_results (namespace, expires_at);

-- Outcome counters per queue and minute (the outcome type's labels, one column each). Each
-- settling transaction adds to one row of one of eight slots (chosen by backend pid), so
-- concurrent workers rarely wait on the same row lock; stats() adds the slots up. Rows older
-- than two hours are pruned.
CREATE TABLE postkit_queue.queue_stats (
    namespace          text        NOT NULL,
    queue              text        NOT NULL,
    minute             timestamptz NOT NULL,
    slot               smallint    NOT NULL,
    completed          bigint      NOT NULL DEFAULT 0,
    retried            bigint      NOT NULL DEFAULT 0,
    rescued            bigint      NOT NULL DEFAULT 0,
    dead_lettered      bigint      NOT NULL DEFAULT 0,
    completed_attempts bigint      NOT NULL DEFAULT 0,
    -- Serves stats() (one namespace's recent minutes) and record_outcomes' upsert.
    PRIMARY KEY (namespace, queue, minute, slot)
);

-- The claim-time state of a flow-controlled queue (flow.sql), one row per queue with a limit.
-- Every claim of such a queue locks its row first, so the claims of one queue take turns: each
-- counts what runs (and what it has claimed lately) with every earlier claim committed, and
-- cannot overshoot a limit by racing another. A queue whose only limit is fair counts nothing:
-- its claims read the row without the lock and write it only when no other claim is (fair.sql). No caller holds a privilege on the table, so no
-- session can take that lock but a claim. For a rate limit it holds the queue's recent claims
-- as a log: at window_at[i], window_claims[i] jobs were claimed; entries older than the rate
-- period are dropped by the next claim. rate_held says the last claim found the window full:
-- once it empties, the queue's ready jobs are due to its waiting workers (next_run_at), even
-- when another limit may hold them too, until a claim finds the window open again.
CREATE TABLE postkit_queue.flow_state (
    namespace     text          NOT NULL,
    queue         text          NOT NULL,
    window_at     timestamptz[] NOT NULL DEFAULT '{}',
    window_claims integer[]     NOT NULL DEFAULT '{}',
    rate_held     boolean       NOT NULL DEFAULT false,
    -- A fair queue's round (fair.sql): the group whose turn it is, and the jobs it was given
    -- in that turn. Version 46 added them.
    fair_group    text,
    fair_given    integer       NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, queue)
);

-- The weights of a fair queue's groups (fair.sql): a group of weight 3 is given three jobs in
-- each of its turns, one of weight 1 one. A group without a row weighs 1. Written by operators
-- (set_group_weight); read by a claim, one primary-key probe per turn.
CREATE TABLE postkit_queue.group_weights (
    namespace  text        NOT NULL,
    queue      text        NOT NULL,
    group_key  text        NOT NULL,
    weight     integer     NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, queue, group_key)
);

-- Wake-up requests: the queues on which a worker waits for a notification. A worker about to
-- wait sets requested_at (request_wakeup), and the first transaction that makes a job of the
-- queue ready takes the request: it clears it and notifies (notify, helpers.sql). So while
-- every worker is busy, a push reads one row here, writes nothing and notifies nothing, and
-- its commit never queues for NOTIFY's database-wide lock. A row per queue that ever had a
-- waiting worker; the updates are HOT (no indexed column changes), hence the free space.
CREATE TABLE postkit_queue.wakeups (
    namespace    text        NOT NULL,
    queue        text        NOT NULL,
    requested_at timestamptz,
    PRIMARY KEY (namespace, queue)
) WITH (fillfactor = 50);

-- Workers waiting for a slot of a queue that a concurrency or group limit holds back: a row per
-- waiting listener, by its backend (wait_for_slot). A transaction that frees a slot or makes a
-- job ready there wakes the longest waiting of them, one per slot, on that listener's own
-- channel, and deletes its row (notify, helpers.sql): a release wakes one worker, not every
-- worker that LISTENs on the queue's channel. A listener whose wait ends deletes its rows
-- (stop_waiting); a backend that is gone is skipped and its row deleted.
CREATE TABLE postkit_queue.slot_waiters (
    namespace text        NOT NULL,
    queue     text        NOT NULL,
    pid       integer     NOT NULL,
    since     timestamptz NOT NULL,
    PRIMARY KEY (namespace, queue, pid)
);

-- Recurring jobs: a schedule pushes a job to a queue on a 5-field cron expression in a time
-- zone, or every fixed interval. The SDK computes each next run time (croniter); the database
-- owns which schedules are due and fires each due run exactly once, however many tickers run.
-- A schedule whose next run no ticker can compute, or whose job its queue refuses, is broken
-- (broken_at, broken_reason) and skipped until it is saved again.
CREATE TABLE postkit_queue.schedules (
    namespace    text        NOT NULL,
    name         text        NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    cron         text,
    timezone     text        NOT NULL DEFAULT 'UTC',
    every        interval,
    priority     smallint    NOT NULL DEFAULT 0,
    max_attempts integer,
    paused       boolean     NOT NULL DEFAULT false,
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_job_id  bigint,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    broken_at     timestamptz,
    broken_reason text,
    PRIMARY KEY (namespace, name),
    CHECK ((cron IS NULL) <> (every IS NULL))
);

-- Serves due_schedules: the schedules of a namespace that may fire, earliest next run first.
CREATE INDEX schedules_due_idx ON postkit_queue.schedules (namespace, next_run_at)
    WHERE NOT paused AND broken_at IS NULL;

-- The workers and tickers that run, for operators (workers.sql): one row each, registered at
-- start, heartbeated while running, deleted on a clean stop or by prune_workers once lost.
CREATE TABLE postkit_queue.workers (
    namespace          text        NOT NULL,
    worker_id          text        NOT NULL,
    kind               text        NOT NULL CHECK (kind IN ('worker', 'ticker')),
    host               text        NOT NULL,
    pid                integer     NOT NULL,
    queues             text[]      NOT NULL,
    concurrency        integer     NOT NULL,
    version            text        NOT NULL,
    heartbeat_interval interval    NOT NULL,
    started_at         timestamptz NOT NULL,
    heartbeat_at       timestamptz NOT NULL,
    -- Serves every call of workers.sql: the rows of one namespace, or one worker's.
    PRIMARY KEY (namespace, worker_id)
);

-- Which roles may use which namespaces, once tenant isolation is on; by role OID, so that a role
-- dropped and created again under the same name does not inherit the old one's namespaces (and
-- its jobs). An assignment whose role is gone is dropped by every install (apply_privileges).
CREATE TABLE postkit_queue.tenants (
    namespace text NOT NULL,
    role_oid  oid  NOT NULL,
    PRIMARY KEY (namespace, role_oid)
);

-- The API: every function a caller may execute, by name (all its overloads), and the least
-- access kind that may call it. Its rows are security.sql's list, which every install applies.
CREATE TABLE postkit_queue.api (
    name   text PRIMARY KEY,
    access text NOT NULL CHECK (access IN ('producer', 'worker', 'operator'))
);

-- Who was granted which access kind, by role OID: a role dropped and created again under the
-- same name does not inherit the old one's access.
CREATE TABLE postkit_queue.grants (
    role_oid oid  PRIMARY KEY,
    access   text NOT NULL CHECK (access IN ('producer', 'worker', 'operator'))
);

-- This install's secret, which only the owner reads: notification channel names are the md5 of
-- it with the namespace and queue (or the namespace alone, for its results), so a session
-- learns a channel only from channel() or results_channel(), which check the caller may use the
-- namespace.
CREATE TABLE postkit_queue.channel_key (
    key text NOT NULL
);
INSERT INTO postkit_queue.channel_key (key)
VALUES (pg_catalog.md5(pg_catalog.gen_random_uuid()::text || pg_catalog.clock_timestamp()::text));
