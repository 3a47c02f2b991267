"""Group commit of snapshot saves: the saves that fall due while one transaction is being
written share the next one.

Every endpoint's probes fall due together, so a tick brings a burst of saves (a snapshot and the
probe's sample each). Written one transaction each, the burst pays per save what SQLite's own
work is far below: a BEGIN, the fence's read, the statements, a COMMIT, each a round trip to the
driver's thread. Grouped, it pays them once per group (`Store._save_many` writes a group's rows
with one statement each).

Nothing waits to fill a group: the first save of a quiet moment is written at once (on the loop's
next turn), and those that arrive while it is written form the next group. Each caller still
gets its own outcome: a group the store refuses (a full disk, a locked file, a server down, a
deposed leader) gives every caller that refusal; any other failure (e.g. a snapshot naming an
incident that is not there) is retried save by save, so one bad row fails only its own caller.
A caller cancelled while it waits does not take its row back: it is written with its group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from supervisor.core.events import ProbeResult
from supervisor.record.store.errors import StoreRefusedError
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.records import Snapshot

#: refusals of the store itself: every save of a group would meet them again
_SHARED = (StoreRefusedError, StaleEpochError)


@dataclass(frozen=True)
class Save:
    """One caller's save: the snapshot, the probe sample that led to it (if any), and the
    future its caller awaits."""

    snapshot: Snapshot
    sample: ProbeResult | None
    done: asyncio.Future[None] = field(compare=False)


WriteMany = Callable[[Sequence[Save]], Awaitable[None]]
"""Writes a group of saves in one transaction."""


class GroupedSaves:
    """The saves waiting for the next group, and the task that writes groups until none wait."""

    def __init__(self, write: WriteMany) -> None:
        self._write = write
        self._waiting: list[Save] = []
        self._writer: asyncio.Task[None] | None = None
        self.groups = 0  #: groups written (or refused), for the bench and the specs

    async def save(self, snapshot: Snapshot, sample: ProbeResult | None) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(Save(snapshot, sample, done))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_groups(), name="store-saves")
        await done

    async def idle(self) -> None:
        """Return once every save handed in so far is written (or refused)."""
        while self._writer is not None:
            await asyncio.shield(self._writer)

    async def _write_groups(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                self.groups += 1
                await self._write_group(group)
        except BaseException:
            for save in self._waiting:  # cancelled with the loop: nobody writes them now
                save.done.cancel()
            self._waiting = []
            raise
        finally:
            self._writer = None

    async def _write_group(self, group: Sequence[Save]) -> None:
        try:
            await self._write(group)
        except _SHARED as err:
            _settle(group, err)
            return
        except Exception as err:
            if len(group) == 1:
                _settle(group, err)
                return
            for save in group:
                await self._write_group((save,))
            return
        except BaseException:
            for save in group:
                save.done.cancel()
            raise
        _settle(group, None)


def _settle(group: Sequence[Save], err: BaseException | None) -> None:
    for save in group:
        if save.done.done():  # its caller was cancelled: the row is written all the same
            continue
        if err is None:
            save.done.set_result(None)
        else:
            save.done.set_exception(err)
