"""What a subject's state did: a transition, and a probe inside an incident."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from supervisor.record.timeline.base import EntryKind, Record, register
from supervisor.record.timeline.parts import ProbeSample, ProgressSample


@register
@dataclass(frozen=True, kw_only=True)
class Transition(Record):
    """The subject moved from `source` to `dest` by `trigger` (an endpoint's machine trigger, or
    `host_lost`/`host_back` for a host). `note` says why in plain words."""

    TAG = "transition"
    KIND = EntryKind.TRANSITION
    source: str
    dest: str
    trigger: str
    note: str
    of_host: bool = False  #: a host's own reachability, not an endpoint's state
    rule: str | None = None  #: the rule a repair or an escalation is about
    actor: str | None = None  #: the person who caused it (a silence, a /restart)
    probe: ProbeSample | None = None  #: the probe that caused it
    probes: tuple[ProbeSample, ...] | None = None  #: when it opens an incident: the failed streak
    host: str | None = None  #: the host lost or back, for an endpoint
    why: str | None = None  #: an escalation's reason
    runbook: str | None = None  #: an escalation's runbook head
    until: datetime | None = None  #: a silence's end
    reason: str | None = None  #: a restart's reason (what the event said)
    failures: int | None = None  #: a host's failed checks in a row
    progress: ProgressSample | None = None  #: what the server was doing (busy, hung) when judged
    extra: Mapping[str, str] = field(default_factory=dict)  #: anything else a producer added

    @property
    def summary(self) -> str:
        head = f"host {self.source}" if self.of_host else self.source
        return f"{head} -> {self.dest}: {self.note}"

    @property
    def opens(self) -> bool:
        """It opened (or reopened) an incident: it carries the streak of failed probes."""
        return self.probes is not None


@register
@dataclass(frozen=True, kw_only=True)
class Probe(Record):
    """Probe results inside an incident: a run of identical consecutive results (same outcome
    and reason) is one entry, `sample` the first of them, `count` how many, `last_at` the last."""

    TAG = "probe"
    KIND = EntryKind.PROBE
    sample: ProbeSample
    note: str  #: what the policy made of the first, e.g. "failed (1/3): connection refused"
    count: int = 1  #: identical results in a row
    last_at: datetime | None = None  #: when the last of them was seen (count > 1)
    progress: ProgressSample | None = None  #: what the server was doing, when it was read

    @property
    def summary(self) -> str:
        line = f"{self.sample.head} ({self.note})"
        if self.count > 1 and self.last_at is not None:
            line += f", {self.count} times, last at {self.last_at.strftime('%H:%M:%SZ')}"
        return line
