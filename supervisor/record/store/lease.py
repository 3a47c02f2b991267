"""Leadership in the store: one lease row with a monotonically increasing epoch, renewed in a
transaction, and the journal of who led when. The fence every leader's write passes through.

Why this is safe (the store is the one arbiter; nothing is decided in memory):

- **Claim and renew** are one transaction that locks the lease row (``SELECT ... FOR UPDATE``
  on PostgreSQL; a SQLite write transaction holds the file). The row is taken over only when
  its ``expires_ms`` is past on the *database's* clock, and taking it over adds one to
  ``epoch``: two claimants are serialised by the row lock, the second sees the first's new
  expiry and follows. So at most one instance holds an unexpired lease, and epochs never repeat.
- **Clean stop**: the leader stops its supervisor (its last writes pass the fence under its own
  epoch), then releases the lease; the release (as any takeover) is announced in the same
  transaction (`supervisor.record.store.listen`, PostgreSQL's NOTIFY), so a follower claims at once
  instead of at its next claim. The announcement is only a hint: the row decides.
- **Killed leader**: it stops renewing; the lease runs out (15 s by default) and a follower
  takes it with epoch + 1.
- **Frozen leader** (SIGSTOP): the same, and when it wakes it still believes it leads until its
  next renewal fails. Everything it would do then passes the fence: each write transaction of
  a leader's store first reads the lease row (``FOR SHARE``) and is refused when the epoch
  there is not its own (`StaleEpochError`), and each command (`supervisor.execute.fenced`)
  and each message (the notifier's sender) asks the fence right before it goes out. The row
  lock orders a fenced write against a takeover: it either committed before the new epoch
  (and the new leader sees it) or it is refused. A refusal is written to the journal (and a
  frozen leader *inside* a transaction: below).
- **The same instance started again** (its name and host in the lease, and the process that
  held it gone from this host, or the same process beginning a new term after it stopped its
  supervisor) takes its own lease over at once with a new epoch, so a restart
  does not wait out the lease. A second process of the same name while the first still runs,
  or the same name on another host, waits the lease out like anyone else (instance names
  should be unique: `store.instance`, the host name by default).
- **Connection drops**: the leader cannot renew and steps down itself once its own lease
  (measured on its monotonic clock from before the last successful renewal) is over; a
  follower cannot take over before the lease ran out on the database's clock, which is later.
  Writes it tried meanwhile fail (no connection) and are not acted on; once reconnected, they
  meet the fence.
- **The store down for everyone** (the PostgreSQL server stopped): nobody renews and nobody
  takes over. The leader leads on from memory while it keeps trying (`supervisor.app.leader`),
  and a follower the store failed counts the lease from the store's return, as if renewed then:
  it takes the row over only once it has read it unrenewed for a whole lease after that. The
  leader, which tries every third of the lease, renews first and keeps its epoch, however long
  the outage ran past the lease on the database's clock.
- **Frozen inside a transaction**: its open session keeps the lease row's share lock, which
  would hold off every claim for the whole freeze. The server ends a session idle in a
  transaction for a third of the lease (`supervisor.record.store.pgengine`); one frozen
  mid-statement, where no server timeout runs, the follower ends once the lease ran out
  (`supervisor.record.store.stuck`). The woken leader's write fails (its connection is gone).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.record.store.dialect import upsert
from supervisor.record.store.errors import StoreError
from supervisor.record.store.listen import LEASE, notify
from supervisor.record.store.schema import leader_journal, leader_lease

LEASE_ID = 1


class StaleEpochError(StoreError):
    """A deposed leader tried to write or act: the lease's epoch is no longer its own."""

    expected_end = (
        True  #: not a crash: logged as a warning without traceback (`supervisor.core.logs`)
    )

    def __init__(self, *, mine: int, current: int, holder: str, what: str) -> None:
        self.mine, self.current, self.holder, self.what = mine, current, holder, what
        super().__init__(
            f"refused under stale epoch {mine}: {holder} leads with epoch {current} ({what})"
        )


@dataclass(frozen=True, kw_only=True)
class Lease:
    """The lease row as one claim or renewal left it, and what that call made of it."""

    epoch: int
    holder: str
    host: str
    acquired_ms: int
    renewed_ms: int
    expires_ms: int
    released: bool
    now_ms: int  #: the database's clock when it was read
    mine: bool = False  #: the caller holds it (after this call)
    took_over: bool = False  #: ... and took it in this call (a new epoch)
    previous: Lease | None = None  #: the lease before a takeover

    @property
    def expired(self) -> bool:
        return self.released or self.expires_ms <= self.now_ms


@dataclass(frozen=True, kw_only=True)
class LeaseJournalEntry:
    id: int
    at_ms: int
    epoch: int
    holder: str
    host: str
    event: str
    detail: str


