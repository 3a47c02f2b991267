"""Two readings of a server's load, a few seconds apart: busy, hung, idle or unknown.

- **busy**: the generation counter rose while requests are waiting, or more than one runs. The
  server is making progress; a slow or unanswered check is load, never a fault to repair. One
  request running with nothing queued is not load (it is most likely our own slow check): idle.
- **hung**: requests are running (or waiting with none running) and the counter did not move
  across the window: vLLM's dead-engine-but-`/health`-200 class.
- **idle**: nothing running, nothing waiting: a failed check is not explained by load.
- **unknown**: no signal (no metrics, a counter reset by a restart, a series missing).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from supervisor.judge.progress.load import Load


class ProgressVerdict(StrEnum):
    """What the server was doing across the window."""

    BUSY = "busy"  #: tokens flowing with requests running or queued
    HUNG = "hung"  #: requests running or queued, the token counter frozen
    IDLE = "idle"  #: nothing running or queued
    UNKNOWN = "unknown"  #: no usable signal


@dataclass(frozen=True, kw_only=True)
class Progress:
    verdict: ProgressVerdict
    reason: str  #: one line, e.g. `busy: 48 running, 20 waiting, 940 tok/s generated`
    running: float | None = None
    waiting: float | None = None
    tok_s: float | None = None  #: tokens generated per second across the window
    kv_cache_usage: float | None = None
    window_s: float = 0.0
    generation_tokens: float | None = None  #: the counter at the second read (frozen: hung)

    @property
    def making_progress(self) -> bool:
        return self.verdict is ProgressVerdict.BUSY


def unknown(reason: str) -> Progress:
    return Progress(verdict=ProgressVerdict.UNKNOWN, reason=reason)


def _n(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def judge_progress(first: Load, second: Load) -> Progress:
    """The verdict of two readings (`second` taken after `first`)."""
    window = (second.at - first.at).total_seconds()
    if window <= 0:
        return unknown("unknown: the two readings are not apart in time")
    before, after = first.generation_tokens, second.generation_tokens
    running, waiting = second.running, second.waiting
    if before is None or after is None or running is None or waiting is None:
        return unknown("unknown: the server does not export running, waiting and token counts")
    if after < before:
        return unknown("unknown: the token counter went back (the server restarted)")
    tok_s = (after - before) / window

    def seen(verdict: ProgressVerdict, reason: str) -> Progress:
        return Progress(
            verdict=verdict,
            reason=reason,
            running=running,
            waiting=waiting,
            tok_s=round(tok_s, 1),
            kv_cache_usage=second.kv_cache_usage,
            window_s=round(window, 3),
            generation_tokens=after,
        )

    load = f"{_n(running)} running, {_n(waiting)} waiting"
    if after > before and (waiting or running > 1):
        return seen(ProgressVerdict.BUSY, f"busy: {load}, {tok_s:.0f} tok/s generated")
    if after > before and running:
        # one request and nothing queued is not load: most likely our own check, just slow
        why = f"idle: {load}, {tok_s:.0f} tok/s generated (one request is not load)"
        return seen(ProgressVerdict.IDLE, why)
    if after == before and (running or waiting):
        frozen = f"generation_tokens_total frozen at {_n(after)} for {window:.1f}s"
        return seen(ProgressVerdict.HUNG, f"hung: {load}, {frozen}")
    return seen(
        ProgressVerdict.IDLE, f"idle: nothing running or waiting ({tok_s:.0f} tok/s generated)"
    )
