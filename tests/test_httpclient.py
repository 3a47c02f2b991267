"""The daemon's HTTP client (`supervisor.core.httpclient`, on aiohttp) against real servers on
127.0.0.1: kept connections reused, expired and dropped; a POST never sent twice; bodies by
length, chunked and up to the close; answers cut short, cut into slivers or never finished; what
goes out (an endpoint's headers to its own server only, no cookies, no compression asked for);
the words for each failure; and TLS."""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import email.policy
import io
import json
import re
import shutil
import socket
import ssl
import subprocess
import wave
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.config.sections import ProbeSettings
from supervisor.config.supervised import Endpoint, EndpointKind
from supervisor.core import httpclient
from supervisor.core.clock import SystemClock
from supervisor.core.durations import parse_duration
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient, failure_reason
from supervisor.core.tls import CertifiContext
from supervisor.execute.local import LocalExecutor
from supervisor.judge.progress.read import ProgressReads
from supervisor.playbook.evidence.base import CollectContext, NoEvidenceParams, Scope
from supervisor.playbook.evidence.registry import COLLECTORS
from supervisor.probe import run_probe
from supervisor.probe.audio import PHRASE
from tests.conftest import FAST_TOK_S, SimFactory

OK, FAIL = ProbeOutcome.OK, ProbeOutcome.FAIL
CLOSED = "connection closed before the response finished"
MODELS = b'{"data": [{"id": "sim-model"}]}'
CHAT = "/v1/chat/completions"

#: answers one request (its head, then its body) on a connection; returns False to close it
Answer = Callable[[str, bytes, asyncio.StreamWriter], Awaitable[bool]]


