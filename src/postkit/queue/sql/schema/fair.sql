-- Fair share: the claims of a fair queue (queue_settings.fair) take turns among its groups (a
-- job's group_key: a tenant, a customer), so that a group with a backlog of a million jobs
-- keeps no other group waiting behind it.
--
--     the groups with pending jobs, in key order:  acme ──> globex ──> initech ──┐
--                                                    ^                            │
--                                                    └────────── next round ──────┘
--     a group's turn: up to its weight of its ready jobs (times ceil(claim / 32)), in pull order
--
-- - A claim of a fair queue (claim_limited, flow.sql) goes round the groups that have pending
--   jobs, in key order, from where the queue's last claim stopped (flow_state.fair_group, and
--   fair_given, what that group got in its turn so far). A group's turn gives it up to its
--   weight (group_weights; 1 without a row) of its ready jobs, in pull order (priority, then
--   run_at, then id), then the turn passes to the next group. A turn goes on across claims:
--   with weights 3 and 1, claims of one job each go A A A B A A A B.
-- - A big claim gives longer turns: weight times ceil(n / 32) jobs in a claim of n, so that it
--   visits about 32 groups however many jobs it asks for. A worker claims as many jobs as it
--   settles in a tenth of a second (up to 500), so the busier it is, the more of each group's
--   jobs a visit takes: with 1,000 groups of 50 jobs, two workers' fair drain went from 0.84
--   to 0.92 of the same drain without fair (medians of six, in one run). The shares follow
--   the weights over every round all the same; a group that starts while others have work
--   waits at most a round, now up to ceil(n / 32) jobs of each other group.
-- - Work conserving: a group without pending jobs is not in jobs_fair_idx, and the round never
--   visits it; a group whose pending jobs are not ready (a backoff, a delay) or are held back by
--   a group limit ends its turn with what it got, and the next group's turn begins at once.
-- - What a claim costs does not grow with a group's backlog: a turn is one probe of
--   jobs_fair_idx, which finds the next group and its first job together (its order is the
--   groups' and, within each, pull order); a group weighing more, or whose first job is not
--   ready, adds a range scan of it that stops at the jobs it takes, and a queue with weights one
--   probe of group_weights. A claim visits at most max_fair_visits() groups, stops once a whole
--   round gave nothing (its walk went back to the first group twice with nothing taken in
--   between).
-- - Claims overlap. A probe locks the job it finds (FOR UPDATE SKIP LOCKED), so a claim passes
--   over a job that another claim holds and takes the next of that group instead. A queue whose
--   only limit is fair lets its claims run at once (claim_limited reads where the round stands
--   without locking the flow_state row): two claims that start from the same point each give
--   those groups a turn, so every group still gets its weight per pass, and each claim writes
--   back the point it reached unless another claim is writing it at that moment. Beside a
--   concurrency, rate or group limit the claims still take turns on the flow_state row: each
--   count must see the claims before it.
-- - Jobs without a group key share what the groups leave: a claim that the round did not fill
--   takes them from the head of jobs_pull_idx, looking at most at max_fair_visits() ready jobs.
-- - The group limits (flow.sql) hold within a turn: group_concurrency caps it by what of the
--   group runs already; group_ordered gives a group its oldest live job only (jobs_group_idx),
--   when that job is ready and no job of the group runs.

-- The most groups one claim visits, and the most ready jobs it looks at for jobs without a
-- group: the bound on a claim's cost when many groups have no job ready.
CREATE OR REPLACE FUNCTION postkit_queue.max_fair_visits()
RETURNS integer
LANGUAGE sql IMMUTABLE
RETURN 1000;

-- claim_fair: choose up to p_limit ready jobs of fair queue p_queue at p_now (the turn's clock),
-- going round its groups from p_group, which was given p_given jobs in its turn so far (see
-- above). Returns their ids, which claim_limited then locks as it locks a group claim's, and
-- where the round stands now, which it keeps in flow_state. Only its caller, under the queue's
-- turn, may call it.
CREATE OR REPLACE FUNCTION postkit_queue.claim_fair(
    p_namespace         text,
    p_queue             text,
    p_limit             integer,
    p_now               timestamptz,
    p_group             text,
    p_given             integer,
    p_group_concurrency integer,
    p_group_ordered     boolean,
    OUT chosen          bigint[],
    OUT fair_group      text,
    OUT fair_given      integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
-- The scans walk their indexes in order whatever the statistics say.
SET enable_sort = off
AS $$
DECLARE
    v_weighted  boolean;         -- some group of the queue has a weight of its own
    v_weight    integer := 1;
    -- What a turn gives a group of weight 1 in this claim: one job in a claim of up to 32,
    -- then one more per 32 the claim asks for (a worker's claims grow with its pace, up to
    -- 1,000), so that a claim visits about 32 groups whatever its size. Each visit is a
    -- statement of its own, the cost of a fair claim; taking a group's next jobs in the same
    -- turn is one range scan. The shares still follow the weights over a round.
    v_quantum   CONSTANT integer := (p_limit + 31) / 32;
    v_turn      integer;         -- what fair_group's turn gives it: its weight times v_quantum
    v_want      integer;
    v_took      integer;
    v_running   integer;
    v_next      text;
    v_head      bigint;          -- the next group's first job in pull order, and its run_at
    v_head_at   timestamptz;
    v_visits    integer := 0;
    -- How many jobs the claim held when its walk last went back to the first group: going
    -- back again with no more taken since, the claim ends (a whole round gave nothing). NULL
    -- until the walk first goes back. Until then each group it visits lies past every job it
    -- took (key order), so a probe cannot find one of them again: the row locks it holds are
    -- its own, which SKIP LOCKED does not skip, and only after going back do the probes test
    -- each row against v_chosen, a test that grows with the claim (O(n^2) in its jobs).
    v_wrap_had  integer;
    v_chosen    bigint[] := '{}';  -- in the order taken
    v_groups    text[] := '{}';  -- the group of each job of v_chosen, for the group limits
    v_id        bigint;
    v_oldest    record;
    v_candidate record;
BEGIN
    fair_group := p_group;
    fair_given := coalesce(p_given, 0);
    -- One probe of group_weights, so that a queue whose groups all weigh 1 reads none per turn.
    PERFORM FROM postkit_queue.group_weights w
    WHERE w.namespace = p_namespace AND w.queue = p_queue
    LIMIT 1;
    v_weighted := FOUND;
    LOOP
        EXIT WHEN cardinality(v_chosen) >= p_limit;
        IF fair_group IS NOT NULL THEN
            -- fair_group's turn: what it may still be given, within its group limits.
            IF v_weighted THEN
                SELECT w.weight INTO v_weight FROM postkit_queue.group_weights w
                WHERE w.namespace = p_namespace AND w.queue = p_queue
                  AND w.group_key = fair_group;
                v_weight := coalesce(v_weight, 1);
            END IF;
            v_turn := v_weight * v_quantum;
            v_want := least(v_turn - fair_given, p_limit - cardinality(v_chosen));
            IF v_want > 0 AND (p_group_ordered OR p_group_concurrency IS NOT NULL) THEN
                -- What of the group runs (jobs_group_running_idx), up to its limit, and what
                -- an earlier round of this claim took of it: still pending until pull claims it
                -- after this returns, it counts as running.
                PERFORM FROM postkit_queue.jobs o
                WHERE o.namespace = p_namespace AND o.queue = p_queue
                  AND o.group_key = fair_group AND o.state = 'running'
                LIMIT coalesce(p_group_concurrency, 1);
                GET DIAGNOSTICS v_running = ROW_COUNT;
                v_want := least(v_want, coalesce(p_group_concurrency, 1) - v_running
                                        - cardinality(array_positions(v_groups, fair_group)));
            END IF;
            v_took := 0;
            IF v_want > 0 AND p_group_ordered THEN
                -- One at a time, in push order: the group's oldest live job (the head of
                -- jobs_group_idx), and only when it is ready.
                SELECT j.id, j.state, j.run_at INTO v_oldest FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.group_key = fair_group
                ORDER BY j.id
                LIMIT 1;
                IF v_oldest.state = 'pending' AND v_oldest.run_at <= p_now THEN
                    v_chosen[cardinality(v_chosen) + 1] := v_oldest.id;
                    v_groups[cardinality(v_groups) + 1] := fair_group;
                    v_took := 1;
                END IF;
            ELSIF v_want > 0 THEN
                -- The group's first job, found with the group itself (below), when it is
                -- ready; then the rest in pull order: a range scan of jobs_fair_idx.
                IF v_head IS NOT NULL AND v_head_at <= p_now THEN
                    v_chosen[cardinality(v_chosen) + 1] := v_head;
                    v_groups[cardinality(v_groups) + 1] := fair_group;
                    v_took := 1;
                END IF;
                IF v_took < v_want THEN
                    FOR v_id IN
                        SELECT j.id FROM postkit_queue.jobs j
                        WHERE j.namespace = p_namespace AND j.queue = p_queue
                          AND j.state = 'pending' AND j.group_key = fair_group
                          AND j.run_at <= p_now AND j.id IS DISTINCT FROM v_head
                          AND (v_wrap_had IS NULL OR j.id <> ALL (v_chosen))
                        ORDER BY j.priority DESC, j.run_at, j.id
                        LIMIT v_want - v_took
                        FOR UPDATE SKIP LOCKED
                    LOOP
                        v_chosen[cardinality(v_chosen) + 1] := v_id;
                        v_groups[cardinality(v_groups) + 1] := fair_group;
                        v_took := v_took + 1;
                    END LOOP;
                END IF;
            END IF;
            v_head := NULL;
            fair_given := fair_given + v_took;
            IF cardinality(v_chosen) >= p_limit AND v_took = v_want AND fair_given < v_turn THEN
                EXIT;  -- the claim is full in the middle of the turn: the next claim goes on
            END IF;
            -- The turn is over: the group got its weight, or had no more to give now.
            fair_given := v_turn;
        END IF;

        -- The next group with pending jobs after fair_group, in key order, else the first one
        -- (a new round), with its first job in pull order not taken yet: one probe of
        -- jobs_fair_idx, whose order is the groups' and, within each, pull order.
        v_visits := v_visits + 1;
        EXIT WHEN v_visits > postkit_queue.max_fair_visits();
        v_next := NULL;
        IF fair_group IS NOT NULL THEN
            SELECT j.group_key, j.id, j.run_at INTO v_next, v_head, v_head_at
            FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.group_key > fair_group
              AND (v_wrap_had IS NULL OR j.id <> ALL (v_chosen))
            ORDER BY j.group_key, j.priority DESC, j.run_at, j.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
        END IF;
        IF v_next IS NULL THEN
            EXIT WHEN v_wrap_had = cardinality(v_chosen);
            v_wrap_had := cardinality(v_chosen);
            SELECT j.group_key, j.id, j.run_at INTO v_next, v_head, v_head_at
            FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.group_key IS NOT NULL AND j.id <> ALL (v_chosen)
            ORDER BY j.group_key, j.priority DESC, j.run_at, j.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
        END IF;
        EXIT WHEN v_next IS NULL;  -- no group has a pending job left to take
        fair_group := v_next;
        fair_given := 0;
    END LOOP;

    IF cardinality(v_chosen) < p_limit THEN
        -- Jobs without a group, from the head of the queue (jobs_pull_idx), which the groups'
        -- ready jobs left after the round hold only where a group limit holds them back.
        FOR v_candidate IN
            SELECT j.id, j.group_key FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.run_at <= p_now
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT postkit_queue.max_fair_visits()
        LOOP
            CONTINUE WHEN v_candidate.group_key IS NOT NULL;
            -- Taken once locked, as the round's jobs are: read without a lock, since the scan
            -- passes over the groups' jobs (one primary-key probe).
            PERFORM FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.id = v_candidate.id AND j.state = 'pending'
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            v_chosen[cardinality(v_chosen) + 1] := v_candidate.id;
            v_groups[cardinality(v_groups) + 1] := NULL;
            EXIT WHEN cardinality(v_chosen) >= p_limit;
        END LOOP;
    END IF;

    chosen := v_chosen;
END
$$;

-- set_group_weight: the weight of group p_group_key in fair queue p_queue: its turn gives it
-- up to p_weight jobs (1 to 1000); NULL puts it back to 1 (deletes its row). Takes effect at
-- the queue's next claim. Returns the weight now in force.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.set_group_weight(
    p_namespace text, p_queue text, p_group_key text, p_weight integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_name('group_key', p_group_key, true);
    PERFORM postkit_queue.require_operator('set a group''s weight');
    IF p_weight IS NULL THEN
        DELETE FROM postkit_queue.group_weights w
        WHERE w.namespace = p_namespace AND w.queue = p_queue AND w.group_key = p_group_key;
        RETURN 1;
    END IF;
    IF p_weight NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'postkit: a group''s weight must be between 1 and 1000, got %', p_weight
            USING ERRCODE = 'PKQ17';
    END IF;
    INSERT INTO postkit_queue.group_weights AS w (namespace, queue, group_key, weight, updated_at)
    VALUES (p_namespace, p_queue, p_group_key, p_weight, postkit_queue.clock())
    ON CONFLICT (namespace, queue, group_key) DO UPDATE
    SET weight = EXCLUDED.weight, updated_at = EXCLUDED.updated_at;
    RETURN p_weight;
END
$$;

-- group_weights: the weights set on queue p_queue's groups (set_group_weight), by group key,
-- at most p_limit of them after p_after (a page; NULL: from the first). A group not listed
-- weighs 1.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.group_weights(
    p_namespace text, p_queue text, p_after text DEFAULT NULL, p_limit integer DEFAULT 1000)
RETURNS TABLE (group_key text, weight integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    RETURN QUERY
    SELECT w.group_key, w.weight FROM postkit_queue.group_weights w
    WHERE w.namespace = p_namespace AND w.queue = p_queue
      AND (p_after IS NULL OR w.group_key > p_after)
    ORDER BY w.group_key
    LIMIT p_limit;
END
$$;

-- group_stats: the group keys of queue p_queue that have live jobs, in key order, at most
-- p_limit of them after p_after (a page; NULL: from the first): for each, its pending jobs
-- (ready now), its scheduled ones (not before their run_at), its running ones and its weight
-- in a fair queue (1 without a row of group_weights). Counts are exact up to p_cap, then read
-- as p_cap with counts_capped, as stats' do. What a group costs does not grow with its backlog
-- beyond p_cap: the keys come from a skip scan of jobs_group_idx (one probe per key); the
-- counts are range scans of jobs_fair_idx, one pair per distinct priority of the key's pending
-- jobs (found by a skip scan of it), and of jobs_group_running_idx, each stopping at p_cap. A
-- key whose jobs all wait for their parents is listed with zeros.
-- access: operator
CREATE OR REPLACE FUNCTION postkit_queue.group_stats(
    p_namespace text, p_queue text, p_after text DEFAULT NULL, p_limit integer DEFAULT 100,
    p_cap integer DEFAULT 100000)
RETURNS TABLE (group_key text, pending bigint, scheduled bigint, running bigint,
               weight integer, counts_capped boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now      timestamptz := postkit_queue.clock();
    v_group    text := p_after;
    v_listed   integer := 0;
    v_priority smallint;
    v_counted  bigint;
BEGIN
    PERFORM postkit_queue.check_name('namespace', p_namespace, true);
    PERFORM postkit_queue.check_name('queue', p_queue, true);
    PERFORM postkit_queue.check_name('after', p_after, false);
    PERFORM postkit_queue.check_limit(p_limit, 10000);
    PERFORM postkit_queue.check_limit(p_cap, 10000000);
    LOOP
        EXIT WHEN v_listed >= p_limit;
        -- The next key with a live job: a name is never empty, so '' comes before every key.
        SELECT j.group_key INTO v_group FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.group_key IS NOT NULL
          AND j.group_key > coalesce(v_group, '')
        ORDER BY j.group_key
        LIMIT 1;
        EXIT WHEN NOT FOUND;
        v_listed := v_listed + 1;
        group_key := v_group;
        pending := 0;
        scheduled := 0;
        -- Priority by priority, highest first: within one, jobs_fair_idx is in run_at order, so
        -- the ready jobs and the later ones are each one range of it.
        v_priority := NULL;
        LOOP
            SELECT j.priority INTO v_priority FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.group_key = v_group AND j.priority < coalesce(v_priority, 32768)
            ORDER BY j.priority DESC
            LIMIT 1;
            EXIT WHEN NOT FOUND OR (pending >= p_cap AND scheduled >= p_cap);
            SELECT count(*) INTO v_counted FROM (
                SELECT FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
                  AND j.group_key = v_group AND j.priority = v_priority AND j.run_at <= v_now
                LIMIT p_cap - pending) ready;
            pending := pending + v_counted;
            SELECT count(*) INTO v_counted FROM (
                SELECT FROM postkit_queue.jobs j
                WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
                  AND j.group_key = v_group AND j.priority = v_priority AND j.run_at > v_now
                LIMIT p_cap - scheduled) later;
            scheduled := scheduled + v_counted;
        END LOOP;
        SELECT count(*) INTO running FROM (
            SELECT FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.group_key = v_group
              AND j.state = 'running'
            LIMIT p_cap) claimed;
        SELECT w.weight INTO weight FROM postkit_queue.group_weights w
        WHERE w.namespace = p_namespace AND w.queue = p_queue AND w.group_key = v_group;
        weight := coalesce(weight, 1);
        counts_capped := greatest(pending, scheduled, running) >= p_cap;
        RETURN NEXT;
    END LOOP;
END
$$;
