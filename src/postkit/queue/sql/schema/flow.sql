-- Flow control: the limits a queue's claims obey across every worker, set in its settings
-- (queue_settings: concurrency, rate_limit per rate_period, group_concurrency, group_ordered)
-- and enforced here, when jobs are claimed, so that a client in any language gets them. pull
-- hands a queue with any limit to claim_limited; a queue without one never comes here and is
-- claimed by pull's own statements, unchanged.
--
-- What each limit holds to (docs/guarantees.md says the same to users):
--   * concurrency: the queue's running jobs (claimed, not yet settled or rescued) never
--     exceed it. It is counted from the running rows themselves at each claim, never kept in a
--     counter, so nothing can drift: a job leaves the count exactly when its state changes (ack,
--     nack, fail, release, a rescue by tick_timeouts), whoever changes it. A worker killed with
--     a claim holds its slot until the claim expires and is rescued.
--   * rate_limit per rate_period: the jobs claimed from the queue in any window of
--     rate_period (by the queue's clock) never exceed rate_limit. It counts claims, not handler
--     calls: a claim that is released or rescued still counted.
--   * group_concurrency: per group key (push's group_key), at most this many running at once.
--   * group_ordered: per group key, one job at a time, in push order (id order: the jobs of
--     pushes that committed one after another run in that order). The oldest live job of a key
--     blocks the rest while it is pending (a retry waiting out its backoff included) or running,
--     until it completes or is dead-lettered. A job whose push committed after a later push's
--     may find that one running: it waits for it, so one at a time holds whatever the commit
--     order.
--   Jobs without a group key obey only the queue-wide limits.
--
-- The claims of one flow-controlled queue take turns: each first locks the queue's flow_state
-- row, which it keeps until its transaction ends. Under READ COMMITTED every statement after
-- the lock sees every earlier turn's claims committed, so a count taken then is exact; a
-- snapshot taken before the lock (REPEATABLE READ, SERIALIZABLE) would not be, and such a claim
-- is refused (PKQ18). Taking turns costs one claim at a time per queue: a worker claims a batch
-- per turn, and a turn is a few index probes long. A queue whose only limit is fair counts
-- nothing, and its claims overlap instead (fair.sql).

-- claim_limited: pull's choice, for a queue with limits or fair (fair.sql): take the queue's
-- turn, then choose and lock up to p_limit ready jobs of it, as many as its limits allow now,
-- highest priority first, then oldest run_at (pull's order), skipping jobs their group's limit
-- holds back; a fair queue's by turns among its groups. Returns their
-- ids, which pull claims at claimed_at: the queue's clock at the turn, which the rate log keeps
-- for them. The policy arrives as its values, not a row.
CREATE OR REPLACE FUNCTION postkit_queue.claim_limited(
    p_namespace         text,
    p_queue             text,
    p_limit             integer,
    p_concurrency       integer,
    p_rate_limit        integer,
    p_rate_period       interval,
    p_group_concurrency integer,
    p_group_ordered     boolean,
    p_fair              boolean,
    OUT ids             bigint[],
    OUT claimed_at      timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
-- The scans walk their indexes in order whatever the statistics say.
SET enable_sort = off
AS $$
DECLARE
    v_now       timestamptz;
    v_allowed   integer := p_limit;
    v_counted   integer;
    v_in_window integer;         -- the claims of the last rate_period, before this one's
    v_window    postkit_queue.flow_state;
    v_at        timestamptz[];
    v_claims    integer[];
    v_candidate record;
    v_ids       bigint[] := '{}';
    v_locked    bigint;          -- a job a scan locked
    v_keys      text[] := '{}';  -- the group key of each job taken so far, in step with v_ids
    v_held      jsonb := '{}';   -- the group keys this walk found held back, as object keys
    v_open      boolean;         -- the candidate's key may run one more job
    v_full      boolean;         -- and taking this one fills it for the rest of the walk
    v_round     record;          -- a fair queue's claim and where its round stands (fair.sql)
    -- Fair is the queue's only limit: its claims overlap instead of taking turns (fair.sql).
    v_overlap   boolean := p_fair AND p_concurrency IS NULL AND p_rate_limit IS NULL
                           AND p_group_concurrency IS NULL AND NOT p_group_ordered;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'postkit: queue % has flow limits, so its jobs are claimed only in a '
                        'READ COMMITTED transaction (this one is %): a snapshot older than the '
                        'claim could not count what runs', p_queue,
            current_setting('transaction_isolation') USING ERRCODE = 'PKQ18';
    END IF;
    -- The turn (see above). The row exists once the queue has limits (configure_queue
    -- creates it); a queue whose settings were written otherwise gets it
    -- here, and two first claims racing to create it both end up locking the one row. A
    -- queue whose only limit is fair reads where its round stands without taking the turn.
    IF v_overlap THEN
        SELECT * INTO v_window FROM postkit_queue.flow_state f
        WHERE f.namespace = p_namespace AND f.queue = p_queue;
    ELSE
        SELECT * INTO v_window FROM postkit_queue.flow_state f
        WHERE f.namespace = p_namespace AND f.queue = p_queue
        FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        INSERT INTO postkit_queue.flow_state (namespace, queue) VALUES (p_namespace, p_queue)
        ON CONFLICT (namespace, queue) DO NOTHING;
        SELECT * INTO v_window FROM postkit_queue.flow_state f
        WHERE f.namespace = p_namespace AND f.queue = p_queue
        FOR UPDATE;
    END IF;
    -- The queue's clock at this moment, after the wait for the turn: clock() is the time the
    -- statement began, which a wait for the previous turn would leave behind.
    v_now := postkit_queue.clock() + (clock_timestamp() - statement_timestamp());
    claimed_at := v_now;
    ids := '{}';

    IF p_concurrency IS NOT NULL THEN
        -- What runs now, counted from the running rows: a range scan of jobs_deadline_idx (the
        -- namespace's running jobs), stopping at the limit. Counted as the rows a PERFORM
        -- read, not by count(*) over a subquery: each statement here is one table's, which
        -- Citus routes with the namespace unbound, as in this generic plan (docs/scaling.md).
        PERFORM FROM postkit_queue.jobs j
        WHERE j.namespace = p_namespace AND j.state = 'running' AND j.queue = p_queue
        LIMIT p_concurrency;
        GET DIAGNOSTICS v_counted = ROW_COUNT;
        v_allowed := least(v_allowed, p_concurrency - v_counted);
    END IF;
    IF p_rate_limit IS NOT NULL THEN
        -- The claims of the last rate_period, from the log in the locked row.
        SELECT coalesce(array_agg(w.at ORDER BY w.n), '{}'),
               coalesce(array_agg(w.claims ORDER BY w.n), '{}'),
               coalesce(sum(w.claims), 0)
        INTO v_at, v_claims, v_counted
        FROM unnest(v_window.window_at, v_window.window_claims) WITH ORDINALITY AS w(at, claims, n)
        WHERE w.at > v_now - p_rate_period;
        v_allowed := least(v_allowed, p_rate_limit - v_counted);
        v_in_window := v_counted;
        -- Whether the window is full, kept for next_run_at: no notification comes when it
        -- empties, so the queue's waiting workers learn it there. Written when it changes:
        -- here when it opened, below when this claim fills it; a few writes per rate slot.
        IF v_window.rate_held IS DISTINCT FROM (v_counted >= p_rate_limit) THEN
            UPDATE postkit_queue.flow_state f SET rate_held = v_counted >= p_rate_limit
            WHERE f.namespace = p_namespace AND f.queue = p_queue;
        END IF;
    END IF;
    IF v_allowed <= 0 THEN
        RETURN;
    END IF;

    IF p_fair THEN
        -- Turns among the queue's groups (fair.sql), from where the last claim left the round,
        -- which this claim moves on in the row it holds locked. Claims that overlap never wait
        -- for it: the row is written only if no other claim is writing it now (that claim,
        -- which started from the same point, writes where it got to).
        SELECT * INTO v_round
        FROM postkit_queue.claim_fair(p_namespace, p_queue, v_allowed, v_now, v_window.fair_group,
                                      v_window.fair_given, p_group_concurrency, p_group_ordered);
        v_ids := v_round.chosen;
        IF v_round.fair_group IS DISTINCT FROM v_window.fair_group
           OR v_round.fair_given <> v_window.fair_given THEN
            IF v_overlap THEN
                PERFORM FROM postkit_queue.flow_state f
                WHERE f.namespace = p_namespace AND f.queue = p_queue
                FOR UPDATE SKIP LOCKED;
            END IF;
            IF NOT v_overlap OR FOUND THEN
                UPDATE postkit_queue.flow_state f
                SET fair_group = v_round.fair_group, fair_given = v_round.fair_given
                WHERE f.namespace = p_namespace AND f.queue = p_queue;
            END IF;
        END IF;
    ELSIF p_group_concurrency IS NULL AND NOT p_group_ordered THEN
        -- Queue-wide limits only: pull's claim from the head of jobs_pull_idx. Only other kinds
        -- of transaction (a cancel, a purge) lock pending rows now, hence SKIP LOCKED.
        FOR v_locked IN
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.run_at <= v_now
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT v_allowed
            FOR UPDATE SKIP LOCKED
        LOOP
            v_ids[cardinality(v_ids) + 1] := v_locked;
        END LOOP;
    ELSE
        -- The ready jobs in pull order, read lazily (the loop stops once it has enough), each
        -- taken unless its group's limit holds it back. Nothing is locked while reading: a
        -- job passed over stays free for the operators' calls.
        FOR v_candidate IN
            SELECT j.id, j.group_key FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.run_at <= v_now
            ORDER BY j.priority DESC, j.run_at, j.id
        LOOP
            IF v_candidate.group_key IS NOT NULL THEN
                -- A key found held back earlier in this walk stays held back until the claim
                -- ends: its later jobs cost a lookup in v_held, not a probe of an index.
                CONTINUE WHEN v_held ? v_candidate.group_key;
                IF p_group_ordered THEN
                    -- It may not run beside a job of its key: not a younger one either, since
                    -- a push whose transaction commits after a later push's is seen only once
                    -- that job may run already (one probe of jobs_group_running_idx). Then its
                    -- key is held back for the whole walk. Else it must be its key's oldest
                    -- live job (one probe of jobs_group_idx for a live job of the key pushed
                    -- before it); one that is not leaves its key open, since the oldest, a
                    -- retry whose run_at moved back, may come later in pull order. A key
                    -- gives one job per claim.
                    PERFORM FROM postkit_queue.jobs o
                    WHERE o.namespace = p_namespace AND o.queue = p_queue
                      AND o.group_key = v_candidate.group_key AND o.state = 'running'
                    LIMIT 1;
                    v_open := NOT FOUND;
                    v_full := true;
                    IF v_open THEN
                        PERFORM FROM postkit_queue.jobs o
                        WHERE o.namespace = p_namespace AND o.queue = p_queue
                          AND o.group_key = v_candidate.group_key
                          AND o.id < v_candidate.id
                        LIMIT 1;
                        CONTINUE WHEN FOUND;
                    END IF;
                ELSE
                    -- What runs of its key (jobs_group_running_idx) and what this claim took.
                    PERFORM FROM postkit_queue.jobs o
                    WHERE o.namespace = p_namespace AND o.queue = p_queue
                      AND o.group_key = v_candidate.group_key AND o.state = 'running'
                    LIMIT p_group_concurrency;
                    GET DIAGNOSTICS v_counted = ROW_COUNT;
                    v_counted := v_counted
                                 + cardinality(array_positions(v_keys, v_candidate.group_key));
                    v_open := v_counted < p_group_concurrency;
                    v_full := v_counted + 1 >= p_group_concurrency;
                END IF;
                IF NOT v_open OR v_full THEN
                    v_held := v_held || jsonb_build_object(v_candidate.group_key, true);
                END IF;
                CONTINUE WHEN NOT v_open;
            END IF;
            v_ids := v_ids || v_candidate.id;
            v_keys := v_keys || v_candidate.group_key;
            EXIT WHEN cardinality(v_ids) >= v_allowed;
        END LOOP;
    END IF;
    IF (p_fair AND NOT v_overlap) OR p_group_concurrency IS NOT NULL OR p_group_ordered THEN
        -- Lock what was taken (where the claims overlap, claim_fair locked it as it went, and
        -- the lock's recheck found it pending): primary-key lookups of its ids; a job another
        -- transaction holds (an operator's cancel, say) or that left the queue meanwhile is
        -- skipped. No ORDER BY: SKIP LOCKED never waits, so the order rows are locked in
        -- cannot deadlock, and with sorting disabled an ORDER BY id makes the planner walk the
        -- namespace's whole primary-key range in id order (an = ANY on the index's second
        -- column gives no order on PostgreSQL 15) instead of probing the ids.
        FOR v_locked IN
            SELECT j.id FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.id = ANY (v_ids) AND j.state = 'pending'
            FOR UPDATE SKIP LOCKED
        LOOP
            ids[cardinality(ids) + 1] := v_locked;
        END LOOP;
        v_ids := ids;
    END IF;

    ids := v_ids;
    IF p_rate_limit IS NOT NULL AND cardinality(v_ids) > 0 THEN
        -- The log keeps the last rate_period's claims, and these: pull claims every id
        -- locked here, in this transaction.
        UPDATE postkit_queue.flow_state f
        SET window_at = v_at || v_now, window_claims = v_claims || cardinality(v_ids),
            rate_held = v_in_window + cardinality(v_ids) >= p_rate_limit
        WHERE f.namespace = p_namespace AND f.queue = p_queue;
    END IF;
END
$$;

-- rate_slot_at: when a rate-limited queue may claim again: NULL when it may now (its last
-- rate_period holds fewer than rate_limit claims), else the moment enough of those claims have
-- left the window. A waiting worker sleeps until then (next_run_at). The log lists claims in
-- time order; the window at time T holds the entries after T - rate_period, so the queue may
-- claim again once the entries after the k-th one sum to less than rate_limit, at the k-th
-- entry's time plus rate_period.
CREATE OR REPLACE FUNCTION postkit_queue.rate_slot_at(
    p_namespace text, p_queue text, p_rate_limit integer, p_rate_period interval,
    p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
-- Its caller next_run_at disables sorting for its own scans, and a function inherits the
-- setting: the window's sort (a few log entries) would then be costed as disabled, past
-- jit_above_cost, and every call would compile the query (150-330 ms on a 2-core machine).
SET enable_sort = on
AS $$
DECLARE
    v_slot   timestamptz;
    v_at     timestamptz[];
    v_claims integer[];
BEGIN
    IF p_rate_limit IS NULL THEN
        RETURN NULL;
    END IF;
    -- The log, by primary key, then the window over it in a statement that reads no table:
    -- next_run_at calls this under its generic plan, where Citus routes only a statement of
    -- one table (docs/scaling.md).
    SELECT f.window_at, f.window_claims INTO v_at, v_claims
    FROM postkit_queue.flow_state f
    WHERE f.namespace = p_namespace AND f.queue = p_queue;
    SELECT CASE WHEN coalesce(sum(w.claims), 0) < p_rate_limit THEN NULL
                ELSE min(w.at + p_rate_period) FILTER (WHERE w.later < p_rate_limit) END
    INTO v_slot
    FROM (
        SELECT e.at, e.claims,
               coalesce(sum(e.claims) OVER (ORDER BY e.n DESC
                                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                        0) AS later
        FROM unnest(v_at, v_claims) WITH ORDINALITY AS e(at, claims, n)
        WHERE e.at > p_now - p_rate_period
    ) w;
    RETURN v_slot;
END
$$;
