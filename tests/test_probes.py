"""Probes against real HTTP servers on 127.0.0.1: the vLLM-shaped sim, and a canned-bytes server
for the shapes the sim does not make (truncated streams, odd error bodies, redirects)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import re
import socket
import ssl
import wave
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

import aiohttp
import pytest

from fleet_lab.vllm_sim.chat import plan_reply
from fleet_lab.vllm_sim.server import Flavour, SimBehaviour, VllmSim
from supervisor.config.sections import ProbeSettings
from supervisor.config.supervised import Endpoint, EndpointKind
from supervisor.core.clock import SystemClock
from supervisor.core.durations import parse_duration
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient, connect_reason
from supervisor.probe import CHECKS, completion, run_probe
from supervisor.probe.completion import CompletionStats, judge_completion, slow_reason
from supervisor.probe.context import ProbeError
from supervisor.probe.http import http_error_reason
from supervisor.probe.liveness import ollama_name
from supervisor.probe.transcript import Transcript
from tests.conftest import FAST_TOK_S, SimFactory
from tests.helpers import eventually

ENGINE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
LIVE, DEEP = Tier.LIVENESS, Tier.DEEP
OK, DEGRADED, FAIL = ProbeOutcome.OK, ProbeOutcome.DEGRADED, ProbeOutcome.FAIL


def endpoint(
    url: str,
    *,
    kind: EndpointKind = "openai",
    model: str | None = "sim-model",
    expect_reasoning: bool = True,
    baseline: float | None = None,
    timeout: str = "5s",
    max_tokens: int = 256,
    ratio: float = 0.5,
) -> Endpoint:
    settings = ProbeSettings(
        timeout=parse_duration(timeout), max_tokens=max_tokens, min_tok_s_ratio=ratio
    )
    return Endpoint(
        name="ep",
        kind=kind,
        url=url,
        model=model,
        expect_reasoning=expect_reasoning,
        baseline_tok_s=baseline,
        probe=settings,
    )


async def probe(ep: Endpoint, tier: Tier, client: HttpClient) -> ProbeResult:
    return await run_probe(ep, tier, client, clock=SystemClock())


# -- every kind against the sim -----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Case:
    id: str
    tier: Tier
    outcome: ProbeOutcome
    check: str
    reason: str  #: exact text; a regular expression when it starts with `re:`
    status: int | None = None
    behaviour: Mapping[str, Any] = field(default_factory=dict)
    flavour: Flavour = "vllm"
    served: str = "sim-model"
    kind: EndpointKind = "openai"
    path: str = ""  #: appended to the sim's URL (kind `health`: `/health`)
    ep: Mapping[str, Any] = field(default_factory=dict)


DEAD, HANG, BAD = {"engine_dead": True}, {"hang": True}, {"bad_json": True}
WHOLE = {"no_stream": True}
SHORT = {"timeout": "300ms"}
OTHER = {"model": "other"}
CHUNK_HEAD = r'\{"id": "chatcmpl-[0-9a-f]{32}", "object…'

CASES = [
    # openai (vLLM, mlx_lm): /health, then /v1/models
    Case(id="openai-live-ok", tier=LIVE, outcome=OK, check="models", reason="", status=200),
    Case(id="openai-live-engine-dead", tier=LIVE, outcome=FAIL, check="health",
         reason="HTTP 503 from /health", status=503, behaviour=DEAD),
    Case(id="openai-live-wrong-model", tier=LIVE, outcome=FAIL, check="models",
         reason="model 'other' not served (serving: sim-model)", status=200, ep=OTHER),
    Case(id="openai-live-hang", tier=LIVE, outcome=FAIL, check="health",
         reason="timed out after 300ms", behaviour=HANG, ep=SHORT),
    Case(id="mlx-live-static-health-while-dead", tier=LIVE, outcome=OK, check="models",
         reason="", flavour="mlx", behaviour=DEAD),
    # openai: the streamed completion
    Case(id="deep-reasoning-stream", tier=DEEP, outcome=OK, check="completion", reason="",
         status=200),
    Case(id="deep-reasoning_content-stream", tier=DEEP, outcome=OK, check="completion",
         reason="", behaviour={"reasoning_field": "reasoning_content"}),
    Case(id="deep-reasoning-whole", tier=DEEP, outcome=OK, check="completion", reason="",
         behaviour=WHOLE),
    Case(id="deep-reasoning_content-whole", tier=DEEP, outcome=OK, check="completion",
         reason="", behaviour={"reasoning_field": "reasoning_content", **WHOLE}),
    Case(id="deep-no-reasoning-stream", tier=DEEP, outcome=DEGRADED, check="completion",
         reason="no reasoning text", behaviour={"reasoning_field": None}),
    Case(id="deep-no-reasoning-whole", tier=DEEP, outcome=DEGRADED, check="completion",
         reason="no reasoning text", behaviour={"reasoning_field": None, **WHOLE}),
    Case(id="deep-no-reasoning-not-expected", tier=DEEP, outcome=OK, check="completion",
         reason="", behaviour={"reasoning_field": None}, ep={"expect_reasoning": False}),
    Case(id="deep-still-thinking-at-max-tokens", tier=DEEP, outcome=OK, check="completion",
         reason="", ep={"max_tokens": 3}),
    Case(id="deep-http-500", tier=DEEP, outcome=FAIL, check="completion",
         reason=f"HTTP 500: {ENGINE}", status=500, behaviour={"fail_status": 500}),
    Case(id="deep-http-503", tier=DEEP, outcome=FAIL, check="completion",
         reason="HTTP 503: Service Unavailable", status=503, behaviour={"fail_status": 503}),
    Case(id="deep-engine-dead-stream", tier=DEEP, outcome=FAIL, check="completion",
         reason=f"stream error: {ENGINE}", status=200, behaviour=DEAD),
    Case(id="deep-engine-dies-mid-stream", tier=DEEP, outcome=FAIL, check="completion",
         reason=f"stream error: {ENGINE}", status=200, behaviour={"die_after_pieces": 3}),
    Case(id="deep-engine-dead-whole", tier=DEEP, outcome=FAIL, check="completion",
         reason=f"HTTP 500: {ENGINE}", status=500, behaviour={**DEAD, **WHOLE}),
    Case(id="deep-bad-json-stream", tier=DEEP, outcome=FAIL, check="completion",
         reason=f"re:bad JSON in response: {CHUNK_HEAD}", status=200, behaviour=BAD),
    Case(id="deep-bad-json-whole", tier=DEEP, outcome=FAIL, check="completion",
         reason=f"re:bad JSON in response: {CHUNK_HEAD}", status=200,
         behaviour={**BAD, **WHOLE}),
    Case(id="deep-wrong-model", tier=DEEP, outcome=FAIL, check="completion",
         reason="HTTP 404: The model `other` does not exist.", status=404, ep=OTHER),
    Case(id="deep-hang", tier=DEEP, outcome=FAIL, check="completion",
         reason="timed out after 300ms", behaviour=HANG, ep=SHORT),
    Case(id="deep-stalls-after-headers", tier=DEEP, outcome=FAIL, check="completion",
         reason="timed out after 300ms", behaviour={"tok_s": 1.0}, ep=SHORT),
    Case(id="mlx-deep-ok", tier=DEEP, outcome=OK, check="completion", reason="", flavour="mlx"),
    # ollama: /api/tags (`name` and `name:latest` are one model), then the same completion
    Case(id="ollama-live-bare-name", tier=LIVE, outcome=OK, check="tags", reason="",
         flavour="ollama", kind="ollama", served="qwen3", ep={"model": "qwen3"}),
    Case(id="ollama-live-latest-name", tier=LIVE, outcome=OK, check="tags", reason="",
         flavour="ollama", kind="ollama", served="qwen3", ep={"model": "qwen3:latest"}),
    Case(id="ollama-live-served-latest", tier=LIVE, outcome=OK, check="tags", reason="",
         flavour="ollama", kind="ollama", served="qwen3:latest", ep={"model": "qwen3"}),
    Case(id="ollama-live-other-tag", tier=LIVE, outcome=FAIL, check="tags",
         reason="model 'qwen3' not served (serving: qwen3:8b)", flavour="ollama",
         kind="ollama", served="qwen3:8b", ep={"model": "qwen3"}),
    Case(id="ollama-live-hang", tier=LIVE, outcome=FAIL, check="tags",
         reason="timed out after 300ms", flavour="ollama", kind="ollama", behaviour=HANG,
         ep=SHORT),
    Case(id="ollama-deep-ok", tier=DEEP, outcome=OK, check="completion", reason="",
         flavour="ollama", kind="ollama", served="qwen3", ep={"model": "qwen3"}),
    Case(id="ollama-deep-no-reasoning", tier=DEEP, outcome=DEGRADED, check="completion",
         reason="no reasoning text", flavour="ollama", kind="ollama",
         behaviour={"reasoning_field": None}),
    Case(id="ollama-deep-wrong-model", tier=DEEP, outcome=FAIL, check="completion",
         reason='HTTP 404: model "other" not found, try pulling it first', status=404,
         flavour="ollama", kind="ollama", ep=OTHER),
    # health: GET the URL at both tiers
    Case(id="health-live-ok", tier=LIVE, outcome=OK, check="http", reason="", status=200,
         kind="health", path="/health", ep={"model": None}),
    Case(id="health-deep-ok", tier=DEEP, outcome=OK, check="http", reason="", status=200,
         kind="health", path="/health", ep={"model": None}),
    Case(id="health-deep-503", tier=DEEP, outcome=FAIL, check="http",
         reason="HTTP 503 from /health", status=503, kind="health", path="/health",
         behaviour=DEAD, ep={"model": None}),
    Case(id="health-live-404", tier=LIVE, outcome=FAIL, check="http",
         reason="HTTP 404 from /nope: Not Found", status=404, kind="health", path="/nope",
         ep={"model": None}),
    Case(id="health-live-hang", tier=LIVE, outcome=FAIL, check="http",
         reason="timed out after 300ms", kind="health", path="/health", behaviour=HANG,
         ep={"model": None, **SHORT}),
    # embedding: /v1/models, then a real embedding
    Case(id="embedding-live-ok", tier=LIVE, outcome=OK, check="models", reason="",
         kind="embedding"),
    Case(id="embedding-live-wrong-model", tier=LIVE, outcome=FAIL, check="models",
         reason="model 'other' not served (serving: sim-model)", kind="embedding", ep=OTHER),
    Case(id="embedding-deep-ok", tier=DEEP, outcome=OK, check="embedding", reason="",
         status=200, kind="embedding"),
    Case(id="embedding-deep-500", tier=DEEP, outcome=FAIL, check="embedding",
         reason=f"HTTP 500: {ENGINE}", status=500, kind="embedding", behaviour=DEAD),
    Case(id="embedding-deep-bad-json", tier=DEEP, outcome=FAIL, check="embedding",
         reason=r're:bad JSON in response: \{"id": "embd-[0-9a-f]{32}", "object": "l',
         status=200, kind="embedding", behaviour=BAD),
    Case(id="embedding-deep-wrong-model", tier=DEEP, outcome=FAIL, check="embedding",
         reason="HTTP 404: The model `other` does not exist.", status=404, kind="embedding",
         ep=OTHER),
    # rerank: /v1/models, then a real rerank of two documents
    Case(id="rerank-live-ok", tier=LIVE, outcome=OK, check="models", reason="", kind="rerank"),
    Case(id="rerank-deep-ok", tier=DEEP, outcome=OK, check="rerank", reason="", status=200,
         kind="rerank"),
    Case(id="rerank-deep-500", tier=DEEP, outcome=FAIL, check="rerank",
         reason=f"HTTP 500: {ENGINE}", status=500, kind="rerank",
         behaviour={"fail_status": 500}),
    Case(id="rerank-deep-bad-json", tier=DEEP, outcome=FAIL, check="rerank",
         reason=r're:bad JSON in response: \{"id": "rerank-[0-9a-f]{32}", "model": "',
         status=200, kind="rerank", behaviour=BAD),
    Case(id="rerank-deep-hang", tier=DEEP, outcome=FAIL, check="rerank",
         reason="timed out after 300ms", kind="rerank", behaviour=HANG, ep=SHORT),
    # asr and tts (OpenAI's audio API): /health, then a real transcription / spoken phrase
    Case(id="asr-live-ok", tier=LIVE, outcome=OK, check="health", reason="", status=200,
         kind="asr"),
    Case(id="asr-deep-ok", tier=DEEP, outcome=OK, check="transcription", reason="",
         status=200, kind="asr"),
    Case(id="asr-deep-500", tier=DEEP, outcome=FAIL, check="transcription",
         reason=f"HTTP 500: {ENGINE}", status=500, kind="asr", behaviour={"fail_status": 500}),
    Case(id="asr-deep-empty-body", tier=DEEP, outcome=FAIL, check="transcription",
         reason="bad JSON in response: (empty)", status=200, kind="asr", behaviour=BAD),
    Case(id="asr-deep-wrong-model", tier=DEEP, outcome=FAIL, check="transcription",
         reason="HTTP 404: The model `other` does not exist.", status=404, kind="asr",
         ep=OTHER),
    Case(id="tts-live-ok", tier=LIVE, outcome=OK, check="health", reason="", status=200,
         kind="tts"),
    Case(id="tts-deep-ok", tier=DEEP, outcome=OK, check="speech", reason="", status=200,
         kind="tts"),
    Case(id="tts-deep-500", tier=DEEP, outcome=FAIL, check="speech",
         reason=f"HTTP 500: {ENGINE}", status=500, kind="tts", behaviour={"fail_status": 500}),
    Case(id="tts-deep-empty-body", tier=DEEP, outcome=FAIL, check="speech",
         reason="unexpected response: not a WAV (0 bytes)", status=200, kind="tts",
         behaviour=BAD),
    Case(id="tts-deep-hang", tier=DEEP, outcome=FAIL, check="speech",
         reason="timed out after 300ms", kind="tts", behaviour=HANG, ep=SHORT),
]  # fmt: skip


def assert_reason(actual: str, expected: str) -> None:
    if expected.startswith("re:"):
        assert re.fullmatch(expected[3:], actual), actual
    else:
        assert actual == expected


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_probe_against_the_sim(
    case: Case, sim_factory: SimFactory, client: HttpClient
) -> None:
    behaviour = SimBehaviour(**{"tok_s": FAST_TOK_S, **case.behaviour})
    server = await sim_factory(behaviour, model=case.served, flavour=case.flavour)
    ep = endpoint(server.url + case.path, kind=case.kind, **case.ep)
    result = await probe(ep, case.tier, client)
    assert (result.outcome, result.check) == (case.outcome, case.check), result.reason
    assert_reason(result.reason, case.reason)
    if case.status is not None:
        assert result.http_status == case.status
    assert (result.endpoint, result.tier) == ("ep", case.tier)
    assert result.at.tzinfo is not None
    assert 0 <= result.latency_s < 2.0
    assert len(result.detail) <= 120


async def test_a_good_completion_is_timed_and_counted(sim: VllmSim, client: HttpClient) -> None:
    result = await probe(endpoint(sim.url), DEEP, client)
    assert result.outcome is OK
    assert result.http_status == 200
    assert result.tokens == len(plan_reply("reasoning", 256).pieces)  # from the usage chunk
    assert result.ttft_s is not None
    assert 0 < result.ttft_s < 2.0
    assert result.tok_s is not None
    assert result.tok_s > 50
    assert result.latency_s >= result.ttft_s
    assert result.detail.startswith("The user asks for a small sum.")
    assert len(result.detail) == 120
    assert result.detail.endswith("…")


async def test_a_slow_completion_is_degraded_with_its_rate(
    sim_factory: SimFactory, client: HttpClient
) -> None:
    server = await sim_factory(SimBehaviour(tok_s=40.0))
    result = await probe(endpoint(server.url, baseline=100.0, max_tokens=10), DEEP, client)
    assert result.outcome is DEGRADED, result.reason
    match = re.fullmatch(r"(\d+\.\d) tok/s < 50% of baseline 100", result.reason)
    assert match is not None, result.reason
    assert result.tok_s is not None
    assert 15 < result.tok_s < 45
    assert match.group(1) == f"{result.tok_s:.1f}"
    assert result.tokens == 10


async def test_a_completion_at_its_baseline_is_ok(
    sim_factory: SimFactory, client: HttpClient
) -> None:
    server = await sim_factory(SimBehaviour(tok_s=40.0))
    result = await probe(endpoint(server.url, baseline=40.0, max_tokens=10), DEEP, client)
    assert (result.outcome, result.reason) == (OK, "")


# -- nothing listening ----------------------------------------------------------------------------


@pytest.fixture
def refusing_url() -> Iterator[str]:
    """A bound port that does not listen: connections are refused (like vLLM while loading)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


