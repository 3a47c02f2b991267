"""Delivers the outbox in order: each message (split under 4096 characters) as a reply in its
incident's thread, each marked sent. While the Bot API is unreachable it retries the same
message with a growing pause, so nothing is skipped or sent twice; the outbox is in SQLite, so
that holds across a restart too. Telegram's flood control (RetryAfter) is obeyed; a message
Telegram refuses for good (chat not found, bot blocked) is marked given up and the rest go on."""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress

import structlog
from telegram import Bot, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, RetryAfter, TelegramError

from supervisor.core.aio import wait_event
from supervisor.core.clock import Clock
from supervisor.core.tenure import Tenure
from supervisor.record.store import Store, StoreRefusedError, TimelineEntry
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.outbox import OutboxStore
from supervisor.record.store.records import OutboxRow
from supervisor.record.timeline import Notification
from supervisor.tell.telegram.texts import split
from supervisor.tell.telegram.timing import Pacing

log = structlog.get_logger("supervisor.notify")

FINISH_WITHIN_S = 5.0  #: how long a stop waits for the message in hand


class Sender:
    def __init__(
        self,
        bot: Bot,
        outbox: OutboxStore,
        store: Store,
        clock: Clock,
        pacing: Pacing,
        *,
        tenure: Tenure | None = None,
    ) -> None:
        self._bot = bot
        self._tenure = tenure or Tenure()
        self._outbox = outbox
        self._store = store
        self._clock = clock
        self._pacing = pacing
        self._wake = asyncio.Event()
        self._last: dict[int, float] = {}
        self.failures = 0  #: consecutive failed tries (tests and /status read it)
        self._stopping = False
        self._resting = asyncio.Event()  #: set while no round is under way (nothing in hand)
        self._resting.set()

    def kick(self) -> None:
        """New rows are queued: look now."""
        self._wake.set()

    async def run(self) -> None:
        """Deliver until stopped; a deposed leader's sender stops at the fence (the new leader
        delivers what is left in the outbox)."""
        try:
            await self._run()
        except StaleEpochError as err:
            log.warning("deposed", stops="the sender", refused=str(err))
        except _DeposedError:
            pass  # said by the tenure

    async def finish(self, within: float = FINISH_WITHIN_S) -> None:
        """Before a stop cancels the sender: no new round starts, and the message in hand is
        done with first (at most `within` seconds). So a deposed leader's sender, woken with a
        message in hand, meets the fence (refused, recorded) rather than being cut off before
        it asked; and a clean stop does not cut a message between its parts."""
        self._stopping = True
        with suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._resting.wait()

    async def _run(self) -> None:
        delay = self._pacing.retry_first
        while not self._stopping:
            self._wake.clear()
            self._resting.clear()
            try:
                delivered = await self._round()
            finally:
                self._resting.set()
            if delivered is None:
                await self._idle(self._pacing.idle_poll)
            elif delivered:
                delay = self._pacing.retry_first
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._pacing.retry_max)

    async def _round(self) -> bool | None:
        """Deliver the pending rows in order: None when there were none, False when one must be
        retried later; a stop ends the round after the row in hand."""
        rows = await self._outbox.pending()
        if not rows:
            return None
        for row in rows:
            if not await self._deliver(row):
                return False
            if self._stopping:
                break
        return True

    async def _idle(self, seconds: float) -> None:
        await wait_event(self._wake, seconds)

    async def _deliver(self, row: OutboxRow) -> bool:
        """True when the row is done with (sent or given up); False: retry it later."""
        parts = split(row.text)
        first_id = row.message_id
        for index in range(row.parts_sent, len(parts)):
            await self._pace(row.chat_id)
            try:
                message_id = await self._send(row, parts[index])
            except RetryAfter as exc:
                wait = exc.retry_after
                seconds = wait.total_seconds() if not isinstance(wait, int) else float(wait)
                self._fail(row, f"flood control: retry after {seconds:g}s")
                await self._outbox.failed(row.id, error=str(exc), give_up=False)
                await asyncio.sleep(seconds)
                return False
            except (BadRequest, Forbidden, ChatMigrated) as exc:
                self._fail(row, f"Telegram refused it: {exc}; giving up on this message")
                await self._outbox.failed(row.id, error=str(exc), give_up=True)
                return True
            except TelegramError as exc:  # network, timeout, 5xx, bad token: keep it, retry
                self._fail(row, str(exc))
                await self._outbox.failed(row.id, error=str(exc), give_up=False)
                return False
            self.failures = 0
            if first_id is None:
                first_id = message_id
                if row.incident_id is not None:
                    await self._outbox.start_thread(row.incident_id, row.chat_id, message_id)
            done = index == len(parts) - 1
            await self._outbox.part_sent(
                row.id, parts=index + 1, message_id=first_id, at=self._clock.now(), done=done
            )
        await self._record(row)
        return True

    async def _send(self, row: OutboxRow, text: str) -> int:
        reply_to = None
        if row.incident_id is not None:
            reply_to = await self._outbox.thread(row.incident_id, row.chat_id)
        # a deposed leader sends nothing: first by its own clock (a leader woken from a freeze
        # stops here, before any round trip), then by the fence (StaleEpochError, recorded);
        # either ends the sender (`run`). A store that cannot be reached cannot fence: the
        # lease held by our clock is what we have, and the message goes (marked)
        if self._tenure.stops("the sender"):
            raise _DeposedError
        with suppress(StoreRefusedError):
            await self._outbox.store.check_fence(f"message {row.kind} #{row.id} to {row.chat_id}")
        if self._tenure.stops("the sender"):  # just before the request
            raise _DeposedError
        message = await self._bot.send_message(
            row.chat_id,
            text,
            parse_mode=ParseMode.HTML,
            reply_parameters=(
                ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
                if reply_to is not None
                else None
            ),
        )
        return message.message_id

    async def _pace(self, chat_id: int) -> None:
        last = self._last.get(chat_id)
        if last is not None:
            wait = last + self._pacing.per_chat - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        self._last[chat_id] = time.monotonic()

    def _fail(self, row: OutboxRow, why: str) -> None:
        self.failures += 1
        log.warning("telegram send failed", message=row.id, chat=row.chat_id, error=why)

    async def _record(self, row: OutboxRow) -> None:
        if row.incident_id is None:
            return
        record = Notification(
            channel="telegram", message=row.kind, chat_id=row.chat_id, outbox_id=row.id
        )
        entry = TimelineEntry(at=self._clock.now(), subject="telegram", record=record)
        await self._store.append(row.incident_id, entry)


class _DeposedError(Exception):
    """The sender found the lead gone by its own clock (`Tenure.stops` said so)."""
