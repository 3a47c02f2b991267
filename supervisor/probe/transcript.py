"""Reading a chat completion, streamed (SSE) or whole (JSON), into a `Transcript`.

Servers differ in where the thinking text goes: vLLM >= 0.16, Ollama and mlx_lm say `reasoning`,
llama.cpp and older vLLM say `reasoning_content`. Read `reasoning` first, then the other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from supervisor.probe.context import ProbeError
from supervisor.probe.http import one_line, parse_json

_REASONING_KEYS = ("reasoning", "reasoning_content")


@dataclass(kw_only=True)
class Transcript:
    """What came back so far; timestamps are the clock's monotonic seconds."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    pieces: int = 0  #: non-empty reasoning or content pieces
    first_at: float | None = None
    last_at: float | None = None
    usage_tokens: int | None = None  #: `usage.completion_tokens`, when a usage record came
    finish_reason: str | None = None
    done: bool = False  #: `data: [DONE]` was seen
    reasoning_field: str = ""  #: where the reasoning came (`reasoning`, `reasoning_content`)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    @property
    def content_text(self) -> str:
        return "".join(self.content)

    @property
    def tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.pieces

    def add(self, part: Mapping[str, Any], now: float) -> None:
        """Take one `delta` (stream) or `message` (whole answer)."""
        for key in _REASONING_KEYS:
            piece = part.get(key)
            if isinstance(piece, str) and piece:
                self._piece(self.reasoning, piece, now)
                self.reasoning_field = self.reasoning_field or key
                break
        content = part.get("content")
        if isinstance(content, str) and content:
            self._piece(self.content, content, now)

    def _piece(self, into: list[str], piece: str, now: float) -> None:
        into.append(piece)
        self.pieces += 1
        if self.first_at is None:
            self.first_at = now
        self.last_at = now

    def take_record(self, record: Any, now: float, *, key: str) -> None:
        """One record: `chat.completion.chunk` (key `delta`) or `chat.completion` (`message`)."""
        if not isinstance(record, dict):
            raise ProbeError("unexpected response: expected a JSON object")
        error = record.get("error")
        if error is not None:
            prefix = "stream error" if key == "delta" else "error in response"
            text = _error_text(error).strip()
            raise ProbeError(f"{prefix}: {text}" if text else f"{prefix} (no message)")
        usage = record.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        # a count, not a bool (`True` is an int) and never negative: anything else is ignored
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
            self.usage_tokens = tokens
        choices = record.get("choices")
        if not isinstance(choices, list) or not choices:
            if key == "message":
                raise ProbeError("unexpected response: no choices[0].message")
            return  # the usage chunk has `choices: []`
        choice = choices[0]
        part = choice.get(key) if isinstance(choice, dict) else None
        if not isinstance(part, dict):
            if key == "message":
                raise ProbeError("unexpected response: no choices[0].message")
            return
        self.add(part, now)
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self.finish_reason = finish


def _error_text(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return one_line(error["message"])
    return one_line(str(error))


class SseReader:
    """`data:` events into a transcript, one line at a time: `line` says True at `[DONE]`;
    `end` takes the end of the body (a last event without its blank line; a stream that ended
    before `[DONE]` or a finish reason is a failure)."""

    __slots__ = ("_data", "_now", "transcript")

    def __init__(self, transcript: Transcript, now: Callable[[], float]) -> None:
        self.transcript = transcript
        self._now = now
        self._data: list[str] = []

    def line(self, raw: str) -> bool:
        line = raw.rstrip("\r")
        if line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
            return False
        if line or not self._data:
            return False  # comments (`: ping`), `event:`/`id:` fields, blank keep-alives
        payload, self._data = "\n".join(self._data), []
        return _dispatch(payload, self.transcript, self._now())

    def end(self) -> None:
        if self._data:
            payload, self._data = "\n".join(self._data), []
            _dispatch(payload, self.transcript, self._now())
        if not self.transcript.done and self.transcript.finish_reason is None:
            raise ProbeError("connection closed before the response finished")


async def read_sse(
    lines: AsyncIterator[str], transcript: Transcript, now: Callable[[], float]
) -> None:
    """Read `data:` events until `[DONE]` or the end of the body."""
    reader = SseReader(transcript, now)
    async for raw in lines:
        if reader.line(raw):
            return
    reader.end()


def _dispatch(payload: str, transcript: Transcript, now: float) -> bool:
    if payload.strip() == "[DONE]":
        transcript.done = True
        return True
    transcript.take_record(parse_json(payload), now, key="delta")
    return False


def read_whole(body: str, transcript: Transcript, now: float) -> None:
    """A non-stream answer: `choices[0].message`, read like a single delta."""
    transcript.take_record(parse_json(body), now, key="message")
