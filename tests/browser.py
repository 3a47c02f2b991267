"""Debian's Chromium, headless, driven by Selenium through Debian's chromium-driver (the two come
from the same source package, so their versions match and nothing is downloaded at run time).

Selenium's calls block: the async specs run them in a thread (`asyncio.to_thread`) so the
in-process sims keep serving meanwhile."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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


@contextmanager
def chromium(
    width: int = 1280, height: int = 860, *, phone: bool = False
) -> Iterator[webdriver.Chrome]:
    """A browser window of `width` x `height`; with `phone`, a touch screen of that many CSS
    pixels (Chrome's device emulation: a headless window is never narrower than 500 px)."""
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
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(
    driver: webdriver.Chrome, condition: Callable[[webdriver.Chrome], Any], *, within: float = 10.0
) -> Any:
    """What `condition` returns once truthy (polled every 100 ms); TimeoutException after. A
    live part of the page replaced while `condition` reads it is read again at the next poll."""
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, within, poll_frequency=0.1, ignored_exceptions=ignored).until(
        condition
    )
