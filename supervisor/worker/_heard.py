"""What an escalated endpoint hears that may change its diagnosis: a unit's death with a new exit
status or a crash loop, a changed verdict of `/metrics`. Each is named by a key (the same
evidence twice is one key), so the repair runner looks again once per new thing heard
(`supervisor.repair.listening`)."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.events import UnitSignal
from supervisor.judge.progress.judge import Progress


@dataclass(frozen=True, kw_only=True)
class Heard:
    """New evidence about an endpoint: `key` names it, `words` say it for people."""

    key: str
    words: str


def unit_heard(signal: UnitSignal) -> Heard:
    """A unit's death: its exit status, and whether systemd calls it a crash loop."""
    loop = "crash loop" if signal.kind == "crash_loop" else "death"
    status = "no status" if signal.exit_status is None else f"status {signal.exit_status}"
    key = f"unit {signal.unit}@{signal.host}: {loop}, {status}"
    return Heard(key=key, words=f"systemd: {signal.line}")


def load_heard(signal: UnitSignal) -> Heard:
    """A load the server said failed, by what failed (the same failure again is one key)."""
    model = f" {signal.model}" if signal.model else ""
    key = f"load {signal.unit}@{signal.host}{model}: {signal.result}"
    return Heard(key=key, words=f"{signal.unit}: {signal.message}")


def progress_heard(progress: Progress) -> Heard:
    """What `/metrics` says the server is doing (busy, hung, idle, unknown)."""
    return Heard(key=f"metrics: {progress.verdict.value}", words=f"/metrics: {progress.reason}")