class Server:
    """Answers requests on kept connections with `answer`; counts connections and requests."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.accepted = 0
        self.requests: list[str] = []  #: `METHOD /path`
        self.heads: list[str] = []
        self.bodies: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def start(self, tls: ssl.SSLContext | None = None) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self.writers:
            writer.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                length = re.search(r"(?i)\r\ncontent-length: (\d+)", head)
                body = await reader.readexactly(int(length.group(1)) if length else 0)
                self.requests.append(" ".join(head.split(" ")[:2]))
                self.heads.append(head)
                self.bodies.append(body)
                if not await self.answer(head, body, writer):
                    break
        writer.close()


def reply(
    body: bytes = MODELS,
    *,
    status: str = "200 OK",
    close: bool = False,
    content_type: str = "application/json",
    extra: str = "",
) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{extra}"
    head += f"content-length: {len(body)}\r\n" + ("connection: close\r\n" if close else "")
    return (head + "\r\n").encode() + body


def chunked(*pieces: bytes, content_type: str = "text/event-stream") -> bytes:
    out = f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n"
    out += "transfer-encoding: chunked\r\n\r\n"
    body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    return out.encode() + body + b"0\r\n\r\n"


def sse(*events: object, end: str = "\n") -> list[bytes]:
    return [
        f"data: {json.dumps(e) if not isinstance(e, str) else e}{end}{end}".encode() for e in events
    ]


def delta(reasoning: str = "", content: str = "", finish: str | None = None) -> dict[str, object]:
    part = {"reasoning": reasoning} if reasoning else {"content": content}
    return {"choices": [{"index": 0, "delta": part, "finish_reason": finish}]}


COMPLETION = sse(delta("Thinking about it."), delta(content="4"), delta(content=".", finish="stop"))


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Answer], Awaitable[Server]]]:
    servers: list[Server] = []

    async def start(answer: Answer) -> Server:
        server = Server(answer)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


Serve = Callable[[Answer], Awaitable[Server]]


def written(*answers: bytes, keep: bool = True) -> Answer:
    """Answer the n-th request with `answers[n]` (the last one over and over)."""
    count = 0

    async def answer(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        nonlocal count
        writer.write(answers[min(count, len(answers) - 1)])
        count += 1
        await writer.drain()
        return keep

    return answer


def by_path(answers: dict[str, bytes]) -> Answer:
    """Answer each request with the bytes for its path (kept alive)."""

    async def answer(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answers[head.split(" ")[1]])
        await writer.drain()
        return True

    return answer


def endpoint(
    url: str,
    *,
    timeout: str = "5s",
    kind: EndpointKind = "openai",
    headers: dict[str, str] | None = None,
) -> Endpoint:
    return Endpoint(
        name="ep",
        kind=kind,
        url=url,
        model="sim-model",
        expect_reasoning=kind == "openai",
        headers=headers or {},
        probe=ProbeSettings(timeout=parse_duration(timeout), max_tokens=16),
    )


async def probe(url: str, tier: Tier, client: HttpClient, timeout: str = "5s") -> ProbeResult:
    return await run_probe(endpoint(url, timeout=timeout), tier, client, clock=SystemClock())


# -- keep-alive ---------------------------------------------------------------------------------


async def test_liveness_and_completions_share_one_kept_connection(
    sim: VllmSim, client: HttpClient
) -> None:
    for tier in (Tier.LIVENESS, Tier.DEEP, Tier.LIVENESS, Tier.DEEP):
        result = await probe(sim.url, tier, client)
        assert (result.outcome, result.reason) == (OK, "")
    assert sim.connections == 1


async def test_a_connection_idle_longer_than_the_keep_alive_expiry_is_not_used(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(httpclient, "KEEPALIVE_S", 0.1)
    server = await serve(written(reply()))
    async with HttpClient() as client:
        for pause in (0.0, 0.3, 0.0):
            await asyncio.sleep(pause)
            assert (await client.get(server.url + "/v1/models")).status_code == 200
    assert server.accepted == 2  # the second request came after 0.3 s: a new connection


async def test_a_connection_the_server_closed_while_idle_is_replaced(
    serve: Serve, client: HttpClient
) -> None:
    server = await serve(written(reply(), keep=False))  # answers, then closes: no `close` said
    for _ in range(3):
        assert (await client.get(server.url + "/v1/models")).status_code == 200
        await asyncio.sleep(0.05)  # the close arrives while the connection is idle
    assert server.accepted == 3


async def test_a_completion_after_the_server_closed_its_idle_connection_goes_out_once(
    serve: Serve, client: HttpClient
) -> None:
    """The server's idle close arrived before the POST: it is written to a new connection, once
    (nothing of it was written to the closed one)."""
    server = await serve(written(chunked(*COMPLETION, b"data: [DONE]\n\n"), keep=False))
    for _ in range(2):
        result = await probe(server.url, Tier.DEEP, client)
        assert (result.outcome, result.reason) == (OK, "")
        await asyncio.sleep(0.05)
    assert (server.accepted, server.requests) == (2, [f"POST {CHAT}"] * 2)


def closes_the_second_request_unanswered() -> Answer:
    seen = 0

    async def answer(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        nonlocal seen
        seen += 1
        if seen == 2:  # read, then closed unanswered: as an idle timeout racing it, or a crash
            return False
        writer.write(chunked(*COMPLETION, b"data: [DONE]\n\n") if CHAT in head else reply())
        await writer.drain()
        return True

    return answer


async def test_a_get_whose_kept_connection_closed_unanswered_is_sent_once_more(
    serve: Serve, client: HttpClient
) -> None:
    """Idempotent (RFC 9112, 9.3.1): the GET goes once more, on a new connection."""
    server = await serve(closes_the_second_request_unanswered())
    for _ in range(2):
        assert (await client.get(server.url + "/v1/models")).content == MODELS
    assert (server.accepted, server.requests) == (2, ["GET /v1/models"] * 3)


async def test_a_completion_whose_kept_connection_closed_unanswered_is_never_sent_again(
    serve: Serve, client: HttpClient
) -> None:
    """The server may have received it (and be generating): the probe fails, the POST is not
    repeated."""
    server = await serve(closes_the_second_request_unanswered())
    first = await probe(server.url, Tier.DEEP, client)
    assert (first.outcome, first.reason) == (OK, "")
    second = await probe(server.url, Tier.DEEP, client)
    assert (second.outcome, second.check, second.reason) == (FAIL, "completion", CLOSED)
    assert (server.accepted, server.requests) == (1, [f"POST {CHAT}"] * 2)


async def test_a_new_connection_closed_unanswered_is_a_failure(
    serve: Serve, client: HttpClient
) -> None:
    async def hang_up(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        return False

    server = await serve(hang_up)
    result = await probe(server.url, Tier.LIVENESS, client)
    assert (result.outcome, result.check, result.reason) == (FAIL, "health", CLOSED)
    assert server.requests == ["GET /health"] * 2  # a GET: once more, on a new connection
    deep = await probe(server.url, Tier.DEEP, client)
    assert (deep.outcome, deep.check, deep.reason) == (FAIL, "completion", CLOSED)
    assert server.requests[2:] == [f"POST {CHAT}"]  # a POST: once
    assert server.accepted == 3


async def test_connection_close_is_obeyed(serve: Serve, client: HttpClient) -> None:
    server = await serve(written(reply(close=True)))
    for _ in range(2):
        assert (await client.get(server.url + "/health")).status_code == 200
    assert server.accepted == 2


async def test_a_probe_that_timed_out_leaves_no_half_read_connection(
    serve: Serve, client: HttpClient
) -> None:
    """The first answer stalls after its head: the probe times out, and the next probe gets a
    fresh connection, not the rest of the stalled answer."""
    count = 0

    async def answer(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        nonlocal count
        count += 1
        if count == 1:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{")
        else:
            writer.write(reply(b"") if "/health" in head else reply())
        await writer.drain()
        return True

    server = await serve(answer)
    stalled = await probe(server.url, Tier.LIVENESS, client, timeout="200ms")
    assert (stalled.outcome, stalled.reason) == (FAIL, "timed out after 200ms")
    passed = await probe(server.url, Tier.LIVENESS, client)
    assert (passed.outcome, passed.reason) == (OK, "")
    assert server.accepted == 2


# -- bodies -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(reply(), id="content-length"),
        pytest.param(
            chunked(MODELS[:5], MODELS[5:], content_type="application/json"), id="chunked"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5;ext=1\r\n" + MODELS[:5] + b"\r\n"
            b"%x\r\n" % (len(MODELS) - 5) + MODELS[5:] + b"\r\n0\r\nx-trailer: 1\r\n\r\n",
            id="chunk-extension-and-trailer",
        ),
        pytest.param(b"HTTP/1.0 200 OK\r\n\r\n" + MODELS, id="up-to-the-close"),
        pytest.param(b"HTTP/1.1 100 Continue\r\n\r\n" + reply(), id="after-100-continue"),
    ],
)
async def test_every_body_framing_is_read_whole(
    answer: bytes, serve: Serve, client: HttpClient
) -> None:
    server = await serve(written(answer, keep="HTTP/1.0" not in answer.decode()))
    for _ in range(2):
        response = await client.get(server.url + "/v1/models")
        assert (response.status_code, response.content) == (200, MODELS)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(reply() + b"junk", id="content-length"),
        pytest.param(chunked(MODELS, content_type="application/json") + b"junk", id="chunked"),
        pytest.param(b"HTTP/1.1 204 No Content\r\n\r\n" + MODELS, id="no-body"),
    ],
)
async def test_bytes_after_the_body_fail_the_answer_and_its_connection(
    answer: bytes, serve: Serve, client: HttpClient
) -> None:
    """More than the answer (aiohttp's parser reads them as a next answer that is not HTTP):
    the request fails, and its connection is not used again."""
    server = await serve(written(answer))
    for _ in range(2):
        with pytest.raises(aiohttp.ClientResponseError) as caught:
            await client.get(server.url + "/v1/models")
        assert failure_reason(caught.value) == CLOSED
    assert server.accepted == 2


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        pytest.param(reply()[:-4], CLOSED, id="content-length-cut-short"),
        pytest.param(chunked(MODELS)[:-5], CLOSED, id="chunked-without-its-last-chunk"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-len", CLOSED, id="head-cut-short"),
        pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", CLOSED, id="not-http"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", CLOSED, id="bad-chunk"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\ncontent-length: many\r\n\r\n", CLOSED, id="bad-content-length"
        ),
    ],
)
async def test_a_broken_answer_is_named(
    answer: bytes, reason: str, serve: Serve, client: HttpClient
) -> None:
    server = await serve(written(answer, keep=False))
    result = await probe(server.url, Tier.LIVENESS, client)
    assert (result.outcome, result.check, result.reason) == (FAIL, "health", reason)


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("sliver", [1, 3, 7])
async def test_a_stream_cut_into_slivers_reads_the_same(
    end: str, sliver: int, serve: Serve, client: HttpClient
) -> None:
    """Chunks split a line, a `\\r\\n` and a UTF-8 character: the same completion comes back."""
    pieces = sse(
        delta("Thinking… ü"), delta(content="4 €"), delta(content=".", finish="stop"), end=end
    )
    whole = chunked(*pieces, "[DONE]\n\n".replace("\n", end).encode())

    async def slivers(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        for at in range(0, len(whole), sliver):
            writer.write(whole[at : at + sliver])
            await writer.drain()
            await asyncio.sleep(0)
        return True

    server = await serve(slivers)
    result = await probe(server.url, Tier.DEEP, client)
    assert (result.outcome, result.reason, result.detail) == (OK, "", "Thinking… ü | 4 €.")
    assert result.tokens == 3


async def test_each_line_of_a_stream_is_read_as_it_arrives(
    serve: Serve, client: HttpClient
) -> None:
    """The first piece is stamped when it comes, not when the body ends: time to first token
    and tokens per second are the server's."""
    pieces = sse(delta("Thinking."), delta(content="4"), delta(content=".", finish="stop"))

    async def slowly(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(chunked(*pieces, b"data: [DONE]\n\n")[: -len(pieces[-1]) - 40])
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.write(chunked(*pieces, b"data: [DONE]\n\n")[-len(pieces[-1]) - 40 :])
        await writer.drain()
        return True

    server = await serve(slowly)
    result = await probe(server.url, Tier.DEEP, client)
    assert (result.outcome, result.reason) == (OK, "")
    assert result.ttft_s is not None
    assert result.ttft_s < 0.25 < result.latency_s


async def test_a_stream_closed_mid_way_is_named(serve: Serve, client: HttpClient) -> None:
    async def dies(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(chunked(*COMPLETION)[:-40])
        await writer.drain()
        return False

    server = await serve(dies)
    result = await probe(server.url, Tier.DEEP, client)
    assert (result.outcome, result.check, result.reason) == (FAIL, "completion", CLOSED)


async def test_a_completion_whose_server_hangs_mid_stream_times_out(
    sim_factory: SimFactory, client: HttpClient
) -> None:
    server = await sim_factory(SimBehaviour(tok_s=5.0))
    result = await probe(server.url, Tier.DEEP, client, timeout="300ms")
    assert (result.outcome, result.check, result.reason) == (
        FAIL,
        "completion",
        "timed out after 300ms",
    )
    again = await sim_factory(SimBehaviour(tok_s=FAST_TOK_S))
    assert (await probe(again.url, Tier.DEEP, client)).outcome is OK


# -- what goes out --------------------------------------------------------------------------------


def fields(head: str) -> dict[str, str]:
    return dict(line.lower().split(": ", 1) for line in head.split("\r\n")[1:] if line)


async def test_the_request_says_who_asks_and_what_it_sends(
    serve: Serve, client: HttpClient
) -> None:
    server = await serve(written(reply()))
    await client.post(server.url + "/v1/embeddings?x=1 2", json={"input": "é"})
    assert server.heads[0].split("\r\n")[0] == "POST /v1/embeddings?x=1+2 HTTP/1.1"
    sent = fields(server.heads[0])
    assert sent["host"] == server.url.removeprefix("http://")
    assert sent["user-agent"].startswith("fleet-supervisor/")
    assert sent["content-type"] == "application/json"
    assert server.bodies[0] == '{"input":"é"}'.encode()
    assert "accept-encoding" not in sent


async def test_an_endpoints_headers_go_with_each_of_its_probes(
    serve: Serve, client: HttpClient
) -> None:
    server = await serve(
        by_path(
            {
                "/health": reply(b""),
                "/v1/models": reply(),
                CHAT: chunked(*COMPLETION, b"data: [DONE]\n\n"),
            }
        )
    )
    ep = endpoint(server.url, headers={"X-Api-Key": "k1", "User-Agent": "gateway-probe"})
    for tier in (Tier.LIVENESS, Tier.DEEP):
        result = await run_probe(ep, tier, client, clock=SystemClock())
        assert (result.outcome, result.reason) == (OK, "")
    assert server.requests == ["GET /health", "GET /v1/models", f"POST {CHAT}"]
    for head in server.heads:
        sent = fields(head)
        assert (sent["x-api-key"], sent["user-agent"]) == ("k1", "gateway-probe")
    other = await probe(server.url, Tier.LIVENESS, client)  # another endpoint, the same client
    assert (other.outcome, other.reason) == (OK, "")
    assert [fields(head).get("x-api-key") for head in server.heads[3:]] == [None, None]


async def test_an_endpoints_headers_go_with_its_metrics_reads(
    serve: Serve, client: HttpClient
) -> None:
    """The busy/hung reads before a failed check counts, and the `metrics` evidence."""
    server = await serve(
        written(reply(b"vllm:num_requests_running 0\n", content_type="text/plain"))
    )
    ep = endpoint(server.url, headers={"X-Api-Key": "k1"}).model_copy(
        update={"probe": ProbeSettings(progress_window=parse_duration("10ms"))}
    )
    progress = await ProgressReads(client, SystemClock())(ep)
    assert progress.reason == "unknown: /metrics has no vllm:generation_tokens_total"
    scope = Scope(endpoint=ep, host=None, unit=None)
    context = CollectContext(
        scope=scope, executor=LocalExecutor(), timeout=parse_duration("5s"), http=client
    )
    evidence = await COLLECTORS["metrics"].run(context, NoEvidenceParams())
    assert evidence.facts["available"] is True
    assert server.requests == ["GET /metrics"] * 2
    assert [fields(head)["x-api-key"] for head in server.heads] == ["k1", "k1"]


def wav(seconds: float, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(rate * seconds))
    return buffer.getvalue()


async def test_a_tts_endpoints_headers_do_not_go_to_the_server_that_hears_it(
    serve: Serve, client: HttpClient
) -> None:
    speaker = await serve(written(reply(wav(2.0), content_type="audio/wav")))
    listener = await serve(written(reply(json.dumps({"text": PHRASE}).encode())))
    ep = Endpoint(
        name="voice",
        kind="tts",
        url=speaker.url,
        model="kokoro",
        headers={"X-Api-Key": "k1"},
        heard_by={"url": listener.url, "model": "whisper"},  # type: ignore[arg-type]
    )
    result = await run_probe(ep, Tier.DEEP, client, clock=SystemClock())
    assert (result.outcome, result.check, result.reason) == (OK, "round trip", "")
    assert fields(speaker.heads[0])["x-api-key"] == "k1"
    assert "x-api-key" not in fields(listener.heads[0])


async def test_a_form_with_a_file_is_what_a_form_parser_reads(
    serve: Serve, client: HttpClient
) -> None:
    server = await serve(written(reply()))
    await client.post(
        server.url + "/v1/audio/transcriptions",
        form={"model": "whisper"},
        files={"file": ("probe.wav", b"RIFF\0\r\n", "audio/wav")},
    )
    kind = fields(server.heads[0])["content-type"]
    assert kind.startswith("multipart/form-data; boundary=")
    parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {kind}\r\n\r\n".encode() + server.bodies[0]
    )
    parts = list(parsed.iter_parts())
    names = [(p.get_param("name", header="content-disposition"), p.get_filename()) for p in parts]
    assert names == [("model", None), ("file", "probe.wav")]
    assert parts[0].get_content() == "whisper"
    assert (parts[1].get_content_type(), parts[1].get_content()) == ("audio/wav", b"RIFF\0\r\n")


async def test_cookies_are_neither_kept_nor_sent(serve: Serve, client: HttpClient) -> None:
    server = await serve(written(reply(extra="set-cookie: session=abc; Path=/\r\n")))
    for _ in range(2):
        await client.get(server.url + "/health")
    assert "cookie" not in fields(server.heads[1])


async def test_a_redirect_is_the_answer(serve: Serve, client: HttpClient) -> None:
    server = await serve(written(reply(b"", status="302 Found", extra="location: /else\r\n")))
    assert (await client.get(server.url + "/health")).status_code == 302
    assert server.requests == ["GET /health"]


# -- the words for a failure ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://127.0.0.1/x", "bad URL: ftp://127.0.0.1/x (not http:// or https://)"),
        ("127.0.0.1:8000/x", "bad URL: 127.0.0.1:8000/x (not http:// or https://)"),
        ("http://127.0.0.1:port/x",
         "bad URL: http://127.0.0.1:port/x (Invalid URL: port can't be converted to integer)"),
    ],
)  # fmt: skip
async def test_a_url_it_cannot_ask_says_why(url: str, reason: str, client: HttpClient) -> None:
    with pytest.raises(aiohttp.ClientError) as caught:
        await client.get(url)
    assert failure_reason(caught.value) == reason


