"""The root-owned signal helper (`supervisor/execute/signal.sh`, installed by install.sh): run
directly, as root would through sudo. It signals a vLLM engine/worker of the units' user and
refuses any other pid, saying why."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.config.supervised import UnitRef
from supervisor.execute.helpers import DROPIN, SIGNAL, SOURCES, signal_argv

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (signals other users)")


def _helper(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SOURCES[SIGNAL]), *args], capture_output=True, text=True, check=False
    )


@pytest.fixture
def spawn() -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def start(argv0: str, user: str | None = None) -> subprocess.Popen[bytes]:
        code = f"import os, time; os.execvp('sleep', [{argv0!r}, '60'])"
        prefix = ["setpriv", f"--reuid={user}", "--regid=65534", "--clear-groups"] if user else []
        proc = subprocess.Popen([*prefix, sys.executable, "-c", code])
        deadline = 50
        while deadline and not Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(
            argv0.encode()
        ):
            deadline -= 1
            subprocess.run(["sleep", "0.02"], check=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def test_a_pid_outside_the_units_and_vllm_is_refused(spawn: object) -> None:
    proc = spawn("sleep")  # type: ignore[operator]
    result = _helper("KILL", str(proc.pid), "--unit=vllm-none.service")
    assert result.returncode == 3
    assert result.stderr == (
        f"fleet-supervisor-signal: refusing to signal pid {proc.pid} (sleep 60 : not in the "
        "cgroup of --unit=vllm-none.service and not a vLLM engine or worker)\n"
    )
    assert _alive(proc)


def test_a_vllm_worker_of_the_units_user_is_signalled(spawn: object) -> None:
    proc = spawn("VLLM::Worker_TP0")  # type: ignore[operator]
    units = [UnitRef(host="spark1", unit="vllm-none.service")]
    argv = signal_argv("KILL", proc.pid, units)
    result = _helper(*argv[1:])
    assert (result.returncode, result.stderr) == (0, "")
    assert proc.wait(timeout=5) == -9


def test_a_vllm_worker_of_another_user_is_refused(spawn: object) -> None:
    proc = spawn("VLLM::Worker_TP0", user="nobody")  # type: ignore[operator]
    result = _helper("KILL", str(proc.pid), "--unit=vllm-none.service")
    assert result.returncode == 3
    assert result.stderr == (
        f"fleet-supervisor-signal: refusing to signal pid {proc.pid} (a vLLM process of nobody, "
        "not of root)\n"
    )
    assert _alive(proc)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["KILL", "1", "--unit=a.service"],
            3,
            "refusing to signal pid 1 (pid 1 is never signalled)",
        ),
        (["HUP", "4242"], 2, "signal must be TERM or KILL, not HUP"),
        (["KILL", "-1"], 2, "not a pid: -1"),
        (
            ["KILL", "SELF", "--user=root"],
            2,
            "unknown scope --user=root (--unit=UNIT or --container=NAME)",
        ),
    ],
)
def test_bad_requests_are_refused(args: list[str], code: int, message: str) -> None:
    result = _helper(*[str(os.getpid()) if arg == "SELF" else arg for arg in args])
    assert (result.returncode, result.stderr) == (code, f"fleet-supervisor-signal: {message}\n")


def _dropin(*args: str) -> subprocess.CompletedProcess[str]:
    script = str(SOURCES[DROPIN])
    return subprocess.run(["sh", script, *args], capture_output=True, text=True, check=False)


def test_the_dropin_helper_writes_only_the_command_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "vllm-a.service.d" / "50-fleet-supervisor-execstart.conf"
    result = _dropin(str(path), "--", "/usr/bin/docker", "exec", "c", "bash", "/w/run.sh")
    assert (result.returncode, result.stderr) == (0, "")
    assert path.read_text() == (
        "[Service]\nExecStart=\nExecStart=/usr/bin/docker exec c bash /w/run.sh\n"
    )
    assert oct(path.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/etc/passwd", "--", "x"], "not a drop-in path: /etc/passwd"),
        (["/etc/systemd/system/a.d/../../x.d/y.conf", "--", "x"], "not a drop-in path: "
         "/etc/systemd/system/a.d/../../x.d/y.conf"),
        (["/etc/systemd/system/a.d/x.conf", "x"], "too few arguments"),
        (["/etc/systemd/system/a.d/x.conf", "x", "y"], "expected -- after the path"),
    ],
)  # fmt: skip
def test_the_dropin_helper_refuses_anything_else(args: list[str], message: str) -> None:
    result = _dropin(*args)
    usage = "(usage: fleet-supervisor-dropin /PATH/UNIT.d/NAME.conf -- COMMAND [ARG]...)"
    assert (result.returncode, result.stderr) == (
        2,
        f"fleet-supervisor-dropin: {message} {usage}\n",
    )
