"""A llama-swap-shaped router in front of upstream simulators, as other fleets run llama-swap
(issue 36); aiohttp, in process, on a loopback port.

    models = {"qwen": SwapModel(upstream=SimUpstream("qwen", load_s=0.2), ttl=300)}
    async with LlamaSwap(models, api_keys=["sk-lab"]) as router:
        ...  # POST router.url + "/v1/chat/completions"; read router.swaps, router.ttl_resets

What follows llama-swap's own code (`proxy/proxymanager.go`, `proxy/processgroup.go`,
`proxy/process.go`, `config.example.yaml`):

- `/v1/chat/completions` (and `/v1/completions`, `/v1/embeddings`) go to the upstream of the
  body's `model`; a model that is not running is started first (the request waits for its
  health check, `GET <upstream><checkEndpoint>` = 200). In a group with `swap: true` (the default
  group of every model in no group) the group's last used model is stopped first, after its
  requests in flight; a group with `exclusive: true` (the default) stops every other group that is
  not `persistent`. `/v1/models` lists the models (not `unlisted`), sorted by id.
- `/upstream/<model>/<path>` goes straight to that model's upstream: it starts (swaps in) the
  model like any request, and resets its ttl like any request (`Process.ProxyRequest` does both
  for every route). `/upstream/<model>` without the slash redirects (301 GET/HEAD, 308 others).
- `ttl`: a model is stopped once `ttl` seconds have passed since its last request ended with no
  request in flight (every proxied request resets it); -1 takes `globalTTL`, 0 never unloads.
- `/running`: the models in state `ready`; `/unload`: stops every model at once, answers `OK`;
  `/health`: `OK`, never behind a key.
- `apiKeys`: every other route wants one of the keys as `Authorization: Bearer KEY`, the password
  of `Authorization: Basic`, or `x-api-key`; else 401 `unauthorized: invalid or missing API key`
  (JSON `{"error": ...}` when the client accepts JSON) with `WWW-Authenticate: Basic
  realm="llama-swap"`. The key headers are not passed upstream.

Counters for specs: `starts` (every start of a model and who caused it), `swaps` (a request that
stopped other models to run its own: who, in, out), `stops` (with the reason), `ttl_resets`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, Self, TextIO

import aiohttp
from aiohttp import web

from fleet_lab.vllm_sim.aioserve import AioServer
from fleet_lab.vllm_sim.clock import RealClock, SimClock
from fleet_lab.vllm_sim.ondemand import Cause
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim

DEFAULT_GROUP = "(default)"
UNAUTHORIZED = "unauthorized: invalid or missing API key"
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Upstream(Protocol):
    """What llama-swap's `cmd` is to a model: started on demand, stopped on a swap."""

    @property
    def cmd(self) -> str: ...

    async def start(self) -> str:
        """Start it and return its base URL at once (it may still be loading)."""

    async def stop(self) -> None: ...


