"""The dashboard under each role layout: run as a real non-superuser LOGIN role (its DSN, as a
deployment would give it), it shows and does exactly what the role's grants allow.

A role without operator access gets a readable 403 from every page it may not read (never a
500), and every action it tries is refused by the database, changing nothing. An operator
under tenant isolation sees only its own namespaces, and another tenant's URLs give it nothing.
The server is the real one (``serve_dashboard``), and one test runs ``postkit dashboard``
itself.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from postkit.queue import QueueClient, install
from postkit.queue.admin import enable_tenant_isolation
from tests.conftest import new_database
from tests.dashboard.conftest import ServeDashboard
from tests.roles import MakeLogin, login_maker
from tests.signals import poll_until

Q = "emails"


@pytest.fixture(scope="module")
def database(server_dsn: str) -> Iterator[str]:
    """A database of this module's own with the queue installed: roles and grants made here
    stay out of the session's database."""
    with new_database(server_dsn) as database:
        with psycopg.connect(database) as connection:
            install(connection)
        yield database


@pytest.fixture(scope="module")
def isolated_database(server_dsn: str) -> Iterator[str]:
    """A database of its own with tenant isolation on (which no later test could undo)."""
    with new_database(server_dsn) as database:
        with psycopg.connect(database) as connection:
            install(connection)
            enable_tenant_isolation(connection.cursor())
        yield database


@pytest.fixture
def make_login(database: str) -> Iterator[MakeLogin]:
    """A LOGIN role with one access kind (or none), as a DSN; dropped afterwards."""
    yield from login_maker(database, prefix="pk_dash")


@pytest.fixture
def make_tenant(isolated_database: str) -> Iterator[MakeLogin]:
    """The same in the database under tenant isolation, with the namespaces assigned."""
    yield from login_maker(isolated_database, prefix="pk_dash")


def owner_client(dsn: str, namespace: str) -> Iterator[QueueClient]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield QueueClient(connection.cursor(), namespace=namespace)


def seed(q: QueueClient) -> dict[str, Any]:
    """A pending job, a dead letter and a schedule in ``q``'s namespace."""
    pending = q.push(Q, {"n": 1})
    q.push(Q, {"n": 2}, priority=10)
    job = q.pull(Q, worker_id="w1")
    assert job is not None and job.id != pending
    q.fail(job, error="boom")
    name = f"nightly-{uuid.uuid4().hex[:6]}"
    q.create_schedule(name, Q, {"n": 3}, cron="0 3 * * *")
    return {"pending": pending, "dead": job.id, "schedule": name}


def reads(namespace: str, seeded: dict[str, Any]) -> list[str]:
    ns = f"/api/ns/{namespace}"
    return [
        "/api/meta",
        "/api/overview",
        f"{ns}/overview",
        f"{ns}/queues/{Q}",
        *(f"{ns}/queues/{Q}/jobs?state={s}" for s in ("pending", "scheduled", "running", "dead")),
        f"{ns}/jobs/{seeded['pending']}",
        f"{ns}/jobs/{seeded['dead']}",
        f"{ns}/dead-letters",
        f"{ns}/dead-letters?error=boom",
        f"{ns}/schedules",
        f"{ns}/workers",
        "/metrics",
    ]