async def test_a_connect_failure_is_named_by_the_systems_words(client: HttpClient) -> None:
    with socket.socket() as bound:  # bound, never listening: refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        with pytest.raises(aiohttp.ClientConnectorError) as refused:
            await client.get(url + "/health")
        result = await probe(url, Tier.LIVENESS, client)
    assert failure_reason(refused.value) == "connection refused"
    assert (result.outcome, result.reason) == (FAIL, "connection refused")
    with pytest.raises(aiohttp.ClientConnectorError) as unknown:
        await client.get("http://no-such-host.invalid/health")
    assert failure_reason(unknown.value) in (
        "cannot connect: Name or service not known",  # glibc, the name not found
        "cannot connect: Temporary failure in name resolution",  # no resolver reachable
    )


# -- TLS ------------------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: Path) -> Path:
    """A self-signed certificate for 127.0.0.1 (its key beside it, `key.pem`)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert


@pytest.fixture
async def https(certificate: Path) -> AsyncIterator[Server]:
    """A server on https://127.0.0.1 with `certificate`: `reply(b"")`, then `reply()`."""
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(certificate, certificate.with_name("key.pem"))
    server = Server(written(reply(b""), reply()))
    await server.start(served)
    yield server
    await server.stop()


async def test_https_with_the_context_given_and_kept_alive(
    https: Server, certificate: Path
) -> None:
    async with HttpClient(ssl.create_default_context(cafile=str(certificate))) as trusting:
        for _ in range(2):
            result = await probe(https.url, Tier.LIVENESS, trusting)
            assert (result.outcome, result.reason) == (OK, "")
    assert https.accepted == 1
    async with HttpClient() as default:  # certifi's bundle does not know this certificate
        refused = await probe(https.url, Tier.LIVENESS, default)
    assert (refused.outcome, refused.reason) == (
        FAIL,
        "cannot connect: certificate verify failed: self-signed certificate",
    )


async def test_the_shared_context_reads_its_ca_bundle_on_its_first_tls_connection(
    https: Server, sim: VllmSim
) -> None:
    tls = CertifiContext()
    async with HttpClient(tls) as http:
        assert (await probe(sim.url, Tier.LIVENESS, http)).outcome is OK
        assert tls.cert_store_stats()["x509_ca"] == 0  # plain HTTP: no certificates read
        refused = await probe(https.url, Tier.LIVENESS, http)
    assert refused.reason.startswith("cannot connect: certificate verify failed"), refused.reason
    assert tls.cert_store_stats()["x509_ca"] > 100  # certifi's bundle
    assert (tls.verify_mode, tls.check_hostname) == (ssl.CERT_REQUIRED, True)


async def test_a_client_verifies_with_the_context_it_was_given(
    https: Server, certificate: Path
) -> None:
    tls = CertifiContext()
    tls.load_verify_locations(cafile=str(certificate))  # the test's own authority, and certifi's
    async with HttpClient(tls) as http:
        assert (await http.get(https.url + "/health")).status_code == 200
    assert tls.cert_store_stats()["x509_ca"] > 100
