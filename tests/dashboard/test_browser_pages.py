"""Every page of the dashboard in a real browser (Debian's Chromium), with data as an operator's
day brings it: three namespaces, ten queues (two named ``.`` and ``..``, one paused, one
rate-limited, one at its max_pending), 1,000 dead letters with 40-line tracebacks, 50 workers
(some lost, some running jobs) and schedules. Each page must show its rows, print no
``[object ...]`` (a DOM node written as text), and fit a dead letter to a line. Screenshots go
to $POSTKIT_SCREENSHOTS when set (docs/dashboard.md shows them), else to the test's directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient
from tests.dashboard.conftest import ServeDashboard, wait_for

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.slow

QUEUES = ["send_otp", "webhooks", "reports", "emails", "thumbnails", "billing", "search-index"]
STRANGE = [".", ".."]
TRACEBACK = "\n".join(
    [
        "Traceback (most recent call last):",
        *(
            f'  File "/app/tasks/step_{n}.py", line {7 * n}, in step_{n}\n    step_{n + 1}()'
            for n in range(19)
        ),
        "ConnectionError: the provider hung up (attempt 3)",
    ]
)


@dataclass
class Day:
    namespaces: tuple[str, str, str]
    dead_job: int


@pytest.fixture
def day(dsn: str, namespace: str) -> Iterator[Day]:
    names = (namespace, f"{namespace}-b", f"{namespace}-c")
    with psycopg.connect(dsn, autocommit=True) as connection:
        q = QueueClient(connection.cursor(), namespace=names[0])
        for queue in [*QUEUES, *STRANGE]:
            q.push_batch(queue, [{"n": n} for n in range(5)])
        q.pause_queue("billing")
        q.configure_queue("search-index", rate=(1, 3600))
        q.configure_queue("thumbnails", max_pending=5)  # its 5 jobs fill it
        q.configure_queue("reports", fair=True)
        q.push_batch("reports", [{}] * 3, group_keys=["acme", "acme", "globex"])
        q.set_group_weight("reports", "acme", 3)
        assert q.pull("search-index", worker_id="worker-00") is not None
        q.push_batch("send_otp", [{"user": n} for n in range(1000)])
        dead = q.pull_batch("send_otp", worker_id="worker-01", limit=1000)
        for job in dead:
            q.fail(job, error=TRACEBACK)
        for number in range(50):
            q.register_worker(
                f"worker-{number:02d}",
                host=f"host-{number % 5}",
                pid=1000 + number,
                queues=QUEUES,
                concurrency=8,
                version="0.1.0",
                heartbeat_interval=5,
            )
        for job in q.pull_batch("webhooks", worker_id="worker-02", limit=3):
            assert job is not None
        connection.execute(
            "UPDATE postkit_queue.workers SET heartbeat_at = now() - interval '1 hour' "
            "WHERE namespace = %s AND worker_id LIKE 'worker-4%%'",
            (names[0],),
        )
        q.create_schedule("nightly-report", "reports", {}, cron="0 3 * * *")
        q.create_schedule("heartbeat", "webhooks", {}, every=timedelta(minutes=5))
        for other in names[1:]:
            QueueClient(connection.cursor(), namespace=other).push("emails", {"n": 1})
    yield Day(names, dead[0].id)


def screenshot(driver: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("POSTKIT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / f"{name}.png"))


def open_page(driver: Any, url: str, table: str, rows: int) -> None:
    """Open ``url`` and wait until its table has at least ``rows`` rows; then no text on the
    page may be a DOM node written out."""
    driver.get(url)
    wait_for(
        driver,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, f"{table} tbody tr")) >= rows,
        f"{rows} rows in {table} at {url}",
    )
    text = driver.find_element(By.TAG_NAME, "body").text
    assert "[object" not in text, text
    assert "http://" not in driver.find_element(By.CSS_SELECTOR, table).text


def test_every_page_shows_its_rows_as_text_in_a_real_browser(
    browser: Any, serve_dashboard: ServeDashboard, day: Day, tmp_path: Path
) -> None:
    main, *_ = day.namespaces
    with serve_dashboard(namespaces=day.namespaces, refresh_seconds=60) as http:
        base = str(http.base_url).rstrip("/")
        ns = f"{base}/#/ns/{main}"

        open_page(browser, f"{base}/#/all", "#all-queues", 11)
        for namespace in day.namespaces:  # each row names its own namespace
            rows = browser.find_elements(By.CSS_SELECTOR, f"tr[data-namespace='{namespace}']")
            assert rows and all(row.text.startswith(namespace) for row in rows)
        assert "rate-limited" in browser.find_element(By.CSS_SELECTOR, "#all-queues").text
        screenshot(browser, tmp_path, "all-namespaces")

        open_page(browser, ns, "#queues", 9)
        text = browser.find_element(By.CSS_SELECTOR, "#queues").text
        assert "paused" in text and "rate-limited" in text
        (full,) = [row for row in text.splitlines() if row.startswith("thumbnails")]
        assert "full" in full
        assert "lost" in browser.find_element(By.ID, "workers-summary").text
        screenshot(browser, tmp_path, "overview")

        for queue in STRANGE:
            open_page(browser, f"{ns}/queue/{queue}", "table", 1)
            assert browser.find_element(By.ID, "queue-name").text == queue
        open_page(browser, f"{ns}/queue/reports", "#groups", 2)
        groups = browser.find_element(By.ID, "groups").text.splitlines()
        assert [row.split() for row in groups[1:]] == [
            ["acme", "2", "0", "0", "3"],
            ["globex", "1", "0", "0", "1"],
        ]
        open_page(browser, f"{ns}/queue/send_otp", "table", 1)
        assert not browser.find_elements(By.ID, "groups")  # no group keys, no table
        screenshot(browser, tmp_path, "queue")

        open_page(browser, f"{ns}/dead", "#dead-letters", 50)
        rows = browser.find_elements(By.CSS_SELECTOR, "#dead-letters tbody tr")
        # A traceback shows its last line; the rest is a click away.
        assert rows[0].find_element(By.TAG_NAME, "summary").text == (
            "ConnectionError: the provider hung up (attempt 3)"
        )
        height = browser.execute_script("return window.innerHeight")
        assert sum(row.rect["y"] + row.rect["height"] <= height for row in rows) >= 15
        options = browser.find_elements(By.CSS_SELECTOR, "#dead-errors option")
        assert [o.get_attribute("value") for o in options] == ["ConnectionError"]
        screenshot(browser, tmp_path, "dead-letters")

        open_page(browser, f"{ns}/job/{day.dead_job}", "table", 1)
        screenshot(browser, tmp_path, "job")

        open_page(browser, f"{ns}/workers", "#workers", 50)
        running = browser.find_element(By.CSS_SELECTOR, "tr[data-worker='worker-02']").text
        assert "#" in running and "http" not in running
        assert browser.find_elements(By.ID, "next-page") == []  # 50 fit a page
        screenshot(browser, tmp_path, "workers")

        open_page(browser, f"{ns}/schedules", "#schedules", 2)
        screenshot(browser, tmp_path, "schedules")
