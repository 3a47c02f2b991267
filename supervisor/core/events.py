"""The records that flow through the engine: frozen, keyword-only, aware UTC timestamps.

Everything that happens to an endpoint is one of these events; each endpoint consumes its own
events in order (see `supervisor.worker`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class ProbeOutcome(StrEnum):
    """What one probe found."""

    OK = "ok"  #: the check passed
    DEGRADED = "degraded"  #: it answered, but without reasoning text or far under its baseline
    FAIL = "fail"  #: it did not answer usefully (refused, HTTP error, bad body, timed out)
    IDLE = "idle"  #: on demand: the server answered, its model is not loaded and was not loaded


class Tier(StrEnum):
    """How deep a probe looks."""

    LIVENESS = "liveness"  #: `/health`, `/v1/models`, `/api/tags`, a plain health URL
    DEEP = "deep"  #: a real chat completion or embedding call (for `health` kinds: the URL)


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    """One probe of one endpoint. `reason` is a plain sentence, empty when the outcome is OK."""

    endpoint: str
    tier: Tier
    check: str  #: what was called: health, models, tags, completion, embedding, http
    outcome: ProbeOutcome
    reason: str
    at: datetime
    latency_s: float
    http_status: int | None = None
    ttft_s: float | None = None  #: time to the first streamed token (reasoning or content)
    tok_s: float | None = None  #: decode rate after the first token
    tokens: int | None = None  #: completion tokens (from usage, else counted chunks)
    detail: str = ""  #: a short excerpt of what came back (reasoning/content head)

    @property
    def ok(self) -> bool:
        return self.outcome is ProbeOutcome.OK


@dataclass(frozen=True, kw_only=True)
class ProbeTick:
    """The scheduler says: probe this endpoint at this tier now."""

    endpoint: str
    tier: Tier
    at: datetime


@dataclass(frozen=True, kw_only=True)
class HostReachability:
    """A host started or stopped answering (already confirmed by the host watcher)."""

    host: str
    reachable: bool
    reason: str
    at: datetime
    incident_id: int | None = None  #: the host's own incident, when one is open


@dataclass(frozen=True, kw_only=True)
class EndpointRestarted:
    """The endpoint's serving process was (re)started: a new startup grace begins."""

    endpoint: str
    reason: str
    at: datetime


@dataclass(frozen=True, kw_only=True)
class UnitSignal:
    """systemd said something about one of the endpoint's units (`supervisor.hear.streams`): a
    down kind (failed, exited, crash_loop, stopped) is judged with one confirming probe."""

    endpoint: str
    host: str
    unit: str
    kind: str  #: `failed`, `exited`, `crash_loop`, `started`, `stopped`, `load_failed`
    down: bool  #: the unit is not serving any more
    line: str  #: `vllm.service failed: status=127, 2 restarts (exit-code)`
    message: str  #: systemd's message that made it
    at: datetime
    lines: tuple[str, ...] = ()  #: the unit's own last lines and systemd's (the evidence)
    result: str = ""
    exit_status: int | None = None
    n_restarts: int | None = None
    source: str = "journal"  #: `journal`, or `poll`
    cursor: str = ""
    model: str = ""  #: `load_failed`: the model the server's line names ('' when none)


@dataclass(frozen=True, kw_only=True)
class Stop:
    """Ends an endpoint's worker after the events queued before it."""

    endpoint: str
    at: datetime = field(compare=False)


Event = ProbeTick | ProbeResult | HostReachability | EndpointRestarted | UnitSignal | Stop
