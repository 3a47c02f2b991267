"""The fleet page's routes on the daemon's aiohttp application.

| route | what |
|---|---|
| `GET /` | the board: endpoints and hosts, silences and pauses, the latest actions, live |
| `GET /incidents?endpoint=&open=1&since=2h` | incidents, filtered |
| `GET /incidents/{id}` | one incident's timeline, read from the typed records |
| `GET /endpoints/{name}` | one endpoint: its incidents, its journal, the action forms |
| `GET /rules` | the rules in force: status, what each matched and how it ended |
| `GET /silences?target=` | silences: in force (edit, expire), ended, a new one (previewed) |
| `GET /alarm.json` | the worst state: how many are not serving, its tone (the tab title, icon) |
| `GET /favicon.ico`, `GET /icons/{tone}.png` | the tab's icon: now, and per tone |
| `GET /states.css` | each state's colour (`supervisor.tell.web.page.states`) |
| `GET /events?after=ID` | server-sent events: each timeline entry after ID, a tick every 5 s |
| `GET /fragments/...` | the live parts of the pages, re-fetched by the page's script |
| `POST /login`, `POST /logout` | a session for actions (the token from `http.token_file`) |
| `POST /actions/{name}` | silence, unsilence, pause, resume, ack, restart (after a confirmation) |
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from supervisor.control.matchers import MatchError, covers, select
from supervisor.control.model import Code
from supervisor.control.routes import STATUS
from supervisor.control.tables import ControlStore
from supervisor.core.durations import DurationError, parse_duration
from supervisor.core.tenure import Tenure
from supervisor.core.timefmt import stamp
from supervisor.record.availability import Repair, availability, days, repairs
from supervisor.record.store.records import SubjectKind
from supervisor.tell.web.page.actions import ACTIONS, CONFIRM
from supervisor.tell.web.page.auth import COOKIE, ActionGate, RefusedError, Session, same_origin
from supervisor.tell.web.page.board import History, board
from supervisor.tell.web.page.doctor import doctor_panel
from supervisor.tell.web.page.feed import Feed
from supervisor.tell.web.page.icon import ico, png
from supervisor.tell.web.page.items import item
from supervisor.tell.web.page.peers import is_loopback
from supervisor.tell.web.page.rules import WINDOW, rule_histories, rule_rows
from supervisor.tell.web.page.states import (
    DAY_TONES,
    TONES,
    Tone,
    stylesheet,
    tone_of,
    worst,
)
from supervisor.tell.web.view import host_views

if TYPE_CHECKING:
    from supervisor.control import ControlApi
    from supervisor.tell.web.source import ControlReads, FleetSource

STATIC = Path(__file__).parent / "static"
INCIDENTS_SHOWN = 200
JOURNAL_SHOWN = 10  #: the board's latest actions
EXPIRED_SHOWN = 50  #: ended silences listed on /silences
SILENCE_PRESETS = ("30m", "1h", "2h", "4h", "8h", "1d", "3d", "1w")


def ago_span(value: datetime | None, now: datetime) -> str:
    """How long before `now`, in the two largest units: `3m 12s`, `2h 5m`, `4d 1h`."""
    if value is None:
        return "–"
    return span((now - value).total_seconds())


def span(value: float | None) -> str:
    """A number of seconds in the two largest units (`–` for None)."""
    if value is None:
        return "–"
    seconds = max(int(value), 0)
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        if parts or seconds >= size or name == "s":
            parts.append(f"{seconds // size}{name}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("supervisor.tell.web.page", "templates"),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ago"] = ago_span
    env.filters["span"] = span
    env.filters["num"] = lambda v, fmt="{:.2f}": "–" if v is None else fmt.format(v)
    env.filters["iso"] = stamp
    env.filters["tone"] = tone_of
    env.globals["DAY_TONES"] = DAY_TONES
    return env


@dataclass(frozen=True, kw_only=True)
class Alarm:
    """The fleet's worst state, for the tab: how many endpoints and hosts are not serving, and
    the worst tone shown."""

    count: int
    tone: Tone

    @property
    def prefix(self) -> str:
        return f"({self.count}) " if self.count else ""

    def document(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "tone": self.tone.name,
            "colour": self.tone.colour,
            "prefix": self.prefix,
            "icon": f"/icons/{self.tone.name}.png",
        }


@dataclass
class Page:
    daemon: FleetSource
    api: ControlApi | None
    started_at: datetime
    gate: ActionGate
    feed: Feed
    env: Environment
    follows: Callable[[], str] | None = None  #: a follower's `this instance follows: ...`
    reads: ControlReads | None = None  #: silences, pauses, journal (default: the API's)
    history: History = field(default_factory=History)  #: the board's availability, kept 30 s

    def __post_init__(self) -> None:
        if self.reads is None:
            self.reads = self.api

    # -- rendering -------------------------------------------------------------------------

    def alarm(self) -> Alarm:
        states = [w.snapshot().state for w in list(self.daemon.workers.values())]
        states += [h.state for h in host_views(self.daemon)]
        count = sum(1 for s in states if tone_of(s) == "bad")
        return Alarm(count=count, tone=worst(states))

    def render(
        self, request: web.Request, template: str, status: int = 200, **context: Any
    ) -> web.Response:
        session = self.gate.session(request)
        html = self.env.get_template(template).render(
            now=self.daemon.clock.now(),
            alarm=self.alarm(),
            session=session,
            can_act=self.api is not None and self.gate.enabled(is_loopback(request.remote or "")),
            path=request.path_qs,
            following=self.follows() if self.follows is not None else "",
            **context,
        )
        response = web.Response(status=status, text=html, content_type="text/html")
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self';"
            " frame-ancestors 'none'; form-action 'self'"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    async def live(
        self,
        request: web.Request,
        template: str,
        read: Callable[[], Awaitable[dict[str, Any]]],
        status: int = 200,
    ) -> web.Response:
        """A whole page that follows the live feed: the newest entry's id is read before the
        page's own reads, and its stream starts after it (`data-after`), so an entry committed
        between this read and the stream's opening is still sent, and the page refreshed."""
        after = await self.feed.newest()
        return self.render(request, template, status, after=after, **await read())

    async def _board_context(self) -> dict[str, Any]:
        reads = self.reads
        journal = (await reads.journal(latest=JOURNAL_SHOWN))[::-1] if reads else []
        return {
            "board": await board(self.daemon, host_views(self.daemon), self.history),
            "silences": await reads.silences() if reads else [],
            "pauses": reads.pauses() if reads else [],
            "journal": journal,
            "doctor": await doctor_panel(self.daemon.store),
        }

    # -- pages -----------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        return await self.live(request, "board.html", self._board_context)

    async def board_fragment(self, request: web.Request) -> web.Response:
        return self.render(request, "board_part.html", **await self._board_context())

    async def incidents(self, request: web.Request) -> web.Response:
        query = request.query
        endpoint = query.get("endpoint", "").strip() or None
        open_only = query.get("open", "") in ("1", "on", "yes", "true")
        since_text = query.get("since", "").strip()
        since, problem = None, ""
        if since_text:
            try:
                since = self.daemon.clock.now() - parse_duration(since_text)
            except DurationError as exc:
                problem = f"since: {exc}"
        rows = await self.daemon.store.incidents(
            subject=endpoint, since=since, open_only=open_only, limit=INCIDENTS_SHOWN
        )
        return self.render(
            request,
            "incidents.html",
            status=400 if problem else 200,
            incidents=[] if problem else rows,
            problem=problem,
            filters={"endpoint": endpoint or "", "open": open_only, "since": since_text},
            names=sorted(self.daemon.workers),
        )

    async def _incident_context(self, request: web.Request) -> dict[str, Any]:
        number = request.match_info["id"]
        incident = (
            await self.daemon.store.incident(int(number))
            if number.isascii() and number.isdigit()
            else None
        )
        if incident is None:
            raise web.HTTPNotFound(text=f"no incident {number}\n")
        rows = await self.daemon.store.timeline(incident.id)
        return {"incident": incident, "items": [item(row) for row in rows]}

    async def incident(self, request: web.Request) -> web.Response:
        return await self.live(request, "incident.html", lambda: self._incident_context(request))

    async def incident_fragment(self, request: web.Request) -> web.Response:
        return self.render(request, "timeline_part.html", **await self._incident_context(request))

    async def _endpoint_context(self, request: web.Request) -> dict[str, Any]:
        name = request.match_info["name"]
        worker = self.daemon.workers.get(name)
        if worker is None:
            raise web.HTTPNotFound(text=f"no endpoint {name!r}\n")
        journal = (await self.reads.journal(name))[::-1] if self.reads else []
        hosts = {name: worker.endpoint.hosts()}
        silenced = [
            s
            for s in (await self.reads.silences() if self.reads else [])
            if covers(s.target, name, hosts)
        ]
        incidents = await self.daemon.store.incidents(subject=name, limit=20)
        paused = self.reads.paused(name) if self.reads else ""
        now = self.daemon.clock.now()
        subject = (SubjectKind.ENDPOINT, name)
        found = await availability(self.daemon.store, [subject], now=now)
        fixed = await repairs(self.daemon.store, now=now)
        return {
            "availability": found[subject],
            "days": await days(self.daemon.store, name, now=now),
            "repair": fixed.by_subject.get(name, Repair()),
            "snap": worker.snapshot(),
            "endpoint": worker.endpoint,
            "incidents": incidents,
            "journal": journal,
            "paused": paused,
            "silenced": silenced,
        }

    async def endpoint(self, request: web.Request) -> web.Response:
        return await self.live(request, "endpoint.html", lambda: self._endpoint_context(request))

    async def endpoint_fragment(self, request: web.Request) -> web.Response:
        return self.render(request, "endpoint_part.html", **await self._endpoint_context(request))

    # -- the tab ---------------------------------------------------------------------------

    async def alarm_document(self, _: web.Request) -> web.Response:
        response = web.json_response(self.alarm().document())
        response.headers["Cache-Control"] = "no-store"
        return response

    async def favicon(self, _: web.Request) -> web.Response:
        body = ico(self.alarm().tone.colour)
        return web.Response(
            body=body, content_type="image/x-icon", headers={"Cache-Control": "no-store"}
        )

    async def tone_icon(self, request: web.Request) -> web.Response:
        tone = TONES.get(request.match_info["tone"])
        if tone is None:
            raise web.HTTPNotFound(text=f"no tone {request.match_info['tone']!r}\n")
        return web.Response(
            body=png(tone.colour),
            content_type="image/png",
            headers={"Cache-Control": "max-age=86400"},
        )

    async def states_css(self, _: web.Request) -> web.Response:
        return web.Response(text=stylesheet(), content_type="text/css")

    # -- silences --------------------------------------------------------------------------

    def preview(self, target: str) -> tuple[tuple[str, ...], str]:
        """The endpoints `target` would silence now (config order), or why it names none."""
        if not target:
            return (), ""
        hosts = {n: w.endpoint.hosts() for n, w in list(self.daemon.workers.items())}
        try:
            return select(target, hosts, list(self.daemon.config.hosts)), ""
        except MatchError as exc:
            return (), exc.text

    async def _silences_context(self, request: web.Request) -> dict[str, Any]:
        target = request.query.get("target", "").strip()
        covered, problem = self.preview(target)
        now = self.daemon.clock.now()
        every = await ControlStore(self.daemon.store).silences()
        return {
            "target": target,
            "covered": covered,
            "problem": problem,
            "active": [s for s in every if s.active(now)],
            "expired": [s for s in every if not s.active(now)][::-1][:EXPIRED_SHOWN],
            "names": list(self.daemon.workers),
            "hosts": list(self.daemon.config.hosts),
            "presets": SILENCE_PRESETS,
            "states": {n: w.snapshot().state for n, w in list(self.daemon.workers.items())},
        }

    async def silences(self, request: web.Request) -> web.Response:
        return self.render(request, "silences.html", **await self._silences_context(request))

    async def silence_preview(self, request: web.Request) -> web.Response:
        return self.render(request, "silence_preview.html", **await self._silences_context(request))

    async def rules(self, request: web.Request) -> web.Response:
        playbook = self.daemon.playbook()
        since = self.daemon.clock.now() - WINDOW
        rows = rule_rows(playbook, await rule_histories(self.daemon.store, since=since))
        return self.render(request, "rules.html", rules=rows, folder=playbook.folder)

    # -- sessions and actions --------------------------------------------------------------

    async def login(self, request: web.Request) -> web.Response:
        if request.method == "GET":
            return self.render(request, "login.html", problem="")
        try:
            form = await read_form(request)
        except RefusedError as exc:
            return self.render(request, "login.html", status=400, problem=str(exc))
        try:
            sid, _ = self.gate.sign_in(request, form.get("who", ""), form.get("token", ""))
        except RefusedError as exc:
            return self.render(request, "login.html", status=403, problem=str(exc))
        response = web.HTTPSeeOther("/")
        # Secure once the browser came over HTTPS (here, or to a TLS proxy that says so): a
        # stricter cookie only, so the proxy's word is taken as it is
        https = request.secure or request.headers.get("X-Forwarded-Proto") == "https"
        response.set_cookie(COOKIE, sid, httponly=True, samesite="Strict", path="/", secure=https)
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        try:
            same_origin(request)
        except RefusedError as exc:
            return self.render(request, "result.html", status=403, ok=False, text=str(exc))
        self.gate.sign_out(request)
        response = web.HTTPSeeOther("/")
        response.del_cookie(COOKIE, path="/")
        raise response

    async def act(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        action = ACTIONS.get(name)
        if action is None:
            raise web.HTTPNotFound(text=f"no action {name!r} (actions: {', '.join(ACTIONS)})\n")
        try:
            form = await read_form(request)
        except RefusedError as exc:
            return self.render(
                request, "result.html", status=400, ok=False, text=f"refused: {exc}", back="/"
            )
        back = form.get("back", "/")
        back = back if back.startswith("/") and not back.startswith("//") else "/"
        if self.follows is not None:
            text = f"{self.follows()}; act on the leader's page"
            return self.render(request, "result.html", status=503, ok=False, text=text, back=back)
        try:
            session: Session = self.gate.check(request, form.get("csrf", ""))
        except RefusedError as exc:
            return self.render(
                request, "result.html", status=403, ok=False, text=f"refused: {exc}", back=back
            )
        if self.api is None:
            text = "unavailable: the control API has not started"
            return self.render(request, "result.html", status=503, ok=False, text=text, back=back)
        if name in CONFIRM and form.get("confirm") != "yes":
            return self.render(request, "confirm.html", action=name, form=form, back=back)
        answer = await action(self.api, form, session.actor)
        status = STATUS[answer.code]
        return self.render(
            request,
            "result.html",
            status=status,
            ok=answer.code is Code.DONE,
            text=answer.text,
            back=back,
        )


async def read_form(request: web.Request) -> dict[str, str]:
    """The posted form's fields; RefusedError when it cannot be read (bytes that are not in its
    charset, an unknown charset, a broken multipart body): a refusal, never a 500."""
    try:
        raw = await request.post()
    except web.HTTPException:
        raise
    except (ValueError, LookupError) as exc:  # UnicodeDecodeError is a ValueError
        raise RefusedError(f"the form cannot be read: {str(exc)[:200]}") from None
    return {key: value if isinstance(value, str) else "" for key, value in raw.items()}


def mount_page(
    app: web.Application,
    daemon: FleetSource,
    *,
    control: ControlApi | None,
    started_at: datetime,
    follows: Callable[[], str] | None = None,
    reads: ControlReads | None = None,
    tenure: Tenure | None = None,
) -> Page:
    """Add the page's routes to `app`; the live feed follows the store while `app` runs. A
    follower's page (`follows`: who leads) is read-only: it says who leads, actions refused."""
    http = daemon.config.http
    gate = ActionGate(token_file=http.token_file, loopback_actions=http.loopback_actions)
    page = Page(
        daemon,
        control,
        started_at,
        gate,
        Feed(daemon.store, tenure),
        environment(),
        follows,
        reads,
    )

    async def on_startup(_: web.Application) -> None:
        page.feed.attach()

    async def on_shutdown(_: web.Application) -> None:
        page.feed.detach()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    routes = [
        web.get("/", page.index),
        web.get("/fragments/board", page.board_fragment),
        web.get("/incidents", page.incidents),
        web.get("/incidents/{id}", page.incident),
        web.get("/fragments/incidents/{id}", page.incident_fragment),
        web.get("/endpoints/{name}", page.endpoint),
        web.get("/fragments/endpoints/{name}", page.endpoint_fragment),
        web.get("/alarm.json", page.alarm_document),
        web.get("/favicon.ico", page.favicon),
        web.get("/icons/{tone}.png", page.tone_icon),
        web.get("/states.css", page.states_css),
        web.get("/rules", page.rules),
        web.get("/silences", page.silences),
        web.get("/fragments/silence-preview", page.silence_preview),
        web.get("/events", page.feed.stream),
        web.route("*", "/login", page.login),
        web.post("/logout", page.logout),
        web.post("/actions/{name}", page.act),
        web.static("/static", STATIC),
    ]
    app.add_routes(routes)
    return page
