"""A vLLM-shaped HTTP server (also Ollama- and mlx_lm-shaped) for tests and drills.

In process::

    async with VllmSim(SimBehaviour(tok_s=2000), model="m") as sim:
        ...  # probe sim.url; change sim.behaviour while it runs

Standalone (prints exactly one line, `READY http://HOST:PORT`, once it accepts connections; exits
0 on SIGTERM/SIGINT once its requests are done, see `drain`; SIGUSR1 kills its "engine")::

    python -m fleet_lab.vllm_sim --host 127.0.0.1 --port 0 --model NAME
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import Counter
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

if TYPE_CHECKING:
    from fleet_lab.vllm_sim.control import ControlFile

from fleet_lab.vllm_sim.chat import engine_error, error_body
from fleet_lab.vllm_sim.http import BadRequestError, Responder, read_request
from fleet_lab.vllm_sim.metrics import SimMetrics
from fleet_lab.vllm_sim.routes import route

_log = logging.getLogger(__name__)
Flavour = Literal["vllm", "ollama", "mlx"]
FLAVOURS: tuple[Flavour, ...] = ("vllm", "ollama", "mlx")
SERVER_HEADER: dict[Flavour, str] = {"vllm": "uvicorn", "ollama": "ollama", "mlx": "BaseHTTP/0.6"}
_DRAIN_POLL_S = 0.05


@dataclass(kw_only=True)
class SimBehaviour:
    """How the server behaves; mutable, and read on every request (and every streamed piece)."""

    reasoning_field: str | None = "reasoning"  #: or "reasoning_content"; None = no reasoning text
    tok_s: float = 2000.0  #: pace of streamed pieces (0 = as fast as possible)
    fail_status: int | None = None  #: every chat/embedding/rerank answers this status
    engine_dead: bool = False  #: keep-alive after engine death: /health 503, chat 500
    hang: bool = False  #: read each request, never answer
    bad_json: bool = False  #: inference routes answer 200 with broken JSON / broken SSE data
    no_stream: bool = False  #: answer chat with a whole JSON body even when asked to stream
    cold_start_s: float = 0.0  #: refuse connections (bound, not listening) this long after start
    exit_on_engine_death: bool = False  #: stop serving (exit 0 standalone) soon after engine death
    die_after_pieces: int | None = None  #: the engine dies after this many pieces of one reply
    exit_delay_s: float = 0.5  #: how soon after engine death it exits (vLLM: 1.5-4.5 s)
    #: other users' load, as vLLM's /metrics shows it: requests running and waiting beside ours,
    #: and the tokens they get per second (a saturated server: 48 running, 20 waiting, 940 tok/s)
    load_running: int = 0
    load_waiting: int = 0
    load_tok_s: float = 0.0
    queue_s: float = 0.0  #: a new completion waits this long in the queue before it runs
    #: the engine stops stepping: /health and /v1/models answer, requests run and get no token,
    #: the generation counter freezes (vLLM's dead-engine-but-/health-200 class)
    engine_hung: bool = False
    #: /metrics holds vLLM's progress series (`generation_tokens_total`, the requests running);
    #: False: a build that exports other series only, as the busy/hung judge cannot use
    progress_metrics: bool = True


class VllmSim:
    """One simulated server. `start()` binds at once and listens after the cold start."""

    def __init__(
        self,
        behaviour: SimBehaviour | None = None,
        *,
        model: str = "sim-model",
        flavour: Flavour = "vllm",
        max_model_len: int = 32768,
        api_key: str | None = None,
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {flavour!r}")
        self.behaviour = behaviour if behaviour is not None else SimBehaviour()
        self.model = model
        self.flavour: Flavour = flavour
        self.max_model_len = max_model_len
        self.api_key = api_key  #: vLLM's `--api-key`: /v1 wants `Bearer KEY` (auth.py)
        self.requests: Counter[str] = Counter()  #: requests received, by path
        self.metrics = SimMetrics()
        self.created = time.time()
        self._url: str | None = None
        self._sock: socket.socket | None = None
        self._server: asyncio.Server | None = None
        self._ready = asyncio.Event()
        self._closed = asyncio.Event()
        self._closed.set()
        self._running = False
        self._stopping = False
        self._engine_killed = False
        self._connections: set[asyncio.Task[Any]] = set()
        self._background: set[asyncio.Task[Any]] = set()
        #: a standalone sim's control file (`--control-file`), polled on every request
        self.control: ControlFile | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL of the last start (kept after `stop()`, to restart on the same port)."""
        if self._url is None:
            raise RuntimeError("the sim is not started")
        return self._url

    @property
    def connections(self) -> int:
        """Client connections open right now (a client's keep-alive pool holds them)."""
        return len(self._connections)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Bind, then listen now or after `cold_start_s`; returns the base URL at once.

        A stopped sim can start again (a restarted server): its metrics start from zero and an
        engine that died by `kill_engine()` is alive again; `requests` keeps counting.
        """
        if self._running:
            raise RuntimeError("the sim is already started")
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
        except OSError:
            sock.close()
            raise
        if self._engine_killed:
            self.behaviour.engine_dead = self._engine_killed = False
        self.metrics = SimMetrics()
        self.created = time.time()
        self._sock, self._server = sock, None
        self._ready, self._closed = asyncio.Event(), asyncio.Event()
        self._running, self._stopping = True, False
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self._url = f"http://{shown}:{bound_port}"
        if self.behaviour.cold_start_s > 0:
            self._spawn(self._listen_after(self.behaviour.cold_start_s))
        else:
            await self._listen()
        return self._url

    async def _listen_after(self, delay: float) -> None:
        await asyncio.sleep(delay)  # like vLLM: bound but not listening while "loading"
        await self._listen()

    async def _listen(self) -> None:
        if self._stopping or self._sock is None:
            return
        self._server = await asyncio.start_server(self._on_connection, sock=self._sock)
        self._ready.set()

    async def wait_ready(self) -> None:
        """Returns once the server accepts connections."""
        await self._ready.wait()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_closed(self) -> None:
        """Returns once the server has stopped (by `stop()` or after an engine death exit)."""
        await self._closed.wait()

    async def stop(self) -> None:
        """Close the listener and every open connection, hung ones included. Idempotent; a
        caller cancelled while it waits does not cut the closing short (it goes on in its own
        task, which the next caller waits for)."""
        if not self._running:
            return
        if self._stopping:
            await self._closed.wait()
            return
        self._stopping = True
        current = asyncio.current_task()
        closing = asyncio.ensure_future(self._close(current))
        await asyncio.shield(closing)

    async def _close(self, current: asyncio.Task[object] | None) -> None:
        for task in list(self._background):
            if task is not current:
                task.cancel()
        if self._server is not None:
            self._server.close()
        elif self._sock is not None:
            self._sock.close()
        connections = list(self._connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._sock = self._server = None
        self._running = False
        self._closed.set()

    def held(self) -> int:
        """Requests a graceful shutdown waits for: ours in flight, and while the engine is hung
        the other users' it holds (`load_running`), which it will never finish."""
        behaviour = self.behaviour
        frozen = behaviour.engine_hung and not behaviour.engine_dead
        return self.metrics.running + (behaviour.load_running if frozen else 0)

    async def drain(self) -> None:
        """A graceful shutdown as vLLM's API server does it (uvicorn, no graceful timeout):
        stop accepting connections, wait until no request is held, then `stop()`. A hung engine
        never finishes its requests, so the drain never ends by itself: SIGTERM is not obeyed
        while the engine is frozen (a second signal, or SIGKILL, ends the process)."""
        if self._server is not None:
            self._server.close()  # the listener only: requests in flight go on
        # `held()` reads counters the requests change: nothing to await
        while self._running and self.held() > 0:  # noqa: ASYNC110
            await asyncio.sleep(_DRAIN_POLL_S)
        await self.stop()

    async def __aenter__(self) -> Self:
        if not self._running:
            await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- the engine ------------------------------------------------------------------------

    def kill_engine(self) -> None:
        """The engine dies: /health 503, chat 500; exits soon if `exit_on_engine_death`."""
        if self.behaviour.engine_dead:
            return
        self.behaviour.engine_dead = self._engine_killed = True
        if self.behaviour.exit_on_engine_death:
            self._spawn(self._exit_after(self.behaviour.exit_delay_s))

    async def _exit_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        await self.stop()

    def serves(self, name: Any) -> bool:
        if not isinstance(name, str):
            return False
        if self.flavour == "ollama":
            return name in (self.model, self.ollama_name)
        return name == self.model

    @property
    def ollama_name(self) -> str:
        return self.model if ":" in self.model.rpartition("/")[2] else f"{self.model}:latest"

    def unknown_model_body(self, name: Any) -> dict[str, Any]:
        if self.flavour == "ollama":
            message = f'model "{name}" not found, try pulling it first'
            return error_body(message, "api_error", 404)
        return error_body(f"The model `{name}` does not exist.", "NotFoundError", 404)

    def failure_body(self, status: int) -> dict[str, Any]:
        if status == 500:
            return engine_error()
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        return error_body(phrase, phrase.replace(" ", "") + "Error", status)

    # -- connections -----------------------------------------------------------------------

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            pass  # stop() cancels; clients go away; neither is an error of the server
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = SERVER_HEADER[self.flavour]
        while True:
            try:
                request = await read_request(reader)
            except BadRequestError as exc:
                out = Responder(writer, server=server, keep_alive=False)
                await out.send_json(400, error_body(str(exc), "BadRequestError", 400))
                return
            if request is None:
                return
            self.requests[request.path] += 1
            if self.control is not None:
                self.behaviour = self.control.poll(self.behaviour)
            if self.behaviour.hang:
                await asyncio.Event().wait()  # until stop() cancels this connection
            out = Responder(writer, server=server, keep_alive=request.keep_alive)
            try:
                await route(self, request, out)
            except (ConnectionError, asyncio.CancelledError):
                raise
            except Exception:  # a bug in the sim: say so, answer 500, drop the connection
                _log.exception("vllm_sim: %s %s failed", request.method, request.path)
                if out.status is None:
                    out.keep_alive = False
                    await out.send_json(500, {"detail": "Internal Server Error"})
                return
            if not out.keep_alive:
                return
