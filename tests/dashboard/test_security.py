"""Who may open the dashboard, and what reaches its actions: loopback unless a token, the token
on every request, POSTs only with the page's CSRF token and never under --read-only, and
headers that keep every value on the page as text."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.dashboard import DashboardSettings
from postkit.dashboard.server import running
from postkit.errors import ConfigurationError
from postkit.queue import QueueClient
from tests.dashboard.conftest import ServeDashboard

TOKEN = "a-token-long-enough-1234"
STATIC = Path(__file__).parents[2] / "src" / "postkit" / "dashboard" / "static"


def paused(dsn: str, namespace: str, queue: str) -> bool:
    with psycopg.connect(dsn) as connection:
        return bool(QueueClient(connection.cursor(), namespace=namespace).stats(queue)[0].paused)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.com"])
def test_binding_beyond_loopback_without_a_token_is_refused(dsn: str, host: str) -> None:
    with pytest.raises(ConfigurationError, match="without a token"):
        DashboardSettings(dsn=dsn, host=host)


def test_the_command_refuses_to_start_on_a_public_address_without_a_token(dsn: str) -> None:
    result = CliRunner().invoke(main, ["dashboard", "--dsn", dsn, "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "without a token" in result.output
    assert "POSTKIT_DASHBOARD_TOKEN" in result.output


def test_a_short_token_is_refused(dsn: str) -> None:
    with pytest.raises(ConfigurationError, match="at least 16"):
        DashboardSettings(dsn=dsn, token="short")


@pytest.mark.parametrize(
    "token",
    [" " * 16, "\t" * 20, TOKEN + "\n", " " + TOKEN, TOKEN + " ", "a-token\nlong-enough-1234"],
    ids=["spaces", "tabs", "trailing-newline", "leading-space", "trailing-space", "newline"],
)
def test_a_blank_or_white_space_padded_token_is_refused(dsn: str, token: str) -> None:
    with pytest.raises(ConfigurationError, match="must not be blank, start or end with white"):
        DashboardSettings(dsn=dsn, token=token, host="0.0.0.0")


def test_the_command_refuses_a_token_read_with_its_trailing_newline(dsn: str) -> None:
    result = CliRunner().invoke(
        main, ["dashboard", "--dsn", dsn, "--host", "0.0.0.0", "--token", TOKEN + "\n"]
    )

    assert result.exit_code == 2
    assert "white space" in result.output


def test_a_non_ascii_token_opens_the_dashboard_by_bearer_and_by_login(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    token = "mot-de-passe-très-sûr-🔑"
    with serve_dashboard(namespaces=(namespace,), token=token) as http:
        bearer = http.get("/api/meta", headers={"authorization": f"Bearer {token}".encode()})
        wrong = http.get("/api/meta", headers={"authorization": f"Bearer {token}x".encode()})
        login = http.post("/login", data={"token": token})
        meta = http.get("/api/meta")

    assert (bearer.status_code, wrong.status_code) == (200, 401)
    assert (login.status_code, meta.status_code) == (303, 200)


def test_without_a_token_a_request_for_another_host_name_is_refused(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    """DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1."""
    with serve_dashboard(namespaces=(namespace,)) as http:
        assert http.get("/api/meta").status_code == 200
        response = http.get("/api/meta", headers={"host": "evil.example:8181"})
    assert response.status_code == 421
    assert "csrf_token" not in response.text


def test_with_a_token_every_request_must_carry_it(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    with serve_dashboard(namespaces=(namespace,), token=TOKEN) as http:
        for path in ("/api/meta", f"/api/ns/{namespace}/overview", "/static/app.js"):
            assert http.get(path).status_code == 401, path
        assert http.get("/api/meta", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert (
            http.get("/api/meta", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        )


def test_login_with_the_token_sets_a_strict_httponly_cookie_that_opens_the_pages(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    with serve_dashboard(namespaces=(namespace,), token=TOKEN) as http:
        assert http.post("/login", data={"token": "wrong-token-wrong-token"}).status_code == 401
        login = http.post("/login", data={"token": TOKEN})
        assert login.status_code == 303
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert http.get("/api/meta").status_code == 200  # the client keeps the cookie


def test_a_browser_without_the_cookie_is_sent_to_a_login_form_that_posts_the_token(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    """The token travels in the form's body: never in an address, so never in the browser's
    history or a log of requests."""
    with serve_dashboard(namespaces=(namespace,), token=TOKEN) as http:
        page = http.get("/")
        form = http.get("/login")

    assert (page.status_code, page.headers["location"]) == (303, "/login")
    assert form.status_code == 200
    assert form.headers["content-type"].startswith("text/html")
    assert '<form method="post" action="/login">' in form.text
    assert 'name="token" type="password"' in form.text


def test_a_token_in_the_login_address_is_refused_and_sets_no_cookie(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    with serve_dashboard(namespaces=(namespace,), token=TOKEN) as http:
        login = http.get("/login", params={"token": TOKEN})
        meta = http.get("/api/meta")

    assert login.status_code == 400
    assert "set-cookie" not in login.headers
    assert "history" in login.text
    assert meta.status_code == 401


def test_a_login_posted_from_another_origin_is_refused(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    """Login CSRF: a page elsewhere would log the visitor into a dashboard of its choosing."""
    with serve_dashboard(namespaces=(namespace,), token=TOKEN) as http:
        login = http.post(
            "/login", data={"token": TOKEN}, headers={"origin": "https://evil.example"}
        )

    assert login.status_code == 403
    assert "set-cookie" not in login.headers


def test_an_action_without_the_pages_csrf_token_is_refused_and_changes_nothing(
    serve_dashboard: ServeDashboard, dsn: str, namespace: str, queue: QueueClient
) -> None:
    queue.push("emails", {"n": 1})
    queue.cursor.connection.commit()
    with serve_dashboard(namespaces=(namespace,)) as http:
        url = f"/api/ns/{namespace}/queues/emails/pause"
        response = http.post(url, json={}, headers={"x-postkit-csrf": "forged"})
        assert response.status_code == 403
        del http.headers["x-postkit-csrf"]
        assert http.post(url, json={}).status_code == 403
    assert not paused(dsn, namespace, "emails")


def test_an_action_from_another_origin_is_refused_even_with_the_token(
    serve_dashboard: ServeDashboard, dsn: str, namespace: str, queue: QueueClient
) -> None:
    queue.push("emails", {"n": 1})
    queue.cursor.connection.commit()
    with serve_dashboard(namespaces=(namespace,)) as http:
        response = http.post(
            f"/api/ns/{namespace}/queues/emails/pause",
            json={},
            headers={"origin": "http://evil.example"},
        )
    assert response.status_code == 403
    assert not paused(dsn, namespace, "emails")


def test_the_same_action_with_the_csrf_token_goes_through(
    serve_dashboard: ServeDashboard, dsn: str, namespace: str, queue: QueueClient
) -> None:
    queue.push("emails", {"n": 1})
    queue.cursor.connection.commit()
    with serve_dashboard(namespaces=(namespace,)) as http:
        response = http.post(f"/api/ns/{namespace}/queues/emails/pause", json={})
    assert response.status_code == 200, response.text
    assert paused(dsn, namespace, "emails")


def test_read_only_refuses_every_action_and_changes_nothing(
    serve_dashboard: ServeDashboard, dsn: str, namespace: str, queue: QueueClient
) -> None:
    job_id = queue.push("emails", {"n": 1})
    queue.cursor.connection.commit()
    with serve_dashboard(namespaces=(namespace,), read_only=True) as http:
        assert http.get("/api/meta").json()["read_only"] is True
        for path in (
            "queues/emails/pause",
            "queues/emails/purge",
            f"jobs/{job_id}/cancel",
            f"jobs/{job_id}/cancel-tree",
            "dead-letters/redrive",
            "dead-letters/purge",
        ):
            response = http.post(f"/api/ns/{namespace}/{path}", json={})
            assert response.status_code == 403, path
            assert "read-only" in response.json()["error"]
    assert not paused(dsn, namespace, "emails")
    assert queue.get_job(job_id) is not None


def test_every_response_forbids_framing_sniffing_and_foreign_scripts(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    with serve_dashboard(namespaces=(namespace,)) as http:
        for path in ("/", "/api/meta", "/static/app.js", "/api/ns/other/overview"):
            headers = http.get(path).headers
            policy = headers["content-security-policy"]
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy, path
            assert headers["x-frame-options"] == "DENY"
            assert headers["x-content-type-options"] == "nosniff"


def test_the_page_script_never_parses_strings_as_html() -> None:
    """Values reach the page only as text nodes: no API that parses HTML is used at all."""
    script = (STATIC / "app.js").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("//"))
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in code, sink
    assert not re.search(r"new Function\s*\(", code)


def test_the_page_loads_nothing_from_another_origin() -> None:
    page = (STATIC / "index.html").read_text()
    assert not re.search(r"(src|href)=\"(https?:)?//", page)


def test_a_namespace_the_dashboard_does_not_show_is_not_found(
    serve_dashboard: ServeDashboard, namespace: str
) -> None:
    with serve_dashboard(namespaces=(namespace,)) as http:
        response = http.get("/api/ns/someone-else/overview")
    assert response.status_code == 404


def test_a_database_that_is_unreachable_answers_503_not_a_crash(unused_dsn: str) -> None:
    settings = DashboardSettings(dsn=unused_dsn, namespaces=("default",), port=0)
    with running(settings) as base_url:
        response = httpx.get(f"{base_url}/api/ns/default/overview", timeout=60)
        assert response.status_code == 503
        assert httpx.get(f"{base_url}/", timeout=10).status_code == 200


@pytest.fixture
def unused_dsn() -> str:
    """A DSN where no server listens."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/postgres?connect_timeout=2"
