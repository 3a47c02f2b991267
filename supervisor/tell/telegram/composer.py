"""The composer task: reads the timeline after its persisted cursor, turns what deserves a
message into outbox rows (in the same transaction as advancing the cursor), and lets time
release held messages and reminders. It reads as soon as the store commits a timeline entry
(`wake`), and every `every` seconds for what time releases."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from supervisor.core.aio import wait_event
from supervisor.core.clock import Clock
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.notify_rows import State
from supervisor.record.store.outbox import OutboxDraft, OutboxStore
from supervisor.tell.telegram.compose import compose, tick
from supervisor.tell.telegram.memory import Memory, Settings

log = structlog.get_logger("supervisor.notify")

#: After a wake-up, how long to let the rest of a burst (a transition and its probe entries) land.
_GATHER_S = 0.05


class Composer:
    def __init__(
        self,
        outbox: OutboxStore,
        clock: Clock,
        settings: Settings,
        chat_ids: Sequence[int],
        *,
        every: float = 1.0,
        on_queued: Callable[[], None] | None = None,
    ) -> None:
        self._outbox = outbox
        self._clock = clock
        self.settings = settings
        self._chats = tuple(chat_ids)
        self._every = every
        self._on_queued = on_queued
        #: held while the composer reads and writes memories (an /ack takes it too)
        self.lock = asyncio.Lock()
        self._woken = asyncio.Event()
        self._cursor: int | None = None  #: found by `begin`

    def wake(self) -> None:
        """A timeline entry was committed: compose now rather than at the next round."""
        self._woken.set()

    async def begin(self) -> None:
        """Find the cursor now (on a new store: the timeline's end), before anything this run
        records: what the endpoints do from then on is told, not taken for history. A store that
        does not answer leaves it to the first round `run` makes."""
        try:
            self._cursor = await self._outbox.start_cursor()
        except Exception:
            log.exception("composer: the outbox's cursor is not readable yet; retrying")

    async def run(self) -> None:
        cursor = self._cursor  # else found in the first round the store answers
        while True:
            self._woken.clear()  # an entry committed while this round reads is seen next round
            try:
                if cursor is None:  # (outside the retries, a store refusing it ended the task:
                    cursor = await self._outbox.start_cursor()  # no alert composed, ever)
                cursor = await self.step(cursor)
            except StaleEpochError as err:  # deposed: the new leader composes from the cursor
                log.warning("deposed", stops="the composer", refused=str(err))
                return
            except Exception:  # the store busy, say: try again next round
                log.exception("composer failed; retrying")
            if await wait_event(self._woken, self._every):
                await asyncio.sleep(_GATHER_S)  # let the rest of a burst of entries land

    async def step(self, cursor: int) -> int:
        """One round: compose every new timeline row, then the timed messages."""
        async with self.lock:
            while True:
                batch = await self._outbox.batch(cursor)
                if not batch.rows:
                    break
                memories = {i: Memory.from_json(s) for i, s in batch.states.items()}
                drafts: list[OutboxDraft] = []
                for row in batch.rows:
                    incident = batch.incidents.get(row.incident_id)
                    if incident is None:
                        continue
                    memory = memories.get(row.incident_id, Memory())
                    made, memories[row.incident_id] = compose(row, incident, memory, self.settings)
                    drafts += made
                # rows the store has not taken yet (negative ids) leave the cursor where it is
                cursor = max(cursor, batch.rows[-1].id, *(r.id for r in batch.rows))
                await self._commit(drafts, memories, cursor)
            await self._tick()
        return cursor

    async def _tick(self) -> None:
        states, incidents = await self._outbox.active()
        drafts: list[OutboxDraft] = []
        memories: dict[int, Memory] = {}
        now = self._clock.now()
        for incident_id, state in states.items():
            incident = incidents.get(incident_id)
            if incident is None:
                continue
            before = Memory.from_json(state)
            made, after = tick(incident, before, now, self.settings)
            if after != before:
                memories[incident_id] = after
            drafts += made
        if drafts or memories:
            await self._commit(drafts, memories, None)

    async def _commit(
        self, drafts: list[OutboxDraft], memories: dict[int, Memory], cursor: int | None
    ) -> None:
        states: dict[int, tuple[State, bool]] = {
            i: (m.to_json(), m.active) for i, m in memories.items()
        }
        await self._outbox.commit(
            drafts=drafts, chat_ids=self._chats, states=states, at=self._clock.now(), cursor=cursor
        )
        if drafts:
            log.info("notifications queued", kinds=[d.kind for d in drafts])
            if self._on_queued is not None:
                self._on_queued()
