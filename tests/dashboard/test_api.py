"""The dashboard's JSON API against a real PostgreSQL, through a real server: each page's data
and each action, as the page uses them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from postkit.dashboard.source import GROUP_KEYS, PAGE_SIZE
from postkit.queue import QueueClient
from tests.dashboard.conftest import ServeDashboard
from tests.scrape import parse, value, values

Q = "send_otp"


@pytest.fixture
def q(dsn: str, namespace: str) -> Iterator[QueueClient]:
    """An autocommit client in the test's namespace: what it writes, the dashboard sees."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield QueueClient(connection.cursor(), namespace=namespace)


@pytest.fixture
def api(dashboard: httpx.Client, namespace: str) -> httpx.Client:
    """The dashboard's client, with paths relative to the test's namespace."""
    dashboard.base_url = dashboard.base_url.join(f"/api/ns/{namespace}/")
    return dashboard


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def bury(q: QueueClient, *, error: str = "boom", payload: Any = None, queue: str = Q) -> int:
    job_id = q.push(queue, {"n": 1} if payload is None else payload)
    job = q.pull(queue, worker_id="w1")
    assert job is not None and job.id == job_id
    q.fail(job, error=error)
    return job_id


# -------------------------------------------------------------------------------------------
# The page's own data
# -------------------------------------------------------------------------------------------


def test_the_page_and_its_script_are_served(dashboard: httpx.Client) -> None:
    page = dashboard.get("/")
    assert page.status_code == 200 and '<script src="/static/app.js">' in page.text
    assert dashboard.get("/static/app.js").status_code == 200
    assert dashboard.get("/static/vendor/uplot-1.6.32/uPlot.iife.min.js").status_code == 200


def test_meta_lists_the_namespaces_the_role_may_see(
    dashboard: httpx.Client, q: QueueClient, namespace: str
) -> None:
    q.push(Q, {"n": 1})
    meta = ok(dashboard.get("/api/meta"))
    assert namespace in meta["namespaces"]
    assert meta["read_only"] is False and len(meta["csrf_token"]) >= 32


def test_meta_lists_only_the_namespaces_given(
    serve_dashboard: ServeDashboard, q: QueueClient, namespace: str
) -> None:
    with serve_dashboard(namespaces=(namespace, "billing")) as http:
        assert ok(http.get("/api/meta"))["namespaces"] == [namespace, "billing"]


# -------------------------------------------------------------------------------------------
# Overview
# -------------------------------------------------------------------------------------------


def test_the_overview_counts_each_queue_by_state(api: httpx.Client, q: QueueClient) -> None:
    for n in range(3):
        q.push(Q, {"n": n})
    q.push(Q, {"n": "later"}, delay=600)
    running = q.pull(Q, worker_id="w1")
    bury(q, queue="emails")

    queues = {row["queue"]: row for row in ok(api.get("overview"))["queues"]}

    assert {k: queues[Q][k] for k in ("pending", "scheduled", "running", "dead")} == {
        "pending": 2,
        "scheduled": 1,
        "running": 1,
        "dead": 0,
    }
    assert queues["emails"]["dead"] == 1
    assert queues[Q]["oldest_ready_age"] >= 0
    assert running is not None


def test_the_overview_shows_a_queues_concurrency_limit_and_its_rate_limit_holding(
    api: httpx.Client, q: QueueClient
) -> None:
    q.configure_queue(Q, concurrency=5, rate=(1, 3600))
    q.push(Q, {"n": 1})
    q.push(Q, {"n": 2})
    assert q.pull(Q, worker_id="w1") is not None

    queues = {row["queue"]: row for row in ok(api.get("overview"))["queues"]}
    policy = ok(api.get(f"queues/{Q}"))["policy"]

    assert (queues[Q]["running"], queues[Q]["concurrency"]) == (1, 5)
    assert queues[Q]["rate_limited_until"] is not None
    assert (policy["concurrency"], policy["rate_limit"], policy["rate_period"]) == (5, 1, 3600.0)


