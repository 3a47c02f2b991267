"""The notifier's tables while the store cannot take writes (a full disk, the PostgreSQL server
down): what the composer and the sender would have written is kept here, in memory, and queued
behind the store's other writes (`ResilientStore.queue`), so alerts go on and nothing is lost.

- Outbox rows composed meanwhile get negative ids; the sender delivers them like any other, and
  what it marks (parts sent, failures, threads) lands on the row in memory. When the store
  takes the queued write, each row is inserted as it stands then (sent rows as sent), its
  incident's placeholder mapped to the real id.
- The composer's memories of incidents are kept over the stored ones.
- The timeline entries the store has not taken (`ResilientStore.held`) are composed from memory;
  the queued write then moves the composer's cursor past them, so they are not composed again.
- Rows that were in the store already and are sent or given up meanwhile are remembered as such
  (and their marks queued), so they are not sent twice.
- Each row is sent from one place: the ids a flush gives rows are seen only once its
  transaction committed (a mark made meanwhile lands here, not on a row a refused commit never
  made), and a row the store has taken while its flush has not resumed to say so is sent from
  here, not from the table too (`besides`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from supervisor.record.store.notify_rows import State
from supervisor.record.store.records import OutboxRow

MARK = "\n<i>(the store cannot be written: kept in memory, recorded when it returns)</i>"
"""Said under each message composed while the store cannot be written."""


@dataclass
class MemoryOutbox:
    rows: dict[int, OutboxRow] = field(default_factory=dict)  #: not yet in the store
    states: dict[int, tuple[State, bool]] = field(default_factory=dict)
    threads: dict[tuple[int, int], int] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)  #: stored rows sent or given up meanwhile
    held_seen: int = 0  #: the last held entry composed (held ids go -1, -2, ...)
    held_batch: int = 0  #: the last held entry of the batch being composed
    held_whole: bool = False  #: that batch has every held entry not composed before
    floor: int = 0  #: the composer's cursor is at least this (moved by a queued write)
    _next: itertools.count[int] = field(default_factory=lambda: itertools.count(-1, -1))

    def add(
        self,
        *,
        at: datetime,
        chat_ids: Sequence[int],
        drafts: Sequence[tuple[str, str, int | None]],
        epoch: int | None,
    ) -> list[int]:
        made = []
        for kind, text, incident_id in drafts:
            for chat_id in chat_ids:
                row = OutboxRow(
                    id=next(self._next),
                    created_at=at,
                    chat_id=chat_id,
                    incident_id=incident_id,
                    kind=kind,
                    text=text + MARK,
                    epoch=epoch,
                )
                self.rows[row.id] = row
                made.append(row.id)
        return made

    def besides(self, stored: Sequence[OutboxRow]) -> list[OutboxRow]:
        """Of the table's unsent rows, those not settled here: not sent or given up meanwhile
        (`done`), and not one of ours still kept here (the store took it, and the flush that
        made it has not resumed yet to say so: it is sent, or not, from here, once)."""
        ours = {(r.created_at, r.chat_id, r.text) for r in self.rows.values()}
        return [
            r
            for r in stored
            if r.id not in self.done and (r.created_at, r.chat_id, r.text) not in ours
        ]

    def pending(self) -> list[OutboxRow]:
        return [r for r in self.rows.values() if r.sent_at is None and not r.given_up]

    def update(self, row_id: int, **values: object) -> None:
        row = self.rows.get(row_id)
        if row is not None:
            self.rows[row_id] = replace(row, **values)  # type: ignore[arg-type]

    def cleared(self) -> None:
        """The store took every queued write: memory has nothing the store lacks."""
        self.states.clear()
        self.threads.clear()
        self.done.clear()
