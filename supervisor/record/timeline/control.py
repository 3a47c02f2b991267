"""What people and the notifier did: silences, pauses, acks, messages sent, notes.

The control API writes them: who (an `Actor`, or a name for pauses and acks), why, until, what
they are about."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from supervisor.core.actor import Actor
from supervisor.core.payload import Maybe, Time
from supervisor.record.timeline.base import EntryKind, JSONValue, Record, kind_of, register


def _by(who: str, why: str) -> str:
    return f" by {who}" + (f": {why}" if why else "")


@register
@dataclass(frozen=True, kw_only=True)
class Silenced(Record):
    """A person silenced what `target` names until `until` (written in the open incident of
    each endpoint it put in maintenance, beside the transition)."""

    TAG = "silenced"
    KIND = EntryKind.NOTE
    actor: Actor
    target: str  #: as given: an endpoint, a glob, `host:NAME` or `all`
    until: Time
    why: str = ""
    silence: Maybe[int] = None  #: the stored silence's id

    @property
    def summary(self) -> str:
        until = self.until.strftime("%Y-%m-%d %H:%M:%SZ")
        number = f" (#{self.silence})" if self.silence is not None else ""
        return f"silenced {self.target}{number} until {until}{_by(str(self.actor), self.why)}"


@register
@dataclass(frozen=True, kw_only=True)
class Unsilenced(Record):
    """A person ended the silences covering what `target` names."""

    TAG = "unsilenced"
    KIND = EntryKind.NOTE
    actor: Actor
    target: str
    why: str = ""
    silences: tuple[int, ...] = ()  #: the stored silences it ended

    @property
    def summary(self) -> str:
        ended = ", ".join(f"#{n}" for n in self.silences)
        number = f" ({ended})" if ended else ""
        return f"unsilenced {self.target}{number}{_by(str(self.actor), self.why)}"


@register
@dataclass(frozen=True, kw_only=True)
class Paused(Record):
    """Automatic action paused (everywhere when `endpoint` is None)."""

    TAG = "paused"
    KIND = EntryKind.NOTE
    who: str
    why: str = ""
    until: Maybe[Time] = None
    endpoint: Maybe[str] = None

    @property
    def summary(self) -> str:
        until = f" until {self.until.strftime('%Y-%m-%d %H:%M:%SZ')}" if self.until else ""
        where = f" for {self.endpoint}" if self.endpoint else ""
        return f"automatic action paused{where}{until}{_by(self.who, self.why)}"


@register
@dataclass(frozen=True, kw_only=True)
class Resumed(Record):
    TAG = "resumed"
    KIND = EntryKind.NOTE
    who: str
    why: str = ""
    endpoint: Maybe[str] = None

    @property
    def summary(self) -> str:
        where = f" for {self.endpoint}" if self.endpoint else ""
        return f"automatic action resumed{where}{_by(self.who, self.why)}"


@register
@dataclass(frozen=True, kw_only=True)
class Acked(Record):
    """A person acknowledged the incident: no more reminders."""

    TAG = "acked"
    KIND = EntryKind.NOTE
    who: str
    via: str = ""  #: where, e.g. "Telegram"
    why: str = ""

    @property
    def summary(self) -> str:
        on = f" on {self.via}" if self.via else ""
        why = f" ({self.why})" if self.why else ""
        return f"acknowledged by {self.who}{on}{why}: no more reminders"


@register
@dataclass(frozen=True, kw_only=True)
class Notification(Record):
    """A message delivered to a person."""

    TAG = "notification"
    KIND = EntryKind.NOTIFICATION
    channel: str  #: "telegram"
    message: str  #: the message's kind: "opened", "resolved", "escalated", ...
    chat_id: int
    outbox_id: int

    @property
    def summary(self) -> str:
        return f"{self.channel}: {self.message} message sent to chat {self.chat_id}"


@register
@dataclass(frozen=True, kw_only=True)
class Note(Record):
    """A line the daemon or a person adds (e.g. the repair runner failed)."""

    TAG = "note"
    KIND = EntryKind.NOTE
    text: str

    @property
    def summary(self) -> str:
        return self.text


@register
@dataclass(frozen=True, kw_only=True)
class Legacy(Record):
    """An entry of a store made before the typed timeline that the migration could not type:
    its kind, its summary and its data, as they were."""

    TAG = "legacy"
    KIND = EntryKind.NOTE
    old_kind: str
    text: str
    data: Mapping[str, JSONValue] = field(default_factory=dict)

    @property
    def kind(self) -> EntryKind:
        return kind_of(self.old_kind)

    @property
    def summary(self) -> str:
        return self.text
