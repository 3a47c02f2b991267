"""The probes' HTTP client (`supervisor.probe.wire`) against real servers on 127.0.0.1: kept
connections reused and dropped, bodies by length, chunked and up to the close, answers cut short,
cut into slivers or never finished, and TLS."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.config.sections import ProbeSettings
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import SystemClock
from supervisor.core.durations import parse_duration
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.probe import make_client, make_http_client, make_tls, run_probe
from supervisor.probe.wire import ProbeHttp, multipart
from tests.conftest import FAST_TOK_S, SimFactory

OK, FAIL = ProbeOutcome.OK, ProbeOutcome.FAIL
CLOSED = "connection closed before the response finished"
MODELS = b'{"data": [{"id": "sim-model"}]}'

#: answers one request (its head, then its body) on a connection; returns False to close it
Answer = Callable[[str, bytes, asyncio.StreamWriter], Awaitable[bool]]


class Server:
    """Answers requests on kept connections with `answer`; counts connections and requests."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.accepted = 0
        self.requests: list[str] = []
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
                self.requests.append(head.split(" ")[1])
                self.bodies.append(body)
                if not await self.answer(head, body, writer):
                    break
        writer.close()


def reply(body: bytes = MODELS, *, status: str = "200 OK", close: bool = False) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
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


def endpoint(url: str, *, timeout: str = "5s") -> Endpoint:
    return Endpoint(
        name="ep",
        kind="openai",
        url=url,
        model="sim-model",
        expect_reasoning=True,
        probe=ProbeSettings(timeout=parse_duration(timeout), max_tokens=16),
    )


async def probe(url: str, tier: Tier, client: ProbeHttp, timeout: str = "5s") -> ProbeResult:
    return await run_probe(endpoint(url, timeout=timeout), tier, client, clock=SystemClock())


# -- keep-alive ---------------------------------------------------------------------------------


async def test_liveness_and_completions_share_one_kept_connection(
    sim: VllmSim, client: ProbeHttp
) -> None:
    for tier in (Tier.LIVENESS, Tier.DEEP, Tier.LIVENESS, Tier.DEEP):
        result = await probe(sim.url, tier, client)
        assert (result.outcome, result.reason) == (OK, "")
    assert sim.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_replaced(
    serve: Serve, client: ProbeHttp
) -> None:
    server = await serve(written(reply(), keep=False))  # answers, then closes: no `close` said
    for _ in range(3):
        assert (await client.get(server.url + "/v1/models")).status_code == 200
        await asyncio.sleep(0.05)  # the close arrives while the connection is idle
    assert server.accepted == 3


