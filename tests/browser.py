"""Debian's Chromium, headless, driven by Selenium through Debian's chromium-driver (the two come
from the same source package, so their versions match and nothing is downloaded at run time).

Selenium's calls block: `chromium()` hands the async specs a `Browser` that runs every call in a
thread (`asyncio.to_thread`), starting and quitting the driver included, so the in-process sims
on the spec's event loop keep serving meanwhile."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"


def missing() -> str:
    """Why the browser specs cannot run here ('' when they can)."""
    for path in (CHROMIUM, DRIVER):
        if shutil.which(path) is None:
            return f"{path} is missing: run scripts/setup.sh as root (chromium, chromium-driver)"
    return ""


_T = TypeVar("_T")


class Browser:
    """A headless Chromium whose Selenium calls run off the event loop: `await browser(step)`
    runs `step(driver)` in a thread and returns what it returned."""

    def __init__(self, driver: webdriver.Chrome) -> None:
        self._driver = driver

    async def __call__(self, step: Callable[[webdriver.Chrome], _T]) -> _T:
        return await asyncio.to_thread(step, self._driver)

    async def get(self, url: str) -> None:
        await self(lambda driver: driver.get(url))

    async def wait(
        self, condition: Callable[[webdriver.Chrome], _T], *, within: float = 10.0
    ) -> _T:
        """`wait_for`, in a thread."""
        return await self(lambda driver: wait_for(driver, condition, within=within))


@asynccontextmanager
async def chromium(width: int = 1280, height: int = 860) -> AsyncIterator[Browser]:
    driver = await asyncio.to_thread(_start, width, height)
    try:
        yield Browser(driver)
    finally:
        await asyncio.to_thread(driver.quit)


def _start(width: int, height: int) -> webdriver.Chrome:
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(DRIVER))


def wait_for(
    driver: webdriver.Chrome, condition: Callable[[webdriver.Chrome], _T], *, within: float = 10.0
) -> _T:
    """What `condition` returns once truthy (polled every 100 ms); TimeoutException after. A
    live part of the page replaced while `condition` reads it is read again at the next poll."""
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, within, poll_frequency=0.1, ignored_exceptions=ignored).until(
        condition
    )
