"""A follower's HTTP side, on the same `http.listen` as when it leads, read-only from the store
(`supervisor.tell.web.stored`):

- `/healthz`: 200 `ok: following a on forge (epoch 3)` (`ok: following; no instance leads right
  now ...` between two leaders); 503 `unhealthy: ...` when its store does not answer.
- `/status`: the `status --json` document (the stored snapshots), `leadership` as the leader's
  has it, and `role: follower`.
- `/metrics`: the fleet's series from the stored snapshots, samples and attempts, and the
  leadership gauges (`fleet_supervisor_leader{instance="b"} 0`).
- `/control/*`: 503 JSON, `this instance follows: a on forge leads (epoch 3); send control
  requests there` (what the CLI's control commands print).
- the fleet page: the board (with the silences, pauses and control journal), incidents,
  timelines and rules from the store under a banner naming the leader; no action forms, and an
  action posted anyway is refused naming the leader.

Every request first reads the snapshots and the lease (one query each); when the store does not
answer, every route says so with a 503.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from aiohttp import web

from supervisor.control.model import Code
from supervisor.control.routes import PREFIX
from supervisor.core.peers import PeerDoor
from supervisor.record.store.who_leads import LeaderView, leadership_document
from supervisor.tell.web.page.app import mount_page
from supervisor.tell.web.peer import is_peer_question, mount_peer
from supervisor.tell.web.site import MAX_BODY, Handler, HttpSite, errors, get_only, not_found, text
from supervisor.tell.web.stored import StoredFleet, health_text
from supervisor.tell.web.view import gather, status_document


class FollowerServer(HttpSite):
    """Serves a follower's HTTP side. `start`, then `stop`."""

    def __init__(
        self,
        fleet: StoredFleet,
        *,
        listen: str,
        started_at: datetime,
        peer: PeerDoor | None = None,
        cut_off: Callable[[], str] = lambda: "",
    ) -> None:
        super().__init__(listen)
        self.fleet = fleet
        self._started_at = started_at
        self._peer = peer
        self._cut_off = cut_off
        self.app = self._build()

    def _build(self) -> web.Application:
        fleet = self.fleet
        cut_off = self._cut_off

        @web.middleware
        async def fresh(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path.startswith("/static/") or is_peer_question(request):
                return await handler(request)
            if line := cut_off():  # said at once, from what it knows: no store round trip
                if request.path.startswith(PREFIX):
                    return refusal_answer(line)
                return text(503, f"unavailable: {line}")
            problem = await fleet.refresh()
            return text(503, f"unhealthy: {problem}") if problem else await handler(request)

        app = web.Application(client_max_size=MAX_BODY, middlewares=[errors, fresh])
        plain: dict[str, Handler] = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/status": self._status,
        }
        for path, handler in plain.items():
            app.router.add_route("*", path, get_only(handler))
        app.router.add_route("*", PREFIX + "{name}", self.control)
        mount_peer(app, self._peer)
        mount_page(
            app,
            fleet,
            control=None,
            started_at=self._started_at,
            follows=fleet.follows,
            reads=fleet.control,
        )
        app.router.add_route("*", "/{tail:.*}", not_found)
        return app

    def _leader(self) -> LeaderView:
        view = self.fleet.leader
        assert view is not None  # the middleware refreshed it
        return view

    async def control(self, request: web.Request) -> web.Response:
        """Every control request: refused, naming the leader (the CLI prints the text)."""
        return refusal_answer(f"{self.fleet.follows()}; send control requests there")

    async def _metrics(self, request: web.Request) -> web.Response:
        # prometheus_client (~5 MB) only once a scraper asks
        from supervisor.tell.web import metrics
        from supervisor.tell.web.leadership import LeadershipCollector

        view = await gather(self.fleet, self._started_at)
        response = web.Response(
            body=metrics.render_metrics(view, LeadershipCollector(self._leader()))
        )
        response.headers["Content-Type"] = metrics.CONTENT_TYPE
        return response

    async def _status(self, request: web.Request) -> web.Response:
        document = status_document(await gather(self.fleet, self._started_at))
        for endpoint in document["endpoints"]:  # as `status --json`: never seen, no since
            if endpoint["name"] in self.fleet.unseen:
                endpoint["since"] = None
        document["leadership"] = leadership_document(self._leader())
        document["role"] = "follower"
        return web.Response(text=json.dumps(document, indent=2), content_type="application/json")

    async def _healthz(self, request: web.Request) -> web.Response:
        return text(200, health_text(self._leader()))


def refusal_answer(line: str) -> web.Response:
    """A control request refused (503 JSON), `line` naming the leader."""
    document = {"ok": False, "code": Code.REFUSED.value, "text": line, "subjects": []}
    return web.json_response(document, status=503)
