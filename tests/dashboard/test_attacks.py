"""The dashboard under attack, and under the values a real deployment throws at it: hostile or
malformed requests, names the queue accepts that a URL mangles, tokens and cookies as people
and other servers write them, values the owner wrote by hand, a database that goes away, and a
namespace with a thousand queues. Each answer is a readable refusal or the right page, never a
500, and never a change the request did not ask for."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from postkit.dashboard import DashboardSettings
from postkit.dashboard.server import running
from postkit.dashboard.source import CHARTED_QUEUES
from postkit.embedded import EmbeddedServer
from postkit.queue import QueueClient, install
from tests.dashboard.conftest import ServeDashboard

Q = "emails"
TOKEN = "a-token-long-enough-1234"


@pytest.fixture
def q(dsn: str, namespace: str) -> Iterator[QueueClient]:
    """An autocommit client in the test's namespace, as the database's owner."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield QueueClient(connection.cursor(), namespace=namespace)


@pytest.fixture
def api(dashboard: httpx.Client, namespace: str) -> httpx.Client:
    dashboard.base_url = dashboard.base_url.join(f"/api/ns/{namespace}/")
    return dashboard


def bury(q: QueueClient, queue: str = Q) -> int:
    job_id = q.push(queue, {"n": 1})
    job = q.pull(queue, worker_id="w1")
    assert job is not None and job.id == job_id
    q.fail(job, error="boom")
    return job_id


def raw_request(base_url: str, request: bytes) -> bytes:
    """Send ``request`` as it is (no client normalises its path) and return the status line."""
    url = httpx.URL(base_url)
    with socket.create_connection((url.host, url.port or 80), timeout=10) as connection:
        connection.sendall(request)
        answer = b""
        while b"\r\n" not in answer:
            chunk = connection.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


# -------------------------------------------------------------------------------------------
# Requests
# -------------------------------------------------------------------------------------------


def test_a_json_body_nested_past_pythons_recursion_limit_is_refused_with_400(
    api: httpx.Client,
) -> None:
    deep = b'{"job_ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

    response = api.post("dead-letters/redrive", content=deep)

    assert response.status_code == 400, response.text
    assert "JSON" in response.json()["error"]


def test_a_request_body_over_the_limit_is_refused_with_413_and_changes_nothing(
    api: httpx.Client, q: QueueClient
) -> None:
    dead = bury(q)
    body = json.dumps({"job_ids": [dead, *range(10**12, 10**12 + 200_000)]})

    response = api.post("dead-letters/purge", content=body)

    assert response.status_code == 413, response.text
    assert [d.job_id for d in q.dead_letters(Q)] == [dead]


@pytest.mark.parametrize("flag", [None, 0, "yes", []])
def test_a_dry_run_flag_that_is_not_true_or_false_is_refused_and_deletes_nothing(
    api: httpx.Client, q: QueueClient, flag: Any
) -> None:
    """``{"dry_run": null}`` (a client's unset variable) is not a purge."""
    q.push(Q, {"n": 1})
    dead = bury(q, "other")

    answers = [
        api.post(f"queues/{Q}/purge", json={"dry_run": flag}),
        api.post("dead-letters/purge", json={"dry_run": flag}),
        api.post("dead-letters/redrive", json={"dry_run": flag}),
    ]

    assert [r.status_code for r in answers] == [400, 400, 400], [r.text for r in answers]
    assert len(q.jobs(Q, "pending")) == 1
    assert [(d.job_id, d.redriven_job_id) for d in q.dead_letters("other")] == [(dead, None)]


def test_a_dead_letter_cursor_with_an_id_out_of_range_is_refused_with_400(
    api: httpx.Client,
) -> None:
    cursor = "2026-01-01T00:00:00+00:00|99999999999999999999"

    response = api.get("dead-letters", params={"cursor": cursor})

    assert response.status_code == 400, response.text


def test_an_action_route_answers_head_and_options_with_405_and_changes_nothing(
    api: httpx.Client, q: QueueClient
) -> None:
    q.push(Q, {"n": 1})

    answers = [api.request(method, f"queues/{Q}/purge") for method in ("HEAD", "OPTIONS")]

    assert [r.status_code for r in answers] == [405, 405]
    assert len(q.jobs(Q, "pending")) == 1


def test_an_action_from_an_opaque_origin_is_refused_even_with_the_csrf_token(
    api: httpx.Client, q: QueueClient
) -> None:
    """A sandboxed frame or a data: page sends ``Origin: null``."""
    q.push(Q, {"n": 1})

    response = api.post(f"queues/{Q}/pause", json={}, headers={"origin": "null"})

    assert response.status_code == 403
    assert not q.queue_policy(Q).paused