REFUSED = [
    ("openai", LIVE, "health"),
    ("openai", DEEP, "completion"),
    ("ollama", LIVE, "tags"),
    ("ollama", DEEP, "completion"),
    ("health", LIVE, "http"),
    ("health", DEEP, "http"),
    ("embedding", LIVE, "models"),
    ("embedding", DEEP, "embedding"),
    ("rerank", LIVE, "models"),
    ("rerank", DEEP, "rerank"),
]


@pytest.mark.parametrize(("kind", "tier", "check"), REFUSED)
async def test_connection_refused(
    kind: EndpointKind, tier: Tier, check: str, refusing_url: str, client: HttpClient
) -> None:
    result = await probe(endpoint(refusing_url, kind=kind), tier, client)
    assert (result.outcome, result.check, result.reason) == (FAIL, check, "connection refused")
    assert result.http_status is None


async def test_cannot_resolve_the_host(client: HttpClient) -> None:
    result = await probe(endpoint("http://no-such-host.invalid:8000"), LIVE, client)
    assert result.outcome is FAIL
    assert result.reason.startswith("cannot connect: "), result.reason


# -- shapes the sim does not make: a server that answers with canned bytes --------------------

Serve = Callable[[Mapping[str, bytes]], Awaitable[str]]


def http_response(status: str, body: bytes = b"", content_type: str = "application/json") -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
    head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    return head.encode() + body