async def db_now_ms(conn: AsyncConnection) -> int:
    """The database's clock in ms: PostgreSQL's (the same for every host); a SQLite file's
    host's (everyone using the file is on it)."""
    if conn.dialect.name == "postgresql":
        found = await conn.execute(
            text("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        )
        return int(found.scalar_one())
    return int(time.time() * 1000)


def _lease(row: Any, now_ms: int, **kw: Any) -> Lease:
    return Lease(
        epoch=row.epoch,
        holder=row.holder,
        host=row.host,
        acquired_ms=row.acquired_ms,
        renewed_ms=row.renewed_ms,
        expires_ms=row.expires_ms,
        released=bool(row.released),
        now_ms=now_ms,
        **kw,
    )


_ROW = select(leader_lease).where(leader_lease.c.id == LEASE_ID)
#: the lease row, as each dialect locks it, by `share`: built once, since every write of a
#: leader's store reads it (the fence), and a statement built per call costs more CPU than
#: reading the row
_LOCKED_ROW = {
    "postgresql": {share: _ROW.with_for_update(read=share) for share in (False, True)},
}


async def _locked_row(conn: AsyncConnection, *, share: bool = False) -> Any:
    query = _LOCKED_ROW.get(conn.dialect.name, {}).get(share, _ROW)
    return (await conn.execute(query)).one_or_none()


async def claim(
    conn: AsyncConnection,
    *,
    holder: str,
    host: str,
    epoch: int | None,
    lease_ms: int,
    pid: int = 0,
) -> Lease:
    """Renew the lease when `epoch` is ours, take it over when it ran out, else follow. One
    call is one decision; the caller's write transaction makes it atomic."""
    now = await db_now_ms(conn)
    await conn.execute(
        upsert(conn, leader_lease)
        .values(
            id=LEASE_ID,
            epoch=0,
            holder="",
            host="",
            acquired_ms=0,
            renewed_ms=0,
            expires_ms=0,
            released=1,
        )
        .on_conflict_do_nothing()
    )
    row = await _locked_row(conn)
    current = _lease(row, now)
    if epoch is not None and current.epoch == epoch and current.holder == holder:
        if current.released:  # we stepped down: a new claim starts a new epoch
            return current
        await conn.execute(
            update(leader_lease)
            .where(leader_lease.c.id == LEASE_ID)
            .values(renewed_ms=now, expires_ms=now + lease_ms)
        )
        return Lease(
            **{**current.__dict__, "renewed_ms": now, "expires_ms": now + lease_ms, "mine": True}
        )
    restarted = (  # this instance again: a new term of this process, or its old process gone
        epoch is None
        and pid != 0
        and (current.holder, current.host) == (holder, host)
        and (row.pid == pid or (row.pid != 0 and not _alive(row.pid)))
    )
    if not current.expired and not restarted:  # someone else leads
        return current
    new_epoch = current.epoch + 1
    await conn.execute(
        update(leader_lease)
        .where(leader_lease.c.id == LEASE_ID)
        .values(
            epoch=new_epoch,
            holder=holder,
            host=host,
            pid=pid,
            acquired_ms=now,
            renewed_ms=now,
            expires_ms=now + lease_ms,
            released=0,
        )
    )
    detail = "first lease" if current.epoch == 0 else _takeover_detail(current)
    await write_journal(
        conn, at_ms=now, epoch=new_epoch, holder=holder, host=host, event="took_over", detail=detail
    )
    await notify(conn, LEASE, str(new_epoch))  # on commit: the other instances claim at once
    return Lease(
        epoch=new_epoch,
        holder=holder,
        host=host,
        acquired_ms=now,
        renewed_ms=now,
        expires_ms=now + lease_ms,
        released=False,
        now_ms=now,
        mine=True,
        took_over=True,
        previous=current if current.epoch else None,
    )


def _alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (the lease's holder was on this host)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _takeover_detail(previous: Lease) -> str:
    how = "released" if previous.released else "expired" if previous.expired else "restarted"
    return f"from {previous.holder} on {previous.host} (epoch {previous.epoch}, {how})"


async def release(conn: AsyncConnection, *, holder: str, epoch: int) -> bool:
    """Step down cleanly (a stop): the lease is free at once. False if it was not ours."""
    now = await db_now_ms(conn)
    row = await _locked_row(conn)
    if row is None or row.epoch != epoch or row.holder != holder or row.released:
        return False
    await conn.execute(
        update(leader_lease).where(leader_lease.c.id == LEASE_ID).values(released=1, expires_ms=now)
    )
    await write_journal(
        conn,
        at_ms=now,
        epoch=epoch,
        holder=holder,
        host=row.host,
        event="released",
        detail="stopped",
    )
    await notify(conn, LEASE, str(epoch))  # on commit: a follower claims at once
    return True


async def check_epoch(conn: AsyncConnection, *, epoch: int, what: str) -> None:
    """The fence: raise `StaleEpochError` unless `epoch` is the lease's (row locked shared,
    so a takeover waits for this transaction, or this transaction sees the takeover)."""
    row = await _locked_row(conn, share=True)
    if row is None or row.epoch != epoch:
        raise StaleEpochError(
            mine=epoch,
            current=0 if row is None else row.epoch,
            holder="nobody" if row is None else row.holder,
            what=what,
        )


async def current_lease(conn: AsyncConnection) -> Lease | None:
    now = await db_now_ms(conn)
    row = (
        await conn.execute(select(leader_lease).where(leader_lease.c.id == LEASE_ID))
    ).one_or_none()
    return None if row is None or row.epoch == 0 else _lease(row, now)


async def write_journal(
    conn: AsyncConnection,
    *,
    at_ms: int | None = None,
    epoch: int,
    holder: str,
    host: str,
    event: str,
    detail: str,
) -> None:
    when = at_ms if at_ms is not None else await db_now_ms(conn)
    await conn.execute(
        insert(leader_journal).values(
            at_ms=when, epoch=epoch, holder=holder, host=host, event=event, detail=detail
        )
    )


async def lease_journal(conn: AsyncConnection) -> list[LeaseJournalEntry]:
    found = await conn.execute(select(leader_journal).order_by(leader_journal.c.id))
    return [LeaseJournalEntry(**m) for m in found.mappings().all()]
