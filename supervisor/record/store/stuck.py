"""A frozen leader's transaction that no timeout of the server ends, ended by a follower.

A leader stopped (SIGSTOP, a hung VM) *between two messages of one statement* (asyncpg's
`executemany` sends a Bind and Execute per row and a Sync at the end) leaves its session
`active`, waiting on its client: neither `idle_in_transaction_session_timeout` nor
`statement_timeout` is running then, and PostgreSQL 15 has no `transaction_timeout`. If that
transaction passed the fence, it holds the lease row's share lock, and every follower's claim
waits on it for as long as the freeze lasts (seen in the SIGSTOP chaos spec under load:
`INSERT INTO notify_incidents ...`, `active`, `ClientRead`, the claim waiting on its
transaction id).

So before each claim a follower ends (`pg_terminate_backend`) every other session that holds a
lock on the lease table in a transaction older than `stuck_s`, but only once the lease has run
out on the database's clock: a leader whose lease is current is never touched, and a claim or
a fenced write lasts milliseconds. The woken leader finds its connection gone; nothing of that
transaction lands. On SQLite there is nothing to do (one box, one file lock).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_UNSTICK = text(
    """
    SELECT a.pid, pg_terminate_backend(a.pid) AS ended
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.relation = 'leader_lease'::regclass
      AND l.pid <> pg_backend_pid()
      AND a.xact_start < clock_timestamp() - make_interval(secs => :stuck_s)
      AND EXISTS (
        SELECT 1 FROM leader_lease
        WHERE id = 1
          AND expires_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint
      )
    """
)


async def end_stuck_sessions(conn: AsyncConnection, *, stuck_s: float) -> list[int]:
    """End the sessions that hold the lease table in a transaction older than `stuck_s` once
    the lease ran out; their pids (none on SQLite)."""
    if conn.dialect.name != "postgresql":
        return []
    rows = (await conn.execute(_UNSTICK, {"stuck_s": stuck_s})).all()
    return sorted({int(r.pid) for r in rows if r.ended})
