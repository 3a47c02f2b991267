"""A PostgreSQL store deposed while cut off (`Store.depose`: a peer said it leads while the
store did not answer this instance) waits on nothing the partition holds: its connections are
dropped at once, so whatever was under way on them is refused at once, and the store closes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from supervisor.record.store.errors import StoreRefusedError
from supervisor.record.store.pgengine import CONNECT_TIMEOUT_S
from supervisor.record.store.store import Store
from supervisor.record.store.target import PgTarget
from tests.helpers import eventually
from tests.pgserver import PgServer
from tests.tcpgate import TcpGate

BIND = b"B"
"""The type of PostgreSQL's Bind message: the first a connection sends at its checkout runs
SQLAlchemy's pre-ping statement (`;`, prepared once; its `BEGIN` before it is a Query, `Q`)."""


@pytest.fixture
async def gate(pg_server: PgServer) -> AsyncIterator[TcpGate]:
    gate = TcpGate(pg_server.port)
    await gate.start()
    yield gate
    gate.open()
    await gate.stop()


async def _read(store: Store) -> None:
    async with store.tx(write=False) as conn:
        await conn.execute(text("SELECT 1"))


async def test_a_deposed_store_does_not_wait_for_a_cancel_the_partition_holds(
    pg_server: PgServer, gate: TcpGate
) -> None:
    """The partition begins as SQLAlchemy's pre-ping sends its statement. Cut short by
    `depose`, asyncpg asks the server to cancel it on a new connection (which the partition
    holds) and the pre-ping's rollback waits for that cancel: for the driver's statement limit
    (30 s), and a stopping daemon with it. Deposed, the store drops its connections instead."""
    direct = pg_server.database().url
    url = direct.replace(f":{pg_server.port}/", f":{gate.listen_port}/")
    store = await Store.open(PgTarget(url=url))
    await _read(store)
    await _read(store)  # a pooled connection: pinged at its next checkout
    gate.close_at(BIND)
    reading = asyncio.create_task(_read(store))
    await eventually(lambda: not gate.forwarding.is_set(), what="the partition")
    store.depose(epoch=2, holder="b")
    async with asyncio.timeout(CONNECT_TIMEOUT_S):  # the driver's limit is 30 s
        with pytest.raises(StoreRefusedError) as refused:
            await reading
        await store.close()
    assert str(refused.value) == (
        f"cannot read store {url}: it does not answer this instance; b leads (epoch 2)"
    )
