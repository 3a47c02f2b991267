"""A daemon loads only what its config needs: the Telegram client (python-telegram-bot) only when
Telegram is configured with a token, asyncssh only when a command goes to an SSH host, Alembic
(and Mako) only when its store must be made or upgraded, the lab never, and never what its
dependencies would import only because it is installed beside them (httpx's command line: click,
rich, pygments; trio) (`fleet-supervisor run` as a real process; what it imported, read at its
exit)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_fleet

pytestmark = pytest.mark.slow

WATCHED = (
    "telegram",
    "asyncssh",
    "cryptography",
    "fleet_lab.demo.command",
    "fleet_lab.vllm_sim.server",
)

#: `run` under the real CLI until SIGTERM; prints the watched modules it loaded by then
RUN = f"""
import sys
from supervisor.cli import main
code = main(["--config", sys.argv[1], "run", "--log-format", "json"])
print(code, sorted(m for m in {WATCHED!r} if m in sys.modules))
"""

TELEGRAM = {"chat_ids": [-100], "user_ids": [7], "base_url": "http://127.0.0.1:9/bot"}

#: what the daemon says once it has done what a spec asks about: started (the store made or
#: opened, the notifier made if configured), an endpoint probed, confirmed down and diagnosed
SETTLED = ("started", "diagnosed")
#: ... and, with a token, its Telegram side started (it asked the Bot API, which is not there)
TELEGRAM_UP = "telegram: Bot API not reachable; retrying"


def _run(
    config: Path, env: dict[str, str], code: str = RUN, until: tuple[str, ...] = SETTLED
) -> str:
    """`code` as a process of its own, stopped by SIGTERM once its JSON log has said every event
    in `until` (a fact it reports, not a time); what it printed on its way out."""
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    stop = threading.Timer(60, process.kill)  # a daemon that never says them: failed, not hung
    stop.start()
    assert process.stderr is not None
    said: list[str] = []
    waiting = set(until)
    for line in process.stderr:
        said.append(line)
        with contextlib.suppress(json.JSONDecodeError):
            waiting.discard(json.loads(line).get("event"))
        if not waiting:
            process.send_signal(signal.SIGTERM)
            break
    out, err = process.communicate()
    stop.cancel()
    assert not waiting, f"never said {sorted(waiting)}: {''.join(said)}{err}"
    assert process.returncode == 0, "".join(said) + err
    return out.strip()


@pytest.mark.parametrize(
    ("telegram", "env", "loaded"),
    [
        (None, {}, "0 []"),
        # configured without a token: disabled (logged), and the client is never loaded
        (TELEGRAM, {}, "0 []"),
        (TELEGRAM, {"FLEET_SUPERVISOR_TELEGRAM_TOKEN": "1:t"}, "0 ['cryptography', 'telegram']"),
    ],
)
def test_the_daemon_loads_the_telegram_client_only_when_telegram_is_configured(
    tmp_path: Path, telegram: dict[str, Any] | None, env: dict[str, str], loaded: str
) -> None:
    config = write_fleet(tmp_path, {"asr": {"kind": "health", "url": "http://127.0.0.1:9/h"}})
    if telegram is not None:
        text = config.read_text() + f"notify:\n  telegram: {telegram!r}\n"
        config.write_text(text)
    until = (*SETTLED, TELEGRAM_UP) if "FLEET_SUPERVISOR_TELEGRAM_TOKEN" in env else SETTLED
    assert _run(config, env, until=until) == loaded


#: a local command through the fleet's executor, then the SSH executor asked for
EXECUTOR = """
import asyncio, sys
from datetime import timedelta
from supervisor.config.supervised import Host
from supervisor.execute.fleet import FleetExecutor
forge = Host(name="forge", local=True)
fleet = FleetExecutor({"forge": forge})
result = asyncio.run(fleet.run(forge, ["true"], timeout=timedelta(seconds=5)))
print(result.exit_status, "asyncssh" in sys.modules)
fleet.ssh
print("asyncssh" in sys.modules)
asyncio.run(fleet.close())
"""


def test_asyncssh_is_loaded_only_when_a_command_goes_over_ssh() -> None:
    result = subprocess.run(
        [sys.executable, "-c", EXECUTOR], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0 False\nTrue\n"


#: `run` as `python -m supervisor` starts it, until SIGTERM; prints what it loaded of `names`
MAIN = """
import runpy, sys
sys.argv = ["supervisor", "--config", sys.argv[1], "run", "--log-format", "json"]
try:
    runpy.run_module("supervisor", run_name="__main__")
except SystemExit as stop:
    print(stop.code, sorted(m for m in {names!r} if sys.modules.get(m) is not None))
"""

STORE_TOOLS = ("alembic", "mako")
EXTRAS = ("click", "rich", "pygments", "trio")


def test_alembic_is_loaded_only_when_the_store_must_be_made_or_upgraded(tmp_path: Path) -> None:
    config = write_fleet(tmp_path, {"asr": {"kind": "health", "url": "http://127.0.0.1:9/h"}})
    code = MAIN.format(names=STORE_TOOLS)
    assert _run(config, {}, code) == "0 ['alembic', 'mako']"  # the store is made
    assert _run(config, {}, code) == "0 []"  # then opened as it is


def test_the_daemon_does_not_load_what_its_dependencies_import_only_when_installed(
    tmp_path: Path,
) -> None:
    for name in EXTRAS:  # the test extras install them; a deployed venv has none of them
        __import__(name)
    config = write_fleet(tmp_path, {"asr": {"kind": "health", "url": "http://127.0.0.1:9/h"}})
    assert _run(config, {}, MAIN.format(names=EXTRAS)) == "0 []"


#: the CLI's imports (the daemon's), then aiohttp's own default contexts and a new default one
CONTEXTS = """
import ssl
import supervisor.cli
import aiohttp.connector as connector
made = (connector._SSL_CONTEXT_VERIFIED, connector._SSL_CONTEXT_UNVERIFIED)
print([context.cert_store_stats()["x509_ca"] for context in made])
print(ssl.create_default_context().cert_store_stats()["x509_ca"] > 0)
"""


def test_aiohttps_default_contexts_read_no_ca_bundle_and_ssl_is_left_as_it_was() -> None:
    """aiohttp makes two TLS contexts when imported, for clients made without one (the daemon
    makes none): imported through `supervisor.core.httpclient`, they read no CA bundle (~2 MB
    resident); `ssl` is as it was after."""
    result = subprocess.run(
        [sys.executable, "-c", CONTEXTS], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[0, 0]\nTrue\n"
