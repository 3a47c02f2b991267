"""The bot's request fence (`supervisor.tell.telegram.request`), alone: the real
python-telegram-bot client over HTTP to the Bot API stub, one pooled connection. A call made
while the lead holds goes out; a call begun after the lead was lost is refused before it is
written; a call that passed the first check and then waited for the pool's one connection (busy
with a long poll) while the lead ran out is refused when its bytes would be written. A refused
call reaches the stub not at all, and the part says `deposed` once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from telegram import Bot

from fleet_lab.botapi import BotApiStub
from supervisor.core.tenure import Tenure
from supervisor.tell.telegram.request import DeposedError, TenuredRequest
from tests.helpers import eventually

TOKEN = "123456:fence-token"
CHAT = 1001
REFUSED = "sendMessage not sent: this instance no longer leads"
DEPOSED = {"event": "deposed", "stops": "the bot", "why": "its lease ran out"}


@pytest.mark.parametrize(
    ("lost", "outcome", "calls", "logged"),
    [
        ("never", "sent", ["getMe", "getUpdates", "sendMessage"], []),
        ("before the call", REFUSED, ["getMe", "getUpdates"], [DEPOSED]),
        ("while it waits for a connection", REFUSED, ["getMe", "getUpdates"], [DEPOSED]),
    ],
)
async def test_a_deposed_leaders_call_reaches_no_bot_api(
    lost: str, outcome: str, calls: list[str], logged: list[dict[str, Any]]
) -> None:
    api = BotApiStub(token=TOKEN)
    await api.start()
    leads = True
    asked = 0

    def holds() -> bool:
        nonlocal asked
        asked += 1
        return leads

    request = TenuredRequest(Tenure(holds), part="the bot", connection_pool_size=1)
    bot = Bot(TOKEN, base_url=api.base_url, request=request, get_updates_request=request)
    try:
        await bot.initialize()
        with structlog.testing.capture_logs() as logs:
            # the stub holds a long poll 0.3 s: the pool's one connection is busy meanwhile
            poll = asyncio.create_task(bot.get_updates(timeout=1))
            await eventually(lambda: "getUpdates" in api.calls, what="the long poll")
            if lost == "before the call":
                leads = False
            before = asked
            send = asyncio.create_task(bot.send_message(CHAT, "hi", pool_timeout=5))
            if lost == "while it waits for a connection":
                await eventually(lambda: asked > before, what="the call's first check")
                leads = False
            try:
                said = (await send).text
            except DeposedError as err:
                said = str(err)
            await poll
    finally:
        await bot.shutdown()
        await api.stop()
    assert ("sent" if said == "hi" else said) == outcome
    assert api.calls == calls
    assert [{k: e[k] for k in ("event", "stops", "why")} for e in logs] == logged
    assert [e["log_level"] for e in logs] == ["warning"] * len(logged)
