"""The specs' warm start (`tests/warmstart.py`) gives what `python -m supervisor` gives: the same
output and exit code, the caller's directory and environment, a real process to signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import warmstart
from tests.helpers import write_fleet


def _cold(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["check"],  # the config from the caller's environment
        ["--config", "missing.yaml", "check"],  # relative to the caller's directory
        ["status", "--nope"],  # a usage error: exit 2, argparse's words on stderr
    ],
)
def test_a_warm_command_answers_as_a_cold_one(tmp_path: Path, argv: list[str]) -> None:
    config = write_fleet(tmp_path, {"asr": {"kind": "health", "url": "http://127.0.0.1:9/h"}})
    env = {**os.environ, "FLEET_SUPERVISOR_CONFIG": str(config)}
    cold = _cold(argv, tmp_path, env)
    warm = warmstart.run(argv, timeout=60, cwd=tmp_path, env=env)
    assert (warm.returncode, warm.stdout, warm.stderr) == (
        cold.returncode,
        cold.stdout,
        cold.stderr,
    )


async def test_a_warm_daemon_is_a_process_of_its_own_that_signals_end(tmp_path: Path) -> None:
    config = write_fleet(tmp_path, {"asr": {"kind": "health", "url": "http://127.0.0.1:9/h"}})
    log = tmp_path / "daemon.log"
    with log.open("ab") as stderr:
        first = await warmstart.spawn(
            ["--config", str(config), "run", "--log-format", "json"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        second = await warmstart.spawn(["--config", str(config), "nope"], stdout=stderr,
                                       stderr=stderr)  # fmt: skip
    assert first.pid != os.getpid()
    assert os.readlink(f"/proc/{first.pid}/cwd") == os.getcwd()
    first.kill()
    assert (await first.wait(), first.returncode) == (-signal.SIGKILL, -signal.SIGKILL)
    first.kill()  # ended: nothing to signal, no error
    assert await second.wait() == 2
    assert "invalid choice: 'nope'" in log.read_text()


def test_a_warm_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    config = write_fleet(tmp_path, {"asr": {"kind": "health", "url": "http://127.0.0.1:9/h"}})
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        warmstart.run(["--config", str(config), "run"], timeout=0.5)
    assert caught.value.cmd == ["python", "-m", "supervisor", "--config", str(config), "run"]
