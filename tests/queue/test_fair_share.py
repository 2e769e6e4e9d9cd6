"""Fair share (fair.sql): the claims of a fair queue take turns among its groups, each given up
to its weight of ready jobs per turn, so that one group's backlog keeps no other waiting.

Every claim here is a pull on a client of its own that commits at once (autocommit), as a
worker's claims are: the round's state lives in the queue's flow_state row between claims.
Where two claims must overlap, the first one's transaction stays open until the test ends it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from postkit import errors
from postkit.queue import Job, QueueClient
from tests.queue.conftest import BLOCK_TIMEOUT, WaitUntilBlocked, commit, forbid_waiting
from tests.queue.test_query_plans import apply_settings, explain, normalized, prepare, scans

Q = "reports"
MakeClient = Callable[..., QueueClient]


@pytest.fixture
def fair(make_client: MakeClient) -> QueueClient:
    """A client in autocommit on a fair queue ``Q``."""
    client = make_client(autocommit=True)
    assert client.configure_queue(Q, fair=True).fair
    return client


def push(client: QueueClient, group: str | None, count: int, **options: object) -> list[int]:
    """``count`` jobs of ``group``, in one statement; their ids."""
    ids = client.push_batch(Q, [{"n": n} for n in range(count)], group_keys=[group] * count)
    assert None not in ids
    return [job_id for job_id in ids if job_id is not None]


def claim_groups(client: QueueClient, claims: int, limit: int = 1) -> list[str | None]:
    """The group of each job ``claims`` claims of ``limit`` jobs took, in claim order."""
    jobs: list[Job] = []
    for _ in range(claims):
        jobs += client.pull_batch(Q, worker_id="w", limit=limit)
    return [job.group_key for job in jobs]


def test_a_group_pushed_behind_another_groups_backlog_is_claimed_at_the_next_turn(
    fair: QueueClient,
) -> None:
    push(fair, "a-big", 10_000)
    push(fair, "b-small", 1)

    assert claim_groups(fair, 2) == ["a-big", "b-small"]


def test_weights_3_to_1_give_jobs_3_to_1_while_both_groups_have_work(fair: QueueClient) -> None:
    fair.set_group_weight(Q, "acme", 3)
    push(fair, "acme", 100)
    push(fair, "globex", 100)

    one_at_a_time = claim_groups(fair, 40)
    in_batches = claim_groups(fair, 5, limit=8)

    assert one_at_a_time[:8] == ["acme"] * 3 + ["globex"] + ["acme"] * 3 + ["globex"]
    assert Counter(one_at_a_time) == {"acme": 30, "globex": 10}
    assert Counter(in_batches) == {"acme": 30, "globex": 10}


def test_a_big_claim_gives_each_group_a_longer_turn_and_visits_about_32_groups(
    fair: QueueClient,
) -> None:
    for group in range(100):
        push(fair, f"g{group:03}", 10)
    fair.set_group_weight(Q, "g000", 2)

    jobs = fair.pull_batch(Q, worker_id="w", limit=96)  # a turn of 3 jobs per unit of weight

    taken = Counter(job.group_key for job in jobs)
    assert taken["g000"] == 6
    assert set(taken.values()) == {6, 3} and len(taken) == 31
    assert claim_groups(fair, 1, limit=32) == [f"g{group:03}" for group in range(31, 63)]


def test_a_claim_that_goes_round_again_never_takes_a_job_twice(fair: QueueClient) -> None:
    pushed = {group: push(fair, group, 5) for group in ("a", "b", "c")}
    assert claim_groups(fair, 1) == ["a"]

    jobs = fair.pull_batch(Q, worker_id="w", limit=12)  # b c a b c a ...: four rounds

    assert Counter(job.group_key for job in jobs) == {"a": 4, "b": 4, "c": 4}
    assert len({job.id for job in jobs}) == 12
    assert {job.id for job in jobs} <= set(itertools.chain(*pushed.values()))


def test_an_idle_groups_share_goes_to_the_others_at_once(fair: QueueClient) -> None:
    fair.set_group_weight(Q, "idle", 5)
    push(fair, "acme", 20)
    push(fair, "globex", 3)

    claimed = claim_groups(fair, 10)

    # "idle" has no job: never visited. globex runs dry after three: acme gets the rest.
    assert claimed == ["acme", "globex"] * 3 + ["acme"] * 4


def test_a_claim_fills_from_every_group_with_ready_jobs_in_one_round(fair: QueueClient) -> None:
    for group in ("a", "b", "c"):
        push(fair, group, 5)

    # One turn each, then a second round: a claim's jobs come back in id order.
    assert Counter(claim_groups(fair, 1, limit=7)) == {"a": 3, "b": 2, "c": 2}


def test_a_groups_jobs_are_claimed_in_pull_order(fair: QueueClient) -> None:
    low = fair.push(Q, {"n": "low"}, group_key="acme")
    later = fair.push(Q, {"n": "later"}, group_key="acme", delay=3600)
    high = fair.push(Q, {"n": "high"}, group_key="acme", priority=5)
    also_low = fair.push(Q, {"n": "also low"}, group_key="acme")

    claimed = [fair.pull_batch(Q, worker_id="w", limit=1) for _ in range(4)]

    # The fourth claim finds nothing: the last job is delayed an hour.
    assert [job.id for jobs in claimed for job in jobs] == [high, low, also_low]
    assert fair.get_job(later) is not None


def test_ten_thousand_groups_of_three_drain_in_push_order_within_each(
    fair: QueueClient,
) -> None:
    groups = [f"tenant-{n:05}" for n in range(10_000)]
    pushed: dict[str, list[int]] = {group: [] for group in groups}
    for round_ in range(3):
        ids = fair.push_batch(Q, [{"round": round_}] * len(groups), group_keys=groups)
        for group, job_id in zip(groups, ids, strict=True):
            assert job_id is not None
            pushed[group].append(job_id)

    claimed: dict[str, list[int]] = {group: [] for group in groups}
    while batch := fair.pull_batch(Q, worker_id="w", limit=1000):
        for job in batch:
            assert job.group_key is not None
            claimed[job.group_key].append(job.id)

    assert claimed == pushed


def test_jobs_without_a_group_get_what_the_groups_leave(fair: QueueClient) -> None:
    push(fair, None, 3)
    push(fair, "acme", 2)

    assert Counter(claim_groups(fair, 1, limit=4)) == {"acme": 2, None: 2}
    assert claim_groups(fair, 1, limit=4) == [None]


def test_a_group_limit_ends_a_turn_and_the_next_group_gets_the_claim(
    fair: QueueClient,
) -> None:
    fair.configure_queue(Q, group_concurrency=1)
    push(fair, "acme", 5)
    push(fair, "globex", 5)

    first = claim_groups(fair, 1, limit=10)
    second = claim_groups(fair, 1, limit=10)

    assert sorted(first) == ["acme", "globex"]  # one running each: their turns end at once
    assert second == []


def test_an_ordered_fair_queue_gives_each_group_its_oldest_live_job_only(
    fair: QueueClient,
) -> None:
    fair.configure_queue(Q, group_ordered=True)
    acme = push(fair, "acme", 3)
    globex = push(fair, "globex", 3)

    first = fair.pull_batch(Q, worker_id="w", limit=10)
    assert sorted(job.id for job in first) == [acme[0], globex[0]]
    fair.ack(next(job for job in first if job.id == acme[0]))

    assert [job.id for job in fair.pull_batch(Q, worker_id="w", limit=10)] == [acme[1]]


def test_the_round_goes_on_across_claims_from_other_sessions(make_client: MakeClient) -> None:
    workers = [make_client(autocommit=True) for _ in range(3)]
    workers[0].configure_queue(Q, fair=True)
    workers[0].set_group_weight(Q, "acme", 2)
    push(workers[0], "acme", 10)
    push(workers[0], "globex", 10)

    claimed = [
        job.group_key
        for worker in itertools.islice(itertools.cycle(workers), 9)
        for job in worker.pull_batch(Q, worker_id="w", limit=1)
    ]

    assert claimed == ["acme", "acme", "globex"] * 3


def test_claims_of_a_queue_whose_only_limit_is_fair_overlap_and_each_gives_every_group_a_turn(
    make_client: MakeClient,
) -> None:
    """The second claim runs while the first one's transaction is still open, without waiting
    for it, and passes over the jobs the first holds to the next job of each group."""
    holder, other = make_client(), make_client()
    holder.configure_queue(Q, fair=True)
    for group in ("a", "b", "c", "d"):
        push(holder, group, 3)
    commit(holder)
    forbid_waiting(other)

    first = holder.pull_batch(Q, worker_id="w", limit=4)  # its transaction stays open
    second = other.pull_batch(Q, worker_id="w", limit=4)

    assert sorted(job.group_key or "" for job in first) == ["a", "b", "c", "d"]
    assert sorted(job.group_key or "" for job in second) == ["a", "b", "c", "d"]
    assert not {job.id for job in first} & {job.id for job in second}
    commit(holder)
    commit(other)


def test_pull_any_over_fair_queues_takes_no_turn(make_client: MakeClient) -> None:
    """pull_any takes the turns of its limited queues before it claims; a queue whose only
    limit is fair has none to take, so a second pull_any runs beside the first."""
    holder, other = make_client(), make_client()
    for queue in (Q, "other"):
        holder.configure_queue(queue, fair=True)
        holder.push_batch(queue, [{}] * 2, group_keys=["a", "b"])
    commit(holder)
    forbid_waiting(other)

    first = holder.pull_any([Q, "other"], worker_id="w", limit=2)  # its transaction stays open
    second = other.pull_any(["other", Q], worker_id="w", limit=2)

    assert {job.queue for job in first} == {Q} and {job.queue for job in second} == {"other"}
    commit(holder)
    commit(other)


def test_claims_of_a_fair_queue_with_a_group_limit_still_take_turns(
    make_client: MakeClient, wait_until_blocked: WaitUntilBlocked, executor: ThreadPoolExecutor
) -> None:
    """With group_concurrency a claim counts what runs of each group, which only a claim that
    waited for the one before it can see."""
    holder, other = make_client(), make_client()
    holder.configure_queue(Q, fair=True, group_concurrency=1)
    for group in ("a", "b"):
        push(holder, group, 2)
    commit(holder)

    assert len(holder.pull_batch(Q, worker_id="w", limit=2)) == 2  # its transaction stays open
    waiting = executor.submit(other.pull_batch, Q, worker_id="w", limit=2)
    wait_until_blocked(other, holder, waiting)
    commit(holder)

    assert waiting.result(timeout=BLOCK_TIMEOUT) == [], "each group runs its one job already"
    commit(other)


def test_a_queue_stops_being_fair_and_claims_in_pull_order_again(fair: QueueClient) -> None:
    push(fair, "a-big", 5)
    push(fair, "b-small", 1)
    assert not fair.configure_queue(Q, fair=None).fair  # None: back to the default

    assert claim_groups(fair, 1, limit=5) == ["a-big"] * 5


def test_weights_are_set_listed_and_put_back(fair: QueueClient) -> None:
    assert fair.set_group_weight(Q, "acme", 3) == 3
    assert fair.set_group_weight(Q, "globex", 1000) == 1000
    assert fair.group_weights(Q) == {"acme": 3, "globex": 1000}
    assert fair.group_weights(Q, after="acme", limit=1) == {"globex": 1000}

    assert fair.set_group_weight(Q, "acme", None) == 1
    assert fair.group_weights(Q) == {"globex": 1000}


@pytest.mark.parametrize("weight", [0, 1001, -1])
def test_a_weight_out_of_range_is_refused_before_anything_is_sent(
    fair: QueueClient, weight: int
) -> None:
    with pytest.raises(errors.InvalidFlowControlError, match="weight"):
        fair.set_group_weight(Q, "acme", weight)


def test_fair_must_be_true_or_false(fair: QueueClient) -> None:
    with pytest.raises(errors.InvalidFlowControlError, match="fair must be True or False"):
        fair.configure_queue(Q, fair="yes")  # type: ignore[arg-type]


# The statements claim_fair runs for each turn, guarded as test_query_plans guards pull's: each
# a copy, word for word, of the function's own, planned on a queue with a group of 3,000 jobs
# and 200 groups of 10, analyzed.
CLAIM_FAIR = "claim_fair(text,text,integer,timestamptz,text,integer,integer,boolean)"
FAIR_PARAMS = {
    "p_namespace": "text",
    "p_queue": "text",
    "fair_group": "text",
    "p_now": "timestamptz",
    "v_want": "integer",
    "v_took": "integer",
    "v_chosen": "bigint[]",
    "v_head": "bigint",
    "v_wrap_had": "integer",
}
FAIR_NEXT_GROUP = """
            SELECT j.group_key, j.id, j.run_at INTO v_next, v_head, v_head_at
            FROM postkit_queue.jobs j
            WHERE j.namespace = p_namespace AND j.queue = p_queue AND j.state = 'pending'
              AND j.group_key > fair_group
              AND (v_wrap_had IS NULL OR j.id <> ALL (v_chosen))
            ORDER BY j.group_key, j.priority DESC, j.run_at, j.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
