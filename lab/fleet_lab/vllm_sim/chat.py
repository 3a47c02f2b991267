"""`/v1/chat/completions` as vLLM answers it: reasoning pieces first, then content, paced at
`tok_s`; streamed (SSE) or whole; and the engine's failure shapes (API-FACTS.md §0, §1)."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleet_lab.vllm_sim.http import Request, Responder

if TYPE_CHECKING:
    from fleet_lab.vllm_sim.server import VllmSim

REASONING_TEXT = (
    "The user asks for a small sum. Seventeen plus twenty-five: ten and twenty make thirty, "
    "seven and five make twelve, so the total is forty-two. Answer with just the number."
)
CONTENT_TEXT = "The answer is 42."
ENGINE_ERROR = "EngineCore encountered an issue. See stack trace (above) for the root cause."
DEFAULT_MAX_TOKENS = 4096
SSE = "text/event-stream; charset=utf-8"
_HUNG_POLL_S = 0.05


def error_body(message: str, kind: str, code: int) -> dict[str, Any]:
    """vLLM's (and Ollama's OpenAI-compatible) error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def engine_error() -> dict[str, Any]:
    return error_body(ENGINE_ERROR, "InternalServerError", 500)


def split_pieces(text: str) -> list[str]:
    """One piece per word, keeping its leading space: what a tokenizer roughly streams."""
    return re.findall(r"\s*\S+", text)


@dataclass(frozen=True, kw_only=True)
class Reply:
    pieces: tuple[tuple[str, str], ...]  #: (delta field, text) in order
    finish_reason: str

    @property
    def reasoning_tokens(self) -> int:
        return sum(1 for name, _ in self.pieces if name != "content")


def plan_reply(reasoning_field: str | None, max_tokens: int) -> Reply:
    """Reasoning then content, cut at `max_tokens` (finish_reason `length`)."""
    planned: list[tuple[str, str]] = []
    if reasoning_field is not None:
        planned += [(reasoning_field, piece) for piece in split_pieces(REASONING_TEXT)]
    planned += [("content", piece) for piece in split_pieces(CONTENT_TEXT)]
    cut = len(planned) > max_tokens
    return Reply(pieces=tuple(planned[:max_tokens]), finish_reason="length" if cut else "stop")


def prompt_tokens(messages: list[Any]) -> int:
    words = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
    return words + 4 * len(messages)


def usage(prompt: int, reply: Reply, produced: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + produced,
        "completion_tokens": produced,
        "completion_tokens_details": {"reasoning_tokens": min(produced, reply.reasoning_tokens)},
        "prompt_tokens_details": None,
    }