def actions(namespace: str, seeded: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    ns = f"/api/ns/{namespace}"
    return [
        (f"{ns}/queues/{Q}/pause", {}),
        (f"{ns}/queues/{Q}/limits", {"concurrency": 3}),
        (f"{ns}/queues/{Q}/purge", {"dry_run": True}),
        (f"{ns}/queues/{Q}/purge", {}),
        (f"{ns}/jobs/{seeded['pending']}/cancel", {}),
        (f"{ns}/jobs/{seeded['pending']}/cancel-tree", {}),
        (f"{ns}/jobs/{seeded['dead']}/redrive", {}),
        (f"{ns}/dead-letters/redrive", {"dry_run": True}),
        (f"{ns}/dead-letters/redrive", {"job_ids": [seeded["dead"]]}),
        (f"{ns}/dead-letters/purge", {"dry_run": True}),
        (f"{ns}/dead-letters/purge", {"job_ids": [seeded["dead"]]}),
        (f"{ns}/dead-letters/purge", {}),
        (f"{ns}/schedules/{seeded['schedule']}/pause", {}),
    ]


def owner_state(dsn: str, namespace: str, seeded: dict[str, Any]) -> dict[str, Any]:
    """What the owner sees of what ``seed`` made: whether any action touched it."""
    for q in owner_client(dsn, namespace):
        dead = q.dead_letters(Q, include_redriven=True)
        return {
            "queue paused": bool(q.stats(Q)[0].paused),
            "concurrency": q.queue_policy(Q).concurrency,
            "pending job": q.get_job(seeded["pending"]) is not None,
            "dead letters": [(d.job_id, d.redriven_job_id) for d in dead],
            "schedule paused": [s.paused for s in q.schedules() if s.name == seeded["schedule"]],
        }
    raise AssertionError("unreachable")


def untouched(seeded: dict[str, Any]) -> dict[str, Any]:
    return {
        "queue paused": False,
        "concurrency": None,
        "pending job": True,
        "dead letters": [(seeded["dead"], None)],
        "schedule paused": [False],
    }


WITHOUT_OPERATOR = [None, "producer", "worker"]


@pytest.mark.parametrize("access", WITHOUT_OPERATOR)
def test_every_page_answers_a_role_without_operator_access_with_a_readable_403(
    database: str,
    make_login: MakeLogin,
    serve_dashboard: ServeDashboard,
    namespace: str,
    access: str | None,
) -> None:
    for q in owner_client(database, namespace):
        seeded = seed(q)
    with serve_dashboard(dsn=make_login(access)) as http:
        answers = {path: http.get(path) for path in reads(namespace, seeded)}
        page = http.get("/")

    assert page.status_code == 200  # the page itself loads, and shows /api/meta's refusal
    assert answers["/api/meta"].status_code == 403
    for path, response in answers.items():
        assert response.status_code in (200, 403), (path, response.text)
        if response.status_code == 403:
            assert "permission denied" in response.json()["error"], path


@pytest.mark.parametrize("access", WITHOUT_OPERATOR)
def test_every_action_of_a_role_without_operator_access_is_refused_and_changes_nothing(
    database: str,
    make_login: MakeLogin,
    serve_dashboard: ServeDashboard,
    namespace: str,
    access: str | None,
) -> None:
    for q in owner_client(database, namespace):
        seeded = seed(q)
    with serve_dashboard(dsn=make_login(access)) as http:
        answers = [
            (path, body, http.post(path, json=body)) for path, body in actions(namespace, seeded)
        ]

    for path, body, response in answers:
        # A dry run only counts; a role that may read the dead letters (a worker) may count.
        allowed = (403, 200) if body.get("dry_run") else (403,)
        assert response.status_code in allowed, (path, body, response.text)
    assert owner_state(database, namespace, seeded) == untouched(seeded)


def test_an_operator_login_reads_every_page_and_takes_every_action(
    database: str, make_login: MakeLogin, serve_dashboard: ServeDashboard, namespace: str
) -> None:
    for q in owner_client(database, namespace):
        seeded = seed(q)
    with serve_dashboard(dsn=make_login("operator")) as http:
        answers = {path: http.get(path) for path in reads(namespace, seeded)}
        done = [(path, http.post(path, json=body)) for path, body in actions(namespace, seeded)]

    assert {path: r.status_code for path, r in answers.items()} == dict.fromkeys(answers, 200)
    assert {path: r.status_code for path, r in done} == dict.fromkeys(dict(done), 200)
    state = owner_state(database, namespace, seeded)
    assert state["queue paused"] and not state["pending job"] and state["schedule paused"] == [True]
    assert state["concurrency"] == 3


def test_the_dashboard_command_run_as_a_worker_role_serves_the_page_and_refuses_its_data(
    database: str, make_login: MakeLogin
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "postkit.cli", "dashboard", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--dsn", make_login("worker")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def answering() -> httpx.Response | None:
        try:
            return httpx.get(f"{base}/", timeout=5)
        except httpx.TransportError:
            return None

    try:
        page = poll_until(lambda: server.poll() is not None or answering(), 30)
        meta = httpx.get(f"{base}/api/meta", timeout=10) if server.poll() is None else None
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=60)

    assert isinstance(page, httpx.Response) and page.status_code == 200, output
    assert meta is not None and meta.status_code == 403, output
    assert "permission denied for function namespaces" in meta.json()["error"]
    assert "Traceback" not in output


# -------------------------------------------------------------------------------------------
# Tenant isolation
# -------------------------------------------------------------------------------------------


def test_an_isolated_operator_sees_only_its_own_namespaces(
    isolated_database: str, make_tenant: MakeLogin, serve_dashboard: ServeDashboard
) -> None:
    mine, theirs = f"mine-{uuid.uuid4().hex[:6]}", f"theirs-{uuid.uuid4().hex[:6]}"
    for name in (mine, theirs):
        for q in owner_client(isolated_database, name):
            seed(q)
    with serve_dashboard(dsn=make_tenant("operator", (mine,))) as http:
        meta = http.get("/api/meta").json()
        across = http.get("/api/overview").json()

    assert meta["namespaces"] == [mine]
    assert [row["namespace"] for row in across["namespaces"]] == [mine]


def test_an_isolated_operator_gets_nothing_from_another_namespaces_urls(
    isolated_database: str, make_tenant: MakeLogin, serve_dashboard: ServeDashboard
) -> None:
    mine, theirs = f"mine-{uuid.uuid4().hex[:6]}", f"theirs-{uuid.uuid4().hex[:6]}"
    for q in owner_client(isolated_database, theirs):
        seeded = seed(q)
    with serve_dashboard(dsn=make_tenant("operator", (mine,))) as http:
        answers = {path: http.get(path) for path in reads(theirs, seeded)}

    metrics = answers.pop("/metrics")
    shown = {path: r.json() for path, r in answers.items() if r.status_code == 200}
    ns = f"/api/ns/{theirs}"
    assert theirs not in answers["/api/meta"].text
    assert shown[f"{ns}/overview"]["queues"] == []
    stats = shown[f"{ns}/queues/{Q}"]["stats"]
    assert [stats[k] for k in ("pending", "scheduled", "running", "dead")] == [0, 0, 0, 0]
    for state in ("pending", "scheduled", "running", "dead"):
        assert shown[f"{ns}/queues/{Q}/jobs?state={state}"]["jobs"] == []
    for job in ("pending", "dead"):
        assert answers[f"{ns}/jobs/{seeded[job]}"].status_code in (403, 404)
    assert shown[f"{ns}/dead-letters"]["dead_letters"] == []
    assert shown[f"{ns}/dead-letters?error=boom"]["dead_letters"] == []
    assert shown[f"{ns}/schedules"]["schedules"] == []
    assert shown[f"{ns}/workers"]["workers"] == []
    assert theirs not in metrics.text
    for response in answers.values():
        assert "boom" not in response.text and '\\"n\\":' not in response.text


def test_an_isolated_operators_actions_on_another_namespace_change_nothing(
    isolated_database: str, make_tenant: MakeLogin, serve_dashboard: ServeDashboard
) -> None:
    mine, theirs = f"mine-{uuid.uuid4().hex[:6]}", f"theirs-{uuid.uuid4().hex[:6]}"
    for q in owner_client(isolated_database, theirs):
        seeded = seed(q)
    with serve_dashboard(dsn=make_tenant("operator", (mine,))) as http:
        answers = [(p, b, http.post(p, json=b)) for p, b in actions(theirs, seeded)]

    for path, body, response in answers:
        assert response.status_code in (200, 403, 404), (path, body, response.text)
        if response.status_code == 200:
            assert response.json().get("count", 0) == 0, (path, body, response.text)
    assert owner_state(isolated_database, theirs, seeded) == untouched(seeded)
