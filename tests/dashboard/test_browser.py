"""The dashboard in a real browser: Debian's Chromium, driven through its ChromeDriver by
Selenium, against a real dashboard server over the test database.

One operator's session, as a user would click through it: the overview's counts follow jobs
being pushed and drained without a reload, a job opens with its payload, a hostile payload and a
hostile error show as text, a dead letter is redriven after its dry run's count, and a queue is
paused. Screenshots go to the test's directory, or to $POSTKIT_SCREENSHOTS when set (the README's
picture comes from there).

Without Chromium the test is skipped, unless $POSTKIT_REQUIRE_BROWSER is set (CI sets it after
installing the browser), where a missing browser fails it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient
from tests.dashboard.conftest import ServeDashboard, click, wait_for

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By

HOSTILE = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"

pytestmark = pytest.mark.slow


def screenshot(driver: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("POSTKIT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / f"{name}.png"))


def cell_text(driver: Any, selector: str, column: int) -> str | None:
    rows = driver.find_elements(By.CSS_SELECTOR, selector)
    if not rows:
        return None
    cells = rows[0].find_elements(By.TAG_NAME, "td")
    return str(cells[column].text) if len(cells) > column else None


def confirm_modal(driver: Any) -> str:
    """Accept the page's confirmation and return what it asked."""
    wait_for(driver, lambda d: d.find_element(By.ID, "modal").is_displayed(), "the confirmation")
    text = str(driver.find_element(By.ID, "modal-text").text)
    driver.find_element(By.ID, "modal-confirm").click()
    return text