@pytest.mark.parametrize(
    "path",
    [
        b"/static/../app.py",
        b"/static/%2e%2e/app.py",
        b"/static/..%2fapp.py",
        b"/static/vendor/../../settings.py",
        b"/static/%2e%2e/%2e%2e/%2e%2e/pyproject.toml",
    ],
)
def test_no_file_outside_the_static_folder_is_served(dashboard: httpx.Client, path: bytes) -> None:
    request = b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"

    assert raw_request(str(dashboard.base_url), request) == b"HTTP/1.1 404 Not Found"


# -------------------------------------------------------------------------------------------
# Names the queue accepts
# -------------------------------------------------------------------------------------------


def test_a_queue_whose_name_holds_a_slash_has_its_own_page_and_actions(
    api: httpx.Client, q: QueueClient
) -> None:
    q.push("emails/high", {"n": 1})
    q.push("emails", {"n": 2})

    page = api.get("queues/emails%2Fhigh")
    jobs = api.get("queues/emails%2Fhigh/jobs", params={"state": "pending"})
    paused = api.post("queues/emails%2Fhigh/pause", json={})

    assert page.status_code == 200 and page.json()["queue"] == "emails/high", page.text
    assert [job["payload_preview"] for job in jobs.json()["jobs"]] == ['{"n":1}']
    assert paused.status_code == 200 and q.queue_policy("emails/high").paused
    assert not q.queue_policy("emails").paused


def test_a_namespace_whose_name_holds_a_slash_has_its_pages(
    serve_dashboard: ServeDashboard, dsn: str, namespace: str
) -> None:
    name = f"{namespace}/billing"
    with psycopg.connect(dsn, autocommit=True) as connection:
        QueueClient(connection.cursor(), namespace=name).push(Q, {"n": 1})
    with serve_dashboard() as http:
        overview = http.get(f"/api/ns/{namespace}%2Fbilling/overview")

    assert overview.status_code == 200, overview.text
    assert [row["queue"] for row in overview.json()["queues"]] == [Q]


# -------------------------------------------------------------------------------------------
# Dry runs count what the action does
# -------------------------------------------------------------------------------------------


def test_a_purge_dry_run_of_a_selection_counts_only_the_dead_letters_it_would_delete(
    api: httpx.Client, q: QueueClient, dsn: str
) -> None:
    dead = bury(q)
    with psycopg.connect(dsn, autocommit=True) as connection:
        elsewhere = bury(QueueClient(connection.cursor(), namespace="someone-else"))
    selection = [dead, elsewhere, 10**15]  # one here, one of another namespace, one gone

    dry = api.post("dead-letters/purge", json={"job_ids": selection, "dry_run": True})

    assert dry.status_code == 200, dry.text
    assert dry.json()["count"] == 1
    assert [d.job_id for d in q.dead_letters(Q)] == [dead]  # the count deleted nothing


# -------------------------------------------------------------------------------------------
# Values the owner wrote by hand
# -------------------------------------------------------------------------------------------


def test_a_job_whose_error_history_holds_entries_that_are_not_objects_is_still_listed(
    api: httpx.Client, q: QueueClient
) -> None:
    dead = bury(q)
    q.cursor.execute(
        """UPDATE postkit_queue.dead_letters SET errors = '["oops", 5, null]' WHERE job_id = %s""",
        (dead,),
    )

    page = api.get(f"queues/{Q}/jobs", params={"state": "dead"})
    job = api.get(f"jobs/{dead}")

    assert page.status_code == 200, page.text
    assert [row["id"] for row in page.json()["jobs"]] == [dead]
    assert job.status_code == 200, job.text


# -------------------------------------------------------------------------------------------
# The token and its cookie
# -------------------------------------------------------------------------------------------


