"""Every text and timeline record the control API writes, in one place.

Silence and unsilence reach an endpoint's incident as the worker's transitions (their notes are
built here); pause, resume and ack are notes appended to the open incidents they concern. Every
action, on a healthy endpoint too, is also a row of the control journal (`tables.journal`),
queried by subject."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from supervisor.core.actor import Actor, Via
from supervisor.core.durations import format_duration
from supervisor.record.store.records import TimelineEntry
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.control import Acked, Note, Paused, Resumed, Silenced, Unsilenced


def _names(subjects: Sequence[str]) -> str:
    return ", ".join(subjects)


def _why(why: str) -> str:
    return f": {why}" if why else ""


def _until(until: datetime) -> str:
    return until.strftime("%Y-%m-%d %H:%M:%SZ")


def silence_note(actor: Actor, *, length: str, why: str) -> str:
    """The note of the transition into maintenance."""
    return f"silenced for {length} by {actor.who}{_why(why)}"


def silence_data(
    silence_id: int, actor: Actor, *, until: datetime, target: str, why: str
) -> dict[str, str]:
    return {
        "until": until.isoformat(),
        "silence": str(silence_id),
        "target": target,
        "who": actor.who,
        "via": str(actor.via or ""),
        "why": why,
    }


def silenced_entry(
    subject: str,
    at: datetime,
    actor: Actor,
    *,
    target: str,
    until: datetime,
    why: str,
    silence: int,
) -> TimelineEntry:
    """Who silenced it, what they named, until when and why: in its open incident."""
    record = Silenced(actor=actor, target=target, until=until, why=why, silence=silence)
    return TimelineEntry(at=at, subject=subject, record=record)


def unsilenced_entry(
    subject: str, at: datetime, actor: Actor, *, target: str, why: str, silences: Sequence[int]
) -> TimelineEntry:
    """Who ended its silence (and which): in its open incident."""
    record = Unsilenced(actor=actor, target=target, why=why, silences=tuple(silences))
    return TimelineEntry(at=at, subject=subject, record=record)


def restored_note(silence_id: int, who: str) -> str:
    return f"silence #{silence_id} by {who} holds after a restart"


def actor_data(actor: Actor) -> dict[str, str]:
    """Who ended a silence, and through what (the transition's `who` and `via`)."""
    return {"who": actor.who, "via": str(actor.via or "")}


def unsilence_note(actor: Actor) -> str:
    return f"unsilenced by {actor.who}"


def silenced_text(subjects: Sequence[str], length: str) -> str:
    return f"silenced {_names(subjects)} for {length}: nothing is acted on until then"


def _is(subjects: Sequence[str]) -> str:
    return "is" if len(subjects) == 1 else "are"


def already_silenced_text(subjects: Sequence[str]) -> str:
    return f"{_names(subjects)} {_is(subjects)} already silenced: /unsilence it first"


def unsilenced_text(subjects: Sequence[str]) -> str:
    they = "it" if len(subjects) == 1 else "they"
    return f"unsilenced {_names(subjects)}: {they} {_is(subjects)} judged afresh"


def not_silenced_text(subjects: Sequence[str]) -> str:
    return f"{_names(subjects)} {_is(subjects)} not silenced"


def length_text(now: datetime, until: datetime) -> str:
    return format_duration(until - now)


def past_until_text(until: datetime) -> str:
    return f"the silence must end in the future, got {_until(until)}"


NO_END = "a silence needs a length (for) or an end (until)"


def no_silence_text(silence_id: int) -> str:
    return f"no silence #{silence_id}"


def silence_over_text(silence_id: int) -> str:
    return f"silence #{silence_id} is over: set a new one"


def edited_note(silence_id: int, until: datetime, actor: Actor, *, why: str) -> Note:
    """In an open incident of an endpoint whose silence was changed."""
    return Note(text=f"silence #{silence_id} now ends {_until(until)}, by {actor.who}{_why(why)}")


def edited_text(silence_id: int, target: str, until: datetime, subjects: Sequence[str]) -> str:
    covers = f" ({_names(subjects)})" if subjects else ""
    return f"silence #{silence_id} on {target}{covers} now ends {_until(until)}"


NOT_LONGER_THAN_ZERO = "the silence must last longer than 0s"


def paused_text(endpoint: str | None) -> str:
    if endpoint is None:
        return "automatic action is paused: /resume to resume"
    return f"automatic action on {endpoint} is paused: /resume {endpoint} to resume"


def resumed_text(endpoint: str | None) -> str:
    if endpoint is None:
        return "automatic action is on again"
    return f"automatic action on {endpoint} is on again"


def not_paused_text(endpoint: str | None) -> str:
    if endpoint is None:
        return "automatic action is not paused"
    return f"automatic action on {endpoint} is not paused"


def pause_reason(endpoint: str | None) -> str:
    """What the repair runner records when it does not act (followed by ': not acting')."""
    return (
        "automatic action is paused"
        if endpoint is None
        else f"automatic action on {endpoint} is paused"
    )


def acked_text(incident_id: int) -> str:
    return f"acknowledged incident #{incident_id}: no more reminders"


def no_incident_text(incident_id: int) -> str:
    return f"no incident {incident_id}"


RESTARTS_NOT_AVAILABLE = "restarts are not available here"
PAUSE_NOT_AVAILABLE = "automatic action is not available here"


def pause_entry(
    subject: str, at: datetime, actor: Actor, *, paused: bool, scope: str, why: str
) -> TimelineEntry:
    """A pause or resume, in an open incident it concerns."""
    endpoint = None if scope == "*" else scope
    record: Record = (
        Paused(who=str(actor), why=why, endpoint=endpoint)
        if paused
        else Resumed(who=str(actor), why=why, endpoint=endpoint)
    )
    return TimelineEntry(at=at, subject=subject, record=record)


_VIA_NAME = {
    Via.TELEGRAM: "Telegram",
    Via.CLI: "the CLI",
    Via.HTTP: "HTTP",
    Via.WEB: "the fleet page",
}


def ack_entry(subject: str, at: datetime, actor: Actor, *, why: str = "") -> TimelineEntry:
    via = _VIA_NAME[actor.via] if actor.via is not None else ""
    record = Acked(who=actor.who, via=via, why=why)
    return TimelineEntry(at=at, subject=subject, record=record)
