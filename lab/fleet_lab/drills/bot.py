"""The Telegram side of a drill: a Bot API stub (`fleet_lab.botapi`) served on loopback for
the drill's daemon, whose real python-telegram-bot client is pointed at it, and what the stub
received about the drill's incident."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType

from fleet_lab.botapi import BotApiStub, Sent
from supervisor.core.backoff import Backoff
from supervisor.tell.telegram.timing import Pacing, Timing

TOKEN = "424242:lab-drill-token"  # noqa: S105 - the stub's own, never a real bot's
CHAT = -1001
USER = 11
#: Fast enough for a drill: the composer looks every 50ms and nothing is paced per chat.
TIMING = Timing(
    pacing=Pacing(retry=Backoff(base_s=0.05, cap_s=0.5), per_chat=0.0, idle_poll=0.1),
    compose_every=0.05,
    settle=timedelta(milliseconds=1),
    poll_timeout=0.5,
    startup_retry=0.2,
)
#: How long a drill waits for the last message about its incident once the daemon is done.
DELIVER_WITHIN_S = 10.0


@dataclass(frozen=True)
class Notified:
    """What the stub received about one incident: every message of its thread, in order."""

    texts: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.texts)

    @property
    def first(self) -> str:
        return self.texts[0] if self.texts else ""


def about(sent: list[Sent], incident: int | None) -> Notified:
    """The messages of incident `incident`'s thread: the one that names it (`incident #N`) and
    every reply to it."""
    if incident is None:
        return Notified()
    opening = [s for s in sent if s.text.splitlines()[-1:] == [f"incident #{incident}"]]
    if not opening:
        return Notified()
    head = opening[0].message_id
    thread = [s for s in sent if s.message_id == head or s.reply_to == head]
    return Notified(texts=tuple(s.text for s in thread))


class DrillBot:
    """`async with DrillBot(folder) as bot`: the stub is up; `bot.notify` is the fleet config's
    `notify` section (the token in `folder/telegram-token`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stub = BotApiStub(token=TOKEN)

    async def __aenter__(self) -> DrillBot:
        await self.stub.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.stub.stop()

    @property
    def notify(self) -> dict[str, object]:
        self.folder.mkdir(parents=True, exist_ok=True)
        token = self.folder / "telegram-token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        telegram = {
            "token_file": str(token),
            "chat_ids": [CHAT],
            "user_ids": [USER],
            "base_url": self.stub.base_url,
        }
        return {"telegram": telegram}

    def received(self, incident: int | None) -> Notified:
        return about(self.stub.sent, incident)

    async def delivered(
        self,
        incident: int | None,
        last: str,
        within: float,
        queued: Callable[[], Awaitable[bool]],
    ) -> Notified:
        """Wait (up to `within` s) until the incident's thread holds a message starting with
        `last` (the outcome's: resolved or escalated) and nothing is `queued` on two looks a
        few composer rounds apart; what arrived by then."""
        deadline = time.monotonic() + within
        idle = 0
        while time.monotonic() < deadline and idle < 2:
            done = any(t.startswith(last) for t in self.received(incident).texts)
            idle = idle + 1 if done and not await queued() else 0
            await asyncio.sleep(2 * TIMING.compose_every)
        return self.received(incident)