class SimUpstream:
    """A vLLM-shaped sim started on demand: bound at once, listening after `load_s` (vLLM's
    loading), stopped on a swap. `sims` keeps every one started, for a spec to read."""

    def __init__(
        self,
        model: str,
        *,
        load_s: float = 0.0,
        behaviour: SimBehaviour | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.model, self.load_s, self.host, self.api_key = model, load_s, host, api_key
        self.behaviour = behaviour or SimBehaviour()
        self.sims: list[VllmSim] = []

    @property
    def cmd(self) -> str:
        return f"python -m fleet_lab.vllm_sim --model {self.model} --cold-start {self.load_s}s"

    async def start(self) -> str:
        behaviour = replace(self.behaviour, cold_start_s=self.load_s)
        sim = VllmSim(behaviour, model=self.model, api_key=self.api_key)
        self.sims.append(sim)
        return await sim.start(self.host, 0)

    async def stop(self) -> None:
        if self.sims:
            await self.sims[-1].stop()


class RunningUpstream:
    """An upstream already running (a spec started it): starting it only names its URL."""

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def cmd(self) -> str:
        return ""

    async def start(self) -> str:
        return self.url

    async def stop(self) -> None:
        return None


@dataclass(kw_only=True)
class SwapModel:
    """One entry of llama-swap's `models:`."""

    upstream: Upstream
    ttl: int = -1  #: seconds idle before it is stopped; -1: `global_ttl`; 0: never
    name: str = ""
    description: str = ""
    unlisted: bool = False
    aliases: tuple[str, ...] = ()
    use_model_name: str = ""
    check_endpoint: str = "/health"  #: "none": no health check


@dataclass(frozen=True, kw_only=True)
class SwapGroup:
    """One entry of llama-swap's (legacy) `groups:`."""

    members: tuple[str, ...]
    swap: bool = True  #: only one member runs at a time
    exclusive: bool = True  #: running a member stops the other groups
    persistent: bool = False  #: other groups never stop this one's members


@dataclass(frozen=True, kw_only=True)
class Start:
    model: str
    at: datetime
    cause: Cause
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Swap:
    model: str  #: the model swapped in
    unloaded: tuple[str, ...]  #: the models stopped for it
    at: datetime
    cause: Cause


@dataclass(frozen=True, kw_only=True)
class Stop:
    model: str
    at: datetime
    reason: str  #: "swap", "exclusive", "ttl", "unload", "shutdown"
    cause: Cause | None = None


@dataclass(frozen=True, kw_only=True)
class TtlReset:
    model: str
    at: datetime  #: when the request ended: the idle time counts from here
    cause: Cause


class StartError(Exception):
    pass


@dataclass(kw_only=True)
class _Process:
    id: str
    config: SwapModel
    group: str
    ttl: int
    state: str = "stopped"  #: stopped, starting, ready, stopping
    url: str = ""
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    last_request: datetime | None = None
    starting: asyncio.Future[None] | None = None
    ttl_task: asyncio.Task[None] | None = None


class LlamaSwap:
    def __init__(
        self,
        models: Mapping[str, SwapModel],
        *,
        groups: Mapping[str, SwapGroup] | None = None,
        api_keys: Sequence[str] = (),
        global_ttl: int = 0,
        health_check_timeout: float = 120.0,
        health_interval_s: float = 0.05,
        first_check_s: float = 0.25,
        clock: SimClock | None = None,
        log_stream: TextIO | None = None,
    ) -> None:
        """`health_check_timeout` is llama-swap's `healthCheckTimeout` (it allows no less than
        15 s; the sim takes any); it checks every 5 s after a first wait of 250 ms: here every
        `health_interval_s` after `first_check_s`. `log` keeps the lines llama-swap's proxy
        logger writes at its default level (info) about starts, also written to `log_stream`."""
        self.models = dict(models)
        self.groups = dict(groups or {})
        grouped = {member for group in self.groups.values() for member in group.members}
        loose = tuple(sorted(set(self.models) - grouped))
        if loose:
            self.groups[DEFAULT_GROUP] = SwapGroup(members=loose)
        self.api_keys = tuple(api_keys)
        self.global_ttl = global_ttl
        self.health_check_timeout = health_check_timeout
        self.health_interval_s = health_interval_s
        self.first_check_s = first_check_s
        self.clock: SimClock = clock or RealClock()
        self.starts: list[Start] = []
        self.swaps: list[Swap] = []
        self.stops: list[Stop] = []
        self.ttl_resets: list[TtlReset] = []
        self.log: list[str] = []
        self.log_stream = log_stream
        self._processes = {
            model_id: _Process(
                id=model_id,
                config=config,
                group=next(g for g, grp in self.groups.items() if model_id in grp.members),
                ttl=config.ttl if config.ttl >= 0 else global_ttl,
            )
            for model_id, config in self.models.items()
        }
        for process in self._processes.values():
            process.idle.set()
        self._last_used: dict[str, str] = {}
        self._group_locks = {group: asyncio.Lock() for group in self.groups}
        self._session: aiohttp.ClientSession | None = None
        self._server = AioServer(self._app())

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._server.url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._session = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, connect=30)
        )
        try:
            return await self._server.start(host, port)
        except BaseException:
            await self._session.close()
            raise

    async def stop(self) -> None:
        await self._server.stop()
        for process in self._processes.values():
            if process.ttl_task is not None:
                process.ttl_task.cancel()
            if process.state in ("ready", "starting"):
                await process.config.upstream.stop()
                process.state = "stopped"
                self._record_stop(process, "shutdown", None)
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def running(self) -> list[str]:
        """The models in state `ready`, by id."""
        return sorted(p.id for p in self._processes.values() if p.state == "ready")

    def state(self, model_id: str) -> str:
        return self._processes[model_id].state

    # -- starting and stopping ---------------------------------------------------------------

    def _real_name(self, requested: str) -> str | None:
        if requested in self.models:
            return requested
        return next((m for m, c in self.models.items() if requested in c.aliases), None)

    async def _swap_in(self, process: _Process, cause: Cause) -> None:
        """`swapProcessGroup` and the swap step of `ProcessGroup.ProxyRequest`."""
        stopped: list[str] = []
        group = self.groups[process.group]
        if group.exclusive:
            for name, other in self.groups.items():
                if name == process.group or other.persistent:
                    continue
                for member in other.members:
                    if await self._stop(self._processes[member], "exclusive", cause, wait=True):
                        stopped.append(member)
        if group.swap:
            async with self._group_locks[process.group]:
                last = self._last_used.get(process.group)
                previous = None if last in (None, process.id) else self._processes[str(last)]
                if previous and await self._stop(previous, "swap", cause, wait=True):
                    stopped.append(previous.id)
                self._last_used[process.group] = process.id
        if stopped:
            swap = Swap(model=process.id, unloaded=tuple(stopped), at=self.clock.now(), cause=cause)
            self.swaps.append(swap)

    async def _start(self, process: _Process, cause: Cause) -> None:
        if process.starting is not None:
            await asyncio.shield(process.starting)
            return
        process.state = "starting"
        starting = process.starting = asyncio.get_running_loop().create_future()
        error: str | None = None
        try:
            process.url = await process.config.upstream.start()
            await self._health_check(process)
        except (StartError, OSError, aiohttp.ClientError) as exc:
            error = str(exc)
            await process.config.upstream.stop()
            # `waitForCmd` once the stopped (or exited) upstream is reaped mid-start
            self._say("INFO", f"<{process.id}> process exited but not StateStopping, "
                      "current state: starting")  # fmt: skip
            process.state = "stopped"
            starting.set_exception(StartError(error))
            starting.exception()  # retrieved here; the waiters re-raise it
            raise StartError(error) from None
        else:
            process.state = "ready"
            starting.set_result(None)
        finally:
            process.starting = None
            self.starts.append(
                Start(model=process.id, at=self.clock.now(), cause=cause, error=error)
            )

    async def _health_check(self, process: _Process) -> None:
        endpoint = process.config.check_endpoint.strip()
        if endpoint == "none":
            return
        await asyncio.sleep(self.first_check_s)
        assert self._session is not None
        began = time.monotonic()
        while True:
            if time.monotonic() - began > self.health_check_timeout:
                raise StartError(f"health check timed out after {self.health_check_timeout:g}s")
            try:
                timeout = aiohttp.ClientTimeout(total=5, connect=0.5)
                async with self._session.get(process.url + endpoint, timeout=timeout) as answer:
                    if answer.status == 200:
                        self._say(
                            "INFO", f"<{process.id}> Health check passed on {process.url}{endpoint}"
                        )
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass  # "connection refused ... (normal during startup)"
            await asyncio.sleep(self.health_interval_s)

    async def _stop(
        self, process: _Process, reason: str, cause: Cause | None, *, wait: bool
    ) -> bool:
        """`Stop()` (after the requests in flight) or `StopImmediately()`; False when it was not
        running."""
        if process.state == "starting" and process.starting is not None:
            await asyncio.gather(asyncio.shield(process.starting), return_exceptions=True)
        if process.state != "ready":
            return False
        if wait:
            await process.idle.wait()
            if process.state != "ready":
                return False
        process.state = "stopping"
        if process.ttl_task is not None and process.ttl_task is not asyncio.current_task():
            process.ttl_task.cancel()
        process.ttl_task = None
        await process.config.upstream.stop()
        process.state = "stopped"
        self._record_stop(process, reason, cause)
        return True

    def _say(self, level: str, message: str) -> None:
        """A line as llama-swap's `LogMonitor` formats it (no time prefix by default)."""
        line = f"[{level}] {message}"
        self.log.append(line)
        if self.log_stream is not None:
            print(line, file=self.log_stream, flush=True)

    def _record_stop(self, process: _Process, reason: str, cause: Cause | None) -> None:
        self.stops.append(Stop(model=process.id, at=self.clock.now(), reason=reason, cause=cause))

    def _request_done(self, process: _Process, cause: Cause) -> None:
        """The deferred part of `Process.ProxyRequest`: the ttl counts from now."""
        now = self.clock.now()
        process.last_request = now
        process.in_flight -= 1
        if process.in_flight == 0:
            process.idle.set()
        self.ttl_resets.append(TtlReset(model=process.id, at=now, cause=cause))
        if process.ttl > 0 and process.state == "ready":
            if process.ttl_task is not None:
                process.ttl_task.cancel()
            loop = asyncio.get_running_loop()
            process.ttl_task = loop.create_task(self._unload_when_idle(process, now))

    async def _unload_when_idle(self, process: _Process, since: datetime) -> None:
        await self.clock.sleep_until(since + timedelta(seconds=process.ttl))
        if process.in_flight == 0 and process.last_request == since:
            await self._stop(process, "ttl", None, wait=False)

    # -- HTTP ----------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        add = app.router.add_route
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
            add("POST", path, self._inference)
        add("GET", "/v1/models", self._list_models)
        add("GET", "/running", self._running)
        add("GET", "/unload", self._unload)
        add("GET", "/health", self._health)
        add("*", "/upstream/{tail:.*}", self._upstream)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        open_route = request.path == "/health" or request.match_info.http_exception is not None
        if open_route or not self.api_keys or request.method == "OPTIONS":
            return await handler(request)  # llama-swap's 404 (NoRoute) is behind no key either
        if _given_key(request) not in self.api_keys:
            response = _error(request, 401, UNAUTHORIZED)
            response.headers["WWW-Authenticate"] = 'Basic realm="llama-swap"'
            return response
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _list_models(self, request: web.Request) -> web.Response:
        created = int(self.clock.now().timestamp())
        data = []
        for model_id in sorted(self.models):
            config = self.models[model_id]
            if config.unlisted:
                continue
            record: dict[str, Any] = {
                "id": model_id,
                "object": "model",
                "created": created,
                "owned_by": "llama-swap",
            }
            if config.name.strip():
                record["name"] = config.name.strip()
            if config.description.strip():
                record["description"] = config.description.strip()
            data.append(record)
        return web.json_response({"object": "list", "data": data})

    async def _running(self, request: web.Request) -> web.Response:
        running = [
            {
                "model": p.id,
                "state": p.state,
                "cmd": p.config.upstream.cmd,
                "proxy": p.url,
                "ttl": p.ttl,
                "name": p.config.name,
                "description": p.config.description,
            }
            for p in sorted(self._processes.values(), key=lambda p: p.id)
            if p.state == "ready"
        ]
        return web.json_response({"running": running})

    async def _unload(self, request: web.Request) -> web.Response:
        cause = Cause.of(request)
        for process in self._processes.values():
            await self._stop(process, "unload", cause, wait=False)
        return web.Response(text="OK")

    async def _inference(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        requested = body.get("model") if isinstance(body, dict) else None
        if not isinstance(requested, str) or not requested:
            return _error(request, 400, "missing or invalid 'model' key")
        model_id = self._real_name(requested)
        if model_id is None:
            message = f"could not find suitable inference handler for {requested}"
            return _error(request, 400, message)
        rename = self.models[model_id].use_model_name
        if rename and isinstance(body, dict):
            raw = json.dumps(body | {"model": rename}).encode()
        return await self._proxy(request, model_id, request.path, raw)

    async def _upstream(self, request: web.Request) -> web.StreamResponse:
        tail = request.match_info["tail"]
        parts = tail.strip().split("/")
        search, model_id, remaining = "", None, "/"
        for index, part in enumerate(parts):
            if not part:
                continue
            search = f"{search}/{part}" if search else part
            model_id = self._real_name(search)
            if model_id is not None:
                remaining = "/" + "/".join(parts[index + 1 :])
                break
        if model_id is None:
            return _error(request, 400, "model id required in path")
        if remaining == "/" and not tail.endswith("/"):
            target = f"/upstream/{search}/" + (
                f"?{request.query_string}" if request.query_string else ""
            )
            status = 301 if request.method in ("GET", "HEAD") else 308
            return web.Response(status=status, headers={"Location": target})
        return await self._proxy(request, model_id, remaining, await request.read())

    async def _proxy(
        self, request: web.Request, model_id: str, path: str, body: bytes
    ) -> web.StreamResponse:
        process, cause = self._processes[model_id], Cause.of(request)
        await self._swap_in(process, cause)
        if process.state in ("stopping",):
            message = f"Process can not ProxyRequest, state is {process.state}\n"
            return web.Response(status=503, text=message)
        process.in_flight += 1
        process.idle.clear()
        try:
            if process.state != "ready":
                try:
                    await self._start(process, cause)
                except StartError as exc:
                    return web.Response(status=502, text=f"unable to start process: {exc}\n")
            return await self._forward(process, request, path, body)
        finally:
            self._request_done(process, cause)

    async def _forward(
        self, process: _Process, request: web.Request, path: str, body: bytes
    ) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        if self.api_keys:
            headers = {
                k: v for k, v in headers.items() if k.lower() not in ("authorization", "x-api-key")
            }
        headers["X-Forwarded-For"] = request.remote or ""
        query = f"?{request.query_string}" if request.query_string else ""
        try:
            async with self._session.request(
                request.method,
                process.url + path + query,
                data=body or None,
                headers=headers,
                allow_redirects=False,
            ) as answer:
                out = web.StreamResponse(status=answer.status)
                for name, value in answer.headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        out.headers[name] = value
                if "text/event-stream" in answer.headers.get("Content-Type", "").lower():
                    out.headers["X-Accel-Buffering"] = "no"
                await out.prepare(request)
                async for chunk in answer.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out
        except aiohttp.ClientError:
            return web.Response(status=502)  # Go's ReverseProxy: "Bad Gateway", no body


def _given_key(request: web.Request) -> str:
    """Basic's password, else Bearer's token, else `x-api-key` (llama-swap's order)."""
    auth = request.headers.get("Authorization", "")
    if auth.startswith("Basic "):
        try:
            decoded = base64.b64decode(auth.removeprefix("Basic "), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            decoded = ""
        _, sep, password = decoded.partition(":")
        if sep and password:
            return password
    if auth.startswith("Bearer ") and auth.removeprefix("Bearer "):
        return auth.removeprefix("Bearer ")
    return request.headers.get("x-api-key", "")


def _error(request: web.Request, status: int, message: str) -> web.Response:
    """llama-swap's `sendErrorResponse`: JSON when the client accepts it, else plain text."""
    if "application/json" in request.headers.get("Accept", ""):
        return web.json_response({"error": message}, status=status)
    return web.Response(status=status, text=message)
