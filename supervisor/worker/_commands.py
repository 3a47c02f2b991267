"""What reaches an endpoint's worker from outside besides probe events: commands, each carrying
a Future for its reply. The worker handles them on its queue, in order with the probe events,
so it stays the only writer of its endpoint's state (the repair runner, the control API and the
daemon all go through these)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from supervisor.core.events import ProbeResult, Tier
from supervisor.judge.machine import Change, Trigger
from supervisor.record.store.records import TimelineEntry


class WorkerStopped(RuntimeError):  # noqa: N818 - a state, not a bug
    """The worker ended before it could handle a command."""


@dataclass(frozen=True, kw_only=True)
class Fire:
    """Fire `trigger` (recorded with `note` and `data`); replies with the change, or None when
    the graph does not allow it now. `until` is a silence's end (with Trigger.SILENCE)."""

    trigger: Trigger
    note: str
    data: Mapping[str, str] = field(default_factory=dict)
    until: datetime | None = None
    reply: asyncio.Future[Change | None]


@dataclass(frozen=True, kw_only=True)
class Append:
    """Append `entry` to `incident_id` (closed ones too), else to the open incident, if any."""

    entry: TimelineEntry
    incident_id: int | None = None
    reply: asyncio.Future[None]


@dataclass(frozen=True, kw_only=True)
class ProbeOnce:
    """Probe once and change no state; with `keep_problem`, a failing result becomes the
    latest problem a diagnosis starts from."""

    tier: Tier
    keep_problem: bool = False
    reply: asyncio.Future[ProbeResult]


@dataclass(frozen=True, kw_only=True)
class MoveSilenceEnd:
    """In maintenance: its silence now ends at `until` (an edited or extended silence); replies
    whether it was in maintenance."""

    until: datetime
    reply: asyncio.Future[bool]


Command = Fire | Append | ProbeOnce | MoveSilenceEnd
