"""Delivers the outbox in order: each message (split under 4096 characters) as a reply in its
incident's thread, each marked sent. While the Bot API is unreachable it retries the same
message with a growing pause, so nothing is skipped or sent twice; the outbox is in SQLite, so
that holds across a restart too. Telegram's flood control (RetryAfter) is obeyed; a message
Telegram refuses for good (chat not found, bot blocked) is marked given up and the rest go on.

The answers to commands (`Replies`) take the same path, first in each round (a person is
waiting): paced per chat with the alerts, in their chat's order, each part retried after a
flood-control pause; one the Bot API keeps failing (network, 5xx) is given up after
`ANSWER_TRIES` tries in a row."""

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
from supervisor.record.store.errors import StoreRefusedError
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.outbox import OutboxStore
from supervisor.record.store.records import OutboxRow, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.control import Notification
from supervisor.tell.telegram.replies import Replies, Reply
from supervisor.tell.telegram.texts import split
from supervisor.tell.telegram.timing import Pacing

log = structlog.get_logger("supervisor.notify")

FINISH_WITHIN_S = 5.0  #: how long a stop waits for the message in hand
ANSWER_TRIES = 5  #: failed tries in a row (not flood control) before an answer is given up


class Sender:
    def __init__(
        self,
        bot: Bot,
        outbox: OutboxStore,
        store: Store,
        clock: Clock,
        pacing: Pacing,
        replies: Replies | None = None,
        *,
        tenure: Tenure | None = None,
    ) -> None:
        self.replies = replies if replies is not None else Replies()
        self.replies.on_ready = self.kick
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
        retries = 0  # in a row
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
                retries = 0
            else:
                retries += 1
                await asyncio.sleep(self._pacing.retry.delay(retries))

    async def _round(self) -> bool | None:
        """Deliver the ready answers, then the pending rows in order: None when there were
        none, False when one must be retried later; a stop ends the round after the message in
        hand, and an answer that became ready ends it after the row in hand (answers first)."""
        answered = await self._answers()
        if answered is False:
            return False
        rows = [] if self._stopping else await self._outbox.pending()
        if not rows:
            return answered
        for row in rows:
            if not await self._deliver(row):
                return False
            if self._stopping or self.replies.ready():
                break
        return True

    async def _answers(self) -> bool | None:
        ready = self.replies.ready()
        if not ready:
            return None
        while ready:
            for reply in ready:
                if not await self._answer(reply):
                    return False
                self.replies.done(reply)
                if self._stopping:
                    return True
            ready = self.replies.ready()
        return True

    async def _answer(self, reply: Reply) -> bool:
        """True when `reply` is done with (sent or given up); False: retry it later."""
        parts = reply.parts or []
        for index in range(reply.sent, len(parts)):
            await self._pace(reply.chat_id)
            last = index == len(parts) - 1
            if self._tenure.stops("the sender"):  # a deposed leader answers nobody
                raise _DeposedError
            try:
                await self._outbox.store.check_fence(f"an answer to {reply.chat_id}")
                await self._bot.send_message(
                    reply.chat_id,
                    parts[index],
                    parse_mode=ParseMode.HTML,
                    reply_parameters=(
                        ReplyParameters(message_id=reply.reply_to, allow_sending_without_reply=True)
                        if reply.reply_to is not None
                        else None
                    ),
                    reply_markup=reply.markup if last else None,
                )
            except RetryAfter as exc:
                seconds = _seconds(exc)
                self._answer_failed(reply, f"flood control: retry after {seconds:g}s")
                await asyncio.sleep(seconds)
                return False
            except (BadRequest, Forbidden, ChatMigrated) as exc:
                self._answer_failed(reply, f"Telegram refused it: {exc}; giving up on this answer")
                return True
            except TelegramError as exc:  # network, timeout, 5xx: retry, a few times
                reply.failures += 1
                if reply.failures >= ANSWER_TRIES:
                    self._answer_failed(reply, f"{exc}; giving up after {ANSWER_TRIES} tries")
                    return True
                self._answer_failed(reply, str(exc))
                return False
            reply.sent, reply.failures = index + 1, 0
            self.failures = 0
        return True

    def _answer_failed(self, reply: Reply, why: str) -> None:
        self.failures += 1
        log.warning("telegram answer failed", chat=reply.chat_id, to=reply.reply_to, error=why)

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
                seconds = _seconds(exc)
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


def _seconds(exc: RetryAfter) -> float:
    wait = exc.retry_after
    return wait.total_seconds() if not isinstance(wait, int) else float(wait)


class _DeposedError(Exception):
    """The sender found the lead gone by its own clock (`Tenure.stops` said so)."""
