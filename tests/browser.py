"""Debian's Chromium, headless, driven by Selenium through Debian's chromium-driver (the two come
from the same source package, so their versions match and nothing is downloaded at run time).

Selenium's calls block until Chromium answers, and Chromium may be waiting for a page, a
fetch or an event stream from a server running on the spec's own event loop: a blocking call made
on that loop stalls the server it waits for. So async specs drive the browser through `window()`,
whose every Selenium call runs in a thread (`asyncio.to_thread`) while the loop keeps serving:

    async with window() as w:
        await w.get(url)
        text = await w.wait_for(lambda d: d.find_element(By.ID, "live").text)
        await w.run(lambda d: d.find_element(By.NAME, "who").send_keys("alice"))

`chromium()` and `wait_for()` are the same browser and wait as plain blocking calls (for code
already in a thread, and for specs that call them through `asyncio.to_thread` themselves)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"


def missing() -> str:
    """Why the browser specs cannot run here ('' when they can)."""
    for path in (CHROMIUM, DRIVER):
        if shutil.which(path) is None:
            return f"{path} is missing: run scripts/setup.sh as root (chromium, chromium-driver)"
    return ""


def _start(width: int, height: int, phone: bool, scratch: str) -> webdriver.Chrome:
    """A browser whose temporary files (Chromium's `org.chromium.Chromium.*` folders) go to
    `scratch`, which its caller removes once it quit, not to the machine's /tmp."""
    options = Options()
    if phone:
        metrics = {"width": width, "height": height, "pixelRatio": 3.0, "touch": True}
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": metrics})
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        # nothing to reach beyond the spec's own servers: no background fetches, updates or
        # sign-in (on a closed network each is a refused connection, retried)
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--no-first-run",
        "--disable-quic",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    service = Service(DRIVER, env={**os.environ, "TMPDIR": scratch})
    return webdriver.Chrome(options=options, service=service)


def _scratch() -> tempfile.TemporaryDirectory[str]:
    """A browser's folder for its temporary files, removed with what is in it."""
    return tempfile.TemporaryDirectory(prefix="fleet-chromium-", ignore_cleanup_errors=True)


@contextmanager
def chromium(
    width: int = 1280, height: int = 860, *, phone: bool = False
) -> Iterator[webdriver.Chrome]:
    """A browser window of `width` x `height`; with `phone`, a touch screen of that many CSS
    pixels (Chrome's device emulation: a headless window is never narrower than 500 px).
    Blocking: from an async spec, use `window()`."""
    with _scratch() as scratch:
        driver = _start(width, height, phone, scratch)
        try:
            yield driver
        finally:
            driver.quit()


class Window:
    """A browser window an async spec drives without blocking its event loop: each call runs
    the Selenium calls it is given in a thread."""

    def __init__(self, driver: webdriver.Chrome) -> None:
        self.driver = driver

    async def run(self, action: Callable[[webdriver.Chrome], T]) -> T:
        """`action(driver)` in a thread: any Selenium calls, e.g. `lambda d: d.title`."""
        return await asyncio.to_thread(action, self.driver)

    async def get(self, url: str) -> None:
        """Open `url` and wait for it to load (the server keeps serving meanwhile)."""
        await asyncio.to_thread(self.driver.get, url)

    async def wait_for(
        self, condition: Callable[[webdriver.Chrome], Any], *, within: float = 10.0
    ) -> Any:
        """`wait_for(driver, condition, within=...)` in a thread."""
        return await asyncio.to_thread(wait_for, self.driver, condition, within=within)


@asynccontextmanager
async def window(
    width: int = 1280, height: int = 860, *, phone: bool = False
) -> AsyncIterator[Window]:
    """`chromium(width, height, phone=phone)` for async specs: started, driven and quit in
    threads."""
    with _scratch() as scratch:
        driver = await asyncio.to_thread(_start, width, height, phone, scratch)
        try:
            yield Window(driver)
        finally:
            await asyncio.to_thread(driver.quit)


def wait_for(
    driver: webdriver.Chrome, condition: Callable[[webdriver.Chrome], Any], *, within: float = 10.0
) -> Any:
    """What `condition` returns once truthy (polled every 100 ms); TimeoutException after. A
    live part of the page replaced while `condition` reads it is read again at the next poll
    (Chromium also says so as `unhandled inspector error: ... Node with given id does not
    belong to the document` when the page it read was left for the next one: a form posted)."""
    ignored = (NoSuchElementException, StaleElementReferenceException)

    def read(on: webdriver.Chrome) -> Any:
        try:
            return condition(on)
        except WebDriverException as exc:
            if REPLACED in (exc.msg or ""):
                return False
            raise

    return WebDriverWait(driver, within, poll_frequency=0.1, ignored_exceptions=ignored).until(read)


REPLACED = "does not belong to the document"
"""Chromium's words for a node of a page that has just been replaced."""
