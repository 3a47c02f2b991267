"""The daemon's own HTTP server, on aiohttp's web server in the daemon's event loop (loopback by
default): `/metrics` (Prometheus text from `prometheus_client`), `/healthz` (200 when the loop
and the store answer, else 503 with the reason), `/status` (the `status --json` document, from
the live daemon), the control API under `/control/` (see `supervisor.control.routes`), answered
to loopback peers only, and the fleet page (`supervisor.tell.web.page`: the board, incidents, rules,
live updates, actions with a token).

Why aiohttp: the daemon is one asyncio process; aiohttp's server runs as tasks in its loop (no
second server process, no thread, no ASGI bridge), and streams server-sent events natively.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import TYPE_CHECKING

from aiohttp import web

from supervisor.control import door
from supervisor.control import routes as control_routes
from supervisor.core.peers import PeerDoor
from supervisor.core.tenure import Tenure
from supervisor.record.store.doctor import last_doctor_run
from supervisor.record.store.errors import StoreError
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.who_leads import leader_view, leadership_document
from supervisor.tell.web.page.app import mount_page
from supervisor.tell.web.page.peers import is_loopback
from supervisor.tell.web.peer import is_peer_question, mount_peer
from supervisor.tell.web.site import (
    MAX_BODY,
    Handler,
    HttpSite,
    errors,
    get_only,
    log,
    not_found,
    text,
)
from supervisor.tell.web.view import gather, status_document

if TYPE_CHECKING:
    from supervisor.control import ControlApi
    from supervisor.runtime import Daemon

STORE_DEADLINE = 2.0
"""Seconds the store has to answer /healthz."""

__all__ = ["OpsServer", "health_problem", "worker_task"]


class OpsServer(HttpSite):
    """Serves the daemon's HTTP side. `start`, then `stop`."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        listen: str,
        started_at: datetime,
        control: ControlApi | None = None,
        tenure: Tenure | None = None,
        peer: PeerDoor | None = None,
    ) -> None:
        super().__init__(listen)
        self._peer = peer
        self._daemon = daemon
        self._api = control
        self._started_at = started_at
        self.tenure = tenure or Tenure()
        self.app = self._build()

    def _build(self) -> web.Application:
        tenure = self.tenure

        @web.middleware
        async def leading(request: web.Request, handler: Handler) -> web.StreamResponse:
            """A leader woken from a freeze answers nothing from its memory: it no longer
            leads by its own clock (no store round trip), and follows again in a moment."""
            if not is_peer_question(request) and tenure.stops("the http answers"):
                return text(503, deposed(tenure.why()))
            return await handler(request)

        app = web.Application(client_max_size=MAX_BODY, middlewares=[errors, leading])
        plain: dict[str, Handler] = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/status": self._status,
        }
        for path, handler in plain.items():
            app.router.add_route("*", path, get_only(handler))
        app.router.add_route("*", control_routes.PREFIX + "{name}", self.control)
        mount_peer(app, self._peer)
        mount_page(app, self._daemon, control=self._api, started_at=self._started_at, tenure=tenure)
        app.router.add_route("*", "/{tail:.*}", not_found)
        return app

    async def control(self, request: web.Request) -> web.Response:
        """A request under /control/: loopback peers only, no browser, the token if any."""
        api = self._api
        peer = request.remote or ""
        if not is_loopback(peer):
            return text(403, f"forbidden: the control API answers loopback peers only, not {peer}")
        refused = door.refusal(request.headers, self._daemon.config.http.control_token_file)
        if refused is not None:
            log.warning(
                "control request refused",
                path=request.path,
                status=refused.status,
                why=refused.text,
            )
            said = {"ok": False, "code": "refused", "text": refused.text, "subjects": []}
            return web.json_response(said, status=refused.status)
        if api is None:
            return text(503, "unavailable: the control API has not started")
        status, document = await control_routes.handle(
            api, request.method, request.path, request.headers, await request.read()
        )
        return web.Response(status=status, body=document, content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.Response:
        # prometheus_client (~5 MB) only once a scraper asks
        from supervisor.tell.web import metrics
        from supervisor.tell.web.leadership import LeadershipCollector

        view = await gather(self._daemon, self._started_at)
        leader = LeadershipCollector(await leader_view(self._daemon.store))  # [leadership]
        response = web.Response(body=metrics.render_metrics(view, leader))
        response.headers["Content-Type"] = metrics.CONTENT_TYPE
        return response

    async def _status(self, request: web.Request) -> web.Response:
        store = self._daemon.store
        document = status_document(await gather(self._daemon, self._started_at))
        leadership = leadership_document(await leader_view(store))
        # [leadership] `role` is the same fact as `leading`: we hold the lease by our own clock
        # (no store round trip; while the store cannot be written too) and the stored lease's
        # epoch is still ours (or the daemon runs unfenced). A deposed leader answers 503
        ours = store.fence_epoch is None or leadership["epoch"] == store.fence_epoch
        if not (self.tenure.holds() and ours):
            return text(503, deposed(self.tenure.why() if ours else "another holds the lease"))
        leadership["leading"] = True
        document["leadership"] = leadership
        document["role"] = "leader"
        document["store"] = store_document(store)
        try:
            doctor = await last_doctor_run(store)
        except StoreError:  # the store cannot be read now: `store` above says why
            doctor = None
        document["doctor"] = None if doctor is None else doctor.as_status()
        return web.Response(text=json.dumps(document, indent=2), content_type="application/json")

    async def _healthz(self, request: web.Request) -> web.Response:
        reason = await health_problem(self._daemon)
        return text(503, f"unhealthy: {reason}") if reason else text(200, "ok")


def deposed(why: str) -> str:
    """A deposed leader's answer to every request until it follows again."""
    return f"unavailable: this instance no longer leads ({why}); it follows again"


def store_document(store: object) -> dict[str, object]:
    """The `store` part of `/status`: whether it takes writes, and if not why and what waits."""
    if not isinstance(store, ResilientStore) or not store.outage:
        return {"writable": True, "problem": None, "queued": 0}
    return {"writable": False, "problem": store.problem(), "queued": store.queued}


async def health_problem(daemon: Daemon) -> str:
    """'' when the daemon is healthy, else why not: its store cannot be written or does not
    answer, or a worker died.

    (That the event loop answers is shown by this running at all: a hung loop answers nothing.)"""
    store = daemon.store
    if isinstance(store, ResilientStore) and store.outage:
        return store.problem()
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
