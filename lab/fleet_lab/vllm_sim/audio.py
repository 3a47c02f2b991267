"""The audio routes of OpenAI-compatible speech servers (Speaches / faster-whisper-server,
Kokoro-FastAPI, vLLM's transcription API), in their shapes:

- `POST /v1/audio/speech` (JSON `model`, `input`, `voice`, `response_format`): the audio, with
  its content type (`audio/wav` here, whatever was asked: the other formats need an encoder);
  the sim speaks a 440 Hz tone, 0.3 s per word, 24 kHz mono 16-bit, and writes the words in the
  WAV's `LIST/INFO` chunk (`ICMT`) so the sim's own ASR can hear them back.
- `POST /v1/audio/transcriptions` (multipart: `file`, `model`, `response_format`): JSON
  `{"text": ...}`: the words of a clip the sim spoke, else what a tone sounds like to Whisper
  (nothing).

`fail_status` answers that status with an error body; `bad_json` answers 200 with an empty body
(a server whose `/health` passes and whose real call gives nothing)."""

from __future__ import annotations

import io
import math
import struct
import wave
from email.parser import BytesParser
from email.policy import HTTP
from typing import TYPE_CHECKING, Any

from fleet_lab.vllm_sim.chat import admit, bad_request
from fleet_lab.vllm_sim.http import Request, Responder

if TYPE_CHECKING:
    from fleet_lab.vllm_sim.server import VllmSim

RATE = 24000
SECONDS_PER_WORD = 0.3


def speak(text: str) -> bytes:
    """A WAV: a tone as long as the words take to say, the words in its INFO chunk."""
    frames = int(RATE * SECONDS_PER_WORD * max(1, len(text.split())))
    tone = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / RATE))) for i in range(frames)
    )
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(tone)
    words = text.encode()
    if len(words) % 2:
        words += b"\0"
    info = b"INFO" + b"ICMT" + struct.pack("<I", len(words)) + words
    chunk = b"LIST" + struct.pack("<I", len(info)) + info
    riff = buffer.getvalue()
    body = riff[12:] + chunk
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def heard(clip: bytes) -> str:
    """The words the sim spoke into `clip` (its ICMT chunk); '' for any other sound."""
    at = clip.find(b"ICMT")
    if at < 0 or not clip.startswith(b"RIFF"):
        return ""
    (size,) = struct.unpack("<I", clip[at + 4 : at + 8])
    return clip[at + 8 : at + 8 + size].rstrip(b"\0").decode(errors="replace")


async def speech(sim: VllmSim, request: Request, out: Responder) -> None:
    body = await admit(sim, request, out)
    if body is None:
        return
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        await bad_request(out, "input: a non-empty text is required")
        return
    if sim.behaviour.bad_json:
        await out.send(200, b"", "audio/wav")
        return
    await out.send(200, speak(text), "audio/wav")


def form_fields(request: Request) -> dict[str, bytes] | None:
    """The parts of a multipart/form-data body by name; None when it is not one."""
    kind = request.headers.get("content-type", "")
    if not kind.startswith("multipart/form-data"):
        return None
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {kind}\r\n\r\n".encode() + request.body
    )
    if not message.is_multipart():
        return None
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload: Any = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    return fields


async def transcriptions(sim: VllmSim, request: Request, out: Responder) -> None:
    fields = form_fields(request)
    if fields is None or "file" not in fields:
        await bad_request(out, "a multipart/form-data body with a `file` is required")
        return
    status = sim.behaviour.fail_status
    if status is not None:
        await out.send_json(status, sim.failure_body(status))
        return
    model = fields.get("model", b"").decode(errors="replace")
    if not sim.serves(model):
        await out.send_json(404, sim.unknown_model_body(model))
        return
    if sim.behaviour.bad_json:
        await out.send(200, b"", "application/json")
        return
    await out.send_json(200, {"text": heard(fields["file"])})
