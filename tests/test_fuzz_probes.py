"""Bad input, fuzzed: whatever an endpoint answers (an SSE stream, a JSON body or garbage), the
probe gives a ProbeResult with a one-line reason, never a traceback. Fed to the parsers directly
and through a real socket on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from supervisor.config.loader import parse_config
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.probe import run_probe
from supervisor.probe.context import ProbeError
from supervisor.probe.transcript import Transcript, read_sse, read_whole

FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
FLEET = """\
store: {path: state/s.db}
hosts: {forge: {local: true}}
endpoints:
  m: {kind: openai, url: "http://127.0.0.1:9", model: m, host: forge, probe: {timeout: 2s}}
"""
ENDPOINT: Endpoint = parse_config(FLEET, source="f.yaml", base_dir=Path("/srv")).endpoints["m"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
pieces = st.fixed_dictionaries(
    {},
    optional={
        "reasoning": json_values,
        "reasoning_content": json_values,
        "content": json_values,
        "role": json_values,
    },
)
chat_records = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={"delta": pieces, "message": pieces, "finish_reason": json_values},
            ),
            max_size=2,
        )
        | json_values,
        "usage": st.fixed_dictionaries({}, optional={"completion_tokens": json_values}),
        "error": json_values,
    },
)
payloads = chat_records.map(json.dumps) | json_values.map(json.dumps) | st.text(max_size=60)
sse_lines = st.lists(
    payloads.map(lambda p: f"data: {p}")
    | st.sampled_from(["", ": ping", "data: [DONE]", "event: x"]),
    max_size=12,
)


async def _aiter(lines: list[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


def _one_line(reason: str) -> None:
    assert reason.strip() == reason
    assert "\n" not in reason
    assert "Traceback" not in reason


@FUZZ
@given(lines=sse_lines)
@example(lines=['data: {"usage": {"completion_tokens": -1}}'])  # found by this spec, 2026-11-25
@example(lines=['data: {"usage": {"completion_tokens": true}}'])
async def test_the_sse_reader_finishes_or_says_why(lines: list[str]) -> None:
    transcript = Transcript()
    error = ""
    try:
        await read_sse(_aiter(lines), transcript, lambda: 1.0)
    except ProbeError as err:
        error = str(err) or "(empty)"
    _one_line(error)
    assert error != "(empty)"
    assert transcript.tokens >= 0


@FUZZ
@given(body=payloads)
def test_the_whole_body_reader_finishes_or_says_why(body: str) -> None:
    transcript = Transcript()
    error = ""
    try:
        read_whole(body, transcript, 1.0)
    except ProbeError as err:
        error = str(err) or "(empty)"
    _one_line(error)
    assert error != "(empty)"


async def _serve_once(body: bytes, content_type: str, status: int) -> tuple[asyncio.Server, int]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            writer.write(
                f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _probe(body: bytes, content_type: str, status: int, tier: Tier) -> ProbeResult:
    server, port = await _serve_once(body, content_type, status)
    endpoint = ENDPOINT.model_copy(update={"url": f"http://127.0.0.1:{port}"})
    try:
        async with HttpClient() as client:
            return await run_probe(endpoint, tier, client, clock=SystemClock())
    finally:
        server.close()
        await server.wait_closed()


content_types = st.sampled_from(
    ["text/event-stream", "application/json", "text/html", "application/octet-stream"]
)
bodies: st.SearchStrategy[bytes] = (
    sse_lines.map(lambda ls: "\n".join(ls).encode())
    | payloads.map(str.encode)
    | st.binary(max_size=200)
)


@settings(FUZZ, max_examples=100)
@given(
    body=bodies,
    content_type=content_types,
    status=st.sampled_from([200, 200, 200, 404, 500, 503]),
    tier=st.sampled_from([Tier.LIVENESS, Tier.DEEP]),
)
async def test_a_probe_over_a_real_socket_never_raises(
    body: bytes, content_type: str, status: int, tier: Tier
) -> None:
    result = await _probe(body, content_type, status, tier)
    _one_line(result.reason)
    if result.outcome is not ProbeOutcome.OK:
        assert result.reason


async def test_garbage_models_list_is_a_clear_failure() -> None:
    result = await _probe(b"<html>oops</html>", "text/html", 200, Tier.LIVENESS)
    assert result.outcome is ProbeOutcome.FAIL
    assert result.reason == "bad JSON in response: <html>oops</html>"
