"""The specs' TCP gate (`tests/tcpgate.py`) leaves nothing open when it stops, whenever it stops.

A connection it made upstream and never closed outlives the spec that stopped it, and is
collected during a later spec on the same worker, which then fails on the `ResourceWarning`
(`test_lease.py` did, in a proof run: two sockets to the PostgreSQL of an earlier spec)."""

from __future__ import annotations

import asyncio

from tests.helpers import eventually
from tests.tcpgate import TcpGate


async def test_a_gate_stopped_as_its_upstream_accepts_closes_that_connection() -> None:
    """Stopped in the step after the upstream server accepted (the gate's two pipes made, not
    yet started), the gate still closes its upstream connection: the server reads its end.
    Without the close in the connection's own `finally`, the pipes' tasks are cancelled before
    their first step, run no `finally`, and the server never reads an end."""
    accepted = asyncio.Event()
    ended: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        ended.append(await reader.read())  # b"" once the gate's side is closed
        writer.close()

    upstream = await asyncio.start_server(serve, "127.0.0.1", 0)
    gate = TcpGate(upstream.sockets[0].getsockname()[1])
    await gate.start()
    _, client = await asyncio.open_connection("127.0.0.1", gate.listen_port)
    try:
        await accepted.wait()
        await gate.stop()
        await eventually(lambda: ended == [b""], within=5, what="the upstream connection's end")
    finally:
        client.close()
        await client.wait_closed()
        upstream.close()
        await upstream.wait_closed()
