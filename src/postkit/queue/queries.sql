-- The statements the Python SDK sends, one per SDK call, each a single round trip to one SQL
-- function of the queue module. Parameters use the pyformat style (%(name)s), which psycopg 3,
-- psycopg2 and Django's cursor all accept. Durations travel as seconds (float8) and become
-- intervals here; payloads travel as JSON text with a ::jsonb cast; JSON and UUIDs come back as
-- text so that every driver returns the same Python types.

-- name: push
SELECT postkit_queue.push(
    %(namespace)s, %(queue)s, %(payload)s::jsonb,
    %(delay)s::float8 * interval '1 second',
    %(priority)s::integer,
    %(max_attempts)s::integer,
    %(unique_key)s,
    %(backoff_base)s::float8 * interval '1 second',
    %(backoff_cap)s::float8 * interval '1 second') AS id;

-- name: pull
SELECT j.namespace, j.id, j.queue, j.state, j.payload::text AS payload, j.priority, j.run_at,
       j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token::text AS claim_token,
       j.claimed_at, j.visible_until, j.errors::text AS errors, j.created_at
FROM postkit_queue.pull(
    %(namespace)s, %(queue)s, %(worker_id)s,
    %(visibility_timeout)s::float8 * interval '1 second',
    %(limit)s::integer) AS j;

-- name: ack
SELECT postkit_queue.ack(%(namespace)s, %(job_id)s::bigint, %(worker_id)s, %(claim_token)s::uuid);

-- name: nack
SELECT postkit_queue.nack(
    %(namespace)s, %(job_id)s::bigint, %(error)s, %(worker_id)s, %(claim_token)s::uuid,
    %(backoff)s::float8 * interval '1 second') AS outcome;

-- name: fail
SELECT postkit_queue.fail(
    %(namespace)s, %(job_id)s::bigint, %(error)s, %(worker_id)s, %(claim_token)s::uuid);

-- name: extend_visibility
SELECT postkit_queue.extend_visibility(
    %(namespace)s, %(job_id)s::bigint, %(extension)s::float8 * interval '1 second',
    %(worker_id)s, %(claim_token)s::uuid);

-- name: tick_timeouts
SELECT count(*) AS reclaimed FROM postkit_queue.tick_timeouts(%(namespace)s, %(limit)s::integer);

-- name: get_job
SELECT j.namespace, j.id, j.queue, j.state, j.payload::text AS payload, j.priority, j.run_at,
       j.attempts, j.max_attempts, j.unique_key, j.worker_id, j.claim_token::text AS claim_token,
       j.claimed_at, j.visible_until, j.errors::text AS errors, j.created_at, j.failed_at
FROM postkit_queue.get_job(%(namespace)s, %(job_id)s::bigint) AS j;

-- name: dead_letters
SELECT d.namespace, d.job_id, d.queue, d.payload::text AS payload, d.priority, d.attempts,
       d.max_attempts, d.unique_key, d.worker_id, d.reason, d.error, d.errors::text AS errors,
       d.created_at, d.failed_at
FROM postkit_queue.dead_letters(%(namespace)s, %(queue)s, %(limit)s::integer) AS d;

-- name: configure_queue
SELECT p.max_attempts,
       extract(epoch FROM p.visibility_timeout)::float8 AS visibility_timeout,
       extract(epoch FROM p.backoff_base)::float8 AS backoff_base,
       extract(epoch FROM p.backoff_cap)::float8 AS backoff_cap
FROM postkit_queue.configure_queue(
    %(namespace)s, %(queue)s, %(max_attempts)s::integer,
    %(visibility_timeout)s::float8 * interval '1 second',
    %(backoff_base)s::float8 * interval '1 second',
    %(backoff_cap)s::float8 * interval '1 second') AS p;

-- name: release
SELECT postkit_queue.release(
    %(namespace)s, %(job_id)s::bigint, %(worker_id)s, %(claim_token)s::uuid);

-- name: next_run_at
SELECT postkit_queue.next_run_at(%(namespace)s, %(queues)s::text[]) AS next_run_at,
       postkit_queue.clock() AS now;

-- name: channels
SELECT postkit_queue.channel(%(namespace)s, q) AS channel FROM unnest(%(queues)s::text[]) AS q;
