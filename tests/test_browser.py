"""The browser helper (`tests.browser.window`) drives Chromium off the event loop: a page served
by a server on the spec's own loop loads, fetches and streams while the spec waits for it in the
browser, each Selenium call in a thread. (Waiting for the pushed line with the blocking
`wait_for` on the loop times out instead: the server cannot write the event until it returns.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from selenium.webdriver.common.by import By

from tests.browser import missing, window

pytestmark = pytest.mark.slow

PAGE = """<!doctype html><title>loop</title>
<p id="fetched"></p><p id="pushed"></p>
<script>
const put = (id, text) => { document.getElementById(id).textContent = text; };
fetch("/answer").then(r => r.text()).then(text => put("fetched", text));
new EventSource("/events").onmessage = e => put("pushed", e.data);
</script>"""


class Site:
    def __init__(self) -> None:
        self.served: list[str] = []
        self.push = asyncio.Event()
        self.url = ""

    async def page(self, request: web.Request) -> web.Response:
        self.served.append(request.path)
        return web.Response(text=PAGE, content_type="text/html")

    async def answer(self, request: web.Request) -> web.Response:
        self.served.append(request.path)
        return web.Response(text="fetched while the spec waited")

    async def events(self, request: web.Request) -> web.StreamResponse:
        self.served.append(request.path)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await self.push.wait()
        await response.write(b"data: pushed on the spec's loop\n\n")
        await asyncio.Future()  # held open, as the page's stream is; cancelled at teardown
        return response


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    served = Site()
    app = web.Application()
    app.add_routes(
        [
            web.get("/", served.page),
            web.get("/answer", served.answer),
            web.get("/events", served.events),
        ]
    )
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    served.url = "http://{}:{}".format(*runner.addresses[0])
    yield served
    await runner.cleanup()


async def test_a_page_on_the_spec_s_loop_loads_fetches_and_streams_while_the_spec_waits(
    site: Site,
) -> None:
    if why := missing():
        pytest.skip(why)
    async with window() as w:
        await w.get(site.url + "/")
        fetched = await w.wait_for(lambda d: d.find_element(By.ID, "fetched").text)
        await w.wait_for(lambda d: "/events" in site.served)
        site.push.set()
        pushed = await w.wait_for(lambda d: d.find_element(By.ID, "pushed").text)
        title = await w.run(lambda d: d.title)
    assert (title, fetched, pushed) == (
        "loop",
        "fetched while the spec waited",
        "pushed on the spec's loop",
    )
    assert sorted(site.served) == ["/", "/answer", "/events"]
