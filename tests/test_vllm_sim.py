"""The vLLM-shaped server: its shapes through a real httpx client, its metrics, cold start,
engine death, restarts, and the standalone process."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from fleet_lab.vllm_sim.chat import CONTENT_TEXT, REASONING_TEXT, split_pieces
from fleet_lab.vllm_sim.cli import main
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.config.sections import ProbeSettings
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import SystemClock
from supervisor.core.durations import parse_duration
from supervisor.core.events import ProbeOutcome, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.core.tls import default_tls
from supervisor.probe import run_probe
from tests.conftest import SimFactory
from tests.helpers import eventually
from tests.ports import free_port

ENGINE_500 = {
    "error": {
        "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
}
CHAT = "/v1/chat/completions"
N_REASONING, N_CONTENT = len(split_pieces(REASONING_TEXT)), len(split_pieces(CONTENT_TEXT))
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=default_tls(), trust_env=False, timeout=5) as client:
        yield client


def chat_body(model: str = "sim-model", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "What is 17 + 25?"}], **extra}


async def stream_events(http: httpx.AsyncClient, url: str, **extra: Any) -> list[Any]:
    """POST a streamed chat; the `data:` payloads, parsed (`[DONE]` stays a string)."""
    body = chat_body(stream=True, **extra)
    async with http.stream("POST", url + CHAT, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in response.aiter_lines()]
    payloads = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    return [p if p == "[DONE]" else json.loads(p) for p in payloads]


def parse_metrics(text: str) -> dict[str, float]:
    """`name{labels}` -> value, for the samples of a Prometheus text page."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return samples


# -- vLLM's shapes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status", "body"),
    [
        ("GET", "/health", 200, b""),
        ("GET", "/ping", 200, b""),
        ("POST", "/ping", 200, b""),
        ("GET", "/version", 200, {"version": "0.32.0"}),
        ("GET", "/load", 200, {"server_load": 0}),
        ("GET", "/nope", 404, {"detail": "Not Found"}),
        ("POST", "/health", 405, {"detail": "Method Not Allowed"}),
    ],
)
async def test_vllm_small_endpoints(
    method: str, path: str, status: int, body: Any, sim: VllmSim, http: httpx.AsyncClient
) -> None:
    response = await http.request(method, sim.url + path)
    assert response.status_code == status
    assert (response.content if isinstance(body, bytes) else response.json()) == body


async def test_vllm_models_list(sim: VllmSim, http: httpx.AsyncClient) -> None:
    data = (await http.get(sim.url + "/v1/models")).json()
    assert data["object"] == "list"
    (entry,) = data["data"]
    assert {k: entry[k] for k in ("id", "object", "owned_by", "max_model_len")} == {
        "id": "sim-model",
        "object": "model",
        "owned_by": "vllm",
        "max_model_len": 32768,
    }


@pytest.mark.parametrize(
    ("field", "reasoning"),
    [("reasoning", REASONING_TEXT), ("reasoning_content", REASONING_TEXT), (None, None)],
)
async def test_whole_chat_completion(
    field: str | None, reasoning: str | None, sim: VllmSim, http: httpx.AsyncClient
) -> None:
    sim.behaviour.reasoning_field = field
    data = (await http.post(sim.url + CHAT, json=chat_body())).json()
    assert data["object"] == "chat.completion"
    assert data["id"].startswith("chatcmpl-")
    (choice,) = data["choices"]
    message = choice["message"]
    assert message[field or "reasoning"] == reasoning
    assert "reasoning_content" not in message or field == "reasoning_content"
    assert message["content"] == CONTENT_TEXT
    assert choice["finish_reason"] == "stop"
    produced = (N_REASONING if field else 0) + N_CONTENT
    assert data["usage"]["completion_tokens"] == produced
    assert data["usage"]["total_tokens"] == data["usage"]["prompt_tokens"] + produced


