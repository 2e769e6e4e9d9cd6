-- The statements the Python SDK sends, one per SDK call, each a single round trip to one SQL
-- function of the queue module. Parameters use the pyformat style (%(name)s), which psycopg 3,
-- psycopg2 and Django's cursor all accept. Durations travel as whole microseconds (bigint; a
-- schedule's interval as seconds, float8) and become intervals here, so the SQL module checks
-- exactly the value the SDK checked before sending it; payloads travel as JSON text cast to
-- jsonb; JSON and UUIDs come back as text so that every driver returns the same Python types.
-- A job's state comes back as text too: a change of its SQL type (version 16 made it the
-- job_state enum) leaves each statement's result type, and the plans a driver prepared for it,
-- as they are.
--
-- These statements run under the caller's search_path, which may put a schema anyone can create
-- in (public, on PostgreSQL 14 and older) ahead of pg_catalog. So every function, type and
-- operator is schema-qualified: a planted public.unnest(text[]) or a domain named public.text
-- would otherwise be a better match than the built-in and run inside every worker. Keywords
-- (integer, bigint, boolean, interval, coalesce, CASE, extract) are bound to pg_catalog by the
-- grammar itself.
--
-- A line that ends with `-- when NAME is given` passes an optional parameter, by name: a call
-- that leaves NAME out (None) sends the statement without that line, so one statement serves
-- every combination, and a call that uses nothing newer runs on a database whose upgrade is
-- still to come (protocol/call.py, optional_parameters).

-- A push's delay is a duration (`delay`) or an absolute time (`run_at`, a timestamptz), at most
-- one of them. A run_at becomes the delay from the queue's clock, taken in this statement: the
-- function's own clock() reads the same statement_timestamp(), so the job's run_at is exactly
-- the one given (a time already past: a delay of zero, ready now). The delay travels as
-- microseconds, never as days: a day added across a daylight-saving change in the session's
-- time zone is 23 or 25 hours. With neither, the delay is NULL, the push's fast path.

-- name: push
SELECT postkit_queue.push(
    %(namespace)s, %(queue)s, %(payload)s::pg_catalog.jsonb,
    coalesce(%(delay)s::bigint,
             CASE WHEN %(run_at)s::pg_catalog.timestamptz OPERATOR(pg_catalog.>) postkit_queue.clock()
                  THEN (extract(epoch FROM %(run_at)s::pg_catalog.timestamptz
                                           OPERATOR(pg_catalog.-) postkit_queue.clock())
                        OPERATOR(pg_catalog.*) 1000000)::bigint
                  WHEN %(run_at)s::pg_catalog.timestamptz IS NOT NULL THEN 0 END)
        OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(priority)s::integer,
    %(max_attempts)s::integer,
    %(unique_key)s,
    %(backoff_base)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(backoff_cap)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'
    , p_trace_context => %(trace_context)s::pg_catalog.jsonb  -- when trace_context is given
    , p_group_key => %(group_key)s  -- when group_key is given
    , p_depends_on => %(depends_on)s::bigint[]  -- when depends_on is given
    , p_wait_for_room => %(wait_for_room)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'  -- when wait_for_room is given
    ) AS id;

-- name: pull
SELECT j.namespace, j.id, j.queue, j.state::pg_catalog.text AS state, j.payload::pg_catalog.text AS payload, j.priority, j.run_at,
       j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token::pg_catalog.text AS claim_token,
       j.claimed_at, j.visible_until, j.errors::pg_catalog.text AS errors, j.created_at,
       j.trace_context::pg_catalog.text AS trace_context, j.group_key, j.depends_on
FROM postkit_queue.pull(
    %(namespace)s, %(queue)s, %(worker_id)s,
    %(visibility_timeout)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(limit)s::integer) AS j;

-- name: ack
SELECT postkit_queue.ack(
    %(namespace)s, %(job_id)s::bigint, %(worker_id)s, %(claim_token)s::pg_catalog.uuid
    , p_result => %(result)s::pg_catalog.jsonb  -- when result is given
    );