def test_an_operator_watches_inspects_redrives_and_pauses_in_a_real_browser(
    browser: Any,
    serve_dashboard: ServeDashboard,
    dsn: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        q = QueueClient(connection.cursor(), namespace=namespace)
        for n in range(3):
            q.push("send_otp", {"user_id": str(n), "channel": "whatsapp"})
        for n in range(4):  # a second queue, so the overview shows more than one
            q.push("webhooks", {"url": f"https://example.com/hook/{n}"}, delay=300 * (n + 1))
        with serve_dashboard(namespaces=(namespace,), refresh_seconds=0.5) as http:
            base = str(http.base_url).rstrip("/")
            browser.get(f"{base}/#/ns/{namespace}")
            row = "#queues tr[data-queue='send_otp']"
            wait_for(browser, lambda d: cell_text(d, row, 1) == "3", "3 pending on the overview")
            screenshot(browser, tmp_path, "overview-backlog")

            # Drained by a worker elsewhere: the page follows without a reload.
            for job in q.pull_batch("send_otp", worker_id="w1", limit=3):
                q.ack(job)
            wait_for(browser, lambda d: cell_text(d, row, 1) == "0", "the backlog drained")
            wait_for(browser, lambda d: cell_text(d, row, 8) == "3", "3 done in the last minute")
            screenshot(browser, tmp_path, "overview")

            # A hostile payload and a hostile error, shown as the text they are.
            hostile_id = q.push("send_otp", {"name": HOSTILE})
            job = q.pull("send_otp", worker_id="w1")
            assert job is not None and job.id == hostile_id
            q.fail(job, error=HOSTILE)
            browser.get(f"{base}/#/ns/{namespace}/job/{hostile_id}")
            # The job page updates live: each read waits out a redraw that replaced it.
            wait_for(
                browser,
                lambda d: HOSTILE in d.find_element(By.ID, "payload").text,
                "the hostile payload shown as text",
            )
            wait_for(
                browser,
                lambda d: HOSTILE in d.find_element(By.ID, "errors").text,
                "the hostile error shown as text",
            )
            assert browser.execute_script("return window.__pwned") is None
            assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script")
            screenshot(browser, tmp_path, "job")

            # Redrive it from the dead letters, after the dry run's count.
            browser.get(f"{base}/#/ns/{namespace}/dead")
            checkbox = f"input.select[data-job='{hostile_id}']"
            click(browser, checkbox)
            click(browser, "#redrive")
            question = confirm_modal(browser)
            assert "Redrive 1 dead letters" in question
            wait_for(
                browser,
                lambda d: "Redrove 1" in d.find_element(By.ID, "action-result").text,
                "the redrive's result",
            )
            assert browser.execute_script("return window.__pwned") is None
            redriven = q.dead_letters("send_otp", include_redriven=True)
            assert [d.job_id for d in redriven] == [hostile_id]
            assert redriven[0].redriven_job_id is not None
            screenshot(browser, tmp_path, "dead-letters")

            # Pause the queue from its page.
            browser.get(f"{base}/#/ns/{namespace}/queue/send_otp")
            click(browser, "#pause")
            wait_for(browser, lambda d: d.find_elements(By.ID, "resume"), "the queue paused")
            assert q.stats("send_otp")[0].paused
            screenshot(browser, tmp_path, "queue")

            # Limit it: at most 7 running across every worker, from its flow limits form.
            click(browser, "#edit-limits")
            field = wait_for(
                browser, lambda d: d.find_elements(By.NAME, "concurrency"), "the limits form"
            )[0]
            field.send_keys("7")
            click(browser, "#save-limits")
            wait_for(
                browser,
                lambda d: "Saved the flow limits" in d.find_element(By.ID, "action-result").text,
                "the limits saved",
            )
            assert q.queue_policy("send_otp").concurrency == 7
            screenshot(browser, tmp_path, "limits")


def tree_rows(driver: Any) -> list[tuple[str, str]]:
    """The job page's tree: each line's depth and state."""
    return [
        (str(item.get_attribute("data-depth")), str(item.find_element(By.CLASS_NAME, "badge").text))
        for item in driver.find_elements(By.CSS_SELECTOR, "#tree li")
    ]


def test_an_operator_sees_a_jobs_tree_and_cancels_it_in_a_real_browser(
    browser: Any, serve_dashboard: ServeDashboard, dsn: str, namespace: str, tmp_path: Path
) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        q = QueueClient(connection.cursor(), namespace=namespace)
        root = q.push("imports", {"file": "orders.csv"})
        assert root is not None
        parts = [q.push("imports", {"part": n}, depends_on=[root]) for n in range(2)]
        total = q.push("reports", {"sum": True}, depends_on=parts)
        job = q.pull("imports", worker_id="w1")
        assert job is not None and job.id == root and q.ack(job)
        running = q.pull("imports", worker_id="w1")
        assert running is not None
        with serve_dashboard(namespaces=(namespace,)) as http:
            base = str(http.base_url).rstrip("/")
            browser.get(f"{base}/#/ns/{namespace}/job/{root}")
            wait_for(
                browser,
                lambda d: (
                    tree_rows(d)
                    == [("0", "unknown"), ("1", "running"), ("1", "pending"), ("2", "waiting")]
                ),
                "the root's tree, a generation to a line",
            )
            screenshot(browser, tmp_path, "job-tree")

            click(browser, "#cancel-tree")
            assert "Cancel the 3 live jobs of job" in confirm_modal(browser)
            wait_for(
                browser,
                lambda d: "Cancelled 3 jobs" in d.find_element(By.ID, "action-result").text,
                "the tree cancelled",
            )
            assert [q.result(job_id).state for job_id in (*parts, total)] == ["cancelled"] * 3
            assert q.ack(running) is False


def test_an_operator_reads_a_workflow_runs_steps_in_a_real_browser(
    browser: Any, serve_dashboard: ServeDashboard, dsn: str, namespace: str, tmp_path: Path
) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        q = QueueClient(connection.cursor(), namespace=namespace)
        run_id = q.push("orders", {"order": 42})
        run = q.pull("orders", worker_id="w1")
        assert run is not None and run.id == run_id
        assert q.record_step(run, 0, "charge", {"id": "ch_1", "note": HOSTILE})
        assert q.record_step(run, 1, "notify")
        label = q.push("labels", {"item": 1})
        assert q.record_step(run, 2, "map", {"queue": "labels", "jobs": [label]})
        with serve_dashboard(namespaces=(namespace,)) as http:
            base = str(http.base_url).rstrip("/")
            browser.get(f"{base}/#/ns/{namespace}/job/{run_id}")
            wait_for(
                browser,
                lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr[data-step]")) == 3,
                "the run's three steps",
            )
            wait_for(
                browser,
                lambda d: (
                    d.find_element(By.CSS_SELECTOR, "#steps tr[data-step='2'] a").text
                    == f"#{label}"
                ),
                "the map's job, linked",
            )
            wait_for(
                browser,
                lambda d: HOSTILE in d.find_element(By.ID, "steps").text,
                "the hostile step result shown as text",
            )
            assert browser.execute_script("return window.__pwned") is None
            screenshot(browser, tmp_path, "workflow-steps")


def test_a_visitor_logs_in_with_the_form_and_the_token_stays_out_of_the_history(
    browser: Any, serve_dashboard: ServeDashboard, namespace: str, tmp_path: Path
) -> None:
    token = "correct horse+battery/staple=="
    with serve_dashboard(namespaces=(namespace,), token=token) as http:
        base = str(http.base_url).rstrip("/")
        browser.get(f"{base}/")
        wait_for(browser, lambda d: d.current_url == f"{base}/login", "the login form")
        screenshot(browser, tmp_path, "login")
        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda d: d.find_elements(By.ID, "nav"), "the overview")
        addresses = browser.execute_script(
            "return performance.getEntriesByType('navigation').map(e => e.name)"
            ".concat([location.href, document.referrer])"
        )

    assert browser.current_url.startswith(f"{base}/")
    assert all("staple" not in address and "token=" not in address for address in addresses)