async def test_a_kept_connection_closed_as_the_request_arrives_is_tried_once_more(
    serve: Serve, client: ProbeHttp
) -> None:
    seen = 0

    async def answer(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        nonlocal seen
        seen += 1
        if seen == 2:  # the second request: closed unanswered, as an idle timeout racing it
            return False
        writer.write(reply())
        await writer.drain()
        return True

    server = await serve(answer)
    for _ in range(2):
        assert (await client.get(server.url + "/v1/models")).content == MODELS
    assert (server.accepted, server.requests) == (2, ["/v1/models"] * 3)


async def test_a_new_connection_closed_unanswered_is_a_failure(
    serve: Serve, client: ProbeHttp
) -> None:
    async def hang_up(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        return False

    server = await serve(hang_up)
    result = await probe(server.url, Tier.LIVENESS, client)
    assert (result.outcome, result.check, result.reason) == (FAIL, "health", CLOSED)
    assert server.accepted == 1


async def test_connection_close_is_obeyed(serve: Serve, client: ProbeHttp) -> None:
    server = await serve(written(reply(close=True)))
    for _ in range(2):
        assert (await client.get(server.url + "/health")).status_code == 200
    assert server.accepted == 2


async def test_a_probe_that_timed_out_leaves_no_half_read_connection(
    serve: Serve, client: ProbeHttp
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
    answer: bytes, serve: Serve, client: ProbeHttp
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
async def test_bytes_after_the_body_are_dropped_with_their_connection(
    answer: bytes, serve: Serve, client: ProbeHttp
) -> None:
    server = await serve(written(answer))
    for _ in range(2):
        response = await client.get(server.url + "/v1/models")
        assert response.content == (b"" if b" 204 " in answer else MODELS)
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
    answer: bytes, reason: str, serve: Serve, client: ProbeHttp
) -> None:
    server = await serve(written(answer, keep=False))
    result = await probe(server.url, Tier.LIVENESS, client)
    assert (result.outcome, result.check, result.reason) == (FAIL, "health", reason)


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("sliver", [1, 3, 7])
async def test_a_stream_cut_into_slivers_reads_the_same(
    end: str, sliver: int, serve: Serve, client: ProbeHttp
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


async def test_a_stream_closed_mid_way_is_named(serve: Serve, client: ProbeHttp) -> None:
    async def dies(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(chunked(*COMPLETION)[:-40])
        await writer.drain()
        return False

    server = await serve(dies)
    result = await probe(server.url, Tier.DEEP, client)
    assert (result.outcome, result.check, result.reason) == (FAIL, "completion", CLOSED)


async def test_a_completion_whose_server_hangs_mid_stream_times_out(
    sim_factory: SimFactory, client: ProbeHttp
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


async def test_the_request_says_who_asks_and_what_it_sends(serve: Serve, client: ProbeHttp) -> None:
    heads: list[str] = []

    async def answer(head: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        heads.append(head)
        writer.write(reply())
        await writer.drain()
        return True

    server = await serve(answer)
    await client.post(server.url + "/v1/embeddings?x=1 2", json={"input": "é"})
    lines = heads[0].split("\r\n")
    assert lines[0] == "POST /v1/embeddings?x=1%202 HTTP/1.1"
    fields = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
    assert fields["host"] == server.url.removeprefix("http://")
    assert fields["user-agent"].startswith("fleet-supervisor/")
    assert fields["content-type"] == "application/json"
    assert json.loads(server.bodies[0]) == {"input": "é"}
    assert "accept-encoding" not in fields


def test_a_multipart_body_is_what_a_form_parser_reads() -> None:
    body, kind = multipart(
        {"model": "whisper"}, {"file": ("probe.wav", b"RIFF\0\r\n", "audio/wav")}
    )
    boundary = kind.removeprefix("multipart/form-data; boundary=")
    parts = body.split(f"--{boundary}".encode())
    assert parts[0] == b""
    assert parts[-1] == b"--\r\n"
    assert parts[1] == b'\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n'
    assert parts[2] == (
        b'\r\nContent-Disposition: form-data; name="file"; filename="probe.wav"\r\n'
        b"Content-Type: audio/wav\r\n\r\nRIFF\0\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        ("ftp://127.0.0.1/x", httpx.UnsupportedProtocol,
         "Request URL has an unsupported protocol 'ftp://'."),
        ("127.0.0.1:8000/x", httpx.UnsupportedProtocol,
         "Request URL is missing an 'http://' or 'https://' protocol."),
        ("http://127.0.0.1:port/x", httpx.InvalidURL,
         "Port could not be cast to integer value as 'port'"),
    ],
)  # fmt: skip
async def test_a_url_it_cannot_ask_says_why(
    url: str, error: type[Exception], message: str, client: ProbeHttp
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        await client.get(url)


async def test_a_connect_failure_is_worded_as_httpx_words_it(client: ProbeHttp) -> None:
    """What the doctor shows of it; a probe says `connection refused` (by the errno)."""
    with socket.socket() as bound:  # bound, never listening: refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        with pytest.raises(httpx.ConnectError, match=r"^All connection attempts failed$"):
            await client.get(url + "/health")
        result = await probe(url, Tier.LIVENESS, client)
    assert (result.outcome, result.reason) == (FAIL, "connection refused")
    with pytest.raises(httpx.ConnectError, match=r"^\[Errno -?\d+\] "):
        await client.get("http://no-such-host.invalid/health")


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
    async with make_client(ssl.create_default_context(cafile=str(certificate))) as trusting:
        for _ in range(2):
            result = await probe(https.url, Tier.LIVENESS, trusting)
            assert (result.outcome, result.reason) == (OK, "")
    assert https.accepted == 1
    async with make_client() as default:  # certifi's bundle does not know this certificate
        refused = await probe(https.url, Tier.LIVENESS, default)
    assert refused.outcome is FAIL
    assert refused.reason.startswith("cannot connect: "), refused.reason


async def test_the_shared_context_reads_its_ca_bundle_on_its_first_tls_connection(
    https: Server, sim: VllmSim
) -> None:
    tls = make_tls()
    async with make_client(tls) as http:
        assert (await probe(sim.url, Tier.LIVENESS, http)).outcome is OK
        assert tls.cert_store_stats()["x509_ca"] == 0  # plain HTTP: no certificates read
        refused = await probe(https.url, Tier.LIVENESS, http)
    assert refused.reason.startswith("cannot connect: "), refused.reason
    assert tls.cert_store_stats()["x509_ca"] > 100  # certifi's bundle, as httpx's default
    assert (tls.verify_mode, tls.check_hostname) == (ssl.CERT_REQUIRED, True)


async def test_the_runners_httpx_client_verifies_with_the_same_context(
    https: Server, certificate: Path
) -> None:
    tls = make_tls()
    tls.load_verify_locations(cafile=str(certificate))  # the test's own authority, and certifi's
    async with make_http_client(tls) as http:
        assert (await http.get(https.url + "/health")).status_code == 200
    assert tls.cert_store_stats()["x509_ca"] > 100
