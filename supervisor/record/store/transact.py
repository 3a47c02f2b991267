"""How a store call becomes a transaction: one per call, driver errors turned into a
`StoreRefusedError` naming the store, and, while we lead, every write fenced by our epoch (a
refusal written to the leadership journal and told to whoever listens)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from types import TracebackType
from typing import Self

from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from supervisor.record.store import lease
from supervisor.record.store.engine import make_any_engine, reason, transaction
from supervisor.record.store.errors import SERVER_DOWN, StoreRefusedError, server_unreachable
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.target import StoreTarget


class StoreTransactions:
    """The engine of an open store and its transactions; `Store` adds the records."""

    def __init__(self, engine: AsyncEngine, path: StoreTarget) -> None:
        self._engine = engine
        self.path = path
        #: the leader's epoch: set, every write is fenced by it (`supervisor.record.store.lease`)
        self.fence_epoch: int | None = None
        self.fence_holder = ""  #: who we are, for the journal of refusals
        self.fence_host = ""
        #: called once with the error when the fence refused us (we are deposed)
        self.on_deposed: list[Callable[[StaleEpochError], None]] = []
        self.closed = False

    async def close(self) -> None:
        self.closed = True
        await self._engine.dispose()

    @asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """On the store's engine while it is open. Once closed (the daemon stopped), on an
        engine of its own, disposed when the transaction ends: the closed engine would open a
        connection again and nobody would close it (a read of a stopped daemon's store)."""
        if not self.closed:
            async with transaction(self._engine, write=write) as conn:
                yield conn
            return
        engine = make_any_engine(self.path)
        try:
            async with transaction(engine, write=write) as conn:
                yield conn
        finally:
            await engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """One transaction; driver errors become a StoreError naming the file."""
        try:
            async with self._transaction(write=write) as conn:
                if write and self.fence_epoch is not None:
                    await lease.check_epoch(conn, epoch=self.fence_epoch, what="a store write")
                yield conn
        except StaleEpochError as err:
            await self._refused(err)
            raise
        except (StatementError, OSError, TimeoutError) as err:  # OSError: a server gone
            verb = "write to" if write else "read"
            raise StoreRefusedError(
                f"cannot {verb} store {self.path}: {reason(err)}",
                cause=SERVER_DOWN if server_unreachable(err) else "",
            ) from None

    async def check_fence(self, what: str) -> None:
        """Before an outside effect (a command, a message): raise `StaleEpochError` (recorded
        in the leadership journal) unless we still hold the lease's epoch. Unfenced: no-op."""
        if self.fence_epoch is None:
            return
        async with self._tx(write=False) as conn:
            await lease.check_epoch(conn, epoch=self.fence_epoch, what=what)

    async def _refused(self, err: StaleEpochError) -> None:
        """Write the refusal to the journal (its own transaction: the refused one rolled back;
        if the store cannot take it either, the refusal still stands), then tell listeners."""
        with suppress(StatementError, OSError, TimeoutError):
            async with self._transaction(write=True) as conn:
                await lease.write_journal(
                    conn,
                    epoch=err.mine,
                    holder=self.fence_holder,
                    host=self.fence_host,
                    event="refused",
                    detail=f"{err.what}: {err.holder} leads with epoch {err.current}",
                )
        for listener in list(self.on_deposed):
            listener(err)

    def tx(self, *, write: bool) -> AbstractAsyncContextManager[AsyncConnection]:
        """One transaction for store add-ons (`supervisor.record.store.outbox`): same errors as
        ours."""
        return self._tx(write=write)
