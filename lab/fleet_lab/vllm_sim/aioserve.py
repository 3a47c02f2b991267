"""One aiohttp application served on a loopback port, started and stopped by a sim."""

from __future__ import annotations

import contextlib

from aiohttp import web

STOP_GRACE_S = 0.5
"""How long `stop()` lets requests in flight (streams) finish before it cancels them."""


class AioServer:
    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the server is not started")
        return self._url

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        if self._runner is not None:
            raise RuntimeError("the server is already started")
        runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=STOP_GRACE_S)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self._url = f"http://{shown}:{bound[1]}"
        return self._url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            with contextlib.suppress(OSError):
                await runner.cleanup()