def test_the_overview_charts_each_queues_outcomes_per_minute(
    api: httpx.Client, q: QueueClient
) -> None:
    for n in range(2):
        q.push(Q, {"n": n})
    for job in q.pull_batch(Q, limit=2, worker_id="w1"):
        q.ack(job)
    bury(q)

    series = ok(api.get("overview"))["series"][Q]

    # [minute (epoch seconds), completed, failed, retried, rescued]
    assert sum(point[1] for point in series) == 2
    assert sum(point[2] for point in series) == 1
    assert all(point[0] % 60 == 0 for point in series)


def test_the_overview_counts_workers_alive_and_lost(
    api: httpx.Client, q: QueueClient, namespace: str
) -> None:
    for worker_id in ("alive-1", "lost-1"):
        q.register_worker(
            worker_id, host="h", pid=1, queues=[Q], concurrency=1, version="t", heartbeat_interval=5
        )
    # lost-1 stopped heartbeating an hour ago (the test session may write the table).
    q.cursor.execute(
        "UPDATE postkit_queue.workers SET heartbeat_at = heartbeat_at - interval '1 hour'"
        " WHERE namespace = %s AND worker_id = 'lost-1'",
        (namespace,),
    )

    assert ok(api.get("overview"))["workers"] == {"alive": 1, "lost": 1}


# -------------------------------------------------------------------------------------------
# Queue
# -------------------------------------------------------------------------------------------


def test_a_queue_shows_its_policy_in_force(api: httpx.Client, q: QueueClient) -> None:
    q.configure_queue(Q, max_attempts=4, visibility_timeout=90)

    data = ok(api.get(f"queues/{Q}"))

    assert data["policy"]["max_attempts"] == 4
    assert data["policy"]["visibility_timeout"] == 90
    assert data["policy"]["paused"] is False


def test_a_queue_lists_its_first_group_keys_and_says_when_there_are_more(
    api: httpx.Client, q: QueueClient
) -> None:
    keys = [f"tenant-{n:02}" for n in range(GROUP_KEYS + 1)]
    q.push_batch(Q, [{}] * len(keys), group_keys=keys)

    data = ok(api.get(f"queues/{Q}"))

    assert [group["group_key"] for group in data["groups"]] == keys[:GROUP_KEYS]
    assert data["groups"][0] == {
        "group_key": "tenant-00",
        "pending": 1,
        "scheduled": 0,
        "running": 0,
        "weight": 1,
        "counts_capped": False,
    }
    assert data["more_groups"] is True


