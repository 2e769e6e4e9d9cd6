"""Fixtures for the dashboard's tests: a real dashboard server on a thread, over the test
database, and an HTTP client for it; and Debian's Chromium, driven by Selenium, for the tests
that open the page in a real browser."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

from postkit.dashboard import DashboardSettings
from postkit.dashboard.server import running

ServeDashboard = Callable[..., contextlib.AbstractContextManager[httpx.Client]]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT = 15.0


@pytest.fixture
def serve_dashboard(dsn: str) -> Iterator[ServeDashboard]:
    """Start a dashboard (settings as keyword arguments, the test database's DSN unless
    given) and yield an HTTP client for it; the server stops when the block ends."""

    @contextlib.contextmanager
    def _serve(**options: Any) -> Iterator[httpx.Client]:
        options.setdefault("dsn", dsn)
        options.setdefault("port", 0)
        settings = DashboardSettings(**options)
        with running(settings) as base_url, httpx.Client(base_url=base_url, timeout=10) as http:
            http.headers["x-postkit-csrf"] = settings.csrf_token
            yield http

    yield _serve


@pytest.fixture
def dashboard(serve_dashboard: ServeDashboard, namespace: str) -> Iterator[httpx.Client]:
    """A dashboard that shows every namespace, and may act, as the test database's owner."""
    with serve_dashboard() as http:
        yield http


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Debian's headless Chromium through its ChromeDriver (Selenium). Without them the test
    is skipped, unless $POSTKIT_REQUIRE_BROWSER is set (CI sets it after installing the
    browser), where a missing browser fails it."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        if os.environ.get("POSTKIT_REQUIRE_BROWSER"):
            pytest.fail(f"no Chromium at {CHROMIUM} or no ChromeDriver at {CHROMEDRIVER}")
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--window-size=1440,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except WebDriverException as exc:
        pytest.fail(f"Chromium did not start: {exc.msg}")
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    """Wait until ``condition`` holds; an element a live update replaced meanwhile (stale)
    counts as not yet."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        driver,
        WAIT,
        poll_frequency=0.1,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    ).until(lambda d: condition(d), message=f"waited {WAIT}s for {what}")


def click(driver: Any, selector: str) -> None:
    """Click the element, again if a live update replaced it before the click landed."""

    def clicked(d: Any) -> bool:
        d.find_element("css selector", selector).click()
        return True

    wait_for(driver, clicked, f"a click on {selector}")
