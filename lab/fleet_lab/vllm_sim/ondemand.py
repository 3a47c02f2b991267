"""An Ollama server that loads its models on demand and unloads them after `keep_alive`, as
Spark 1's Ollama does (issue 36); aiohttp, in process, on a loopback port.

    async with OllamaOnDemand([OllamaModel(name="qwen3:8b")], load_s=0.2) as ollama:
        ...  # POST ollama.url + "/api/chat"; read ollama.loads, ollama.expiries, ollama.unloads

What follows Ollama's own code (`server/routes.go`, `server/sched.go`, `api/types.go`,
`openai/openai.go`, `llm/server.go`):

- `/api/tags` lists the models on disk; `/api/ps` the ones loaded (or loading), longest time
  left first, each with `expires_at` (RFC 3339) = when its keep-alive runs out.
- `/api/generate`, `/api/chat` (NDJSON streams unless `"stream": false`) and the OpenAI-compatible
  `/v1/chat/completions` (SSE when `"stream": true`) and `/v1/models`. A thinking model thinks
  unless `think` is false (`/v1`: `reasoning_effort: "none"`): `message.thinking` natively,
  `message.reasoning` / `delta.reasoning` on `/v1`.
- A request for a model not loaded waits for its load (`load_s`), then answers; requests that
  arrive during a load share it. An empty prompt (no `messages`) loads the model and answers
  `done_reason: "load"`; with `keep_alive` 0 it unloads it instead (`"unload"`) and loads nothing.
- The expiry is set when the model's last request in flight finishes: now + that request's
  `keep_alive` (the server default `keep_alive` for `/v1`, which has no such field); 0 unloads it
  then; a negative value keeps it for ever (expires_at some 292 years ahead). While a request
  runs, no timer runs.
- A model larger than the memory left (after unloading idle models to make room, as Ollama's
  scheduler does; also to stay within `max_loaded`) fails: HTTP 500 `model requires more system
  memory (X GiB) than is available (Y GiB)`, and Ollama's WARN line in the log.

Counters for specs: `loads` (who caused each: path, the `X-Fleet-Client` header, the
User-Agent), `expiries` (every change of a model's expires_at), `unloads` (with the reason),
`requests` by path, and `log` (Ollama-shaped lines; also written to `log_stream`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TextIO

from aiohttp import web

from fleet_lab.vllm_sim.aioserve import AioServer
from fleet_lab.vllm_sim.chat import DEFAULT_MAX_TOKENS, Reply, plan_reply, prompt_tokens
from fleet_lab.vllm_sim.clock import RealClock, SimClock, go_time
from fleet_lab.vllm_sim.keepalive import (
    FOREVER,
    KeepAliveError,
    expiry,
    keep_alive_seconds,
    server_keep_alive,
)

OLLAMA_VERSION = "0.33.0"
CLIENT_HEADER = "X-Fleet-Client"
"""A client names itself in this header; each load and expiry records it."""
GIB = 1024**3
NDJSON = "application/x-ndjson"
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, kw_only=True)
class OllamaModel:
    """A model on disk. `size` is what it takes loaded (`/api/ps`), `file_size` on disk."""

    name: str  #: "qwen3:8b"; without a tag it is ":latest"
    size: int = 6 * GIB
    size_vram: int | None = None  #: None: all of it on the GPU
    file_size: int | None = None  #: None: `size`
    thinking: bool = True
    load_s: float | None = None  #: None: the server's `load_s`
    family: str = "qwen3"
    parameter_size: str = "8.2B"
    quantization_level: str = "Q4_K_M"
    context_length: int = 4096

    @property
    def tagged(self) -> str:
        return self.name if ":" in self.name.rpartition("/")[2] else f"{self.name}:latest"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.tagged.encode()).hexdigest()

    def details(self) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.family,
            "families": [self.family],
            "parameter_size": self.parameter_size,
            "quantization_level": self.quantization_level,
        }


@dataclass(frozen=True, kw_only=True)
class Cause:
    """Who made a request: its path, its `X-Fleet-Client` header and its User-Agent."""

    path: str
    client: str | None = None
    user_agent: str | None = None

    @classmethod
    def of(cls, request: web.Request) -> Cause:
        headers = request.headers
        return cls(
            path=request.path,
            client=headers.get(CLIENT_HEADER),
            user_agent=headers.get("User-Agent"),
        )


@dataclass(frozen=True, kw_only=True)
class Load:
    model: str
    at: datetime
    cause: Cause
    error: str | None = None  #: the load failed with this (Ollama's text)


@dataclass(frozen=True, kw_only=True)
class ExpiryChange:
    model: str
    expires_at: datetime
    at: datetime
    cause: Cause


@dataclass(frozen=True, kw_only=True)
class Unload:
    model: str
    at: datetime
    reason: str  #: "expired", "keep_alive 0", "unload request", "evicted", "stopped"
    cause: Cause | None = None


class LoadError(Exception):
    """The model cannot be loaded; Ollama answers 500 with this text."""


class _Runner:
    """A loaded (or loading) model: Ollama's `runnerRef`."""

    def __init__(self, model: OllamaModel, session_s: float) -> None:
        self.model = model
        self.session_s = session_s
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.refs = 0
        self.expires_at: datetime | None = None
        self.timer: asyncio.Task[None] | None = None
        self.load_task: asyncio.Task[None] | None = None
        self.load_ns = 0  #: how long the load took (the first request's `load_duration`)

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class OllamaOnDemand:
    def __init__(
        self,
        models: Sequence[OllamaModel],
        *,
        keep_alive: str = "5m",
        load_s: float = 0.0,
        memory: int = 119 * GIB,
        max_loaded: int = 3,
        tok_s: float = 2000.0,
        clock: SimClock | None = None,
        log_stream: TextIO | None = None,
        available: Callable[[], int] | None = None,
    ) -> None:
        """`keep_alive` is `OLLAMA_KEEP_ALIVE`; `memory` what the models may take together;
        `max_loaded` is `OLLAMA_MAX_LOADED_MODELS`; `tok_s` paces the generated pieces;
        `available`, when given, is read before each load as Ollama reads the system's free
        memory (a lab unit: the host's `/proc/meminfo`): the models may then take that much
        beside what is loaded already."""
        self.models = {m.tagged: m for m in models}
        self.keep_alive_s = server_keep_alive(keep_alive)
        self.load_s = load_s
        self.memory = memory
        self.max_loaded = max_loaded
        self.tok_s = tok_s
        self.clock: SimClock = clock or RealClock()
        self.log_stream = log_stream
        self.available = available
        self.loads: list[Load] = []
        self.expiries: list[ExpiryChange] = []
        self.unloads: list[Unload] = []
        self.requests: Counter[str] = Counter()
        self.log: list[str] = []
        self._runners: dict[str, _Runner] = {}
        self._server = AioServer(self._app())

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._server.url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        return await self._server.start(host, port)

    async def stop(self) -> None:
        await self._server.stop()
        for runner in list(self._runners.values()):
            self._drop(runner, "stopped", None)

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

    # -- what is loaded ----------------------------------------------------------------------

    @property
    def loaded(self) -> list[str]:
        """The models loaded or loading now, by name (expired ones are unloaded first)."""
        self._reap()
        return sorted(self._runners)

    def expires_at(self, name: str) -> datetime | None:
        """When `name` unloads as things stand (None: not loaded), as `/api/ps` shows it."""
        self._reap()
        model = self._model(name)
        runner = None if model is None else self._runners.get(model.tagged)
        return None if runner is None else self._shown_expiry(runner)

    def _shown_expiry(self, runner: _Runner) -> datetime:
        # Ollama: "The scheduler waits to set expiresAt, so if a model is loading ... just
        # calculate the time w/ the sessionDuration instead."
        if runner.expires_at is not None:
            return runner.expires_at
        return expiry(self.clock.now(), runner.session_s)

    def _model(self, name: Any) -> OllamaModel | None:
        if not isinstance(name, str) or not name:
            return None
        tagged = name if ":" in name.rpartition("/")[2] else f"{name}:latest"
        return self.models.get(tagged)

    def _reap(self) -> None:
        """Unload what has expired (the timers do it too; a manual clock makes this the way)."""
        now = self.clock.now()
        for runner in list(self._runners.values()):
            if runner.refs == 0 and runner.expires_at is not None and runner.expires_at <= now:
                self._drop(runner, "expired", None)

    def _drop(self, runner: _Runner, reason: str, cause: Cause | None) -> None:
        if self._runners.get(runner.model.tagged) is not runner:
            return
        del self._runners[runner.model.tagged]
        runner.stop_timer()
        if runner.load_task is not None and not runner.load_task.done():
            runner.load_task.cancel()
        if not runner.ready.done():
            runner.ready.set_exception(LoadError("model unloaded while loading"))
            runner.ready.exception()  # retrieved: nobody may be waiting
        self.unloads.append(
            Unload(model=runner.model.tagged, at=self.clock.now(), reason=reason, cause=cause)
        )

    # -- the scheduler ---------------------------------------------------------------------

    async def _acquire(self, model: OllamaModel, keep_s: float | None, cause: Cause) -> _Runner:
        """The model's runner, loaded (waiting for its load); counted as in use until
        `_release`. Raises `LoadError` when it cannot be loaded."""
        self._reap()
        runner = self._runners.get(model.tagged)
        session_s = self.keep_alive_s if keep_s is None else keep_s
        if runner is None:
            runner = self._load(model, session_s, cause)
        runner.refs += 1
        runner.session_s = session_s
        runner.stop_timer()
        try:
            await asyncio.shield(runner.ready)
        except BaseException:
            runner.refs -= 1
            raise
        return runner

    def _load(self, model: OllamaModel, session_s: float, cause: Cause) -> _Runner:
        error = self._make_room(model, cause)
        self.loads.append(Load(model=model.tagged, at=self.clock.now(), cause=cause, error=error))
        if error is not None:
            raise LoadError(error)
        runner = _Runner(model, session_s)
        self._runners[model.tagged] = runner
        runner.load_task = asyncio.get_running_loop().create_task(self._run_load(runner))
        return runner

    async def _run_load(self, runner: _Runner) -> None:
        seconds = self.load_s if runner.model.load_s is None else runner.model.load_s
        started = time.monotonic()
        await asyncio.sleep(seconds)
        took = time.monotonic() - started
        runner.load_ns = int(took * 1e9)
        self._say("INFO", "server.go:1289", f'msg="llama runner started in {took:.2f} seconds"')
        if not runner.ready.done():
            runner.ready.set_result(None)

    def _make_room(self, model: OllamaModel, cause: Cause) -> str | None:
        """Unload idle models (soonest to expire first) until `model` fits; the error text
        when it does not fit even so."""

        def used() -> int:
            return sum(r.model.size for r in self._runners.values())

        if self.available is not None:
            self.memory = self.available() + used()
        while self._runners and (
            len(self._runners) >= self.max_loaded or used() + model.size > self.memory
        ):
            idle = [r for r in self._runners.values() if r.refs == 0 and r.ready.done()]
            if not idle:
                break
            victim = min(idle, key=self._shown_expiry)
            self._drop(victim, "evicted", cause)
        free = self.memory - used()
        if model.size <= free:
            return None
        requested, available = _human_bytes(model.size), _human_bytes(free)
        self._say(
            "WARN",
            "server.go:1012",
            'msg="model request too large for system" '
            f'requested="{requested}" available="{available}" '
            f'total="{_human_bytes(self.memory)}" free="{available}" swap="0 B"',
        )
        return f"model requires more system memory ({requested}) than is available ({available})"

    def _release(self, runner: _Runner, cause: Cause) -> None:
        """A request is done with the model: Ollama's `processCompleted`."""
        runner.refs -= 1
        if runner.refs > 0 or self._runners.get(runner.model.tagged) is not runner:
            return
        if runner.session_s <= 0:
            self._drop(runner, "keep_alive 0", cause)
            return
        self._set_expiry(runner, expiry(self.clock.now(), runner.session_s), cause)
        if runner.session_s != FOREVER:
            runner.timer = asyncio.get_running_loop().create_task(self._expire_later(runner))

    def _set_expiry(self, runner: _Runner, when: datetime, cause: Cause) -> None:
        runner.expires_at = when
        now, name = self.clock.now(), runner.model.tagged
        self.expiries.append(ExpiryChange(model=name, expires_at=when, at=now, cause=cause))

    async def _expire_later(self, runner: _Runner) -> None:
        if runner.expires_at is not None:
            await self.clock.sleep_until(runner.expires_at)
        runner.timer = None
        if runner.refs == 0:
            self._drop(runner, "expired", None)

    def _expire_runner(self, model: OllamaModel, cause: Cause) -> None:
        """An empty prompt with `keep_alive` 0: Ollama's `expireRunner`."""
        runner = self._runners.get(model.tagged)
        if runner is None:
            return
        self._set_expiry(runner, self.clock.now(), cause)
        runner.stop_timer()
        runner.session_s = 0
        if runner.refs <= 0:
            self._drop(runner, "unload request", cause)

    # -- the log -----------------------------------------------------------------------------

    def _say(self, level: str, source: str, rest: str) -> None:
        now = self.clock.now()
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
        self._write(f"time={stamp} level={level} source={source} {rest}")

    def _write(self, line: str) -> None:
        self.log.append(line)
        if self.log_stream is not None:
            print(line, file=self.log_stream, flush=True)

    # -- HTTP ----------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        add = app.router.add_route
        add("GET", "/", self._root)
        add("GET", "/api/version", self._version)
        add("GET", "/api/tags", self._tags)
        add("GET", "/api/ps", self._ps)
        add("POST", "/api/generate", self._generate)
        add("POST", "/api/chat", self._chat)
        add("GET", "/v1/models", self._v1_models)
        add("POST", "/v1/chat/completions", self._v1_chat)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        self.requests[request.path] += 1
        self._reap()
        started = time.monotonic()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            response = exc  # Go's net/http: "404 page not found"
            if exc.status in (404, 405):
                response = web.Response(
                    status=exc.status, text=f"{exc.status} {_NO_ROUTE[exc.status]}"
                )
        took = _go_duration(time.monotonic() - started)
        when = self.clock.now().strftime("%Y/%m/%d - %H:%M:%S")
        peer = (request.remote or "")[:15]
        line = f"[GIN] {when} | {response.status:3d} | {took:>13} | {peer:>15} | "
        self._write(line + f"{request.method:<7} {json.dumps(request.path)}")
        return response

    async def _root(self, request: web.Request) -> web.Response:
        return web.Response(text="Ollama is running")

    async def _version(self, request: web.Request) -> web.Response:
        return _json(200, {"version": OLLAMA_VERSION})

    async def _tags(self, request: web.Request) -> web.Response:
        entries = []
        for model in self.models.values():
            capabilities = ["completion", *(["thinking"] if model.thinking else [])]
            entries.append(
                {
                    "name": model.tagged,
                    "model": model.tagged,
                    "modified_at": "2026-01-05T10:00:00.123456789Z",
                    "size": model.file_size if model.file_size is not None else model.size,
                    "digest": model.digest,
                    "details": model.details(),
                    "capabilities": capabilities,
                }
            )
        return _json(200, {"models": entries})

    async def _ps(self, request: web.Request) -> web.Response:
        shown = []
        for runner in self._runners.values():
            model, expires = runner.model, self._shown_expiry(runner)
            vram = model.size_vram if model.size_vram is not None else model.size
            entry = {
                "name": model.tagged,
                "model": model.tagged,
                "size": model.size,
                "digest": model.digest,
                "details": model.details(),
                "expires_at": go_time(expires),
                "size_vram": vram,
                "context_length": model.context_length,
            }
            shown.append((expires.timestamp() // 1, entry))
        shown.sort(key=lambda pair: -pair[0])  # longest time left first (stable)
        return _json(200, {"models": [entry for _, entry in shown]})

    async def _v1_models(self, request: web.Request) -> web.Response:
        created = int(datetime(2026, 1, 5, 10, 0).timestamp())
        data = [
            {"id": m.tagged, "object": "model", "created": created, "owned_by": "library"}
            for m in self.models.values()
        ]
        return _json(200, {"object": "list", "data": data})

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        return await self._native(request, "generate")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._native(request, "chat")

    async def _native(self, request: web.Request, kind: str) -> web.StreamResponse:
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        try:
            keep = body.get("keep_alive")
            keep_s = None if keep is None else keep_alive_seconds(keep)
        except KeepAliveError as exc:
            return _json(400, {"error": str(exc)})
        name = body.get("model")
        if not isinstance(name, str) or not name:
            return _json(400, {"error": "model is required"})
        model = self._model(name)
        if model is None:
            return _json(404, {"error": f"model '{name}' not found"})
        cause, now = Cause.of(request), go_time(self.clock.now())
        empty = not body.get("prompt") if kind == "generate" else not body.get("messages")
        done: dict[str, Any] = {"response": ""} if kind == "generate" else _chat_message("")
        if empty and keep_s == 0:
            self._expire_runner(model, cause)
            unload = {"model": name, "created_at": now, **done, "done": True}
            return _json(200, unload | {"done_reason": "unload"})
        think = body.get("think")
        if think not in (None, False) and not model.thinking:
            return _json(400, {"error": f"{json.dumps(name)} does not support thinking"})
        thinks = model.thinking if think is None else think is not False
        try:
            runner = await self._acquire(model, keep_s, cause)
        except LoadError as exc:
            return _json(500, {"error": str(exc)})
        try:
            if empty:
                loaded = {"model": name, "created_at": now, **done, "done": True}
                return _json(200, loaded | {"done_reason": "load"})
            options = body.get("options")
            limit = options.get("num_predict") if isinstance(options, dict) else None
            reply = _plan("thinking" if thinks else None, limit)
            prompt = _prompt(body, kind)
            generation = _NativeGeneration(self, request, kind, name, reply, prompt, runner)
            if body.get("stream", True) is False:
                return await generation.whole()
            return await generation.stream()
        finally:
            self._release(runner, cause)

    async def _v1_chat(self, request: web.Request) -> web.StreamResponse:
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _json(400, _openai_error("[] is too short - 'messages'", 400))
        name = body.get("model")
        model = self._model(name)
        if model is None:
            return _json(404, _openai_error(f"model '{name}' not found", 500))
        thinks = model.thinking and body.get("reasoning_effort") != "none"
        cause = Cause.of(request)
        try:
            runner = await self._acquire(model, None, cause)  # /v1 has no keep_alive field
        except LoadError as exc:
            return _json(500, _openai_error(str(exc), 500))
        try:
            limit = body.get("max_completion_tokens", body.get("max_tokens"))
            reply = _plan("reasoning" if thinks else None, limit)
            chat = _OpenAIChat(self, request, str(name), reply, prompt_tokens(messages))
            if body.get("stream") is True:
                options = body.get("stream_options")
                usage = isinstance(options, dict) and options.get("include_usage") is True
                return await chat.stream(usage)
            return await chat.whole()
        finally:
            self._release(runner, cause)

    async def pace(self) -> None:
        await asyncio.sleep(1.0 / self.tok_s if self.tok_s > 0 else 0)


# -- the answers -------------------------------------------------------------------------------


def _plan(field: str | None, limit: Any) -> Reply:
    valid = isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
    return plan_reply(field, limit if valid else DEFAULT_MAX_TOKENS)


def _prompt(body: dict[str, Any], kind: str) -> int:
    if kind == "chat":
        messages = body.get("messages")
        return prompt_tokens(messages if isinstance(messages, list) else [])
    return len(str(body.get("prompt", "")).split()) + 4


def _chat_message(content: str, thinking: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    return {"message": message}


class _NativeGeneration:
    """One `/api/generate` or `/api/chat` answer: NDJSON pieces, then the closing record."""

    def __init__(
        self,
        server: OllamaOnDemand,
        request: web.Request,
        kind: str,
        name: str,
        reply: Reply,
        prompt: int,
        runner: _Runner,
    ) -> None:
        self.server, self.request, self.kind, self.name = server, request, kind, name
        self.reply, self.prompt, self.runner = reply, prompt, runner
        self.started = time.monotonic()
        self.load_ns = runner.load_ns
        runner.load_ns = 0  # only the request that waited for the load reports it

    def _record(self, text: str = "", thinking: str | None = None) -> dict[str, Any]:
        head = {"model": self.name, "created_at": go_time(self.server.clock.now())}
        if self.kind == "chat":
            return head | _chat_message(text, thinking)
        return head | {"response": text} | ({"thinking": thinking} if thinking else {})

    def _closing(self, record: dict[str, Any]) -> dict[str, Any]:
        total = int((time.monotonic() - self.started) * 1e9) + self.load_ns
        count = len(self.reply.pieces)
        tail: dict[str, Any] = {"done": True, "done_reason": self.reply.finish_reason}
        if self.kind == "generate":
            tail["context"] = list(range(1, self.prompt + count + 1))
        return (
            record
            | tail
            | {
                "total_duration": total,
                "load_duration": self.load_ns,
                "prompt_eval_count": self.prompt,
                "prompt_eval_duration": 1_000_000,
                "eval_count": count,
                "eval_duration": max(0, total - self.load_ns - 1_000_000),
            }
        )

    async def stream(self) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": NDJSON})
        await response.prepare(self.request)
        for field, text in self.reply.pieces:
            await self.server.pace()
            record = self._record(thinking=text) if field == "thinking" else self._record(text)
            await response.write(json.dumps(record | {"done": False}).encode() + b"\n")
        await response.write(json.dumps(self._closing(self._record())).encode() + b"\n")
        await response.write_eof()
        return response

    async def whole(self) -> web.Response:
        texts = {"thinking": "", "content": ""}
        for field, text in self.reply.pieces:
            await self.server.pace()
            texts[field] += text
        record = self._record(texts["content"], texts["thinking"] or None)
        return _json(200, self._closing(record))


class _OpenAIChat:
    """One `/v1/chat/completions` answer as Ollama's OpenAI layer writes it."""

    def __init__(
        self, server: OllamaOnDemand, request: web.Request, name: str, reply: Reply, prompt: int
    ) -> None:
        self.server, self.request, self.name, self.reply = server, request, name, reply
        self.prompt = prompt
        self.id = f"chatcmpl-{random.randrange(1000)}"
        self.created = int(server.clock.now().timestamp())

    def _head(self, kind: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.name,
            "system_fingerprint": "fp_ollama",
        }

    def _usage(self) -> dict[str, int]:
        count = len(self.reply.pieces)
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": count,
            "total_tokens": self.prompt + count,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""} | delta}
        record = self._head("chat.completion.chunk") | {
            "choices": [choice | {"finish_reason": finish}]
        }
        return f"data: {json.dumps(record)}\n\n".encode()

    async def stream(self, include_usage: bool) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(self.request)
        for field, text in self.reply.pieces:
            await self.server.pace()
            await response.write(self._chunk({field: text}))
        await response.write(self._chunk({}, self.reply.finish_reason))
        if include_usage:
            record = self._head("chat.completion.chunk") | {"choices": [], "usage": self._usage()}
            await response.write(f"data: {json.dumps(record)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def whole(self) -> web.Response:
        texts = {"reasoning": "", "content": ""}
        for field, text in self.reply.pieces:
            await self.server.pace()
            texts[field] += text
        message: dict[str, Any] = {"role": "assistant", "content": texts["content"]}
        if texts["reasoning"]:
            message["reasoning"] = texts["reasoning"]
        choice = {"index": 0, "message": message, "finish_reason": self.reply.finish_reason}
        body = self._head("chat.completion") | {"choices": [choice], "usage": self._usage()}
        return _json(200, body)


# -- small helpers -----------------------------------------------------------------------------

_NO_ROUTE = {404: "page not found", 405: "method not allowed"}


def _json(status: int, data: Any) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type="application/json"
    )


def _openai_error(message: str, kind_status: int) -> dict[str, Any]:
    """Ollama's `openai.NewError`: the type follows the status it is given (the OpenAI layer
    passes 500 for every error the native handler wrote)."""
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(kind_status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


async def _read_json(request: web.Request) -> dict[str, Any] | web.Response:
    raw = await request.read()
    if not raw:
        return _json(400, {"error": "missing request body"})
    try:
        body = json.loads(raw)
    except ValueError:
        return _json(400, {"error": "invalid character in request body"})
    if not isinstance(body, dict):
        return _json(400, {"error": "json: cannot unmarshal into the request"})
    return body


def _human_bytes(size: int) -> str:
    """Ollama's `format.HumanBytes2`."""
    for unit, scale in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{max(size, 0)} B"


def _go_duration(seconds: float) -> str:
    """Go's `time.Duration.String()`, close enough for a log line."""
    if seconds < 1e-6:
        return f"{round(seconds * 1e9)}ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3f}".rstrip("0").rstrip(".") + "µs"
    if seconds < 1:
        return f"{seconds * 1e3:.6f}".rstrip("0").rstrip(".") + "ms"
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