def sse(data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


async def pace(sim: VllmSim) -> None:
    """Wait for the next piece: one token's time, and for as long as the engine is hung."""
    tok_s = sim.behaviour.tok_s
    await asyncio.sleep(1.0 / tok_s if tok_s > 0 else 0)
    # the behaviour is a plain mutable dataclass a test or a control file flips: nothing to await
    while sim.behaviour.engine_hung and not sim.behaviour.engine_dead:  # noqa: ASYNC110
        await asyncio.sleep(_HUNG_POLL_S)


async def queue(sim: VllmSim) -> None:
    """Wait in the scheduler's queue (`queue_s`), counted in `vllm:num_requests_waiting`."""
    seconds = sim.behaviour.queue_s
    if seconds <= 0:
        return
    sim.metrics.waiting += 1
    try:
        await asyncio.sleep(seconds)
    finally:
        sim.metrics.waiting -= 1


async def bad_request(out: Responder, message: str) -> None:
    await out.send_json(400, error_body(message, "BadRequestError", 400))


async def admit(sim: VllmSim, request: Request, out: Responder) -> dict[str, Any] | None:
    """What every inference route checks first; None when an error answer was already sent."""
    try:
        body = request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        await bad_request(out, "The request body is not a JSON object.")
        return None
    status = sim.behaviour.fail_status
    if status is not None:
        await out.send_json(status, sim.failure_body(status))
        return None
    if not sim.serves(body.get("model")):
        await out.send_json(404, sim.unknown_model_body(body.get("model")))
        return None
    return body


async def handle_chat(sim: VllmSim, request: Request, out: Responder) -> None:
    body = await admit(sim, request, out)
    if body is None:
        return
    messages, max_tokens = body.get("messages"), body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not isinstance(messages, list) or not messages:
        await bad_request(out, "messages: at least one message is required")
        return
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        await bad_request(out, "max_tokens must be at least 1")
        return
    behaviour = sim.behaviour
    reply = plan_reply(behaviour.reasoning_field, max_tokens)
    await queue(sim)
    chat = _Chat(sim, out, str(body["model"]), reply, prompt_tokens(messages))
    if body.get("stream") is True and not behaviour.no_stream:
        options = body.get("stream_options")
        await chat.stream(isinstance(options, dict) and options.get("include_usage") is True)
    else:
        await chat.whole()


class _Chat:
    """One completion in flight: generates the reply and keeps the metrics honest."""

    def __init__(self, sim: VllmSim, out: Responder, model: str, reply: Reply, prompt: int) -> None:
        self.sim, self.out, self.model, self.reply, self.prompt = sim, out, model, reply, prompt
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.produced = 0
        self.started = time.monotonic()

    def _record(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
        } | fields

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._record("chat.completion.chunk", choices=[choice])

    def _produced_one(self) -> None:
        metrics = self.sim.metrics
        if self.produced == 0:
            metrics.ttft.observe(time.monotonic() - self.started)
            metrics.prompt_tokens += self.prompt
        self.produced += 1
        metrics.generation_tokens += 1
        limit = self.sim.behaviour.die_after_pieces
        if limit is not None and self.produced >= limit:
            self.sim.kill_engine()

    async def stream(self, include_usage: bool) -> None:
        out, metrics = self.out, self.sim.metrics
        await out.start_stream(200, SSE)
        metrics.running += 1
        try:
            await out.chunk(sse(self._chunk({"role": "assistant", "content": ""})))
            if self.sim.behaviour.bad_json:
                await out.chunk(sse(json.dumps(self._chunk({"reasoning": "The user"}))[:70]))
            elif not await self._stream_pieces():
                await out.chunk(sse(engine_error()))  # the engine died: 200 headers, then this
                metrics.success["error"] += 1
            else:
                if include_usage:
                    body = usage(self.prompt, self.reply, self.produced)
                    await out.chunk(
                        sse(self._record("chat.completion.chunk", choices=[], usage=body))
                    )
                metrics.success[self.reply.finish_reason] += 1
            await out.chunk(sse("[DONE]"))
            await out.end_stream()
        except ConnectionError:
            metrics.success["abort"] += 1
            raise
        finally:
            metrics.running -= 1

    async def _stream_pieces(self) -> bool:
        """Send every piece; False when the engine is (or goes) dead on the way."""
        last = len(self.reply.pieces) - 1
        for index, (name, text) in enumerate(self.reply.pieces):
            await pace(self.sim)
            if self.sim.behaviour.engine_dead:
                return False
            finish = self.reply.finish_reason if index == last else None
            await self.out.chunk(sse(self._chunk({name: text}, finish)))
            self._produced_one()
        if not self.reply.pieces:
            await self.out.chunk(sse(self._chunk({}, self.reply.finish_reason)))
        return True

    async def whole(self) -> None:
        metrics, behaviour = self.sim.metrics, self.sim.behaviour
        metrics.running += 1
        try:
            for _ in self.reply.pieces:
                await pace(self.sim)
                if behaviour.engine_dead:
                    metrics.success["error"] += 1
                    await self.out.send_json(500, engine_error())
                    return
                self._produced_one()
            if behaviour.bad_json:
                await self.out.send(
                    200, json.dumps(self._message())[:90].encode(), "application/json"
                )
                return
            metrics.success[self.reply.finish_reason] += 1
            await self.out.send_json(200, self._message())
        finally:
            metrics.running -= 1

    def _message(self) -> dict[str, Any]:
        texts: dict[str, str] = {}
        for name, text in self.reply.pieces:
            texts[name] = texts.get(name, "") + text
        field = self.sim.behaviour.reasoning_field or "reasoning"
        message: dict[str, Any] = {
            "role": "assistant",
            "content": texts.get("content") or None,
            "tool_calls": [],
        }
        message[field] = texts.get(field) or None
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": self.reply.finish_reason,
            "stop_reason": None,
        }
        body = usage(self.prompt, self.reply, self.produced)
        return self._record("chat.completion", choices=[choice], usage=body)
