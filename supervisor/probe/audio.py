"""Deep checks for speech servers, by a real call of the OpenAI audio API (Speaches /
faster-whisper-server, Kokoro-FastAPI, vLLM's transcription API answer these shapes):

- `tts`: `POST /v1/audio/speech` a short known phrase as WAV: the answer must be audio of the
  content type asked for (`audio/wav`), a WAV whose header parses, lasting a plausible time for
  the phrase (at least `MIN_SPEECH_S`, at most `MAX_SPEECH_S`);
- `asr`: `POST /v1/audio/transcriptions` a one-second WAV clip (multipart, as the API takes it):
  the answer must be JSON with a `text` string (a tone is heard as nothing: what the words are is
  not judged);
- a round trip, where a `tts` endpoint names an ASR server (`heard_by`): the phrase it spoke is
  transcribed there and must come back with its words (two thirds at least: case, punctuation
  and a misheard word aside), which proves both servers at once.

Their liveness is `GET /health`. A server that answers `/health` but errors, or answers the real
call with an empty or malformed body, fails here."""

from __future__ import annotations

import io
import math
import struct
import wave
from functools import cache

from supervisor.core.events import ProbeOutcome
from supervisor.core.httpclient import Headers
from supervisor.probe.context import CheckFinding, ProbeContext, ProbeError
from supervisor.probe.http import excerpt, get_ok, http_error_reason, parse_json, refused_reason

PHRASE = "The fleet supervisor checks this voice."
WAV_TYPES = frozenset({"audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave"})
MIN_SPEECH_S = 0.5  #: less is no one saying the phrase
MAX_SPEECH_S = 60.0  #: more is not the phrase either
CLIP_RATE = 16000  #: what Whisper resamples to anyway


async def health_liveness(ctx: ProbeContext) -> CheckFinding:
    """`GET /health` 2xx (speech servers have no model listing in common)."""
    ctx.check = "health"
    response = await get_ok(ctx, ctx.url("/health"))
    return CheckFinding(check="health", outcome=ProbeOutcome.OK, http_status=response.status_code)


async def tts_check(ctx: ProbeContext) -> CheckFinding:
    ctx.check = "speech"
    payload = {
        "model": ctx.require_model(),
        "input": PHRASE,
        "voice": ctx.endpoint.voice,
        "response_format": "wav",
    }
    url = ctx.url("/v1/audio/speech")
    response = await ctx.client.post(url, json=payload, headers=ctx.headers)
    ctx.http_status = status = response.status_code
    if not response.is_success:
        raise ProbeError(refused_reason(ctx, status, response.text), http_status=status)
    kind = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind not in WAV_TYPES:
        said = f"{kind or 'no content type'}: {excerpt(response.text) or '(empty)'}"
        raise ProbeError(
            f"unexpected response: asked for audio/wav, got {said}", http_status=status
        )
    seconds = wav_seconds(response.content)
    if seconds is None:
        raise ProbeError(
            f"unexpected response: not a WAV ({len(response.content)} bytes)", http_status=status
        )
    if not MIN_SPEECH_S <= seconds <= MAX_SPEECH_S:
        raise ProbeError(
            f"unexpected response: {seconds:.2f}s of audio for a {len(PHRASE.split())}-word "
            f"phrase (expected {MIN_SPEECH_S:g}-{MAX_SPEECH_S:g}s)",
            http_status=status,
        )
    detail = f"{seconds:.2f}s of audio, {len(response.content)} bytes"
    listener = ctx.endpoint.heard_by
    if listener is not None:
        ctx.check = "round trip"
        text = await transcribe(ctx, listener.url, listener.model, response.content, headers=None)
        missed = missing_words(PHRASE, text)
        if len(missed) > len(words(PHRASE)) // 3:
            raise ProbeError(
                f"round trip: {listener.url} heard {excerpt(text)!r} for {PHRASE!r} "
                f"(missing: {', '.join(missed)})",
                http_status=ctx.http_status,
            )
        detail = f"{detail}; heard back: {excerpt(text)!r}"
    return CheckFinding(check=ctx.check, outcome=ProbeOutcome.OK, http_status=status, detail=detail)


def words(text: str) -> list[str]:
    return [w for w in (word.strip(".,;:!?\"'").lower() for word in text.split()) if w]


def missing_words(said: str, heard: str) -> list[str]:
    """The words of `said` that `heard` lacks (case and punctuation aside)."""
    got = set(words(heard))
    return [w for w in words(said) if w not in got]


async def asr_check(ctx: ProbeContext) -> CheckFinding:
    ctx.check = "transcription"
    text = await transcribe(ctx, ctx.endpoint.url, ctx.require_model(), clip(), headers=ctx.headers)
    heard = f"heard {excerpt(text)!r}" if text.strip() else "heard nothing (a tone)"
    return CheckFinding(
        check="transcription", outcome=ProbeOutcome.OK, http_status=ctx.http_status, detail=heard
    )


async def transcribe(
    ctx: ProbeContext, base_url: str, model: str, audio: bytes, *, headers: Headers | None
) -> str:
    """`POST base_url/v1/audio/transcriptions` (multipart): the `text` of its JSON answer.
    `headers`: the endpoint's for its own server, none for another (a round trip's listener)."""
    form = {"model": model, "response_format": "json"}
    files = {"file": ("probe.wav", audio, "audio/wav")}
    url = f"{base_url}/v1/audio/transcriptions"
    response = await ctx.client.post(url, form=form, files=files, headers=headers)
    ctx.http_status = status = response.status_code
    if not response.is_success:
        raise ProbeError(http_error_reason(status, response.text), http_status=status)
    try:
        answer = parse_json(response.text)
    except ProbeError as exc:
        raise ProbeError(exc.reason, http_status=status) from None
    text = answer.get("text") if isinstance(answer, dict) else None
    if not isinstance(text, str):
        raise ProbeError(
            f"unexpected response: no `text` in {excerpt(response.text)}", http_status=status
        )
    return text


def wav_seconds(audio: bytes) -> float | None:
    """How long a WAV lasts, from its header; None when it is not a WAV."""
    if len(audio) < 12 or audio[:4] != b"RIFF" or audio[8:12] != b"WAVE":
        return None
    try:
        with wave.open(io.BytesIO(audio), "rb") as reader:
            rate, frames = reader.getframerate(), reader.getnframes()
    except (wave.Error, EOFError, struct.error):
        return None
    return frames / rate if rate > 0 else None


@cache
def clip() -> bytes:
    """One second of a 440 Hz tone, 16 kHz mono 16-bit: what every ASR server takes."""
    frames = b"".join(
        struct.pack("<h", int(6000 * math.sin(2 * math.pi * 440 * i / CLIP_RATE)))
        for i in range(CLIP_RATE)
    )
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(CLIP_RATE)
        writer.writeframes(frames)
    return buffer.getvalue()
