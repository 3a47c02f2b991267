"""The product's key check: a real streamed chat completion that must come back with text.

It tells "alive" from "can infer": timed for TTFT and decode tok/s, and, for thinking models,
it must bring back reasoning text (API-FACTS.md §0, §1, §3).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from supervisor.core.events import ProbeOutcome
from supervisor.core.httpclient import Response
from supervisor.probe.context import CheckFinding, ProbeContext, ProbeError
from supervisor.probe.http import one_line, refused_reason
from supervisor.probe.transcript import SseReader, Transcript, read_sse, read_whole

if TYPE_CHECKING:
    from supervisor.config.supervised import Endpoint

DETAIL_CHARS = 120


@dataclass(frozen=True, kw_only=True)
class CompletionStats:
    """The numbers and text one completion produced."""

    reasoning: str
    content: str
    finish_reason: str | None
    tokens: int
    ttft_s: float | None
    tok_s: float | None


def stats_of(transcript: Transcript, sent_at: float) -> CompletionStats:
    first, last, tokens = transcript.first_at, transcript.last_at, transcript.tokens
    tok_s = None
    if first is not None and last is not None and tokens >= 2 and last > first:
        tok_s = (tokens - 1) / (last - first)
    return CompletionStats(
        reasoning=transcript.reasoning_text,
        content=transcript.content_text,
        finish_reason=transcript.finish_reason,
        tokens=tokens,
        ttft_s=None if first is None else first - sent_at,
        tok_s=tok_s,
    )


def slow_reason(tok_s: float, ratio: float, baseline: float) -> str:
    """`12.1 tok/s < 50% of baseline 37`."""
    shown = int(baseline) if float(baseline).is_integer() else baseline
    return f"{tok_s:.1f} tok/s < {round(ratio * 100)}% of baseline {shown}"


NO_REASONING = "no reasoning text"
"""The degraded reason that is not slowness (load never explains it)."""


def judge_completion(stats: CompletionStats, endpoint: Endpoint) -> tuple[ProbeOutcome, str]:
    reasoning, content = stats.reasoning.strip(), stats.content.strip()
    if not reasoning and not content:
        return ProbeOutcome.FAIL, "empty completion"
    # Content may be empty only when the model was still thinking as max_tokens ran out
    # (finish_reason "length" with reasoning text): it did infer, which is what we check.
    if not content and stats.finish_reason != "length":
        return ProbeOutcome.FAIL, f"reasoning but no content (finish_reason: {stats.finish_reason})"
    if endpoint.expect_reasoning and not reasoning:
        return ProbeOutcome.DEGRADED, NO_REASONING
    baseline, ratio = endpoint.baseline_tok_s, endpoint.probe.min_tok_s_ratio
    if baseline is not None and stats.tok_s is not None and stats.tok_s < ratio * baseline:
        return ProbeOutcome.DEGRADED, slow_reason(stats.tok_s, ratio, baseline)
    return ProbeOutcome.OK, ""


def detail_of(stats: CompletionStats) -> str:
    """A short head of what came back: reasoning, then content."""
    text = " | ".join(part for part in (one_line(stats.reasoning), one_line(stats.content)) if part)
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def request_body(endpoint: Endpoint, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": endpoint.probe.prompt}],
        "max_tokens": endpoint.probe.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }


async def _lines(text: str) -> AsyncIterator[str]:
    for line in text.splitlines():
        yield line


def _split(raw: bytes) -> list[str]:
    """One line of the body as read (up to its `\n`) as text lines: SSE may end a line with a
    lone `\r` too (such lines come when the next `\n` or the end of the body does)."""
    text = raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
    return text.split("\r") if "\r" in text else [text]


DRAIN_S = 0.5


async def _drain(response: Response) -> None:
    """Read the body's end after `[DONE]` (its last chunk, already on its way), so the
    connection goes back to the pool instead of being closed; a server that keeps the stream
    open after `[DONE]` gets DRAIN_S, then the connection is closed as before."""
    with suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_S):
            await response.content.read()


async def _read_sse(response: Response, sse: SseReader) -> None:
    """The stream's lines into `sse`, each stamped as it arrives, until `[DONE]` or its end."""
    async for raw in response.content:
        for line in _split(raw):
            if sse.line(line):
                await _drain(response)
                return
    sse.end()


async def completion_check(ctx: ProbeContext) -> CheckFinding:
    """POST /v1/chat/completions (streamed) and judge the answer."""
    ctx.check = "completion"
    body = request_body(ctx.endpoint, ctx.require_model())
    transcript = Transcript()
    sent_at = ctx.clock.monotonic()
    url = ctx.url("/v1/chat/completions")
    async with ctx.client.stream(url, json=body, headers=ctx.headers) as response:
        ctx.http_status = response.status
        if not 200 <= response.status < 300:
            text = (await response.read()).decode("utf-8", "replace")
            reason = refused_reason(ctx, response.status, text)
            raise ProbeError(reason, http_status=ctx.http_status)
        if "text/event-stream" in response.headers.get("content-type", ""):
            await _read_sse(response, SseReader(transcript, ctx.clock.monotonic))
        else:
            text = (await response.read()).decode("utf-8", "replace")
            if text.lstrip().startswith("data:"):  # SSE without its content type
                await read_sse(_lines(text), transcript, ctx.clock.monotonic)
            else:
                read_whole(text, transcript, ctx.clock.monotonic())
    stats = stats_of(transcript, sent_at)
    outcome, reason = judge_completion(stats, ctx.endpoint)
    return CheckFinding(
        check="completion",
        outcome=outcome,
        reason=reason,
        http_status=ctx.http_status,
        ttft_s=stats.ttft_s,
        tok_s=stats.tok_s,
        tokens=stats.tokens,
        detail=detail_of(stats),
        reasoning_field=transcript.reasoning_field,
    )