"""
FAIR_GROUP_JOBS = """
                        SELECT j.id FROM postkit_queue.jobs j
                        WHERE j.namespace = p_namespace AND j.queue = p_queue
                          AND j.state = 'pending' AND j.group_key = fair_group
                          AND j.run_at <= p_now AND j.id IS DISTINCT FROM v_head
                          AND (v_wrap_had IS NULL OR j.id <> ALL (v_chosen))
                        ORDER BY j.priority DESC, j.run_at, j.id
                        LIMIT v_want - v_took
                        FOR UPDATE SKIP LOCKED
"""


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("statement", [FAIR_NEXT_GROUP, FAIR_GROUP_JOBS])
def test_each_turn_probes_the_fair_index_whatever_a_groups_backlog(
    fair: QueueClient, connect: Callable[..., psycopg.Connection], mode: str, statement: str
) -> None:
    push(fair, "big", 3000)
    for group in range(200):
        push(fair, f"group-{group:03}", 10)
    push(fair, None, 500)
    connection = connect(autocommit=True)
    connection.execute("ANALYZE postkit_queue.jobs")
    row = connection.execute(
        "SELECT prosrc FROM pg_proc WHERE oid = 'postkit_queue.claim_fair'::regproc"
    ).fetchone()
    assert row is not None and normalized(statement) in normalized(row[0])
    text = statement.replace("INTO v_next, v_head, v_head_at", "").rstrip().rstrip(";")
    prepare(connection, "fair_stmt", text, FAIR_PARAMS)

    # After the walk went back to the first group: each row is tested against v_chosen.
    arguments = f"'{fair.namespace}', '{Q}', 'big', now(), 10, 0, '{{1,2}}', 3, 2"
    with connection.transaction():  # under claim_fair's own planner settings (sorting off)
        apply_settings(connection, CLAIM_FAIR)
        nodes = explain(connection, mode, f"EXECUTE fair_stmt({arguments})")

    assert [scan for scan in scans(nodes) if scan[1] != "jobs_fair_idx"] == [], nodes
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], nodes
