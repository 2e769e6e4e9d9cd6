"""The page under attack in a real browser (Debian's Chromium, see ``browser`` in conftest):
markup and script in every value that reaches it stay text on every view, names that a URL
would mangle open their own pages, and a mangled link does not stop the live updates."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from postkit.queue import QueueClient
from tests.dashboard.conftest import ServeDashboard, click, wait_for

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.slow

# Each sets window.__pwned if the page ever runs it, as markup, as a handler or as a URL.
IMG = "<img src=x onerror=window.__pwned='img'>"
SVG = "<svg/onload=window.__pwned='svg'>"
SCRIPT = "<script>window.__pwned='script'</script>"
FRAME = "<iframe src=javascript:window.__pwned='frame'>"
Q = "emails"
JS_URL = "javascript:window.__pwned='href'//"

INJECTED = "main img, main script, main svg, main iframe, select img, select script"
HANDLERS = "[onerror], [onload], [onclick], [onmouseover]"


@pytest.fixture
def owner(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


def page_text(driver: Any, selector: str) -> str:
    return str(
        driver.execute_script(
            "const el = document.querySelector(arguments[0]); return el ? el.innerText : '';",
            selector,
        )
    )


def showing(selector: str, text: str) -> Callable[[Any], bool]:
    return lambda driver: text in page_text(driver, selector)


def assert_nothing_ran(driver: Any, where: str) -> None:
    assert driver.execute_script("return window.__pwned") is None, where
    assert not driver.find_elements(By.CSS_SELECTOR, INJECTED), where
    assert not driver.find_elements(By.CSS_SELECTOR, HANDLERS), where
    hrefs = driver.execute_script(
        "return Array.from(document.querySelectorAll('a')).map((a) => a.getAttribute('href'))"
    )
    assert [h for h in hrefs if not str(h).startswith("#")] == [], where


def pending_on_overview(driver: Any, queue: str) -> str | None:
    return driver.execute_script(  # type: ignore[no-any-return]
        "const row = Array.from(document.querySelectorAll('#queues tr[data-queue]'))"
        ".find((r) => r.dataset.queue === arguments[0]);"
        "return row ? row.cells[1].innerText : null;",
        queue,
    )


def test_markup_and_script_in_every_value_stay_text_on_every_view(
    browser: Any, serve_dashboard: ServeDashboard, owner: psycopg.Connection[Any], namespace: str
) -> None:
    ns = f"{namespace}{IMG}"
    queue = f"{SVG}/q"
    worker = f"{JS_URL}{SCRIPT}"
    schedule = f"{JS_URL}{IMG}"
    q = QueueClient(owner.cursor(), namespace=ns)
    q.register_worker(
        worker,
        host=FRAME,
        pid=1,
        queues=[queue, IMG],
        concurrency=1,
        version=SCRIPT,
        heartbeat_interval=60,
    )
    dead = q.push(queue, {"html": IMG, JS_URL: SCRIPT}, unique_key=SVG)
    job = q.pull(queue, worker_id=worker)
    assert job is not None and job.id == dead
    q.fail(job, error=f"{SCRIPT}\n{IMG}")
    run = q.push(queue, {"html": FRAME})
    assert q.pull(queue, worker_id=worker) is not None
    q.create_schedule(schedule, queue, {"html": SVG}, cron="0 3 * * *")
    owner.execute(
        "UPDATE postkit_queue.schedules SET cron = %s, timezone = %s"
        " WHERE namespace = %s AND name = %s",
        (f"{IMG} * * * *", SVG, ns, schedule),
    )
    owner.execute(
        "SELECT postkit_queue.mark_schedule_broken(%s, %s, next_run_at, %s)"
        " FROM postkit_queue.schedules(%s) WHERE name = %s",
        (ns, schedule, FRAME, ns, schedule),
    )
    at = "#/ns/" + quote(ns, safe="")
    views = {
        "#/all": ("#all-queues", ns),
        at: ("#queues", queue),
        f"{at}/queue/{quote(queue, safe='')}?state=running": ("#jobs", worker),
        f"{at}/queue/{quote(queue, safe='')}?state=dead": ("#jobs", SCRIPT),
        f"{at}/queue/{quote(queue, safe='')}?state={quote(IMG)}": ("#status", "state must"),
        f"{at}/job/{dead}": ("#errors", IMG),
        f"{at}/job/{run}": ("#payload", FRAME),
        f"{at}/job/1{quote(IMG)}": ("main", "Not Found"),
        f"{at}/dead": ("#dead-letters", SCRIPT),
        f"{at}/schedules": ("#schedules", FRAME),
        f"{at}/workers": ("#workers", FRAME),
    }
    with serve_dashboard(namespaces=(ns, namespace), refresh_seconds=0.5) as http:
        base = str(http.base_url).rstrip("/")
        for view, (selector, text) in views.items():
            browser.get(f"{base}/{view}")
            wait_for(browser, showing(selector, text), f"{text!r} on {view}")
            assert_nothing_ran(browser, view)
        options = browser.execute_script(
            "return Array.from(document.querySelectorAll('#namespace option'))"
            ".map((o) => o.textContent)"
        )

    assert ns in options


def test_a_mangled_link_does_not_stop_the_live_updates(
    browser: Any, serve_dashboard: ServeDashboard, owner: psycopg.Connection[Any], namespace: str
) -> None:
    """A link cut in the middle of a percent escape, opened first: the page still renders
    what it can, and keeps following the queues once the operator moves on."""
    q = QueueClient(owner.cursor(), namespace=namespace)
    q.push(Q, {"n": 1})
    with serve_dashboard(namespaces=(namespace,), refresh_seconds=0.5) as http:
        base = str(http.base_url).rstrip("/")
        browser.get(f"{base}/#/ns/{namespace}/queue/%E0%A4%A")
        wait_for(browser, lambda d: page_text(d, "#queue-name") == "%E0%A4%A", "the queue view")
        browser.execute_script("location.hash = arguments[0]", f"#/ns/{namespace}")
        wait_for(browser, lambda d: pending_on_overview(d, Q) == "1", "1 pending")
        q.push(Q, {"n": 2})
        wait_for(browser, lambda d: pending_on_overview(d, Q) == "2", "2 pending, live")


def test_a_namespace_and_a_queue_named_with_slashes_open_and_act_from_the_page(
    browser: Any, serve_dashboard: ServeDashboard, owner: psycopg.Connection[Any], namespace: str
) -> None:
    ns, queue = f"{namespace}/billing", "emails/high"
    q = QueueClient(owner.cursor(), namespace=ns)
    q.push(queue, {"n": 1})
    q.push("emails", {"n": 2})
    with serve_dashboard(namespaces=(ns,), refresh_seconds=0.5) as http:
        base = str(http.base_url).rstrip("/")
        browser.get(f"{base}/#/ns/{quote(ns, safe='')}")
        wait_for(browser, lambda d: pending_on_overview(d, queue) == "1", "the queue's row")
        browser.execute_script(
            "Array.from(document.querySelectorAll('#queues tr[data-queue]'))"
            ".find((r) => r.dataset.queue === arguments[0]).querySelector('a').click()",
            queue,
        )
        wait_for(browser, lambda d: page_text(d, "#queue-name") == queue, "the queue's page")
        wait_for(browser, lambda d: '{"n":1}' in page_text(d, "#jobs"), "its job")
        click(browser, "#pause")
        wait_for(browser, lambda d: d.find_elements(By.ID, "resume"), "the queue paused")
        click(browser, "#nav a[data-view='workers']")
        wait_for(browser, lambda d: "No workers" in page_text(d, "main"), "its workers' page")

    assert q.queue_policy(queue).paused
    assert not q.queue_policy("emails").paused