async def test_max_tokens_cuts_the_thinking_short(sim: VllmSim, http: httpx.AsyncClient) -> None:
    data = (await http.post(sim.url + CHAT, json=chat_body(max_tokens=3))).json()
    (choice,) = data["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] is None
    assert choice["message"]["reasoning"] == "".join(split_pieces(REASONING_TEXT)[:3])
    assert data["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("include_usage", [True, False])
async def test_streamed_chat_completion(
    include_usage: bool, sim: VllmSim, http: httpx.AsyncClient
) -> None:
    events = await stream_events(http, sim.url, stream_options={"include_usage": include_usage})
    assert events[-1] == "[DONE]"
    records = events[:-1]
    assert records[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [r["choices"][0]["delta"] for r in records[1:] if r["choices"]]
    assert [next(iter(d)) for d in deltas] == ["reasoning"] * N_REASONING + ["content"] * N_CONTENT
    assert "".join(d.get("reasoning", "") for d in deltas) == REASONING_TEXT
    assert "".join(d.get("content", "") for d in deltas) == CONTENT_TEXT
    finishes = [r["choices"][0]["finish_reason"] for r in records if r["choices"]]
    assert finishes[-1] == "stop"
    assert set(finishes[:-1]) == {None}
    usage = [r["usage"] for r in records if "usage" in r]
    if include_usage:
        assert records[-1]["choices"] == []
        assert usage[0]["completion_tokens"] == N_REASONING + N_CONTENT
        assert usage[0]["completion_tokens_details"] == {"reasoning_tokens": N_REASONING}
    else:
        assert usage == []


@pytest.mark.parametrize(
    ("behaviour", "body", "status", "answer"),
    [
        (
            {},
            chat_body("other"),
            404,
            {
                "error": {
                    "message": "The model `other` does not exist.",
                    "type": "NotFoundError",
                    "param": None,
                    "code": 404,
                }
            },
        ),
        ({"fail_status": 500}, chat_body(), 500, ENGINE_500),
        ({"fail_status": 500}, chat_body(stream=True), 500, ENGINE_500),
        ({"engine_dead": True}, chat_body(), 500, ENGINE_500),
        (
            {},
            {"model": "sim-model"},
            400,
            {
                "error": {
                    "message": "messages: at least one message is required",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
        ),
    ],
)
async def test_chat_errors(
    behaviour: dict[str, Any],
    body: dict[str, Any],
    status: int,
    answer: Any,
    sim_factory: SimFactory,
    http: httpx.AsyncClient,
) -> None:
    server = await sim_factory(SimBehaviour(tok_s=2000.0, **behaviour))
    response = await http.post(server.url + CHAT, json=body)
    assert (response.status_code, response.json()) == (status, answer)


async def test_engine_dead_in_keep_alive_mode(sim: VllmSim, http: httpx.AsyncClient) -> None:
    sim.behaviour.engine_dead = True
    health = await http.get(sim.url + "/health")
    assert (health.status_code, health.content) == (503, b"")
    assert (await http.get(sim.url + "/v1/models")).status_code == 200
    assert (await http.get(sim.url + "/metrics")).status_code == 200
    events = await stream_events(http, sim.url)
    assert events[1:] == [ENGINE_500, "[DONE]"]  # the 200 headers and role chunk came first


async def test_the_engine_can_die_mid_stream(
    sim_factory: SimFactory, http: httpx.AsyncClient
) -> None:
    server = await sim_factory(SimBehaviour(tok_s=2000.0, die_after_pieces=4))
    events = await stream_events(http, server.url)
    pieces = [e for e in events[1:-2] if e["choices"]]
    assert len(pieces) == 4
    assert events[-2:] == [ENGINE_500, "[DONE]"]
    assert (await http.get(server.url + "/health")).status_code == 503


async def test_engine_death_can_end_the_server(
    sim_factory: SimFactory, http: httpx.AsyncClient
) -> None:
    server = await sim_factory(SimBehaviour(exit_on_engine_death=True, exit_delay_s=0.05))
    server.kill_engine()
    assert (await http.get(server.url + "/health")).status_code == 503
    async with asyncio.timeout(2):
        await server.wait_closed()
    with pytest.raises(httpx.ConnectError):
        await http.get(server.url + "/health")


async def test_a_hung_server_does_not_hold_up_stop(
    sim_factory: SimFactory, http: httpx.AsyncClient
) -> None:
    server = await sim_factory(SimBehaviour(hang=True))
    # the server hangs in its answer, not in the connection: connecting may take its time (over
    # 0.2 s on 2 busy cores), the answer never comes
    with pytest.raises(httpx.ReadTimeout):
        await http.get(server.url + "/health", timeout=httpx.Timeout(0.2, connect=10.0))
    hung = asyncio.create_task(http.post(server.url + CHAT, json=chat_body(stream=True)))
    await eventually(lambda: server.requests[CHAT] == 1, what="the chat request to arrive")
    async with asyncio.timeout(1):
        await server.stop()
    with pytest.raises(httpx.RemoteProtocolError):
        await hung
    assert server.requests["/health"] == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_bad_json(stream: bool, sim_factory: SimFactory, http: httpx.AsyncClient) -> None:
    server = await sim_factory(SimBehaviour(tok_s=2000.0, bad_json=True))
    response = await http.post(server.url + CHAT, json=chat_body(stream=stream))
    assert response.status_code == 200
    if stream:
        data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        json.loads(data[0])  # the role chunk is fine, the next one is cut
        with pytest.raises(ValueError, match="Unterminated string"):
            json.loads(data[1])
        assert data[-1] == "[DONE]"
    else:
        with pytest.raises(ValueError, match="line 1 column 91"):
            response.json()


# -- metrics ------------------------------------------------------------------------------------


async def test_metrics_count_what_was_served(sim: VllmSim, http: httpx.AsyncClient) -> None:
    await stream_events(http, sim.url)
    await stream_events(http, sim.url, stream_options={"include_usage": True})
    await http.post(sim.url + CHAT, json=chat_body())
    await http.post(sim.url + CHAT, json=chat_body(max_tokens=5))
    response = await http.get(sim.url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for family, kind in [
        ("vllm:num_requests_running", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:generation_tokens_total", "counter"),
        ("vllm:time_to_first_token_seconds", "histogram"),
    ]:
        assert f"# TYPE {family} {kind}\n" in text
    m = parse_metrics(text)
    labels = 'model_name="sim-model",engine="0"'
    full = N_REASONING + N_CONTENT
    assert m[f"vllm:generation_tokens_total{{{labels}}}"] == 3 * full + 5
    assert m[f"vllm:prompt_tokens_total{{{labels}}}"] == 4 * (5 + 4)  # 5 words + 4 per message
    assert m[f'vllm:request_success_total{{{labels},finished_reason="stop"}}'] == 3
    assert m[f'vllm:request_success_total{{{labels},finished_reason="length"}}'] == 1
    assert m[f'vllm:request_success_total{{{labels},finished_reason="error"}}'] == 0
    assert m[f"vllm:num_requests_running{{{labels}}}"] == 0
    assert m[f"vllm:num_requests_waiting{{{labels}}}"] == 0
    assert m[f"vllm:time_to_first_token_seconds_count{{{labels}}}"] == 4
    assert m[f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}}'] == 4
    assert 0 < m[f"vllm:time_to_first_token_seconds_sum{{{labels}}}"] < 4


async def test_running_gauge_counts_a_request_in_flight(
    sim: VllmSim, http: httpx.AsyncClient
) -> None:
    sim.behaviour.tok_s = 20.0
    running = 'vllm:num_requests_running{model_name="sim-model",engine="0"}'

    async def gauge() -> float:
        return parse_metrics((await http.get(sim.url + "/metrics")).text)[running]

    async def is_running() -> bool:
        return await gauge() == 1

    task = asyncio.create_task(http.post(sim.url + CHAT, json=chat_body(max_tokens=6)))
    await eventually(is_running, what="one request running")
    assert (await task).status_code == 200
    assert await gauge() == 0


# -- lifecycle ----------------------------------------------------------------------------------


async def test_cold_start_refuses_then_serves(
    sim_factory: SimFactory, http: httpx.AsyncClient
) -> None:
    started = time.monotonic()
    server = await sim_factory(SimBehaviour(cold_start_s=0.5))
    assert not server.ready
    with pytest.raises(httpx.ConnectError):
        await http.get(server.url + "/health")
    async with asyncio.timeout(3):
        await server.wait_ready()
    assert time.monotonic() - started >= 0.5
    assert (await http.get(server.url + "/health")).status_code == 200


async def test_a_stopped_sim_restarts_on_its_port_with_a_fresh_engine(
    sim: VllmSim, http: httpx.AsyncClient
) -> None:
    await http.post(sim.url + CHAT, json=chat_body())
    sim.kill_engine()
    url = sim.url
    await sim.stop()
    with pytest.raises(httpx.ConnectError):
        await http.get(url + "/health")
    port = int(url.rsplit(":", 1)[1])
    assert await sim.start("127.0.0.1", port) == url
    assert (await http.get(url + "/health")).status_code == 200
    assert sim.metrics.generation_tokens == 0
    assert sim.requests[CHAT] == 1


async def test_async_with_starts_and_stops() -> None:
    async with VllmSim(SimBehaviour(), model="m") as server, HttpClient() as client:
        assert (await client.get(server.url + "/health")).status_code == 200
        url = server.url
    async with HttpClient() as client:
        with pytest.raises(aiohttp.ClientConnectorError):
            await client.get(url + "/health")


# -- other flavours -----------------------------------------------------------------------------


async def test_ollama_shapes(sim_factory: SimFactory, http: httpx.AsyncClient) -> None:
    server = await sim_factory(model="qwen3", flavour="ollama")
    root = await http.get(server.url + "/")
    assert (root.status_code, root.text) == (200, "Ollama is running")
    assert (await http.get(server.url + "/api/version")).json() == {"version": "0.33.0"}
    (tag,) = (await http.get(server.url + "/api/tags")).json()["models"]
    assert {"name", "model", "modified_at", "size", "digest", "details"} <= set(tag)
    assert (tag["name"], tag["model"]) == ("qwen3:latest", "qwen3:latest")
    missing = await http.get(server.url + "/health")
    assert (missing.status_code, missing.text) == (404, "404 page not found")
    for name in ("qwen3", "qwen3:latest"):
        events = await stream_events(http, server.url, model=name)
        assert events[1]["choices"][0]["delta"] == {"reasoning": "The"}
    wrong = await http.post(server.url + CHAT, json=chat_body("llama3"))
    assert wrong.status_code == 404
    assert wrong.json()["error"]["message"] == 'model "llama3" not found, try pulling it first'


async def test_mlx_health_is_static(sim_factory: SimFactory, http: httpx.AsyncClient) -> None:
    server = await sim_factory(SimBehaviour(engine_dead=True), flavour="mlx")
    health = await http.get(server.url + "/health")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (await http.get(server.url + "/metrics")).status_code == 404
    assert (await http.post(server.url + CHAT, json=chat_body())).status_code == 500


async def test_embeddings(sim: VllmSim, http: httpx.AsyncClient) -> None:
    body = {"model": "sim-model", "input": ["hello there", "hello there", "other"]}
    data = (await http.post(sim.url + "/v1/embeddings", json=body)).json()
    assert data["object"] == "list"
    vectors = [item["embedding"] for item in data["data"]]
    assert [item["index"] for item in data["data"]] == [0, 1, 2]
    assert all(len(v) == 16 and all(isinstance(x, float) for x in v) for v in vectors)
    assert vectors[0] == vectors[1] != vectors[2]
    assert abs(sum(x * x for x in vectors[0]) - 1) < 1e-4


async def test_rerank(sim: VllmSim, http: httpx.AsyncClient) -> None:
    body = {
        "model": "sim-model",
        "query": "What is the capital of France?",
        "documents": ["Bananas are yellow.", {"text": "Paris is the capital of France."}],
    }
    data = (await http.post(sim.url + "/v1/rerank", json=body)).json()
    assert [r["index"] for r in data["results"]] == [1, 0]
    assert data["results"][0]["document"] == {"text": "Paris is the capital of France."}
    scores = [r["relevance_score"] for r in data["results"]]
    assert 1 > scores[0] > scores[1] > 0


# -- standalone ---------------------------------------------------------------------------------


@asynccontextmanager
async def standalone(*flags: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`python -m fleet_lab.vllm_sim FLAGS`, once it printed READY; killed if still alive."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleet_lab.vllm_sim", "--host", "127.0.0.1", *flags,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 15)).decode()
        match = re.fullmatch(r"READY (http://127\.0\.0\.1:\d+)\n", line)
        assert match is not None, line
        yield process, match.group(1)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def ended(process: asyncio.subprocess.Process) -> tuple[int, str, str]:
    async with asyncio.timeout(10):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_standalone_serves_probes_and_exits_0_on_sigterm() -> None:
    async with standalone("--port", "0", "--model", "m", "--tok-s", "2000") as (process, url):
        settings = ProbeSettings(timeout=parse_duration("5s"))
        ep = Endpoint(name="lab", kind="openai", url=url, model="m", expect_reasoning=True,
                      probe=settings)  # fmt: skip
        async with HttpClient() as client:
            for tier in (Tier.LIVENESS, Tier.DEEP):
                result = await run_probe(ep, tier, client, clock=SystemClock())
                assert (result.outcome, result.reason) == (ProbeOutcome.OK, "")
        process.send_signal(signal.SIGTERM)
        assert await ended(process) == (0, "", "")


@pytest.mark.slow
async def test_standalone_exits_0_by_itself_when_its_engine_dies() -> None:
    """`--exit-delay`: /health says 503 until it exits (vLLM: 1.5-4.5 s after the death)."""
    argv = ("--port", "0", "--model", "m", "--exit-on-engine-death", "--exit-delay", "300ms")
    async with standalone(*argv) as (p, url):
        p.send_signal(signal.SIGUSR1)
        async with HttpClient() as client:

            async def health_is_503() -> bool:
                return (await client.get(url + "/health")).status_code == 503

            await eventually(health_is_503, what="/health 503 before the exit")
        assert await ended(p) == (0, "", "")
    async with HttpClient() as client:
        with pytest.raises(aiohttp.ClientConnectorError):
            await client.get(url + "/health")


@pytest.mark.slow
async def test_standalone_keeps_serving_a_dead_engine_and_listens_after_cold_start() -> None:
    port = free_port()
    started = time.monotonic()
    async with standalone("--port", str(port), "--model", "m", "--cold-start", "500ms") as (
        process,
        url,
    ):
        assert time.monotonic() - started >= 0.5
        assert url == f"http://127.0.0.1:{port}"
        process.send_signal(signal.SIGUSR1)
        async with HttpClient() as client:

            async def health_is_503() -> bool:
                return (await client.get(url + "/health")).status_code == 503

            await eventually(health_is_503, what="/health 503")
            assert (await client.get(url + "/v1/models")).status_code == 200
        process.send_signal(signal.SIGINT)
        assert (await ended(process))[0] == 0


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ([], "the following arguments are required: --model"),
        (["--model", "m", "--tok-s", "fast"], "argument --tok-s: expected a number, got 'fast'"),
        (["--model", "m", "--tok-s", "-1"], "argument --tok-s: must be 0 or more, got '-1'"),
        (
            ["--model", "m", "--cold-start", "soon"],
            "argument --cold-start: expected a duration like 90s, 15m or 2h, got 'soon'",
        ),
        (
            ["--model", "m", "--exit-delay", "later"],
            "argument --exit-delay: expected a duration like 90s, 15m or 2h, got 'later'",
        ),
        (
            ["--model", "m", "--port", "70000"],
            "argument --port: must be between 0 and 65535, got 70000",
        ),
        (
            ["--model", "m", "--flavour", "tgi"],
            "argument --flavour: expected one of vllm, ollama, mlx, got 'tgi'",
        ),
        (
            ["--model", "m", "--reasoning-field", "thinking"],
            "argument --reasoning-field: expected one of reasoning, reasoning_content, none, "
            "got 'thinking'",
        ),
        (
            ["--model", "m", "--fail-status", "200"],
            "argument --fail-status: must be between 400 and 599, got 200",
        ),
    ],
)  # fmt: skip
def test_cli_bad_flags_give_one_line(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"vllm_sim: error: {error}\n")


def test_cli_port_in_use_gives_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--model", "m", "--port", str(port)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"vllm_sim: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )


async def _in_flight(url: str) -> asyncio.Task[httpx.Response]:
    """A real completion sent to `url` and left waiting (the engine is hung); its request is
    counted in `vllm:num_requests_running` once the server holds it."""
    client = httpx.AsyncClient(verify=default_tls(), timeout=60)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

    async def send() -> httpx.Response:
        async with client:
            return await client.post(url + "/v1/chat/completions", json=body)

    task = asyncio.ensure_future(send())
    async with HttpClient() as probe:

        async def running() -> bool:
            text = (await probe.get(url + "/metrics")).text
            return re.search(r"^vllm:num_requests_running\{[^}]*\} 1\.0$", text, re.M) is not None

        await eventually(running, what="the completion to run")
    return task


@pytest.mark.slow
async def test_standalone_with_a_hung_engine_does_not_obey_sigterm_until_a_second_signal() -> None:
    """vLLM with a frozen engine: SIGTERM starts uvicorn's graceful shutdown, which waits for
    the requests in flight, and a hung engine never finishes them."""
    async with standalone("--port", "0", "--model", "m", "--engine-hung") as (process, url):
        waiting = await _in_flight(url)
        process.send_signal(signal.SIGTERM)
        with pytest.raises(TimeoutError):  # the absence of an exit is what is checked
            await asyncio.wait_for(asyncio.shield(process.wait()), 1.0)
        process.send_signal(signal.SIGTERM)
        status, out, err = await ended(process)
        waiting.cancel()
    assert (status, out) == (0, "")
    assert err.splitlines() == [
        "INFO:     Shutting down",
        "INFO:     Waiting for connections to close. (CTRL+C to force quit)",
        "INFO:     Forced quit",
    ]


@pytest.mark.slow
async def test_standalone_drains_a_request_in_flight_then_exits_on_sigterm() -> None:
    async with standalone("--port", "0", "--model", "m", "--tok-s", "20") as (process, url):
        waiting = await _in_flight(url)
        process.send_signal(signal.SIGTERM)
        status, out, err = await ended(process)
        reply = await waiting
    assert (status, out) == (0, "")
    assert reply.status_code == 200
    assert "data: [DONE]" in reply.text
    assert err.splitlines()[-1] == "INFO:     Finished server process"
