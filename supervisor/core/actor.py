"""Who acted, and through what: the person behind a silence, a pause, an ack or a restart, as
the control API takes it and the timeline keeps it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from supervisor.core.payload import Maybe


class Via(StrEnum):
    """The transport an action came through."""

    TELEGRAM = "telegram"
    CLI = "cli"
    HTTP = "http"
    WEB = "web"  #: the fleet page in a browser


_PHRASE = {
    Via.TELEGRAM: "on Telegram",
    Via.CLI: "from the CLI",
    Via.HTTP: "over HTTP",
    Via.WEB: "on the fleet page",
}


@dataclass(frozen=True, kw_only=True)
class Actor:
    """Who asked: `@op` on Telegram, a user name from the CLI, `http` (or a header) over HTTP.
    `via` is None only in timeline entries written before it was kept (a restart's)."""

    who: str
    via: Maybe[Via] = None

    def __str__(self) -> str:
        return f"{self.who} {_PHRASE[self.via]}" if self.via is not None else self.who