def test_a_token_with_spaces_plus_slash_and_equals_opens_the_dashboard_by_the_form(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    """As `openssl rand -base64` makes it, or a passphrase, typed into the login form (which
    sends a space as + and a + as %2B)."""
    token = "correct horse+battery/staple=="
    with serve_dashboard(namespaces=(namespace,), token=token) as http:
        login = http.post(
            "/login",
            content=b"token=correct+horse%2Bbattery%2Fstaple%3D%3D",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        meta = http.get("/api/meta")

    assert login.status_code == 303, login.text
    assert meta.status_code == 200, meta.text


def test_a_token_of_any_text_makes_a_cookie_that_opens_the_dashboard(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    token = 'semi;colon "quoted" back\\slash,comma'
    with serve_dashboard(namespaces=(namespace,), token=token) as http:
        login = http.post("/login", data={"token": token})
        meta = http.get("/api/meta")

    assert login.status_code == 303, login.text
    assert meta.status_code == 200, meta.text


def test_the_login_cookie_never_holds_the_token(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    with serve_dashboard(namespaces=(namespace,), token=TOKEN) as http:
        cookie = http.post("/login", data={"token": TOKEN}).headers["set-cookie"]

    assert TOKEN not in cookie


def test_the_login_cookie_counts_among_cookies_other_servers_of_the_host_set(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    """A browser sends a host's cookies to every port of it: a notebook or a dev server on
    127.0.0.1 adds its own, in whatever form it likes."""
    with serve_dashboard(namespaces=(namespace,), token=TOKEN) as http:
        http.post("/login", data={"token": TOKEN})
        ours = http.cookies["postkit_dashboard"]
        http.cookies.clear()
        theirs = 'prefs={"theme": "dark"}; session=a b'
        meta = http.get("/api/meta", headers={"cookie": f"{theirs}; postkit_dashboard={ours}"})

    assert meta.status_code == 200, meta.text


# -------------------------------------------------------------------------------------------
# The database going away
# -------------------------------------------------------------------------------------------


def test_a_connection_the_server_cut_is_replaced_before_a_page_uses_it(
    dashboard: httpx.Client, dsn: str, namespace: str
) -> None:
    """A restart, a failover or an idle timeout ends the pooled sessions; the next page gets
    a new one, not a 503."""
    assert dashboard.get(f"/api/ns/{namespace}/overview").status_code == 200
    with psycopg.connect(dsn, autocommit=True) as admin:
        (cut,) = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'postkit dashboard' AND datname = current_database()"
        ).fetchone()  # type: ignore[misc]
    assert cut >= 1

    response = dashboard.get(f"/api/ns/{namespace}/overview")

    assert response.status_code == 200, response.text


def test_the_pages_answer_503_while_the_database_is_down_and_recover_when_it_is_back(
    own_server: EmbeddedServer,
) -> None:
    with psycopg.connect(own_server.dsn) as connection:
        install(connection)
    settings = DashboardSettings(dsn=own_server.dsn, namespaces=("default",), port=0)
    with running(settings) as base_url, httpx.Client(base_url=base_url, timeout=60) as http:
        assert http.get("/api/ns/default/overview").status_code == 200
        own_server.stop()
        down = [http.get("/api/ns/default/overview") for _ in range(2)]
        page = http.get("/")
        assert own_server.restart() == settings.dsn
        back = http.get("/api/ns/default/overview")

    assert [r.status_code for r in down] == [503, 503], [r.text for r in down]
    assert page.status_code == 200
    assert back.status_code == 200, back.text


# -------------------------------------------------------------------------------------------
# A namespace with many queues
# -------------------------------------------------------------------------------------------


def many_queues(q: QueueClient, count: int) -> None:
    """``count`` queues, queue ``qNNNN`` with NNNN completed jobs in the last minute (one at
    least), and one job left pending."""
    with q.cursor.connection.transaction():
        for n in range(count):
            name = f"q{n:04d}"
            q.push_batch(name, [{"n": i} for i in range(min(n, 20) + 2)])
            for job in q.pull_batch(name, worker_id="w1", limit=min(n, 20) + 1):
                q.ack(job)


def test_the_overview_charts_only_the_busiest_queues(api: httpx.Client, q: QueueClient) -> None:
    many_queues(q, CHARTED_QUEUES + 8)

    data = api.get("overview").json()

    busiest = [f"q{n:04d}" for n in range(CHARTED_QUEUES + 7, 7, -1)]
    assert data["charted"] == busiest
    assert sorted(data["series"]) == sorted(busiest)
    assert len(data["queues"]) == CHARTED_QUEUES + 8  # every queue keeps its row of counts


def test_the_overview_of_a_namespace_with_1000_queues_lists_a_bounded_page_of_them(
    api: httpx.Client, q: QueueClient
) -> None:
    with q.cursor.connection.transaction():
        for n in range(1000):
            q.push(f"q{n:04d}", {"n": n})

    first = api.get("overview").json()
    second = api.get("overview", params={"after": first["next_after"]}).json()
    pages = [first, second]
    while pages[-1]["next_after"] is not None:
        pages.append(api.get("overview", params={"after": pages[-1]["next_after"]}).json())

    assert [row["queue"] for row in first["queues"]] == [f"q{n:04d}" for n in range(100)]
    assert [row["queue"] for row in second["queues"]] == [f"q{n:04d}" for n in range(100, 200)]
    # Every queue is on exactly one page, and the last page says it is the last.
    listed = [row["queue"] for page in pages for row in page["queues"]]
    assert listed == [f"q{n:04d}" for n in range(1000)]
    assert len(pages) == 10 and pages[-1]["next_after"] is None