@pytest.mark.parametrize("state", ["pending", "scheduled", "running", "dead"])
def test_a_queues_jobs_page_through_each_state_once(
    api: httpx.Client, q: QueueClient, state: str
) -> None:
    ids: set[int] = set()
    for n in range(120):
        if state == "dead":
            ids.add(bury(q, payload={"n": n}))
        else:
            ids.add(q.push(Q, {"n": n}, delay=600 if state == "scheduled" else 0))
    if state == "running":
        assert len(q.pull_batch(Q, limit=120, worker_id="w1")) == 120

    seen: list[int] = []
    cursor = None
    for _ in range(10):
        params = {"state": state, **({"cursor": cursor} if cursor else {})}
        page = ok(api.get(f"queues/{Q}/jobs", params=params))
        seen += [job["id"] for job in page["jobs"]]
        assert all(job["age_seconds"] >= 0 for job in page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert sorted(seen) == sorted(ids)


def test_the_limits_action_sets_the_limits_it_names_and_keeps_the_others(
    api: httpx.Client, q: QueueClient
) -> None:
    q.push(Q, {})

    first = ok(api.post(f"queues/{Q}/limits", json={"concurrency": 5, "rate": [10, 1]}))
    second = ok(api.post(f"queues/{Q}/limits", json={"group_ordered": True}))
    lifted = ok(api.post(f"queues/{Q}/limits", json={"concurrency": None, "rate": None}))

    assert (first["policy"]["concurrency"], first["policy"]["rate_limit"]) == (5, 10)
    assert second["policy"]["concurrency"] == 5 and second["policy"]["group_ordered"] is True
    assert (lifted["policy"]["concurrency"], lifted["policy"]["rate_limit"]) == (None, None)
    assert lifted["policy"]["group_ordered"] is True
    assert q.queue_policy(Q).group_ordered is True


def test_the_limits_action_makes_a_queue_fair_and_null_makes_it_claim_in_pull_order_again(
    api: httpx.Client, q: QueueClient
) -> None:
    q.push(Q, {})

    made_fair = ok(api.post(f"queues/{Q}/limits", json={"fair": True}))
    unfair = ok(api.post(f"queues/{Q}/limits", json={"fair": None}))

    assert made_fair["policy"]["fair"] is True
    assert unfair["policy"]["fair"] is False
    assert q.queue_policy(Q).fair is False


@pytest.mark.parametrize(
    "body, says",
    [
        ({"concurrency": 0}, "concurrency must be between 1 and 100000"),
        ({"rate": [10, None]}, "rate_period is required"),
        ({"rate": 10}, "rate must be a pair (claims, period)"),
        ({"group_ordered": True, "group_concurrency": 2}, "group_concurrency must be 1 or unset"),
        ({"max_attempts": 3}, "unknown limit 'max_attempts'"),
    ],
)
def test_the_limits_action_refuses_a_bad_limit_with_a_readable_400(
    api: httpx.Client, q: QueueClient, body: dict[str, object], says: str
) -> None:
    q.push(Q, {})

    response = api.post(f"queues/{Q}/limits", json=body)

    assert response.status_code == 400, response.text
    assert says in response.json()["error"]
    assert q.queue_policy(Q).concurrency is None


def test_pause_and_resume_a_queue(api: httpx.Client, q: QueueClient) -> None:
    q.push(Q, {"n": 1})

    assert ok(api.post(f"queues/{Q}/pause", json={}))["paused"] is True
    assert q.queue_policy(Q).paused
    assert ok(api.post(f"queues/{Q}/resume", json={}))["paused"] is False
    assert not q.queue_policy(Q).paused


def test_a_queue_purge_deletes_at_most_what_its_dry_run_counted(
    api: httpx.Client, q: QueueClient
) -> None:
    for n in range(3):
        q.push(Q, {"n": n})
    dry = ok(api.post(f"queues/{Q}/purge", json={"dry_run": True}))
    assert dry["count"] == 3
    assert len(q.jobs(Q, "pending")) == 3
    q.push(Q, {"n": "pushed after the dry run"})

    done = ok(api.post(f"queues/{Q}/purge", json={"created_before": dry["created_before"]}))

    assert done["count"] == 3
    assert [job.payload for job in q.jobs(Q, "pending")] == [{"n": "pushed after the dry run"}]


# -------------------------------------------------------------------------------------------
# Job
# -------------------------------------------------------------------------------------------


def test_a_job_shows_its_payload_errors_and_claim(api: httpx.Client, q: QueueClient) -> None:
    job_id = q.push(Q, {"user_id": "42", "nested": {"a": [1, 2]}}, max_attempts=3)
    job = q.pull(Q, worker_id="w1")
    assert job is not None
    q.nack(job, error="provider down", backoff=0)
    job = q.pull(Q, worker_id="w2")
    assert job is not None

    data = ok(api.get(f"jobs/{job_id}"))["job"]

    assert data["state"] == "running" and data["attempts"] == 2
    assert '"user_id": "42"' in data["payload_json"]
    assert [(e["error"], e["worker_id"]) for e in data["errors"]] == [("provider down", "w1")]
    assert data["visible_until"] is not None
    assert data["claim_token"] is None  # the fence stays with the worker


def test_a_job_shows_the_jobs_waiting_for_it(api: httpx.Client, q: QueueClient) -> None:
    parent = q.push(Q, {"n": 1})
    children = [q.push(Q, {"n": 2}, depends_on=[parent]) for _ in range(2)]

    assert ok(api.get(f"jobs/{parent}"))["waiting_children"] == children
    assert ok(api.get(f"jobs/{children[0]}"))["job"]["depends_on"] == [parent]


def test_a_job_shows_its_tree_and_the_tree_is_cancelled_whole(
    api: httpx.Client, q: QueueClient
) -> None:
    root = q.push(Q, {"n": 1})
    child = q.push(Q, {"n": 2}, depends_on=[root])
    grandchild = q.push(Q, {"n": 3}, depends_on=[child])
    alone = q.push(Q, {"n": 4})

    tree = ok(api.get(f"jobs/{root}"))["tree"]
    assert [(node["job_id"], node["depth"], node["state"]) for node in tree] == [
        (root, 0, "pending"),
        (child, 1, "waiting"),
        (grandchild, 2, "waiting"),
    ]
    assert ok(api.get(f"jobs/{alone}"))["tree"] == []  # nothing descends from it

    assert ok(api.post(f"jobs/{root}/cancel-tree", json={})) == {"job_id": root, "cancelled": 3}
    assert {q.result(job_id).state for job_id in (root, child, grandchild)} == {"cancelled"}


def test_a_workflow_runs_page_lists_its_steps(api: httpx.Client, q: QueueClient) -> None:
    run_id = q.push(Q, {"order": 42})
    run = q.pull(Q, worker_id="w1")
    assert run is not None and run.id == run_id
    assert q.record_step(run, 0, "charge", {"id": "ch_1", "note": "<b>x</b>"})
    assert q.record_step(run, 1, "notify")

    steps = ok(api.get(f"jobs/{run_id}"))["steps"]

    assert [(s["position"], s["name"], s["attempt"]) for s in steps] == [
        (0, "charge", 1),
        (1, "notify", 1),
    ]
    assert '"note": "<b>x</b>"' in steps[0]["result_json"]  # text, for the page to show as text
    assert steps[1]["result_json"] == "null"
    assert [s["jobs"] for s in steps] == [[], []]


def test_a_workflow_runs_map_step_lists_its_jobs(api: httpx.Client, q: QueueClient) -> None:
    run_id = q.push(Q, {"order": 42})
    run = q.pull(Q, worker_id="w1")
    assert run is not None and run.id == run_id
    assert q.record_step(run, 0, "map", {"queue": "labels", "jobs": [7, 8]})
    assert q.record_step(run, 1, "charge", {"jobs": [9]})  # not a map: no links

    steps = ok(api.get(f"jobs/{run_id}"))["steps"]

    assert [s["jobs"] for s in steps] == [[7, 8], []]


def test_a_running_job_past_its_claim_deadline_shows_its_claim_expired(
    api: httpx.Client, q: QueueClient
) -> None:
    held = q.push(Q, {"n": 1})
    expired = q.push(Q, {"n": 2})
    assert q.pull(Q, worker_id="w1") is not None  # the default claim: 30 s
    assert q.pull(Q, worker_id="w2", visibility_timeout=0.01) is not None
    time.sleep(0.05)

    assert ok(api.get(f"jobs/{held}"))["claim_expired"] is False
    assert ok(api.get(f"jobs/{expired}"))["claim_expired"] is True
    assert ok(api.get(f"jobs/{expired}"))["job"]["state"] == "running"


def test_a_job_deeper_than_python_can_decode_shows_why_not_a_crash(
    api: httpx.Client, q: QueueClient, namespace: str
) -> None:
    deep = "[" * 5000 + "]" * 5000
    q.cursor.execute("SELECT postkit_queue.push(%s, %s, %s::jsonb)", (namespace, Q, deep))
    job_id = q.cursor.fetchone()[0]  # type: ignore[index]

    data = ok(api.get(f"jobs/{job_id}"))["job"]
    page = ok(api.get(f"queues/{Q}/jobs", params={"state": "pending"}))

    assert data["payload_json"] is None and data["payload_error"]
    assert page["jobs"][0]["payload_preview"].startswith("(")


def test_a_hostile_payload_comes_back_as_the_exact_text(api: httpx.Client, q: QueueClient) -> None:
    hostile = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    job_id = q.push(Q, {"name": hostile})

    data = ok(api.get(f"jobs/{job_id}"))
    assert hostile in data["job"]["payload_json"]


def test_cancel_a_pending_job_and_a_running_one(api: httpx.Client, q: QueueClient) -> None:
    q.push(Q, {"n": 1})
    running = q.pull(Q, worker_id="w1")
    waiting = q.push(Q, {"n": 2})
    assert running is not None

    assert ok(api.post(f"jobs/{waiting}/cancel", json={}))["cancelled"] is True
    assert ok(api.post(f"jobs/{running.id}/cancel", json={}))["cancelled"] is True

    for job_id in (waiting, running.id):
        cancelled = q.get_job(job_id)
        assert cancelled is not None and cancelled.state == "cancelled"
    assert q.ack(running) is False


def test_redrive_a_dead_job_and_follow_its_lineage(api: httpx.Client, q: QueueClient) -> None:
    dead = bury(q)

    new_id = ok(api.post(f"jobs/{dead}/redrive", json={}))["redriven"][0]["new_job_id"]
    lineage = ok(api.get(f"jobs/{new_id}"))["lineage"]

    assert [(step["job_id"], step["state"], step["redriven_job_id"]) for step in lineage] == [
        (dead, "dead", new_id),
        (new_id, "pending", None),
    ]


def test_an_unknown_job_is_not_found(api: httpx.Client) -> None:
    assert api.get("jobs/987654321").status_code == 404


# -------------------------------------------------------------------------------------------
# Dead letters
# -------------------------------------------------------------------------------------------


def test_dead_letters_filter_by_queue_error_and_time(api: httpx.Client, q: QueueClient) -> None:
    timeout = bury(q, error="Timeout from provider")
    refused = bury(q, error="card refused")
    other = bury(q, error="timeout too", queue="emails")
    since = ok(api.get("dead-letters"))["dead_letters"][0]["failed_at"]

    def ids(**params: str) -> list[int]:
        return [d["job_id"] for d in ok(api.get("dead-letters", params=params))["dead_letters"]]

    assert ids() == [other, refused, timeout]
    assert ids(queue=Q) == [refused, timeout]
    assert ids(error="TIMEOUT") == [other, timeout]
    assert ids(since=since) == [other]
    assert ids(until=since) == [refused, timeout]
    assert api.get("dead-letters", params={"since": "yesterday"}).status_code == 400


def test_dead_letters_page_newest_first_through_every_one(
    api: httpx.Client, q: QueueClient
) -> None:
    buried = [bury(q, payload={"n": n}) for n in range(75)]
    first = ok(api.get("dead-letters"))
    second = ok(api.get("dead-letters", params={"cursor": first["next_cursor"]}))

    seen = [d["job_id"] for d in first["dead_letters"] + second["dead_letters"]]
    assert seen == buried[::-1]
    assert second["next_cursor"] is None
    assert api.get("dead-letters", params={"cursor": "garbage"}).status_code == 400


def test_redrive_the_selected_dead_letters_after_a_dry_run(
    api: httpx.Client, q: QueueClient
) -> None:
    chosen = [bury(q), bury(q)]
    left = bury(q)

    dry = ok(api.post("dead-letters/redrive", json={"job_ids": chosen, "dry_run": True}))
    assert dry["count"] == 2 and len(q.dead_letters()) == 3
    done = ok(api.post("dead-letters/redrive", json={"job_ids": chosen}))

    assert done["count"] == 2
    assert [d.job_id for d in q.dead_letters()] == [left]
    assert len(q.jobs(Q, "pending")) == 2


def test_redrive_every_dead_letter_the_filters_match(api: httpx.Client, q: QueueClient) -> None:
    bury(q, queue="emails")
    bury(q)
    bury(q)

    dry = ok(api.post("dead-letters/redrive", json={"queue": Q, "dry_run": True}))
    done = ok(api.post("dead-letters/redrive", json={"queue": Q}))

    assert dry["count"] == done["count"] == 2
    assert [d.queue for d in q.dead_letters()] == ["emails"]


def test_an_action_on_an_error_text_filter_needs_a_selection(
    api: httpx.Client, q: QueueClient
) -> None:
    """Matching text reads every dead letter: an action takes the rows the search showed."""
    timeout = bury(q, error="timeout")
    bury(q, error="refused")

    for action in ("redrive", "purge"):
        refused = api.post(f"dead-letters/{action}", json={"error": "timeout"})
        assert refused.status_code == 400 and "select" in refused.json()["error"]
    found = ok(api.get("dead-letters", params={"error": "timeout"}))
    chosen = [d["job_id"] for d in found["dead_letters"]]
    assert found["searched_all"] and chosen == [timeout]
    assert ok(api.post("dead-letters/redrive", json={"job_ids": chosen}))["count"] == 1
    assert [d.error for d in q.dead_letters()] == ["refused"]


def test_purge_dead_letters_after_a_dry_run_spares_newer_ones(
    api: httpx.Client, q: QueueClient
) -> None:
    old = [bury(q), bury(q)]
    dry = ok(api.post("dead-letters/purge", json={"dry_run": True}))
    assert dry["count"] == 2
    newer = bury(q)

    done = ok(api.post("dead-letters/purge", json={"until": dry["failed_before"]}))

    assert done["count"] == 2
    assert [d.job_id for d in q.dead_letters(include_redriven=True)] == [newer]
    assert old


def test_bad_job_ids_are_refused_with_400(api: httpx.Client) -> None:
    for body in ({"job_ids": "1,2"}, {"job_ids": [1, "2"]}, {"job_ids": [True]}):
        assert api.post("dead-letters/redrive", json=body).status_code == 400
    assert api.post("dead-letters/redrive", content=b"not json").status_code == 400


# -------------------------------------------------------------------------------------------
# Schedules and workers
# -------------------------------------------------------------------------------------------


def test_schedules_show_next_run_and_flag_a_broken_one(
    api: httpx.Client, q: QueueClient, namespace: str
) -> None:
    q.create_schedule("nightly", Q, {"n": 1}, cron="0 3 * * *")
    q.create_schedule("broken", Q, {"n": 2}, every=60)
    q.cursor.execute(
        "SELECT postkit_queue.mark_schedule_broken(%s, 'broken', next_run_at, 'bad cron')"
        " FROM postkit_queue.schedules(%s) WHERE name = 'broken'",
        (namespace, namespace),
    )

    rows = {s["name"]: s for s in ok(api.get("schedules"))["schedules"]}

    assert rows["nightly"]["next_run_at"] and rows["nightly"]["broken_at"] is None
    assert rows["broken"]["broken_reason"] == "bad cron"


def test_pause_and_resume_a_schedule(api: httpx.Client, q: QueueClient) -> None:
    q.create_schedule("nightly", Q, {"n": 1}, cron="0 3 * * *")

    ok(api.post("schedules/nightly/pause", json={}))
    assert q.schedules()[0].paused
    ok(api.post("schedules/nightly/resume", json={}))
    assert not q.schedules()[0].paused
    assert api.post("schedules/missing/pause", json={}).status_code == 404


def test_workers_show_what_each_one_runs_now(api: httpx.Client, q: QueueClient) -> None:
    q.register_worker(
        "w1", host="h", pid=10, queues=[Q], concurrency=2, version="t", heartbeat_interval=5
    )
    q.push(Q, {"n": 1})
    job = q.pull(Q, worker_id="w1")
    assert job is not None

    (worker,) = ok(api.get("workers"))["workers"]

    assert worker["worker_id"] == "w1" and worker["lost"] is False
    assert [running["id"] for running in worker["running"]] == [job.id]


def test_schedules_come_a_page_at_a_time(api: httpx.Client, q: QueueClient) -> None:
    names = [f"every-{n:03d}" for n in range(PAGE_SIZE + 10)]
    for name in names:
        q.create_schedule(name, Q, {}, every=60)

    first = ok(api.get("schedules"))
    second = ok(api.get("schedules", params={"cursor": first["next_cursor"]}))

    assert [s["name"] for s in first["schedules"]] == names[:PAGE_SIZE]
    assert [s["name"] for s in second["schedules"]] == names[PAGE_SIZE:]
    assert second["next_cursor"] is None


def test_workers_come_a_page_at_a_time(api: httpx.Client, q: QueueClient) -> None:
    for n in range(PAGE_SIZE + 3):
        q.register_worker(
            f"w{n:03d}",
            host="h",
            pid=n + 1,
            queues=[Q],
            concurrency=1,
            version="t",
            heartbeat_interval=5,
        )

    first = ok(api.get("workers"))
    second = ok(api.get("workers", params={"cursor": first["next_cursor"]}))

    seen = [w["worker_id"] for w in first["workers"] + second["workers"]]
    assert len(first["workers"]) == PAGE_SIZE and first["total"] == PAGE_SIZE + 3
    assert sorted(seen) == [f"w{n:03d}" for n in range(PAGE_SIZE + 3)]
    assert second["next_cursor"] is None


def test_a_queue_named_dot_or_dot_dot_opens_through_the_api(
    api: httpx.Client, q: QueueClient
) -> None:
    """A browser resolves . and .. in a path, percent-encoded too: the page sends them (and
    any name starting with ~) behind a ~, which the server takes off."""
    for name in (".", "..", "~x"):
        q.push(name, {"n": 1})

    assert ok(api.get("queues/~."))["queue"] == "."
    assert ok(api.get("queues/~.."))["queue"] == ".."
    assert ok(api.get("queues/~~x"))["queue"] == "~x"


# -------------------------------------------------------------------------------------------
# Metrics
# -------------------------------------------------------------------------------------------


def test_metrics_serve_the_queue_gauges_of_the_namespaces_shown(
    serve_dashboard: ServeDashboard, q: QueueClient, namespace: str
) -> None:
    for n in range(3):
        q.push(Q, {"n": n})
    q.push(Q, {"n": "later"}, delay=600)
    bury(q, queue="emails")
    q.pause_queue("emails")

    with serve_dashboard(namespaces=(namespace,)) as http:
        response = http.get("/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = parse(response.text)
    jobs = values(samples, "postkit_queue_jobs", by="state", namespace=namespace, queue=Q)
    assert jobs == {
        "pending": 3,
        "scheduled": 1,
        "waiting": 0,
        "running": 0,
        "dead": 0,
        "cancelled": 0,
    }
    assert (
        value(samples, "postkit_queue_jobs", namespace=namespace, queue="emails", state="dead") == 1
    )
    assert value(samples, "postkit_queue_paused", namespace=namespace, queue="emails") == 1
    assert {s.labels["namespace"] for s in samples if "namespace" in s.labels} == {namespace}


def test_a_completed_job_shows_the_result_its_queue_kept(api: httpx.Client, q: QueueClient) -> None:
    q.configure_queue(Q, retain_results=3600)
    job_id = q.push(Q, {"n": 1})
    job = q.pull(Q, worker_id="w1")
    assert job is not None and q.ack(job, result={"sent": True, "html": "<b>x</b>"})

    data = ok(api.get(f"jobs/{job_id}"))

    assert data["job"] is None  # acknowledged jobs leave the queue
    assert data["result"]["state"] == "completed"
    assert '"html": "<b>x</b>"' in data["result"]["value_json"]
