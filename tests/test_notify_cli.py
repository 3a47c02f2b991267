"""`fleet-supervisor notify-test` against the Bot API stub: the real client, over a real socket."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet_lab.botapi import BotApiStub
from tests import warmstart
from tests.helpers import write_fleet

pytestmark = pytest.mark.slow

TOKEN = "123456:TEST-token-never-printed"


async def _notify_test(config: Path) -> tuple[int, str, str]:
    done = await warmstart.run_async(
        ["--config", str(config), "notify-test"],
        timeout=60,
        env={**os.environ, "FLEET_SUPERVISOR_TELEGRAM_TOKEN": TOKEN},
    )
    return done.returncode, done.stdout, done.stderr


async def test_notify_test_sends_one_message_to_every_chat_and_never_prints_the_token(
    tmp_path: Path,
) -> None:
    stub = BotApiStub(token=TOKEN)
    await stub.start()
    try:
        config = write_fleet(
            tmp_path,
            {"asr": {"kind": "health", "url": "http://127.0.0.1:9/health"}},
        )
        text = config.read_text() + (
            f"notify:\n  telegram: {{chat_ids: [-100, -200], user_ids: [7], "
            f"base_url: '{stub.base_url}'}}\n"
        )
        config.write_text(text)
        code, out, err = await _notify_test(config)
        assert code == 0, out + err
        assert stub.texts(-100) == [
            "fleet-supervisor: test message. Alerts and commands will come through this chat."
        ]
        assert len(stub.texts(-200)) == 1
        assert out.splitlines()[1:] == [
            "chat -100: sent (message 1)",
            "chat -200: sent (message 2)",
        ]
        await stub.down()
        code, out, err = await _notify_test(config)
        assert code == 1
        assert out.startswith("cannot reach the Bot API: ")
        assert TOKEN not in out + err
        assert TOKEN.split(":")[1] not in out + err
    finally:
        await stub.stop()
