"""What a subject's state did: a transition, and a probe inside an incident."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from supervisor.core.actor import Actor, Via
from supervisor.core.payload import Maybe, Time
from supervisor.judge.machine import HostState, State, Trigger
from supervisor.record.timeline.base import EntryKind, JSONValue, Record, register
from supervisor.record.timeline.parts import ProbeSample, ProgressSample


@register
@dataclass(frozen=True, kw_only=True)
class Transition(Record):
    """The subject moved from `source` to `dest` by `trigger` (an endpoint's machine trigger, or
    `host_lost`/`host_back` for a host, whose states are `HostState`s). `note` says why in plain
    words; the fields say it for code.

    Version 2 (issue 22): the states and the trigger are the machine's enums (stored as their
    values, as before) and `actor` is who and through what (version 1 kept a name in `actor`,
    or a silence's `who`/`via` in `extra`: `upgrade` moves them)."""

    TAG = "transition"
    VERSION = 2
    KIND = EntryKind.TRANSITION
    source: State | HostState
    dest: State | HostState
    trigger: Trigger
    note: str
    of_host: bool = False  #: a host's own reachability, not an endpoint's state
    rule: Maybe[str] = None  #: the rule a repair or an escalation is about
    actor: Maybe[Actor] = None  #: the person who caused it (a silence, a /restart)
    probe: Maybe[ProbeSample] = None  #: the probe that caused it
    probes: Maybe[tuple[ProbeSample, ...]] = None  #: when it opens an incident: the failed streak
    host: Maybe[str] = None  #: the host lost or back, for an endpoint
    why: Maybe[str] = None  #: an escalation's reason
    runbook: Maybe[str] = None  #: an escalation's runbook head
    until: Maybe[Time] = None  #: a silence's end
    reason: Maybe[str] = None  #: a restart's reason (what the event said)
    failures: Maybe[int] = None  #: a host's failed checks in a row
    progress: Maybe[ProgressSample] = None  #: what the server was doing (busy, hung) when judged
    extra: Mapping[str, str] = field(default_factory=dict)  #: anything else a producer added

    def __post_init__(self) -> None:
        # a host's states share two values with an endpoint's ("unknown", "unreachable"): the
        # codec reads a stored value as the first enum it fits, `of_host` says which it is
        states: type[State] | type[HostState] = HostState if self.of_host else State
        object.__setattr__(self, "source", states(self.source))
        object.__setattr__(self, "dest", states(self.dest))

    @property
    def summary(self) -> str:
        head = f"host {self.source}" if self.of_host else self.source
        return f"{head} -> {self.dest}: {self.note}"

    @property
    def opens(self) -> bool:
        """It opened (or reopened) an incident: it carries the streak of failed probes."""
        return self.probes is not None

    @classmethod
    def upgrade(cls, version: int, payload: Mapping[str, JSONValue]) -> Mapping[str, JSONValue]:
        """Version 1 -> 2: a restart's `actor` name, or a silence's `who`/`via` in `extra`,
        become the typed `actor` (`via` None where it was not kept)."""
        if version >= 2:
            return payload
        out = dict(payload)
        extra = out.get("extra")
        extra = dict(extra) if isinstance(extra, dict) else {}
        name = out.get("actor")
        who, via = extra.pop("who", None), extra.pop("via", None)
        if isinstance(name, str):
            out["actor"] = {"who": name}
        elif isinstance(who, str):
            known = isinstance(via, str) and via in {v.value for v in Via}
            out["actor"] = {"who": who, "via": via} if known else {"who": who}
        if extra or "extra" in out:
            out["extra"] = extra
        return out


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
    last_at: Maybe[Time] = None  #: when the last of them was seen (count > 1)
    progress: Maybe[ProgressSample] = None  #: what the server was doing, when it was read

    @property
    def summary(self) -> str:
        line = f"{self.sample.head} ({self.note})"
        if self.count > 1 and self.last_at is not None:
            line += f", {self.count} times, last at {self.last_at.strftime('%H:%M:%SZ')}"
        return line
