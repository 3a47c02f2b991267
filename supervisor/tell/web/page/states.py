"""Every state the page shows, with its tone and colour, in one table: the board's rows and
badges, the endpoint page's badge, the hosts, the tab's title and icon all read it (the colours
reach the browser as `/states.css`, rendered from here; the icons as PNGs drawn from here).

A state this table does not know is shown `muted` (grey), never green."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from supervisor.judge.machine import HostState, State


@dataclass(frozen=True, kw_only=True)
class Tone:
    """How a family of states looks: its colour, the tint of its rows, how bad it is (the tab
    shows the worst), and what the board's count of it says."""

    name: str
    colour: str
    tint: str
    rank: int  #: higher is worse
    label: str


TONES: Mapping[str, Tone] = {
    tone.name: tone
    for tone in (
        Tone(name="bad", colour="#c62828", tint="#ffebee", rank=5, label="not serving"),
        Tone(name="warn", colour="#e65100", tint="#fff3e0", rank=4, label="attention"),
        Tone(name="busy", colour="#00838f", tint="#e0f7fa", rank=3, label="busy"),
        Tone(name="maint", colour="#5e35b1", tint="#ede7f6", rank=2, label="silenced"),
        Tone(name="muted", colour="#616161", tint="#f5f5f5", rank=1, label="unknown"),
        Tone(name="idle", colour="#546e7a", tint="#eceff1", rank=0, label="idle"),
        Tone(name="good", colour="#2e7d32", tint="#ffffff", rank=0, label="healthy"),
    )
}

STATES: Mapping[str, str] = {
    # an endpoint's states (`supervisor.judge.machine.State`)
    State.UNKNOWN: "muted",
    State.STARTING: "warn",
    State.HEALTHY: "good",
    State.IDLE: "idle",
    State.DEGRADED: "warn",
    State.BUSY: "busy",
    State.DOWN: "bad",
    State.UNREACHABLE: "bad",
    State.REMEDIATING: "bad",
    State.VERIFYING: "bad",
    State.ESCALATED: "bad",
    State.MAINTENANCE: "maint",
    # a host's (`supervisor.hear.reachability`); `unknown` as above
    HostState.REACHABLE: "good",
    HostState.UNREACHABLE: "bad",
}
"""state -> the name of its tone."""

UNLISTED = "muted"

DAY_TONES: Mapping[str, str] = {
    "incidents": "bad",
    "no incident": "good",
    "not supervised": "muted",  # neither up nor down: nobody watched that day
}
"""A day of the history bar (`supervisor.record.availability.Day.status`) -> its tone."""


def tone_of(state: str) -> str:
    return STATES.get(state, UNLISTED)


def worst(states: Iterable[str]) -> Tone:
    """The worst tone among `states` (`good` for none)."""
    return max((TONES[tone_of(s)] for s in states), key=lambda t: t.rank, default=TONES["good"])


def stylesheet() -> str:
    """`/states.css`: a class per tone (`.tone-bad` badges, `.row-bad` rows, `.pill.bad`)."""
    lines = []
    for tone in TONES.values():
        name, colour = tone.name, tone.colour
        lines.append(
            f".state.{name}, .pill.{name}, .tone-{name} {{ background: {colour}; color: #fff; }}"
        )
        lines.append(f"tr.row-{name} td {{ background: {tone.tint}; }}")
        lines.append(f".fg-{name} {{ color: {colour}; }}")
    return "\n".join(lines) + "\n"