-- name: job_result
SELECT r.job_id, r.queue, r.state, r.result::pg_catalog.text AS result, r.error, r.reason,
       r.attempts, r.finished_at, r.expires_at, r.redriven_job_id
FROM postkit_queue.job_result(%(namespace)s, %(job_id)s::bigint) AS r;

-- name: results_channel
SELECT postkit_queue.results_channel(%(namespace)s) AS channel;

-- name: nack
SELECT postkit_queue.nack(
    %(namespace)s, %(job_id)s::bigint, %(error)s, %(worker_id)s, %(claim_token)s::pg_catalog.uuid,
    %(backoff)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond') AS outcome;

-- name: fail
SELECT postkit_queue.fail(
    %(namespace)s, %(job_id)s::bigint, %(error)s, %(worker_id)s, %(claim_token)s::pg_catalog.uuid);

-- name: extend_visibility
SELECT postkit_queue.extend_visibility(
    %(namespace)s, %(job_id)s::bigint, %(extension)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(worker_id)s, %(claim_token)s::pg_catalog.uuid);

-- name: tick_timeouts
SELECT pg_catalog.count(*) AS rescued FROM postkit_queue.tick_timeouts(%(namespace)s, %(limit)s::integer);

-- name: get_job
SELECT j.namespace, j.id, j.queue, j.state::pg_catalog.text AS state, j.payload::pg_catalog.text AS payload, j.priority, j.run_at,
       j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token::pg_catalog.text AS claim_token,
       j.claimed_at, j.visible_until, j.errors::pg_catalog.text AS errors, j.created_at, j.failed_at,
       j.trace_context::pg_catalog.text AS trace_context, j.group_key, j.claim_expired,
       j.depends_on, j.waiting_on, j.progress, j.progress_note, j.progress_at
FROM postkit_queue.get_job(%(namespace)s, %(job_id)s::bigint) AS j;

-- name: dependency_problem
-- Asked before a push with parents: a refusal here leaves the caller's transaction usable.
SELECT postkit_queue.dependency_problem(%(namespace)s, %(depends_on)s::bigint[]) AS problem;

-- name: parent_results
SELECT r.parent_id, r.state, r.result::pg_catalog.text AS result
FROM postkit_queue.parent_results(%(namespace)s, %(job_id)s::bigint) AS r;

-- name: waiting_children
SELECT c.child_id
FROM postkit_queue.waiting_children(%(namespace)s, %(job_id)s::bigint, %(limit)s::integer) AS c;

-- name: job_tree
SELECT t.job_id, t.depth, t.queue, t.state, t.depends_on
FROM postkit_queue.job_tree(%(namespace)s, %(job_id)s::bigint, %(limit)s::integer) AS t;

-- name: dead_letters
SELECT d.namespace, d.job_id, d.queue, d.payload::pg_catalog.text AS payload, d.priority, d.attempts,
       d.max_attempts, d.unique_key, d.worker_id, d.reason, d.error, d.errors::pg_catalog.text AS errors,
       d.created_at, d.failed_at, d.expires_at, d.redriven_job_id, d.redriven_at,
       d.trace_context::pg_catalog.text AS trace_context
FROM postkit_queue.dead_letters(
    %(namespace)s, %(queue)s, %(limit)s::integer, %(failed_after)s::pg_catalog.timestamptz,
    %(failed_before)s::pg_catalog.timestamptz, %(error_contains)s, %(include_redriven)s::boolean,
    %(after_failed_at)s::pg_catalog.timestamptz, %(after_job_id)s::bigint) AS d;

-- name: configure_queue
SELECT p.max_attempts,
       extract(epoch FROM p.visibility_timeout)::pg_catalog.float8 AS visibility_timeout,
       extract(epoch FROM p.backoff_base)::pg_catalog.float8 AS backoff_base,
       extract(epoch FROM p.backoff_cap)::pg_catalog.float8 AS backoff_cap,
       p.paused,
       extract(epoch FROM p.retain_completed)::pg_catalog.float8 AS retain_completed,
       extract(epoch FROM p.retain_dead)::pg_catalog.float8 AS retain_dead,
       p.max_payload_bytes,
       extract(epoch FROM p.retain_results)::pg_catalog.float8 AS retain_results,
       p.concurrency, p.rate_limit,
       extract(epoch FROM p.rate_period)::pg_catalog.float8 AS rate_period,
       p.group_concurrency, p.group_ordered, p.fair, p.max_pending
FROM postkit_queue.configure_queue(
    %(namespace)s, %(queue)s, %(max_attempts)s::integer,
    %(visibility_timeout)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(backoff_base)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(backoff_cap)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(retain_completed)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(retain_dead)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(max_payload_bytes)s::integer,
    %(retain_results)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(concurrency)s::integer, %(rate_limit)s::integer,
    %(rate_period)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(group_concurrency)s::integer, %(group_ordered)s::boolean,
    %(reset)s::pg_catalog.text[], %(fair)s::boolean, %(max_pending)s::integer) AS p;

-- name: set_group_weight
SELECT postkit_queue.set_group_weight(%(namespace)s, %(queue)s, %(group_key)s, %(weight)s::integer) AS weight;

-- name: group_weights
SELECT w.group_key, w.weight
FROM postkit_queue.group_weights(%(namespace)s, %(queue)s, %(after)s, %(limit)s::integer) AS w;

-- name: group_stats
SELECT g.group_key, g.pending, g.scheduled, g.running, g.weight, g.counts_capped
FROM postkit_queue.group_stats(
    %(namespace)s, %(queue)s, %(after)s, %(limit)s::integer, %(cap)s::integer) AS g;

-- name: queues
SELECT q AS queue FROM postkit_queue.queues(%(namespace)s) AS q ORDER BY q;

-- name: outcome_series
SELECT o.queue, o.minute, o.completed, o.dead_lettered, o.retried, o.rescued
FROM postkit_queue.outcome_series(%(namespace)s, %(since)s::pg_catalog.timestamptz, %(queue)s) AS o;

-- name: namespaces
SELECT n AS namespace FROM postkit_queue.namespaces() AS n;

-- name: count_dead_letters
SELECT postkit_queue.count_dead_letters(
    %(namespace)s, %(queue)s, %(failed_after)s::pg_catalog.timestamptz,
    %(failed_before)s::pg_catalog.timestamptz, %(include_redriven)s::boolean,
    %(cap)s::integer) AS counted;

-- name: search_dead_letters
SELECT d.namespace, d.job_id, d.queue, d.payload::pg_catalog.text AS payload, d.priority, d.attempts,
       d.max_attempts, d.unique_key, d.worker_id, d.reason, d.error, d.errors::pg_catalog.text AS errors,
       d.created_at, d.failed_at, d.expires_at, d.redriven_job_id, d.redriven_at,
       d.trace_context::pg_catalog.text AS trace_context, d.searched_to
FROM postkit_queue.search_dead_letters(
    %(namespace)s, %(error_contains)s, %(queue)s, %(limit)s::integer,
    %(failed_after)s::pg_catalog.timestamptz, %(failed_before)s::pg_catalog.timestamptz,
    %(include_redriven)s::boolean, %(after_failed_at)s::pg_catalog.timestamptz,
    %(after_job_id)s::bigint, %(scan_limit)s::integer) AS d;

-- name: outcomes_since
SELECT o.queue, o.completed, o.dead_lettered, o.retried, o.rescued
FROM postkit_queue.outcomes_since(%(namespace)s, %(since)s::pg_catalog.timestamptz) AS o;

-- name: report_progress
SELECT postkit_queue.report_progress(
    %(namespace)s, %(job_id)s::bigint, %(fraction)s::pg_catalog.float8, %(note)s, %(worker_id)s,
    %(claim_token)s::pg_catalog.uuid);

-- name: record_step
SELECT postkit_queue.record_step(
    %(namespace)s, %(job_id)s::bigint, %(claim_token)s::pg_catalog.uuid, %(position)s::integer,
    %(name)s, %(result)s::pg_catalog.jsonb);

-- name: park
SELECT postkit_queue.park(
    %(namespace)s, %(job_id)s::bigint, %(claim_token)s::pg_catalog.uuid,
    %(until)s::pg_catalog.timestamptz);

-- name: send_event
SELECT postkit_queue.send_event(
    %(namespace)s, %(job_id)s::bigint, %(name)s, %(payload)s::pg_catalog.jsonb, %(key)s);

-- name: wait_event
SELECT w.status, w.payload::pg_catalog.text AS payload
FROM postkit_queue.wait_event(
    %(namespace)s, %(job_id)s::bigint, %(claim_token)s::pg_catalog.uuid, %(position)s::integer,
    %(name)s, %(until)s::pg_catalog.timestamptz) AS w;

-- name: await_jobs
SELECT a.status, a.problem
FROM postkit_queue.await_jobs(
    %(namespace)s, %(job_id)s::bigint, %(claim_token)s::pg_catalog.uuid,
    %(job_ids)s::bigint[]) AS a;

-- name: workflow_steps
SELECT s.position, s.name, s.result::pg_catalog.text AS result, s.attempt, s.recorded_at
FROM postkit_queue.workflow_steps(%(namespace)s, %(job_id)s::bigint) AS s;

-- name: release
SELECT postkit_queue.release(
    %(namespace)s, %(job_id)s::bigint, %(worker_id)s, %(claim_token)s::pg_catalog.uuid);

-- name: request_wakeup
-- One statement, one transaction: the request, and the wait for the slots of the queues a limit
-- holds back, recorded for the calling backend, the listener's.
SELECT postkit_queue.request_wakeup(%(namespace)s, %(queues)s::pg_catalog.text[]) AS made,
       postkit_queue.wait_for_slot(%(namespace)s, %(queues)s::pg_catalog.text[]) AS waiting;

-- name: stop_waiting
SELECT postkit_queue.stop_waiting(%(namespace)s) AS stopped;

-- name: next_run_at
SELECT postkit_queue.next_run_at(%(namespace)s, %(queues)s::pg_catalog.text[]) AS next_run_at,
       postkit_queue.clock() AS now;

-- name: next_schedule_at
SELECT postkit_queue.next_schedule_at(%(namespace)s) AS next_run_at,
       postkit_queue.clock() AS now;

-- name: channels
SELECT postkit_queue.channel(%(namespace)s, q) AS channel FROM pg_catalog.unnest(%(queues)s::pg_catalog.text[]) AS q;

-- name: listen
-- LISTEN takes its channel as a name, not a parameter: protocol.Call writes it in as a quoted
-- identifier.
LISTEN {channel};

-- name: unlisten
UNLISTEN {channel};

-- name: clock
SELECT postkit_queue.clock() AS now;

-- name: pull_any
SELECT j.namespace, j.id, j.queue, j.state::pg_catalog.text AS state, j.payload::pg_catalog.text AS payload, j.priority, j.run_at,
       j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token::pg_catalog.text AS claim_token,
       j.claimed_at, j.visible_until, j.errors::pg_catalog.text AS errors, j.created_at,
       j.trace_context::pg_catalog.text AS trace_context, j.group_key, j.depends_on
FROM postkit_queue.pull_any(
    %(namespace)s, %(queues)s::pg_catalog.text[], %(worker_id)s,
    %(visibility_timeout)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(limit)s::integer
    , p_weights => %(weights)s::integer[]  -- when weights is given
    ) AS j;

-- name: push_batch
SELECT b.id FROM postkit_queue.push_batch(
    %(namespace)s, %(queue)s, %(payloads)s::pg_catalog.jsonb,
    coalesce(%(delay)s::bigint,
             CASE WHEN %(run_at)s::pg_catalog.timestamptz OPERATOR(pg_catalog.>) postkit_queue.clock()
                  THEN (extract(epoch FROM %(run_at)s::pg_catalog.timestamptz
                                           OPERATOR(pg_catalog.-) postkit_queue.clock())
                        OPERATOR(pg_catalog.*) 1000000)::bigint
                  WHEN %(run_at)s::pg_catalog.timestamptz IS NOT NULL THEN 0 END)
        OPERATOR(pg_catalog.*) interval '1 microsecond',
    %(priority)s::integer, %(max_attempts)s::integer, %(unique_keys)s::pg_catalog.text[]
    , p_trace_contexts => %(trace_contexts)s::pg_catalog.jsonb  -- when trace_contexts is given
    , p_group_keys => %(group_keys)s::pg_catalog.text[]  -- when group_keys is given
    , p_depends_on => %(depends_on)s::pg_catalog.jsonb  -- when depends_on is given
    , p_wait_for_room => %(wait_for_room)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'  -- when wait_for_room is given
    ) AS b
ORDER BY b.ordinality;

-- name: ack_batch
SELECT postkit_queue.ack_batch(
    %(namespace)s, %(job_ids)s::bigint[], %(claim_tokens)s::pg_catalog.uuid[], %(worker_id)s);

-- name: stats
SELECT s.queue, s.paused, s.pending, s.scheduled, s.running, s.dead, s.counts_capped,
       s.oldest_ready_age, s.completed_last_minute, s.completed_last_hour,
       s.dead_lettered_last_minute, s.dead_lettered_last_hour, s.retried_last_hour,
       s.rescued_last_hour,
       s.mean_attempts::pg_catalog.float8 AS mean_attempts, s.concurrency, s.rate_limited_until,
       s.waiting, s.cancelled, s.max_pending
FROM postkit_queue.stats(
    %(namespace)s, %(queue)s, %(cap)s::integer, %(after)s, %(limit)s::integer) AS s;

-- name: jobs
SELECT j.namespace, j.id, j.queue, j.state::pg_catalog.text AS state, j.payload::pg_catalog.text AS payload, j.priority, j.run_at,
       j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token::pg_catalog.text AS claim_token,
       j.claimed_at, j.visible_until, j.errors::pg_catalog.text AS errors, j.created_at, j.failed_at,
       j.trace_context::pg_catalog.text AS trace_context, j.age
FROM postkit_queue.jobs(
    %(namespace)s, %(queue)s, %(state)s, %(limit)s::integer, %(after_id)s::bigint,
    %(after_priority)s::integer, %(after_at)s::pg_catalog.timestamptz) AS j;

-- name: redrive
SELECT r.job_id, r.queue, r.new_job_id
FROM postkit_queue.redrive(
    %(namespace)s, %(job_ids)s::bigint[], %(queue)s, %(failed_after)s::pg_catalog.timestamptz,
    %(failed_before)s::pg_catalog.timestamptz, %(error_contains)s, %(to_queue)s, %(limit)s::integer,
    %(dry_run)s::boolean) AS r;

-- name: job_lineage
SELECT l.job_id, l.queue, l.state, l.attempts, l.created_at, l.failed_at, l.error,
       l.redriven_job_id, l.redriven_at
FROM postkit_queue.job_lineage(%(namespace)s, %(job_id)s::bigint, %(limit)s::integer) AS l;

-- name: purge_dead_letters
SELECT postkit_queue.purge_dead_letters(
    %(namespace)s, %(older_than)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond', %(queue)s) AS purged;

-- name: cancel
SELECT postkit_queue.cancel(%(namespace)s, %(job_id)s::bigint);

-- name: cancel_tree
SELECT postkit_queue.cancel_tree(%(namespace)s, %(job_id)s::bigint, %(limit)s::integer) AS cancelled;

-- name: cancel_run
SELECT postkit_queue.cancel_run(%(namespace)s, %(job_id)s::bigint, %(limit)s::integer) AS cancelled;

-- name: cancel_queue
SELECT postkit_queue.cancel_queue(
    %(namespace)s, %(queue)s, %(created_before)s::pg_catalog.timestamptz,
    %(limit)s::integer) AS cancelled;

-- name: pause_queue
SELECT postkit_queue.pause_queue(%(namespace)s, %(queue)s);

-- name: resume_queue
SELECT postkit_queue.resume_queue(%(namespace)s, %(queue)s);

-- name: purge_queue
SELECT postkit_queue.purge_queue(%(namespace)s, %(queue)s) AS purged;

-- name: prune
SELECT p.completed_jobs, p.dead_letters, p.stats_rows, p.results, p.cancelled, p.ancestry,
       p.steps
FROM postkit_queue.prune(%(namespace)s, %(limit)s::integer) AS p;

-- name: save_schedule
SELECT s.namespace, s.name, s.queue, s.payload::pg_catalog.text AS payload, s.cron, s.timezone, s.every,
       s.priority, s.max_attempts, s.paused, s.next_run_at, s.last_run_at, s.last_job_id,
       s.created_at, s.updated_at, s.broken_at, s.broken_reason
FROM postkit_queue.save_schedule(
    %(namespace)s, %(name)s, %(queue)s, %(payload)s::pg_catalog.jsonb, %(next_run_at)s::pg_catalog.timestamptz,
    %(cron)s, %(timezone)s, pg_catalog.make_interval(secs => %(every)s::pg_catalog.float8), %(priority)s::integer,
    %(max_attempts)s::integer) AS s;

-- name: schedules
SELECT s.namespace, s.name, s.queue, s.payload::pg_catalog.text AS payload, s.cron, s.timezone, s.every,
       s.priority, s.max_attempts, s.paused, s.next_run_at, s.last_run_at, s.last_job_id,
       s.created_at, s.updated_at, s.broken_at, s.broken_reason
FROM postkit_queue.schedules(%(namespace)s, %(after)s, %(limit)s::integer) AS s;

-- name: schedule_runs
SELECT r.name, r.last_run_at, r.last_job_id, r.last_job_state, r.attempts, r.finished_at, r.error
FROM postkit_queue.schedule_runs(%(namespace)s, %(after)s, %(limit)s::integer) AS r;

-- name: set_schedule_paused
SELECT postkit_queue.set_schedule_paused(%(namespace)s, %(name)s, %(paused)s::boolean);

-- name: delete_schedule
SELECT postkit_queue.delete_schedule(%(namespace)s, %(name)s);

-- name: due_schedules
SELECT s.namespace, s.name, s.queue, s.payload::pg_catalog.text AS payload, s.cron, s.timezone, s.every,
       s.priority, s.max_attempts, s.paused, s.next_run_at, s.last_run_at, s.last_job_id,
       s.created_at, s.updated_at, s.broken_at, s.broken_reason, postkit_queue.clock() AS now
FROM postkit_queue.due_schedules(%(namespace)s, %(limit)s::integer) AS s;

-- name: fire_schedule_run
SELECT r.job_id, r.broken_reason
FROM postkit_queue.fire_schedule_run(
    %(namespace)s, %(name)s, %(due_at)s::pg_catalog.timestamptz, %(next_run_at)s::pg_catalog.timestamptz) AS r;

-- name: mark_schedule_broken
SELECT postkit_queue.mark_schedule_broken(
    %(namespace)s, %(name)s, %(due_at)s::pg_catalog.timestamptz, %(reason)s) AS marked;

-- name: purge_dead_letters_before
SELECT postkit_queue.purge_dead_letters_before(
    %(namespace)s, %(failed_before)s::pg_catalog.timestamptz, %(queue)s, %(job_ids)s::bigint[],
    %(failed_after)s::pg_catalog.timestamptz) AS purged;

-- name: get_queue_policy
SELECT p.max_attempts,
       extract(epoch FROM p.visibility_timeout)::pg_catalog.float8 AS visibility_timeout,
       extract(epoch FROM p.backoff_base)::pg_catalog.float8 AS backoff_base,
       extract(epoch FROM p.backoff_cap)::pg_catalog.float8 AS backoff_cap,
       p.paused,
       extract(epoch FROM p.retain_completed)::pg_catalog.float8 AS retain_completed,
       extract(epoch FROM p.retain_dead)::pg_catalog.float8 AS retain_dead,
       p.max_payload_bytes,
       extract(epoch FROM p.retain_results)::pg_catalog.float8 AS retain_results,
       p.concurrency, p.rate_limit,
       extract(epoch FROM p.rate_period)::pg_catalog.float8 AS rate_period,
       p.group_concurrency, p.group_ordered, p.fair, p.max_pending
FROM postkit_queue.get_queue_policy(%(namespace)s, %(queue)s) AS p;

-- name: ack_many
SELECT postkit_queue.ack_many(
    %(namespace)s, %(job_ids)s::bigint[], %(claim_tokens)s::pg_catalog.uuid[]
    , p_results => %(results)s::pg_catalog.jsonb  -- when results is given
    ) AS acked;

-- name: ack_and_pull
-- A worker's round trip: acknowledge what finished and claim the next batch, in one statement
-- and one transaction. The two touch different rows (running ones, pending ones), so their
-- order does not matter. The acked ids come in the first row only: repeated in every row, the
-- array was read (and parsed by the driver) once per claimed job.
SELECT CASE WHEN coalesce(j.ordinality, 1) OPERATOR(pg_catalog.=) 1 THEN a.acked END AS acked,
       j.namespace, j.id, j.queue, j.state::pg_catalog.text AS state,
       j.payload::pg_catalog.text AS payload, j.priority,
       j.run_at, j.attempts, j.max_attempts, j.unique_key, j.worker_id,
       j.claim_token::pg_catalog.text AS claim_token, j.claimed_at, j.visible_until,
       j.errors::pg_catalog.text AS errors, j.created_at,
       j.trace_context::pg_catalog.text AS trace_context, j.group_key, j.depends_on
FROM postkit_queue.ack_many(
    %(namespace)s, %(job_ids)s::bigint[], %(claim_tokens)s::pg_catalog.uuid[]
    , p_results => %(results)s::pg_catalog.jsonb  -- when results is given
    ) AS a(acked)
LEFT JOIN LATERAL postkit_queue.pull(
    %(namespace)s, %(queue)s, %(worker_id)s,
    %(visibility_timeout)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond', %(limit)s::integer)
    WITH ORDINALITY AS j ON true;

-- name: vacuum_state
-- Whether this role may vacuum the jobs table (its owner, a member of the owner, a superuser,
-- or, from PostgreSQL 17, a holder of MAINTAIN), and how many dead rows it holds now.
SELECT (pg_catalog.pg_has_role(c.relowner, 'USAGE')
        -- CASE, not AND: before 17 the privilege name itself is an error.
        OR CASE WHEN pg_catalog.current_setting('server_version_num')::integer
                     OPERATOR(pg_catalog.>=) 170000
                THEN pg_catalog.has_table_privilege(c.oid, 'MAINTAIN') ELSE false END)
           AS may_vacuum,
       coalesce(s.n_dead_tup, 0) AS dead_rows
FROM pg_catalog.pg_class c
LEFT JOIN pg_catalog.pg_stat_user_tables s ON s.relid OPERATOR(pg_catalog.=) c.oid
WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('postkit_queue.jobs');

-- name: vacuum_lock
-- One vacuum at a time across every worker of the database (the key is "pkvacuum" in hex).
SELECT pg_catalog.pg_try_advisory_lock(x'706b76616375756d'::bigint) AS locked;

-- name: vacuum_jobs
VACUUM (SKIP_LOCKED) postkit_queue.jobs;

-- name: vacuum_unlock
SELECT pg_catalog.pg_advisory_unlock(x'706b76616375756d'::bigint) AS unlocked;

-- name: wake
-- Ends a listener's wait: its wake channel is its own (AsyncWorkListener.wake_channel).
SELECT pg_catalog.pg_notify(%(channel)s, '');

-- name: asynchronous_commit
-- A worker's call, committed without waiting for the WAL flush: a claim or an ack lost in a
-- crash is a redelivery, which at-least-once delivery allows. Inside the parentheses stands
-- the call's own statement, run in autocommit: one statement, one transaction.
-- set_config(..., true) lasts until that transaction ends, so nothing stays on the session for
-- whoever uses it next (a pool's next borrower, a shared pooler's next client); the commit
-- reads the setting, so it does not matter which row sets it. A call that returns no row sets nothing and commits
-- durably, as any statement does: the calls that settle jobs always return one.
SELECT r.* FROM (
{statement}
) AS r
WHERE pg_catalog.set_config('synchronous_commit', 'off', true) IS NOT NULL;

-- name: purge_queue_before
SELECT postkit_queue.purge_queue_before(
    %(namespace)s, %(queue)s, %(created_before)s::pg_catalog.timestamptz,
    %(dry_run)s::boolean) AS purged;

-- name: register_queues
SELECT postkit_queue.register_queues(%(namespace)s, %(queues)s::pg_catalog.text[]) AS added;

-- name: known_queues
SELECT q AS queue FROM postkit_queue.known_queues(%(namespace)s) AS q ORDER BY q;

-- name: grant_access
-- This and the next three are postkit.queue.admin's: functions of the queue's owner, which no
-- access kind includes (they are not in postkit_queue.api).
SELECT postkit_queue.grant_access(%(role)s, %(access)s);

-- name: revoke_access
SELECT postkit_queue.revoke_access(%(role)s) AS revoked;

-- name: enable_tenant_isolation
SELECT postkit_queue.enable_tenant_isolation();

-- name: assign_namespace
SELECT postkit_queue.assign_namespace(%(namespace)s, %(role)s);

-- name: distribute_on_citus
SELECT d.object, d.placement FROM postkit_queue.distribute_on_citus() AS d;

-- name: schema_probe
-- Whether the schema is installed, and whether it answers its version through a function: from
-- version 9 on, callers hold no privileges on its tables.
SELECT pg_catalog.to_regclass('postkit_queue.migrations') IS NOT NULL AS installed,
       pg_catalog.to_regprocedure('postkit_queue.schema_version()') IS NOT NULL AS by_function;

-- name: schema_version
SELECT postkit_queue.schema_version() AS version;

-- name: schema_version_from_table
SELECT pg_catalog.max(m.version) AS version FROM postkit_queue.migrations m;

-- name: register_worker
SELECT postkit_queue.register_worker(
    %(namespace)s, %(worker_id)s, %(kind)s, %(host)s, %(pid)s::bigint,
    %(queues)s::pg_catalog.text[], %(concurrency)s::integer, %(version)s,
    %(heartbeat_interval)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond');

-- name: worker_heartbeat
SELECT postkit_queue.worker_heartbeat(%(namespace)s, %(worker_id)s) AS found;

-- name: deregister_worker
SELECT postkit_queue.deregister_worker(%(namespace)s, %(worker_id)s) AS found;

-- name: workers
SELECT w.worker_id, w.kind, w.host, w.pid, w.queues, w.concurrency, w.version,
       extract(epoch FROM w.heartbeat_interval)::pg_catalog.float8 AS heartbeat_interval,
       w.started_at, w.heartbeat_at, w.lost
FROM postkit_queue.workers(%(namespace)s) AS w;

-- name: prune_workers
SELECT postkit_queue.prune_workers(
    %(namespace)s, %(older_than)s::bigint OPERATOR(pg_catalog.*) interval '1 microsecond') AS pruned;

-- name: running_jobs
SELECT r.id, r.queue, r.worker_id, r.attempts, r.max_attempts, r.claimed_at, r.visible_until,
       r.running_for
FROM postkit_queue.running_jobs(%(namespace)s, %(limit)s::integer) AS r;
