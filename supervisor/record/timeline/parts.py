"""Values nested inside records: a probe result, a command that was run, a unit as a failed repair
left it."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.payload import Maybe, Time


@dataclass(frozen=True, kw_only=True)
class ProbeSample:
    """One probe result as the timeline keeps it (figures rounded, `detail` kept)."""

    at: Time
    tier: str  #: "liveness" or "deep"
    check: str  #: "models", "completion", "health", ...
    outcome: str  #: "ok", "fail", "degraded"
    reason: str = ""
    latency_s: float = 0.0
    http_status: Maybe[int] = None
    ttft_s: Maybe[float] = None
    tok_s: Maybe[float] = None
    tokens: Maybe[int] = None
    detail: Maybe[str] = None

    @property
    def head(self) -> str:
        """`deep completion fail: timed out after 1s`, `liveness models ok`."""
        head = f"{self.tier} {self.check} {self.outcome}"
        return f"{head}: {self.reason}" if self.reason else head


@dataclass(frozen=True, kw_only=True)
class ProgressSample:
    """What the server was doing when a real check failed or was slow (two reads of its
    `/metrics`): why it was judged busy (load, never repaired) or hung (down at once)."""

    verdict: str  #: "busy", "hung", "idle" or "unknown"
    reason: str  #: `hung: 3 running, 0 waiting, generation_tokens_total frozen at 412 for 5.0s`
    running: Maybe[float] = None  #: requests being generated at the second read
    waiting: Maybe[float] = None  #: requests queued at the second read
    tok_s: Maybe[float] = None  #: tokens generated per second across the window
    generation_tokens: Maybe[float] = None  #: the token counter at the second read
    kv_cache_usage: Maybe[float] = None  #: 0-1
    window_s: float = 0.0  #: time between the two reads


@dataclass(frozen=True, kw_only=True)
class CommandRun:
    """One command run (or, in a dry run, only recorded) on a host, with its output's tail."""

    host: str
    command: str
    exit_status: int | None
    duration_s: float
    error: str = ""
    dry_run: bool = False
    output_tail: str = ""


@dataclass(frozen=True, kw_only=True)
class UnitLeft:
    """One unit of an endpoint whose repair stopped at a failed step: what its service manager
    said before the steps, after them, and once the runner had started it again if needed.
    States are systemd's `ActiveState/SubState` (`active/running`, `failed/failed`) or launchd's
    job state (`running`, `not running`, `not loaded`); '' when it could not be read."""

    host: str
    unit: str
    found: str  #: before the rule's steps
    after_steps: str  #: once a step had failed
    left: str  #: what it was left as (after a start, if it was started again)
    pid: int = 0  #: its main process when left (0: none)
    started: bool = False  #: it ran when found, not after the steps: the runner started it
    error: str = ""  #: why a state could not be read

    @property
    def line(self) -> str:
        """`vllm.service@spark1: active/running, then inactive/dead, started: active/running`"""
        said = f"{self.unit}@{self.host}: {self.found or '?'}"
        if self.after_steps != self.found:
            said += f", then {self.after_steps or '?'}"
        if self.started:
            said += f", started: {self.left or '?'}"
        if self.pid:
            said += f" (pid {self.pid})"
        return said + (f" ({self.error})" if self.error else "")
