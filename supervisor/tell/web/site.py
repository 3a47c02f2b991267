"""What the leader's and the follower's HTTP servers share: listening on `http.listen` (start,
stop, the bound port), the plain-text answer, GET-only routes, the 404 and the middleware that
turns a broken handler into a 500 and times every answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from supervisor.tell.web.listen import parse_listen

log = structlog.get_logger("supervisor.ops.http")

MAX_BODY = 64 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", content_type="text/plain")


class HttpSite:
    """An aiohttp application served on one address. `start`, then `stop`; `start` again after
    a `stop` serves again (the follower's server between two terms of leading)."""

    app: web.Application

    def __init__(self, listen: str) -> None:
        self._host, self._port = parse_listen(listen)
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when `listen` asked for port 0)."""
        addresses = self._runner.addresses if self._runner is not None else []
        if not addresses:
            return self._port
        port: int = addresses[0][1]
        return port

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Listen; raises OSError when the address cannot be bound."""
        runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("http listening", url=self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def get_only(handler: Handler) -> Handler:
    async def only_get(request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return text(405, f"method not allowed: {request.method} (only GET)")
        return await handler(request)

    return only_get


async def not_found(request: web.Request) -> web.Response:
    return text(404, f"not found: {request.path} (try /metrics, /healthz or /status)")


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A broken page must not take the daemon down: a plain 500 with the reason, logged. Every
    answer says how long the server took (`Server-Timing: app;dur=MS`: what bench/board.py
    reads)."""
    started = time.perf_counter()
    try:
        response = await handler(request)
    except web.HTTPException:
        raise
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception as exc:
        log.exception("http handler failed", path=request.path)
        response = text(500, f"internal error: {exc}")
    if not response.prepared:
        elapsed = (time.perf_counter() - started) * 1000
        response.headers["Server-Timing"] = f"app;dur={elapsed:.2f}"
    return response