def sse_response(*events: str, complete: bool = True, content_type: str = "") -> bytes:
    """A chunked SSE body; `complete=False` drops the last chunk and the terminator."""
    kind = content_type or "text/event-stream"
    head = f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ntransfer-encoding: chunked\r\n"
    out = (head + "connection: close\r\n\r\n").encode()
    for event in events:
        data = f"data: {event}\n\n".encode()
        out += f"{len(data):x}\r\n".encode() + data + b"\r\n"
    return out + b"0\r\n\r\n" if complete else out[: len(out) - 5]


def chunk(delta: Mapping[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": dict(delta), "finish_reason": finish}
    return json.dumps({"object": "chat.completion.chunk", "choices": [choice]})


@pytest.fixture
async def canned() -> AsyncIterator[Serve]:
    """Serve fixed bytes per path (404 otherwise), one request per connection."""
    servers: list[asyncio.Server] = []

    async def serve(answers: Mapping[str, bytes]) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            length = re.search(r"(?i)content-length: (\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            path = head.split(" ")[1]
            writer.write(answers.get(path, http_response("404 Not Found")))
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield serve
    for server in servers:
        server.close()
        await server.wait_closed()


CHAT = "/v1/chat/completions"


def _wav(seconds: float, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(rate * seconds))
    return buffer.getvalue()


WAV_TENTH = _wav(0.1)
R, C = {"reasoning": "Thinking."}, {"content": "42"}
CANNED: list[tuple[str, Tier, Mapping[str, bytes], ProbeOutcome, str]] = [
    ("closed-mid-stream", DEEP, {CHAT: sse_response(chunk(R), chunk(R), complete=False)},
     FAIL, "connection closed before the response finished"),
    ("stream-ends-without-done", DEEP, {CHAT: sse_response(chunk(R))},
     FAIL, "connection closed before the response finished"),
    ("finish-reason-without-done", DEEP, {CHAT: sse_response(chunk(R), chunk(C, "stop"))},
     OK, ""),
    ("sse-labelled-json", DEEP,
     {CHAT: sse_response(chunk(R), chunk(C, "stop"), "[DONE]", content_type="application/json")},
     OK, ""),
    ("empty-completion", DEEP, {CHAT: sse_response(chunk({"role": "assistant"}, "stop"), "[DONE]")},
     FAIL, "empty completion"),
    ("reasoning-but-no-content", DEEP, {CHAT: sse_response(chunk(R, "stop"), "[DONE]")},
     FAIL, "reasoning but no content (finish_reason: stop)"),
    ("whole-answer-without-choices", DEEP, {CHAT: http_response("200 OK", b'{"id": "x"}')},
     FAIL, "unexpected response: no choices[0].message"),
    ("http-503-empty-body", DEEP, {CHAT: http_response("503 Service Unavailable")},
     FAIL, "HTTP 503"),
    ("http-500-text-body", DEEP,
     {CHAT: http_response("500 Internal Server Error", b"Internal\nServer Error\n", "text/plain")},
     FAIL, "HTTP 500: Internal Server Error"),
    ("http-502-long-text", DEEP, {CHAT: http_response("502 Bad Gateway", b"x" * 300, "text/html")},
     FAIL, "HTTP 502: " + "x" * 200),
    ("http-422-detail", DEEP,
     {CHAT: http_response("422 Unprocessable Entity", b'{"detail": "max_tokens too big"}')},
     FAIL, "HTTP 422: max_tokens too big"),
    ("http-400-message", DEEP, {CHAT: http_response("400 Bad Request", b'{"message": "no"}')},
     FAIL, "HTTP 400: no"),
    ("http-404-error-string", DEEP,
     {CHAT: http_response("404 Not Found", b'{"error": "model \'m\' not found"}')},
     FAIL, "HTTP 404: model 'm' not found"),
    ("llama-cpp-loading", LIVE,
     {"/health": http_response("503 Service Unavailable",
                               b'{"error":{"code":503,"message":"Loading model"}}')},
     FAIL, "HTTP 503 from /health: Loading model"),
    ("redirect-not-followed", LIVE,
     {"/health": b"HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n"},
     FAIL, "HTTP 302 from /health"),
    ("models-not-json", LIVE,
     {"/health": http_response("200 OK"), "/v1/models": http_response("200 OK", b"<html>")},
     FAIL, "bad JSON in response: <html>"),
    ("models-wrong-shape", LIVE,
     {"/health": http_response("200 OK"), "/v1/models": http_response("200 OK", b"[]")},
     FAIL, "unexpected response from /v1/models: no 'data' list"),
    # a speech server whose /health passes and whose real call does not
    ("tts-html-error-page", DEEP,
     {"/v1/audio/speech": http_response("200 OK", b"<html>oops</html>", "text/html")},
     FAIL, "unexpected response: asked for audio/wav, got text/html: <html>oops</html>"),
    ("tts-too-short", DEEP,
     {"/v1/audio/speech": http_response("200 OK", WAV_TENTH, "audio/wav")},
     FAIL, "unexpected response: 0.10s of audio for a 6-word phrase (expected 0.5-60s)"),
    ("tts-not-a-wav", DEEP,
     {"/v1/audio/speech": http_response("200 OK", b"ID3" + b"\0" * 500, "audio/wav")},
     FAIL, "unexpected response: not a WAV (503 bytes)"),
    ("asr-no-text", DEEP,
     {"/v1/audio/transcriptions": http_response("200 OK", b'{"segments": []}')},
     FAIL, 'unexpected response: no `text` in {"segments": []}'),
    ("models-serving-nothing", LIVE,
     {"/health": http_response("200 OK"), "/v1/models": http_response("200 OK", b'{"data": []}')},
     FAIL, "model 'sim-model' not served (serving: nothing)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tier", "answers", "outcome", "reason"), [c[1:] for c in CANNED], ids=[c[0] for c in CANNED]
)
async def test_probe_against_canned_answers(
    tier: Tier,
    answers: Mapping[str, bytes],
    outcome: ProbeOutcome,
    reason: str,
    canned: Serve,
    client: HttpClient,
) -> None:
    url = await canned(answers)
    path = next(iter(answers))
    kind: EndpointKind = "tts" if "speech" in path else "asr" if "transcr" in path else "openai"
    result = await probe(endpoint(url, kind=kind), tier, client)
    assert (result.outcome, result.reason) == (outcome, reason)


async def test_usage_tokens_win_over_counted_pieces(canned: Serve, client: HttpClient) -> None:
    usage = '{"choices": [], "usage": {"completion_tokens": 7}}'
    url = await canned({CHAT: sse_response(chunk(R), chunk(C, "stop"), usage, "[DONE]")})
    result = await probe(endpoint(url), DEEP, client)
    assert (result.outcome, result.tokens, result.detail) == (OK, 7, "Thinking. | 42")


async def test_without_usage_the_pieces_are_counted(canned: Serve, client: HttpClient) -> None:
    url = await canned({CHAT: sse_response(chunk(R), chunk(R), chunk(C, "stop"), "[DONE]")})
    result = await probe(endpoint(url), DEEP, client)
    assert (result.outcome, result.tokens) == (OK, 3)


# -- the probe's own guarantees -------------------------------------------------------------------


KEEP_ALIVE_SSE = sse_response(chunk(R), chunk(C, "stop"), "[DONE]").replace(
    b"connection: close\r\n", b""
)


@pytest.fixture
async def keep_alive() -> AsyncIterator[tuple[str, list[int]]]:
    """A server that answers every request on a connection with `KEEP_ALIVE_SSE` (keep-alive),
    and counts the connections it accepted; below `/hold`, the body never ends after `[DONE]`."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while head := (await reader.readuntil(b"\r\n\r\n")).decode():
                length = re.search(r"(?i)content-length: (\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
                hold = head.split(" ")[1].startswith("/hold/")
                writer.write(KEEP_ALIVE_SSE[:-5] if hold else KEEP_ALIVE_SSE)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", accepted
    server.close()


async def test_a_streamed_completion_leaves_its_connection_to_the_next_probe(
    keep_alive: tuple[str, list[int]], client: HttpClient
) -> None:
    url, accepted = keep_alive
    for _ in range(3):
        result = await probe(endpoint(url), DEEP, client)
        assert (result.outcome, result.reason) == (OK, "")
    assert len(accepted) == 1


async def test_a_stream_held_open_after_done_passes_and_its_connection_is_closed(
    keep_alive: tuple[str, list[int]], client: HttpClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(completion, "DRAIN_S", 0.05)
    url, accepted = keep_alive
    for _ in range(2):
        result = await probe(endpoint(url + "/hold", timeout="2s"), DEEP, client)
        assert (result.outcome, result.reason) == (OK, "")
        assert result.latency_s < 1.0
    assert len(accepted) == 2


async def test_cancelling_a_probe_cancels_it(sim_factory: SimFactory, client: HttpClient) -> None:
    server = await sim_factory(SimBehaviour(hang=True))
    task = asyncio.create_task(probe(endpoint(server.url), DEEP, client))
    await eventually(lambda: server.requests[CHAT] == 1, what="the chat request to arrive")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_client_ignores_proxies_from_the_environment(
    sim: VllmSim, refusing_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, refusing_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with HttpClient() as http:
        result = await probe(endpoint(sim.url), LIVE, http)
    assert (result.outcome, result.reason) == (OK, "")


def test_every_endpoint_kind_has_both_checks() -> None:
    assert set(CHECKS) == set(get_args(EndpointKind))


# -- the verdict and its words, as pure functions -------------------------------------------------


@pytest.mark.parametrize(
    ("tok_s", "ratio", "baseline", "expected"),
    [
        (12.06, 0.5, 37.0, "12.1 tok/s < 50% of baseline 37"),
        (3.0, 0.75, 37.5, "3.0 tok/s < 75% of baseline 37.5"),
        (0.04, 0.333, 100.0, "0.0 tok/s < 33% of baseline 100"),
        (20.0, 1.0, 44.0, "20.0 tok/s < 100% of baseline 44"),
    ],
)
def test_slow_reason(tok_s: float, ratio: float, baseline: float, expected: str) -> None:
    assert slow_reason(tok_s, ratio, baseline) == expected


def stats(
    reasoning: str = "thinking", content: str = "42", finish: str | None = "stop", tok_s: float = 40
) -> CompletionStats:
    return CompletionStats(
        reasoning=reasoning, content=content, finish_reason=finish, tokens=9, ttft_s=0.1,
        tok_s=tok_s,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("given", "expect_reasoning", "baseline", "verdict"),
    [
        (stats(), True, 37.0, (OK, "")),
        (stats(reasoning="", content=""), True, None, (FAIL, "empty completion")),
        (stats(reasoning=" \n", content=" "), False, None, (FAIL, "empty completion")),
        (stats(content=""), True, None, (FAIL, "reasoning but no content (finish_reason: stop)")),
        (stats(content="", finish=None), True, None,
         (FAIL, "reasoning but no content (finish_reason: None)")),
        (stats(content="", finish="length"), True, None, (OK, "")),
        (stats(reasoning="", content="", finish="length"), True, None, (FAIL, "empty completion")),
        (stats(reasoning=""), True, None, (DEGRADED, "no reasoning text")),
        (stats(reasoning=""), False, None, (OK, "")),
        (stats(reasoning="", tok_s=1.0), True, 37.0, (DEGRADED, "no reasoning text")),
        (stats(tok_s=18.4), True, 37.0, (DEGRADED, "18.4 tok/s < 50% of baseline 37")),
        (stats(tok_s=18.5), True, 37.0, (OK, "")),
    ],
)  # fmt: skip
def test_judge(
    given: CompletionStats,
    expect_reasoning: bool,
    baseline: float | None,
    verdict: tuple[ProbeOutcome, str],
) -> None:
    ep = endpoint("http://127.0.0.1:9", expect_reasoning=expect_reasoning, baseline=baseline)
    assert judge_completion(given, ep) == verdict


@pytest.mark.parametrize(
    ("status", "body", "where", "expected"),
    [
        (503, "", "/health", "HTTP 503 from /health"),
        (503, "", None, "HTTP 503"),
        (500, '{"error": {"message": "boom", "code": 500}}', None, "HTTP 500: boom"),
        (404, '{"error": "model not found"}', None, "HTTP 404: model not found"),
        (422, '{"detail": [{"loc": ["body"]}]}', None, 'HTTP 422: {"detail": [{"loc": ["body"]}]}'),
        (500, "  spread\n over\tlines ", "/x", "HTTP 500 from /x: spread over lines"),
        # cut at 200 characters right after a space: no trailing blank (found by the fuzzer)
        (404, "x" * 199 + " tail", "/health", "HTTP 404 from /health: " + "x" * 199),
    ],
)
def test_http_error_reason(status: int, body: str, where: str | None, expected: str) -> None:
    assert http_error_reason(status, body, where=where) == expected


@pytest.mark.parametrize(
    ("name", "same_as"),
    [
        ("qwen3", "qwen3:latest"),
        ("qwen3:latest", "qwen3:latest"),
        ("qwen3:8b", "qwen3:8b"),
        ("registry.local:5000/team/qwen3", "registry.local:5000/team/qwen3:latest"),
    ],
)
def test_ollama_name(name: str, same_as: str) -> None:
    assert ollama_name(name) == same_as


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 9)"),
         "connection refused"),
        (OSError(errno.ECONNRESET, "Connect call failed ('127.0.0.1', 9)"),
         "cannot connect: Connection reset by peer"),
        (OSError("All connection attempts failed"),
         "cannot connect: All connection attempts failed"),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
         "cannot connect: Name or service not known"),
        (ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] verify failed"),
         "cannot connect: certificate verify failed: self-signed certificate"),
    ],
    ids=["refused", "reset-while-the-server-stops", "no-errno", "no-such-name", "certificate"],
)  # fmt: skip
def test_a_connect_failure_is_named_by_its_errno(error: OSError, expected: str) -> None:
    if isinstance(error, ssl.SSLCertVerificationError):
        error.verify_message = "self-signed certificate"
    with pytest.raises(aiohttp.ClientOSError) as caught:
        raise aiohttp.ClientOSError(error.errno, str(error)) from error  # as aiohttp wraps it
    assert connect_reason(caught.value) == expected


@pytest.mark.parametrize(
    ("record", "key", "expected"),
    [
        ({"error": {"message": "EngineCore died"}}, "delta", "stream error: EngineCore died"),
        ({"usage": {}, "error": ""}, "message", "error in response (no message)"),
        ({"error": "  "}, "delta", "stream error (no message)"),
    ],
    ids=["message", "empty-found-by-the-fuzzer", "blank"],
)
def test_an_error_record_is_one_clean_line(
    record: dict[str, object], key: str, expected: str
) -> None:
    with pytest.raises(ProbeError) as caught:
        Transcript().take_record(record, 1.0, key=key)
    assert str(caught.value) == expected


# -- a speech round trip: the TTS speaks, the ASR must hear the words --------------------------


async def test_a_round_trip_proves_tts_and_asr_at_once(
    sim_factory: SimFactory, client: HttpClient, canned: Serve
) -> None:
    tts = await sim_factory(model="kokoro")
    asr = await sim_factory(model="whisper")
    ep = Endpoint(
        name="voice",
        kind="tts",
        url=tts.url,
        model="kokoro",
        heard_by={"url": asr.url, "model": "whisper"},  # type: ignore[arg-type]
    )
    good = await probe(ep, DEEP, client)
    assert (good.outcome, good.check, good.reason) == (OK, "round trip", "")
    assert good.detail.endswith("; heard back: 'The fleet supervisor checks this voice.'")

    asr.behaviour.bad_json = True  # the ASR answers /health, and nothing to the real call
    empty = await probe(ep, DEEP, client)
    assert (empty.outcome, empty.check, empty.reason) == (
        FAIL,
        "round trip",
        "bad JSON in response: (empty)",
    )
    deaf = await canned(
        {"/v1/audio/transcriptions": http_response("200 OK", b'{"text": "the flute super"}')}
    )
    wrong = await probe(
        ep.model_copy(update={"heard_by": ep.heard_by.model_copy(update={"url": deaf})}),  # type: ignore[union-attr]
        DEEP,
        client,
    )
    assert (wrong.outcome, wrong.reason) == (
        FAIL,
        f"round trip: {deaf} heard 'the flute super' for 'The fleet supervisor checks this "
        "voice.' (missing: fleet, supervisor, checks, this, voice)",
    )
