"""The daemon's own HTTP server, on aiohttp's web server in the daemon's event loop (loopback by
default): `/metrics` (Prometheus text from `prometheus_client`), `/healthz` (200 when the loop
and the store answer, else 503 with the reason), `/status` (the `status --json` document, from
the live daemon), the control API under `/control/` (see `supervisor.control.routes`), answered
to loopback peers only, and the fleet page (`supervisor.ops.page`: the board, incidents, rules,
live updates, actions with a token).

Why aiohttp: the daemon is one asyncio process; aiohttp's server runs as tasks in its loop (no
second server process, no thread, no ASGI bridge), and streams server-sent events natively.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from supervisor.control import routes as control_routes
from supervisor.ops import metrics
from supervisor.ops.leadership import LeadershipCollector
from supervisor.ops.listen import ListenError, parse_listen
from supervisor.ops.page.app import mount_page
from supervisor.ops.page.peers import is_loopback
from supervisor.ops.view import gather, status_document
from supervisor.store.lease_view import leader_view, leadership_document

if TYPE_CHECKING:
    from supervisor.control import ControlApi
    from supervisor.daemon import Daemon

log = structlog.get_logger("supervisor.ops.http")

STORE_DEADLINE = 2.0
"""Seconds the store has to answer /healthz."""
_MAX_BODY = 64 * 1024

__all__ = ["ListenError", "OpsServer", "health_problem", "parse_listen", "worker_task"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", content_type="text/plain")


class OpsServer:
    """Serves the daemon's HTTP side. `start`, then `stop`."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        listen: str,
        started_at: datetime,
        control: ControlApi | None = None,
    ) -> None:
        self._daemon = daemon
        self._api = control
        self._host, self._port = parse_listen(listen)
        self._started_at = started_at
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.app = self._build()

    def _build(self) -> web.Application:
        app = web.Application(client_max_size=_MAX_BODY, middlewares=[_errors])
        plain: dict[str, Handler] = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/status": self._status,
        }
        for path, handler in plain.items():
            app.router.add_route("*", path, _get_only(handler))
        app.router.add_route("*", control_routes.PREFIX + "{name}", self.control)
        mount_page(app, self._daemon, control=self._api, started_at=self._started_at)
        app.router.add_route("*", "/{tail:.*}", _not_found)
        return app

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
        self._runner, self._site = runner, site
        log.info("http listening", url=self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = self._site = None

    async def control(self, request: web.Request) -> web.Response:
        """A request under /control/: loopback peers only."""
        api = self._api
        peer = request.remote or ""
        if not is_loopback(peer):
            return text(403, f"forbidden: the control API answers loopback peers only, not {peer}")
        if api is None:
            return text(503, "unavailable: the control API has not started")
        status, document = await control_routes.handle(
            api, request.method, request.path, request.headers, await request.read()
        )
        return web.Response(status=status, body=document, content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.Response:
        view = await gather(self._daemon, self._started_at)
        leader = LeadershipCollector(await leader_view(self._daemon.store))  # [leadership]
        response = web.Response(body=metrics.render(view, leader))
        response.headers["Content-Type"] = metrics.CONTENT_TYPE
        return response

    async def _status(self, request: web.Request) -> web.Response:
        document = status_document(await gather(self._daemon, self._started_at))
        document["leadership"] = leadership_document(await leader_view(self._daemon.store))
        return web.Response(text=json.dumps(document, indent=2), content_type="application/json")

    async def _healthz(self, request: web.Request) -> web.Response:
        reason = await health_problem(self._daemon)
        return text(503, f"unhealthy: {reason}") if reason else text(200, "ok")


def _get_only(handler: Handler) -> Handler:
    async def only_get(request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return text(405, f"method not allowed: {request.method} (only GET)")
        return await handler(request)

    return only_get


async def _not_found(request: web.Request) -> web.Response:
    return text(404, f"not found: {request.path} (try /metrics, /healthz or /status)")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
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


async def health_problem(daemon: Daemon) -> str:
    """'' when the daemon is healthy, else why not: its store does not answer, or a worker died.

    (That the event loop answers is shown by this running at all: a hung loop answers nothing.)"""
    store = daemon.store
    try:
        async with asyncio.timeout(STORE_DEADLINE):
            await store.snapshots()
    except TimeoutError:
        return f"the store did not answer within {STORE_DEADLINE:g}s"
    except Exception as exc:
        return f"the store does not answer: {exc}"
    for name in daemon.workers:
        task = worker_task(daemon, name)
        if task is not None and task.done():
            return f"the worker of endpoint {name} stopped"
    return ""


def worker_task(daemon: Daemon, name: str) -> asyncio.Task[None] | None:
    """The task running endpoint `name`'s worker: the newest (a reload restarts workers)."""
    running = [t for t in daemon.worker_tasks(name) if not t.cancelled()]
    return running[-1] if running else None
