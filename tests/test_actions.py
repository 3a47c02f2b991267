"""The remediation actions, run for real on this machine (LocalExecutor), over the loopback sshd
(SshExecutor), and as dry-run plans (DryRunExecutor). Exact summaries throughout.

Processes the tests kill carry a random token in their title, so a test can only ever match
what it started itself (other test runs may have `VLLM::Worker` processes of their own).
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from fleet_lab.vllm_sim.server import SimBehaviour
from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.execute.base import CommandResult, Executor, command_line
from supervisor.execute.dryrun import DryRunExecutor
from supervisor.execute.local import LocalExecutor
from supervisor.execute.ssh import SshExecutor
from supervisor.playbook.actions.base import (
    Action,
    ActionContext,
    ActionOutcome,
    ActionParams,
    Target,
)
from supervisor.playbook.actions.dedupe import DedupeError, plan_dedupe
from supervisor.playbook.actions.registry import ACTIONS, build_registry
from supervisor.playbook.actions.steps import shorten
from supervisor.probe import run_probe
from tests.conftest import SimFactory
from tests.helpers import eventually
from tests.ports import free_port
from tests.sshd import Sshd

FORGE = Host(name="forge", local=True)
SPARK1 = Host(name="spark1", address="192.168.1.11")
SPARK2 = Host(name="spark2", address="192.168.1.12")
#: spark1 logged in to as root: the drop-in is written with `install` (no helper needed)
SPARK1_ROOT = Host(name="spark1", address="192.168.1.11", user="root")
WORKER = UnitRef(
    host="spark2", unit="vllm-ds4-worker.service", container="vllm_ds4", known_good="/w/worker.sh"
)
HEAD = UnitRef(
    host="spark1", unit="vllm-ds4-head.service", container="vllm_ds4", known_good="/w/head.sh"
)
DS4 = Endpoint(
    name="ds4", kind="openai", url="http://192.168.1.11:8000", model="ds4", units=(WORKER, HEAD)
)
PAIR = ((SPARK2, WORKER), (SPARK1, HEAD))
MARKER = "torch.cuda.empty_cache()"


async def _no_probe() -> ProbeResult:
    raise AssertionError("this action must not probe")


def context(
    executor: Executor,
    *,
    host: Host | None = FORGE,
    unit: UnitRef | None = None,
    units: tuple[tuple[Host, UnitRef], ...] = (),
    endpoint: Endpoint = DS4,
    probe: Callable[[], Awaitable[ProbeResult]] = _no_probe,
) -> ActionContext:
    return ActionContext(
        endpoint=endpoint,
        host=host,
        unit=unit,
        units=units,
        executor=executor,
        timeout=timedelta(seconds=10),
        facts={},
        dry_run=isinstance(executor, DryRunExecutor),
        clock=SystemClock(),
        probe=probe,
    )


async def act(name: str, ctx: ActionContext, **params: Any) -> ActionOutcome:
    chosen: Action[Any] = ACTIONS[name]
    return await chosen.run(ctx, chosen.params(**params))


def names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def backup(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def dry() -> DryRunExecutor:
    return DryRunExecutor(LocalExecutor())


def plan(executor: DryRunExecutor) -> list[tuple[str, str]]:
    return [(result.host, result.command) for result in executor.planned]


def ran(outcome: ActionOutcome) -> list[tuple[str, str]]:
    return [(result.host, result.command) for result in outcome.commands]


# --- the registry and the params models ------------------------------------------------------


def test_registry_has_every_action_of_the_design() -> None:
    assert sorted(ACTIONS) == [
        "ask_person",
        "dedupe_block",
        "docker_exec",
        "docker_restart",
        "drop_page_cache",
        "kill_processes",
        "restart_units",
        "shell",
        "start_units",
        "stop_job_gracefully",
        "stop_units",
        "wait_healthy",
        "write_execstart_dropin",
    ]
    for name, entry in ACTIONS.items():
        assert entry.name == name
        assert entry.doc
        assert entry.target in entry.targets
        assert issubclass(entry.params, ActionParams)
    assert ACTIONS["restart_units"].targets == {Target.UNITS, Target.UNIT}
    assert ACTIONS["write_execstart_dropin"].targets == {Target.UNIT}


def test_a_name_defined_twice_is_refused() -> None:
    from supervisor.playbook.actions import shell

    twin = ACTIONS["shell"]
    other = Action(
        name="shell", params=twin.params, run=twin.run, target=twin.target, doc="another"
    )

    class Module:  # stands in for a module: build_registry only reads its attributes
        pass

    module = Module()
    module.__dict__["other"] = other
    with pytest.raises(ValueError, match=r"^action 'shell' is defined twice$"):
        build_registry((shell, module))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        (
            "kill_processes",
            {"pattern": "(VLLM"},
            "Value error, not a valid regular expression: "
            "missing ), unterminated subpattern at position 0",
        ),
        ("kill_processes", {"pattern": "x", "signal": "HUP"}, "Input should be 'KILL' or 'TERM'"),
        (
            "kill_processes",
            {"pattern": ".*"},
            "Value error, '.*' matches any command line: name the processes",
        ),
        ("kill_processes", {"pattern": ""}, "String should have at least 1 character"),
        (
            "kill_processes",
            {"pattern": "x", "grace": "soon"},
            "expected a duration like 90s, 15m or 2h, got 'soon'",
        ),
        (
            "kill_processes",
            {"pattern": "x", "only_listening_on": 70000},
            "must be between 1 and 65535, got 70000",
        ),
        ("kill_processes", {"pattern": "x", "force": True}, "Extra inputs are not permitted"),
        (
            "write_execstart_dropin",
            {"command": "x", "dropin_name": "../evil.conf"},
            "Value error, must be a file name ending in .conf, got '../evil.conf'",
        ),
        (
            "write_execstart_dropin",
            {"command": "x", "systemd_dir": "etc/systemd"},
            "Value error, must be an absolute path, got 'etc/systemd'",
        ),
        (
            "drop_page_cache",
            {"shm_globs": ["/dev/shm/*"]},
            "Value error, must be an absolute file pattern with wildcards only in its last "
            "part, like /dev/shm/psm_*, got '/dev/shm/*'",
        ),
        (
            "drop_page_cache",
            {"shm_globs": ["/dev/*/psm_*"]},
            "Value error, must be an absolute file pattern with wildcards only in its last "
            "part, like /dev/shm/psm_*, got '/dev/*/psm_*'",
        ),
        (
            "dedupe_block",
            {"path": "/x.py", "marker": "", "expected": 2},
            "String should have at least 1 character",
        ),
        (
            "dedupe_block",
            {"path": "/x.py", "marker": "m", "expected": "2"},
            "Input should be a valid integer",
        ),
        ("wait_healthy", {"within": "0s"}, "must be longer than 0s, got 0s"),
        ("shell", {"argv": []}, "Tuple should have at least 1 item after validation, not 0"),
        ("ask_person", {"message": ""}, "String should have at least 1 character"),
    ],
)
def test_bad_params_are_refused_with_a_plain_message(
    name: str, params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        ACTIONS[name].params(**params)
    assert caught.value.errors()[0]["msg"] == message


# --- systemd units ---------------------------------------------------------------------------

SYSTEMCTL = """#!/bin/sh
for arg in "$@"; do printf '[%s]' "$arg"; done >> "$FLEET_TEST_SYSTEMCTL_LOG"
echo >> "$FLEET_TEST_SYSTEMCTL_LOG"
if [ "$*" = "$FLEET_TEST_SYSTEMCTL_FAIL" ]; then
    echo "$FLEET_TEST_SYSTEMCTL_ERROR" >&2
    exit 1
fi
"""


@dataclass
class Systemctl:
    """A `systemctl` put first on PATH: it logs its arguments and fails when told to (no
    systemd runs here; the actions' ordering and reporting are what is tested)."""

    log: Path
    monkeypatch: pytest.MonkeyPatch

    def fail(self, command: str, error: str) -> None:
        self.monkeypatch.setenv("FLEET_TEST_SYSTEMCTL_FAIL", command)
        self.monkeypatch.setenv("FLEET_TEST_SYSTEMCTL_ERROR", error)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Systemctl:
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "systemctl"
    script.write_text(SYSTEMCTL)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.setenv("FLEET_TEST_SYSTEMCTL_LOG", str(tmp_path / "systemctl.log"))
    monkeypatch.setenv("FLEET_TEST_SYSTEMCTL_FAIL", "")
    return Systemctl(tmp_path / "systemctl.log", monkeypatch)


async def test_restart_plan_stops_in_reverse_and_starts_in_order() -> None:
    executor = dry()
    outcome = await act("restart_units", context(executor, host=None, units=PAIR))
    assert outcome == ActionOutcome(
        ok=True,
        summary="would restart vllm-ds4-worker.service on spark2, "
        "then vllm-ds4-head.service on spark1",
        commands=tuple(executor.planned),
    )
    assert plan(executor) == [
        ("spark1", "sudo -n systemctl stop vllm-ds4-head.service"),
        ("spark2", "sudo -n systemctl stop vllm-ds4-worker.service"),
        ("spark2", "sudo -n systemctl reset-failed vllm-ds4-worker.service"),
        ("spark1", "sudo -n systemctl reset-failed vllm-ds4-head.service"),
        ("spark2", "sudo -n systemctl start vllm-ds4-worker.service"),
        ("spark1", "sudo -n systemctl start vllm-ds4-head.service"),
    ]


@pytest.mark.parametrize(
    ("name", "params", "planned", "summary"),
    [
        (
            "restart_units",
            {"reset_failed": False},
            [
                ("spark1", "sudo -n systemctl stop vllm-ds4-head.service"),
                ("spark1", "sudo -n systemctl start vllm-ds4-head.service"),
            ],
            "would restart vllm-ds4-head.service on spark1",
        ),
        (
            "stop_units",
            {},
            [("spark1", "sudo -n systemctl stop vllm-ds4-head.service")],
            "would stop vllm-ds4-head.service on spark1",
        ),
        (
            "start_units",
            {},
            [
                ("spark1", "sudo -n systemctl reset-failed vllm-ds4-head.service"),
                ("spark1", "sudo -n systemctl start vllm-ds4-head.service"),
            ],
            "would start vllm-ds4-head.service on spark1",
        ),
    ],
)
async def test_unit_actions_on_one_unit(
    name: str, params: dict[str, Any], planned: list[tuple[str, str]], summary: str
) -> None:
    executor = dry()
    outcome = await act(name, context(executor, host=SPARK1, unit=HEAD, units=PAIR), **params)
    assert (outcome.ok, outcome.summary, plan(executor)) == (True, summary, planned)


async def test_stop_and_start_plans_over_the_pair() -> None:
    stopping, starting = dry(), dry()
    stopped = await act("stop_units", context(stopping, host=None, units=PAIR))
    started = await act("start_units", context(starting, host=None, units=PAIR))
    assert stopped.summary == (
        "would stop vllm-ds4-head.service on spark1, then vllm-ds4-worker.service on spark2"
    )
    assert [command for _, command in plan(stopping)] == [
        "sudo -n systemctl stop vllm-ds4-head.service",
        "sudo -n systemctl stop vllm-ds4-worker.service",
    ]
    assert started.summary == (
        "would start vllm-ds4-worker.service on spark2, then vllm-ds4-head.service on spark1"
    )
    assert len(plan(starting)) == 4


@pytest.mark.sudo
async def test_restart_runs_in_order_and_stops_at_the_first_failure(
    systemctl: Systemctl,
) -> None:
    ok = await act("restart_units", context(LocalExecutor(), host=None, units=PAIR))
    assert ok.ok
    assert ok.summary == (
        "restarted vllm-ds4-worker.service on spark2, then vllm-ds4-head.service on spark1"
    )
    assert [host for host, _ in ran(ok)] == [
        "spark1",
        "spark2",
        "spark2",
        "spark1",
        "spark2",
        "spark1",
    ]
    assert systemctl.calls() == [
        "[stop][vllm-ds4-head.service]",
        "[stop][vllm-ds4-worker.service]",
        "[reset-failed][vllm-ds4-worker.service]",
        "[reset-failed][vllm-ds4-head.service]",
        "[start][vllm-ds4-worker.service]",
        "[start][vllm-ds4-head.service]",
    ]

    systemctl.log.unlink()
    systemctl.fail(
        "start vllm-ds4-worker.service",
        "Job for vllm-ds4-worker.service failed because the control process exited with "
        "error code.",
    )
    failed = await act("restart_units", context(LocalExecutor(), host=None, units=PAIR))
    assert failed.ok is False
    assert failed.summary == (
        "systemctl start vllm-ds4-worker.service on spark2 failed: exit 1: Job for "
        "vllm-ds4-worker.service failed because the control process exited with error code."
    )
    assert failed.needs_person == ""
    assert len(failed.commands) == 5
    assert failed.commands[-1].exit_status == 1
    assert systemctl.calls()[-1] == "[start][vllm-ds4-worker.service]"  # the head never started


@pytest.mark.sudo
async def test_a_unit_name_is_one_quoted_argument(systemctl: Systemctl) -> None:
    evil = UnitRef(host="forge", unit="x; rm -rf /")
    executor = dry()
    await act("stop_units", context(executor, unit=evil))
    assert plan(executor) == [("forge", "sudo -n systemctl stop 'x; rm -rf /'")]
    outcome = await act("stop_units", context(LocalExecutor(), unit=evil))
    assert outcome.summary == "stopped x; rm -rf / on forge"
    assert systemctl.calls() == ["[stop][x; rm -rf /]"]


async def test_a_unit_name_that_reads_as_an_option_is_refused() -> None:
    outcome = await act("stop_units", context(dry(), unit=UnitRef(host="forge", unit="--all")))
    assert (outcome.ok, outcome.summary, outcome.commands) == (
        False,
        "not a unit name: '--all'",
        (),
    )


async def test_units_without_any_unit_to_act_on() -> None:
    outcome = await act("restart_units", context(dry(), host=None))
    assert (outcome.ok, outcome.summary) == (False, "endpoint ds4 has no units to act on")


DROPIN = "[Service]\nExecStart=\nExecStart=/usr/bin/docker exec vllm_ds4 bash /w/head.sh\n"


@pytest.mark.sudo
async def test_execstart_dropin_is_written_then_reload_failure_is_reported(
    tmp_path: Path, systemctl: Systemctl
) -> None:
    systemctl.fail("daemon-reload", "Failed to connect to bus: Host is down")
    command = "/usr/bin/docker exec vllm_ds4 bash /w/head.sh"
    outcome = await act(
        "write_execstart_dropin",
        context(LocalExecutor(), host=SPARK1_ROOT, unit=HEAD),
        command=command,
        systemd_dir=str(tmp_path / "system"),
    )
    path = tmp_path / "system" / "vllm-ds4-head.service.d" / "50-fleet-supervisor-execstart.conf"
    assert path.read_text() == DROPIN
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert outcome.ok is False
    assert outcome.summary == (
        "systemctl daemon-reload on spark1 failed: exit 1: Failed to connect to bus: Host is down"
    )
    assert [result.exit_status for result in outcome.commands] == [0, 1]

    systemctl.fail("", "")
    again = await act(
        "write_execstart_dropin",
        context(LocalExecutor(), host=SPARK1_ROOT, unit=HEAD),
        command=command + "  ",
        systemd_dir=str(tmp_path / "system") + "/",
    )
    assert again.ok
    assert again.summary == f"wrote {path} on spark1 (ExecStart={command}), then daemon-reload"
    assert path.read_text() == DROPIN
    assert systemctl.calls() == ["[daemon-reload]", "[daemon-reload]"]


async def test_execstart_dropin_plan() -> None:
    executor = dry()
    outcome = await act(
        "write_execstart_dropin",
        context(executor, host=SPARK1, unit=HEAD),
        command="/usr/bin/docker exec vllm_ds4 bash /w/head.sh",
    )
    path = "/etc/systemd/system/vllm-ds4-head.service.d/50-fleet-supervisor-execstart.conf"
    assert outcome.summary == (
        f"would write {path} on spark1 "
        "(ExecStart=/usr/bin/docker exec vllm_ds4 bash /w/head.sh), then daemon-reload"
    )
    # a service account: the root-owned helper writes the drop-in from its (pinned) arguments
    assert plan(executor) == [
        (
            "spark1",
            f"sudo -n /usr/local/libexec/fleet-supervisor/dropin {path} -- "
            "/usr/bin/docker exec vllm_ds4 bash /w/head.sh",
        ),
        ("spark1", "sudo -n systemctl daemon-reload"),
    ]


@pytest.mark.parametrize(
    ("unit", "command", "reason"),
    [
        (HEAD, "", "no known-good command for vllm-ds4-head.service: set units[].known_good"),
        (HEAD, "   ", "no known-good command for vllm-ds4-head.service: set units[].known_good"),
        (
            HEAD,
            "/bin/true\nExecStartPre=/bin/rm -rf /",
            "the command for vllm-ds4-head.service holds a line break: not writing it",
        ),
    ],
)
async def test_execstart_dropin_refusals(unit: UnitRef, command: str, reason: str) -> None:
    executor = dry()
    outcome = await act(
        "write_execstart_dropin", context(executor, host=SPARK1, unit=unit), command=command
    )
    assert outcome == ActionOutcome(ok=False, summary=reason, needs_person=reason)
    assert executor.planned == []


async def test_execstart_dropin_refuses_a_unit_name_with_a_slash() -> None:
    outcome = await act(
        "write_execstart_dropin",
        context(dry(), host=SPARK1, unit=UnitRef(host="spark1", unit="../../x.service")),
        command="/bin/true",
    )
    assert (outcome.ok, outcome.summary) == (False, "not a unit name: '../../x.service'")


async def test_execstart_dropin_needs_a_unit() -> None:
    outcome = await act("write_execstart_dropin", context(dry()), command="/bin/true")
    assert (outcome.ok, outcome.summary) == (False, "no unit to act on for endpoint ds4")


# --- page cache ------------------------------------------------------------------------------


@pytest.fixture
def shm(tmp_path: Path) -> Path:
    folder = tmp_path / "shm"
    folder.mkdir()
    for name in ("psm_a1", "psm_b2", "sem.mp-x9", "other_keep", "psm_ spaced"):
        (folder / name).write_text("x")
    (tmp_path / "drop_caches").write_text("0\n")
    return folder


@pytest.mark.sudo
async def test_drop_page_cache_for_real(tmp_path: Path, shm: Path) -> None:
    outcome = await act(
        "drop_page_cache",
        context(LocalExecutor()),
        drop_caches_path=str(tmp_path / "drop_caches"),
        shm_globs=[f"{shm}/psm_[a-z]*", f"{shm}/sem.mp-*", f"{shm}/none_*"],
    )
    assert outcome.ok, outcome.summary
    assert (tmp_path / "drop_caches").read_text() == "3\n"
    assert names(shm) == ["other_keep", "psm_ spaced"]
    assert outcome.summary == (
        f"dropped the page cache on forge ({tmp_path}/drop_caches) and removed 3 shm segments "
        f"({shm}/psm_a1, {shm}/psm_b2, {shm}/sem.mp-x9)"
    )
    assert [result.command.split()[0] for result in outcome.commands] == ["sh", "sync", "sh", "rm"]


async def test_drop_page_cache_plan_lists_what_it_would_remove(tmp_path: Path, shm: Path) -> None:
    executor = dry()
    drop = str(tmp_path / "drop_caches")
    outcome = await act(
        "drop_page_cache",
        context(executor, host=FORGE),
        drop_caches_path=drop,
        shm_globs=[f"{shm}/psm_*"],
    )
    assert outcome.summary == (
        f"would drop the page cache on forge ({drop}) and would remove 3 shm segments "
        f"({shm}/psm_ spaced, {shm}/psm_a1, {shm}/psm_b2)"
    )
    assert plan(executor) == [
        ("forge", "sync"),
        ("forge", f"sudo -n sh -c 'echo 3 > \"$1\"' sh {drop}"),
        ("forge", f"sudo -n rm -f -- '{shm}/psm_ spaced' {shm}/psm_a1 {shm}/psm_b2"),
    ]
    assert (tmp_path / "drop_caches").read_text() == "0\n"
    assert len(names(shm)) == 5


@pytest.mark.sudo
async def test_drop_page_cache_with_nothing_in_shm_and_a_failing_write(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "drop_caches"
    outcome = await act(
        "drop_page_cache",
        context(LocalExecutor()),
        drop_caches_path=str(missing),
        shm_globs=[f"{tmp_path}/psm_*"],
    )
    assert outcome.ok is False
    failed = f"sh -c 'echo 3 > \"$1\"' sh {missing} on forge failed: exit "
    assert outcome.summary.startswith(failed)
    assert str(missing) in outcome.summary.removeprefix(failed)  # the shell's own complaint
    assert [c for _, c in ran(outcome)][-1] == failed.split(" on forge")[0]


async def test_drop_page_cache_needs_a_host() -> None:
    outcome = await act("drop_page_cache", context(dry(), host=None))
    assert (outcome.ok, outcome.summary) == (False, "no host to act on for endpoint ds4")


# --- processes -------------------------------------------------------------------------------

LISTENER = """
import os, socket, sys, time
sock = socket.socket()
sock.bind(("127.0.0.1", int(os.environ["FLEET_TEST_PORT"])))
sock.listen()
print("ready", flush=True)
time.sleep(60)
"""


@dataclass
class Started:
    pid: int
    args: str  #: the command line ps shows


class Spawner:
    def __init__(self) -> None:
        self.procs: list[asyncio.subprocess.Process] = []
        self.token = secrets.token_hex(4)

    def title(self, name: str) -> str:
        return f"{name}-{self.token}" if name.startswith("VLLM::") else name

    async def sleeper(self, name: str, *, ignore_term: bool = False) -> Started:
        """`NAME 60` (a sleep under another title); `ignore_term` survives SIGTERM."""
        title = self.title(name)
        trap = "trap '' TERM; " if ignore_term else ""
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", f'{trap}exec -a "$0" sleep 60', title
        )
        self.procs.append(proc)
        started = Started(proc.pid, f"{title} 60")
        await eventually(lambda: _cmdline(proc.pid) == started.args, within=5, what=title)
        return started

    async def listener(self, name: str, port: int) -> Started:
        """A python process titled NAME (its whole command line) listening on 127.0.0.1:PORT."""
        title = self.title(name)
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            'exec -a "$0" "$1"',
            title,
            sys.executable,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "FLEET_TEST_PORT": str(port)},
        )
        self.procs.append(proc)
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(LISTENER.encode())
        proc.stdin.close()
        async with asyncio.timeout(10):
            assert await proc.stdout.readline() == b"ready\n"
        return Started(proc.pid, title)

    async def close(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(part.decode() for part in raw.split(b"\0") if part)


def running(started: Started) -> bool:
    return _cmdline(started.pid) == started.args


@pytest.fixture
async def spawn() -> AsyncIterator[Spawner]:
    spawner = Spawner()
    yield spawner
    await spawner.close()


def label(started: Started) -> str:
    return f"{started.pid} ({shorten(started.args)})"


@pytest.mark.sudo
async def test_kill_processes_kills_only_what_matches(spawn: Spawner) -> None:
    first = await spawn.sleeper("VLLM::Worker_TP0")
    second = await spawn.sleeper("VLLM::Worker_TP1")
    decoy = await spawn.sleeper("nginx")
    pattern = rf"^VLLM::Worker_TP\d-{spawn.token}"
    outcome = await act("kill_processes", context(LocalExecutor()), pattern=pattern)
    assert outcome.ok, outcome.summary
    assert outcome.summary == f"sent KILL on forge to {label(first)}, {label(second)}"
    assert not running(first)
    assert not running(second)
    assert running(decoy)
    assert ran(outcome) == [
        ("forge", "ps -ww -eo pid=,user=,args="),
        ("forge", f"kill -s KILL -- {first.pid}"),
        ("forge", f"kill -s KILL -- {second.pid}"),
        ("forge", "ps -ww -eo pid=,user=,args="),
    ]


@pytest.mark.sudo
async def test_kill_processes_term_then_kill_after_grace(spawn: Spawner) -> None:
    polite = await spawn.sleeper("VLLM::EngineCore_A")
    stubborn = await spawn.sleeper("VLLM::EngineCore_B", ignore_term=True)
    outcome = await act(
        "kill_processes",
        context(LocalExecutor()),
        pattern=f"^VLLM::EngineCore_.-{spawn.token}",
        signal="TERM",
        grace="500ms",
        user="root" if os.geteuid() == 0 else os.environ.get("USER", "root"),
    )
    assert outcome.ok, outcome.summary
    assert outcome.summary == (
        f"sent TERM on forge to {label(polite)}, {label(stubborn)}; "
        "1 still ran after 500ms and got KILL"
    )
    assert not running(polite)
    assert not running(stubborn)
    assert [c for _, c in ran(outcome) if c.startswith("kill")] == [
        f"kill -s TERM -- {polite.pid}",
        f"kill -s TERM -- {stubborn.pid}",
        f"kill -s KILL -- {stubborn.pid}",
    ]


async def test_kill_processes_leaves_other_users_alone(spawn: Spawner) -> None:
    worker = await spawn.sleeper("VLLM::Worker_TP0")
    pattern = f"^VLLM::Worker_TP0-{spawn.token}"
    outcome = await act(
        "kill_processes", context(LocalExecutor()), pattern=pattern, user="someone-else"
    )
    assert (outcome.ok, outcome.summary) == (
        True,
        f"no process on forge matches {pattern}: nothing to kill",
    )
    assert running(worker)


async def test_kill_processes_never_kills_pid_1_or_itself() -> None:
    own = re.escape(_cmdline(os.getpid()))
    init = re.escape(_cmdline(1))
    pattern = f"^(?:{own}|{init})$"
    executor = dry()
    outcome = await act("kill_processes", context(executor), pattern=pattern)
    assert outcome.ok, outcome.summary
    # (another process with exactly this test run's command line would be planned: not these)
    planned = [command for _, command in plan(executor)]
    assert f"sudo -n kill -s KILL -- {os.getpid()}" not in planned
    assert "sudo -n kill -s KILL -- 1" not in planned
    if not planned:
        assert outcome.summary == f"no process on forge matches {pattern}: nothing to kill"


async def test_kill_processes_plan_lists_the_pids(spawn: Spawner) -> None:
    worker = await spawn.sleeper("VLLM::Worker_TP0")
    executor = dry()
    outcome = await act(
        "kill_processes",
        context(executor),
        pattern=f"^VLLM::Worker_TP0-{spawn.token}",
        signal="TERM",
    )
    assert outcome.summary == (
        f"would send TERM on forge to {label(worker)}, then KILL those still running after 30s"
    )
    # as root the daemon signals with kill itself; as another user, through the signal helper
    signalled = (
        f"kill -s TERM -- {worker.pid}"
        if os.geteuid() == 0
        else f"/usr/local/libexec/fleet-supervisor/signal TERM {worker.pid}"
    )
    assert plan(executor) == [("forge", f"sudo -n {signalled}")]
    assert running(worker)


@pytest.mark.sudo
async def test_kill_processes_only_listening_on_a_port(spawn: Spawner) -> None:
    port = free_port()
    listening = await spawn.listener("VLLM::Worker_TP0", port)
    idle = await spawn.sleeper("VLLM::Worker_TP1")
    decoy = await spawn.sleeper("nginx")
    outcome = await act(
        "kill_processes",
        context(LocalExecutor()),
        pattern=rf"^VLLM::Worker_TP\d-{spawn.token}",
        only_listening_on=port,
    )
    assert outcome.ok, outcome.summary
    assert outcome.summary == f"sent KILL on forge to {label(listening)}"
    assert not running(listening)
    assert running(idle)
    assert running(decoy)
    assert ran(outcome)[1] == ("forge", f"ss -Hltnp sport = :{port}")

    nothing = await act(
        "kill_processes",
        context(LocalExecutor()),
        pattern=rf"^VLLM::Worker_TP\d-{spawn.token}",
        only_listening_on=port,
    )
    assert (nothing.ok, nothing.summary) == (
        True,
        f"nothing listens on port {port} on forge: nothing to kill",
    )


@pytest.mark.sudo
async def test_kill_processes_refuses_a_port_held_by_something_else(spawn: Spawner) -> None:
    port = free_port()
    nginx = await spawn.listener("nginx: master process", port)
    worker = await spawn.sleeper("VLLM::Worker_TP0")
    pattern = "^VLLM::Worker"
    outcome = await act(
        "kill_processes", context(LocalExecutor()), pattern=pattern, only_listening_on=port
    )
    reason = (
        f"port {port} is held by pid {nginx.pid} (nginx: master process) "
        "which does not match ^VLLM::Worker: not killing it"
    )
    assert outcome == ActionOutcome(
        ok=False, summary=reason, needs_person=reason, commands=outcome.commands
    )
    assert [c for _, c in ran(outcome)] == [
        "ps -ww -eo pid=,user=,args=",
        f"ss -Hltnp sport = :{port}",
    ]
    assert running(nginx)
    assert running(worker)


# --- dedupe_block ----------------------------------------------------------------------------

GOOD_MXFP4 = """\
import torch
from torch.nn import Parameter


class Mxfp4MoEMethod:
    def __init__(self, moe):
        self.moe = moe
        self.kernel = None

    def _setup_kernel(self, layer, w13, w2, w13_scale, w2_scale):
        self.kernel = (w13.t().contiguous(), w2.t().contiguous(), w13_scale, w2_scale)

    def process_weights_after_loading(self, layer):
        w13 = layer.w13_weight.data
        w2 = layer.w2_weight.data
        w13_scale = layer.w13_weight_scale.data
        w2_scale = layer.w2_weight_scale.data
        self._setup_kernel(layer, w13, w2, w13_scale, w2_scale)
        # The kernel holds swizzled copies: free the originals before graph capture.
        del w13, w2, w13_scale, w2_scale
        torch.cuda.empty_cache()
        layer.w13_weight = Parameter(self.kernel[0], requires_grad=False)
        layer.w2_weight = Parameter(self.kernel[1], requires_grad=False)

    def maybe_release(self):
        if self.kernel is not None:
            torch.cuda.empty_cache()
"""
FIX = """\
        # The kernel holds swizzled copies: free the originals before graph capture.
        del w13, w2, w13_scale, w2_scale
        torch.cuda.empty_cache()
"""
TWICE_MXFP4 = GOOD_MXFP4.replace(FIX, FIX + FIX)
THRICE_MXFP4 = GOOD_MXFP4.replace(FIX, FIX * 3)


@pytest.mark.parametrize(
    ("text", "marker", "expected", "result", "ranges"),
    [
        ("a\nM\na\nM\nb\n", "M", 1, "a\nM\nb\n", ((3, 4),)),
        ("s\nd\nM\nd\nM\nd\nM\ne\n", "M", 1, "s\nd\nM\ne\n", ((4, 7),)),
        ("a\nM\na\nM", "M", 1, "a\nM\n", ((3, 4),)),
        ("M\r\nM\r\nx\r\n", "M", 1, "M\r\nx\r\n", ((2, 2),)),
        ("M\nx\nM\nM\n", "M", 2, "M\nx\nM\n", ((4, 4),)),
        ("M\nx\n", "M", 1, "M\nx\n", ()),
        (TWICE_MXFP4, MARKER, 2, GOOD_MXFP4, ((22, 24),)),
        (THRICE_MXFP4, MARKER, 2, GOOD_MXFP4, ((22, 27),)),
    ],
)
def test_plan_dedupe(
    text: str, marker: str, expected: int, result: str, ranges: tuple[tuple[int, int], ...]
) -> None:
    planned = plan_dedupe(text, marker, expected)
    assert (planned.text, planned.ranges, planned.after) == (result, ranges, expected)


@pytest.mark.parametrize(
    ("text", "expected", "message"),
    [
        ("M\nx\nM\n", 1, "has 2 lines with 'M': removing repeated blocks cannot bring that to 1"),
        (
            "x\nM\ny\nM\nx\nM\ny\nM\n",
            3,
            "has 4 lines with 'M': removing repeated blocks cannot bring that to 3",
        ),
        ("M\n", 2, "has 1 line with 'M', fewer than the expected 2"),
    ],
)
def test_plan_dedupe_refuses(text: str, expected: int, message: str) -> None:
    with pytest.raises(DedupeError) as caught:
        plan_dedupe(text, "M", expected)
    assert str(caught.value) == message


def _mxfp4(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vllm" / "mxfp4.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o640)
    return path


async def _dedupe(
    executor: Executor, path: Path, host: Host = FORGE, **extra: Any
) -> ActionOutcome:
    return await act(
        "dedupe_block",
        context(executor, host=host),
        path=str(path),
        marker=MARKER,
        expected=2,
        **extra,
    )


@pytest.mark.sudo
async def test_dedupe_block_removes_the_pasted_copy(tmp_path: Path) -> None:
    path = _mxfp4(tmp_path, TWICE_MXFP4)
    outcome = await _dedupe(LocalExecutor(), path)
    assert outcome.ok, outcome.summary
    assert outcome.summary == (
        f"removed 1 repeated copy (3 lines) of the block with '{MARKER}' from {path} on forge: "
        f"3 -> 2 lines hold it (backup {path}.bak)"
    )
    assert path.read_text() == GOOD_MXFP4
    assert backup(path).read_text() == TWICE_MXFP4
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [c for _, c in ran(outcome)] == [
        f"cat {path}",
        f"sed -i.bak -e 22,24d {path}",
        f"cat {path}",
        f"python3 -m py_compile {path}",
    ]


@pytest.mark.sudo
async def test_dedupe_block_with_the_right_count_changes_nothing(tmp_path: Path) -> None:
    path = _mxfp4(tmp_path, GOOD_MXFP4)
    outcome = await _dedupe(LocalExecutor(), path)
    assert (outcome.ok, outcome.summary) == (
        True,
        f"{path} on forge has 2 lines with '{MARKER}': nothing to do",
    )
    assert path.read_text() == GOOD_MXFP4
    assert not backup(path).exists()


@pytest.mark.sudo
async def test_dedupe_block_restores_a_file_that_does_not_compile(tmp_path: Path) -> None:
    broken = THRICE_MXFP4 + "\ndef broken(:\n    pass\n"
    path = _mxfp4(tmp_path, broken)
    outcome = await _dedupe(LocalExecutor(), path)
    reason = (
        f"{path} on forge does not compile without 2 repeated copies (6 lines) of the block "
        f"with '{MARKER}': restored it from {path}.bak (exit 1: SyntaxError: invalid syntax)"
    )
    assert outcome == ActionOutcome(
        ok=False, summary=reason, needs_person=reason, commands=outcome.commands
    )
    assert path.read_text() == broken
    assert [c for _, c in ran(outcome)][-1] == f"cp -p {path}.bak {path}"


@pytest.mark.sudo
async def test_dedupe_block_refuses_what_exact_duplicates_cannot_fix(tmp_path: Path) -> None:
    text = GOOD_MXFP4 + "\n\ndef again():\n    torch.cuda.empty_cache()\n"
    path = _mxfp4(tmp_path, text)
    outcome = await _dedupe(LocalExecutor(), path)
    reason = (
        f"{path} on forge has 3 lines with '{MARKER}': removing repeated blocks cannot bring "
        "that to 2: not changing it"
    )
    assert (outcome.ok, outcome.summary, outcome.needs_person) == (False, reason, reason)
    assert path.read_text() == text
    assert len(outcome.commands) == 1


@pytest.mark.sudo
async def test_dedupe_block_plan_reads_but_does_not_write(tmp_path: Path) -> None:
    path = _mxfp4(tmp_path, TWICE_MXFP4)
    executor = dry()
    outcome = await _dedupe(executor, path)
    assert outcome.summary == (
        f"would remove 1 repeated copy (3 lines) of the block with '{MARKER}' from {path} on "
        f"forge: 3 -> 2 lines hold it (backup {path}.bak)"
    )
    assert plan(executor) == [
        ("forge", f"sudo -n sed -i.bak -e 22,24d {path}"),
        ("forge", f"sudo -n python3 -m py_compile {path}"),
    ]
    assert path.read_text() == TWICE_MXFP4


class Canned:
    """A stand-in host inside a container (no docker here): read-only commands answer from
    `outputs` (by command line; unknown ones fail), changes succeed without doing anything."""

    def __init__(self, outputs: dict[str, str]) -> None:
        self.outputs = outputs

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        timeout: timedelta,
        sudo: bool = False,
        mutating: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        line = command_line(argv, sudo=sudo)
        known = line in self.outputs or mutating
        return CommandResult(
            host=host.name,
            command=line,
            exit_status=0 if known else 1,
            stdout=self.outputs.get(line, ""),
            stderr="" if known else "unexpected command",
            duration_s=0.0,
        )

    async def close(self) -> None:
        return None


async def test_dedupe_block_restores_when_the_edit_did_not_land() -> None:
    path = "/opt/vllm/mxfp4.py"
    cat = f"sudo -n docker exec vllm_ds4 cat {path}"
    outcome = await act(
        "dedupe_block",
        context(Canned({cat: TWICE_MXFP4}), host=SPARK1, unit=HEAD),
        path=path,
        marker=MARKER,
        expected=2,
        in_container=True,
    )
    reason = f"{path} in vllm_ds4 on spark1 did not read back as planned: restored it from .bak"
    assert (outcome.ok, outcome.summary, outcome.needs_person) == (False, reason, reason)
    assert [c for _, c in ran(outcome)] == [
        cat,
        f"sudo -n docker exec vllm_ds4 sed -i.bak -e 22,24d {path}",
        cat,
        f"sudo -n docker exec vllm_ds4 cp -p {path}.bak {path}",
    ]


async def test_dedupe_block_inside_the_container_plan() -> None:
    path = "/usr/lib/python3/dist-packages/vllm/mxfp4.py"
    executor = DryRunExecutor(Canned({f"sudo -n docker exec vllm_ds4 cat {path}": THRICE_MXFP4}))
    outcome = await act(
        "dedupe_block",
        context(executor, host=SPARK1, unit=HEAD),
        path=path,
        marker=MARKER,
        expected=2,
        in_container=True,
    )
    assert outcome.summary == (
        f"would remove 2 repeated copies (6 lines) of the block with '{MARKER}' from {path} in "
        f"vllm_ds4 on spark1: 4 -> 2 lines hold it (backup {path}.bak)"
    )
    assert plan(executor) == [
        ("spark1", f"sudo -n docker exec vllm_ds4 sed -i.bak -e 22,27d {path}"),
        ("spark1", f"sudo -n docker exec vllm_ds4 python3 -m py_compile {path}"),
    ]


@pytest.mark.parametrize(
    ("params", "unit", "reason"),
    [
        ({"path": "mxfp4.py"}, HEAD, "path must be an absolute path, got 'mxfp4.py'"),
        (
            {"path": "/x.py", "in_container": True},
            UnitRef(host="spark1", unit="a.service"),
            "a.service has no container: set units[].container",
        ),
        (
            {"path": "/x.py", "in_container": True},
            UnitRef(host="spark1", unit="a.service", container="-u root"),
            "not a container name: '-u root'",
        ),
    ],
)
async def test_dedupe_block_refusals(params: dict[str, Any], unit: UnitRef, reason: str) -> None:
    executor = dry()
    outcome = await act(
        "dedupe_block",
        context(executor, host=SPARK1, unit=unit),
        marker=MARKER,
        expected=2,
        **params,
    )
    assert (outcome.ok, outcome.summary, outcome.commands) == (False, reason, ())


# --- docker, shell, people, waiting ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "planned", "summary"),
    [
        (
            "docker_restart",
            {},
            "sudo -n docker restart vllm_ds4",
            "would restart vllm_ds4 on spark1",
        ),
        (
            "docker_restart",
            {"container": "other_box"},
            "sudo -n docker restart other_box",
            "would restart other_box on spark1",
        ),
        (
            "docker_exec",
            {"argv": ["pkill", "-f", "VLLM::Worker; x"]},
            "sudo -n docker exec vllm_ds4 pkill -f 'VLLM::Worker; x'",
            "would run pkill -f 'VLLM::Worker; x' in vllm_ds4 on spark1",
        ),
        (
            "shell",
            {"argv": ["touch", "/tmp/a b"], "sudo": True},
            "sudo -n touch '/tmp/a b'",
            "would run touch '/tmp/a b' on spark1",
        ),
    ],
)
async def test_container_and_shell_plans(
    name: str, params: dict[str, Any], planned: str, summary: str
) -> None:
    executor = dry()
    outcome = await act(name, context(executor, host=SPARK1, unit=HEAD), **params)
    assert (outcome.ok, outcome.summary, plan(executor)) == (True, summary, [("spark1", planned)])


async def test_docker_restart_refuses_a_flag_as_container() -> None:
    outcome = await act(
        "docker_restart", context(dry(), host=SPARK1, unit=HEAD), container="--time=0"
    )
    assert (outcome.ok, outcome.summary) == (False, "not a container name: '--time=0'")


async def test_shell_runs_for_real_and_reports_failures(tmp_path: Path) -> None:
    target = tmp_path / "made"
    ok = await act("shell", context(LocalExecutor()), argv=["touch", str(target)])
    assert (ok.ok, ok.summary) == (True, f"ran touch {target} on forge")
    assert target.exists()
    failed = await act("shell", context(LocalExecutor()), argv=["sh", "-c", "echo no >&2; exit 3"])
    assert (failed.ok, failed.summary) == (
        False,
        "sh -c 'echo no >&2; exit 3' on forge failed: exit 3: no",
    )
    readonly = dry()
    read = await act("shell", context(readonly), argv=["echo", "hi"], mutating=False)
    assert (read.ok, read.summary, readonly.planned) == (True, "ran echo hi on forge", [])
    assert read.commands[0].stdout == "hi\n"


async def test_ask_person() -> None:
    message = "ds4: both sparks are unreachable; power-cycle them"
    outcome = await act("ask_person", context(dry()), message=message)
    assert outcome == ActionOutcome(
        ok=False, summary=f"asked a person: {message}", needs_person=message
    )


async def test_wait_healthy_plan_does_not_probe() -> None:
    outcome = await act("wait_healthy", context(dry()), within="15m")
    assert outcome == ActionOutcome(
        ok=True, summary="would wait up to 15m for a passing completion"
    )


async def test_wait_healthy_waits_through_a_cold_start(
    sim_factory: SimFactory, client: HttpClient
) -> None:
    sim = await sim_factory(SimBehaviour(tok_s=2000, cold_start_s=0.4))
    endpoint = Endpoint(name="sim", kind="openai", url=sim.url, model="sim-model")
    results: list[ProbeResult] = []

    async def probe() -> ProbeResult:
        results.append(await run_probe(endpoint, Tier.DEEP, client, clock=SystemClock()))
        return results[-1]

    outcome = await act(
        "wait_healthy",
        context(LocalExecutor(), endpoint=endpoint, probe=probe),
        within="10s",
        every="100ms",
    )
    assert outcome.ok, outcome.summary
    assert results[0].outcome is ProbeOutcome.FAIL
    assert results[-1].outcome is ProbeOutcome.OK
    assert re.fullmatch(
        # format_duration's spelling: under a second `NNNms`, else whole seconds (a loaded box
        # took 2 s to see the 0.4 s cold start end)
        rf"sim is healthy: completion passed after (\d+ms|\d+s) \({len(results)} probes\)",
        outcome.summary,
    )


async def test_wait_healthy_gives_up_at_the_deadline(
    sim_factory: SimFactory, client: HttpClient
) -> None:
    sim = await sim_factory(SimBehaviour(tok_s=2000, fail_status=500))
    endpoint = Endpoint(name="sim", kind="openai", url=sim.url, model="sim-model")
    results: list[ProbeResult] = []

    async def probe() -> ProbeResult:
        results.append(await run_probe(endpoint, Tier.DEEP, client, clock=SystemClock()))
        return results[-1]

    outcome = await act(
        "wait_healthy",
        context(LocalExecutor(), endpoint=endpoint, probe=probe),
        within="300ms",
        every="100ms",
    )
    assert len(results) >= 3
    assert outcome == ActionOutcome(
        ok=False,
        summary=f"sim is still not healthy after 300ms ({len(results)} probes); "
        f"last completion check: {results[-1].reason}",
    )


# --- over real SSH (the loopback sshd) -------------------------------------------------------


@pytest.fixture
async def ssh() -> AsyncIterator[SshExecutor]:
    executor = SshExecutor()
    yield executor
    await executor.close()


async def test_over_ssh_dedupe_block(sshd: Sshd, ssh: SshExecutor, tmp_path: Path) -> None:
    path = _mxfp4(tmp_path, THRICE_MXFP4)
    outcome = await _dedupe(ssh, path, host=sshd.host)
    assert outcome.ok, outcome.summary
    assert outcome.summary == (
        f"removed 2 repeated copies (6 lines) of the block with '{MARKER}' from {path} on "
        f"spark1: 4 -> 2 lines hold it (backup {path}.bak)"
    )
    assert path.read_text() == GOOD_MXFP4
    assert [result.host for result in outcome.commands] == ["spark1"] * 4


async def test_over_ssh_execstart_dropin(sshd: Sshd, ssh: SshExecutor, tmp_path: Path) -> None:
    unit = UnitRef(host="spark1", unit="vllm-ds4-head.service")
    outcome = await act(
        "write_execstart_dropin",
        context(ssh, host=sshd.host, unit=unit),
        command="/usr/bin/docker exec vllm_ds4 bash /w/head.sh",
        systemd_dir=str(tmp_path / "system"),
    )
    path = tmp_path / "system" / "vllm-ds4-head.service.d" / "50-fleet-supervisor-execstart.conf"
    assert path.read_text() == DROPIN
    install = outcome.commands[0]
    assert (install.command, install.exit_status) == (
        f"sudo -n install -D -m 0644 /dev/stdin {path}",
        0,
    )
    # no systemd runs behind this sshd: daemon-reload fails, and says so with its exit status
    reload = outcome.commands[1]
    assert reload.exit_status not in (0, None) or reload.error
    assert outcome.ok is False
    assert outcome.summary.startswith("systemctl daemon-reload on spark1 failed: ")


async def test_over_ssh_kill_processes(sshd: Sshd, ssh: SshExecutor, spawn: Spawner) -> None:
    worker = await spawn.sleeper("VLLM::Worker_TP0")
    decoy = await spawn.sleeper("nginx")
    outcome = await act(
        "kill_processes",
        context(ssh, host=sshd.host),
        pattern=f"^VLLM::Worker_TP0-{spawn.token}",
    )
    assert outcome.ok, outcome.summary
    assert outcome.summary == f"sent KILL on spark1 to {label(worker)}"
    assert not running(worker)
    assert running(decoy)
    assert ran(outcome)[1] == ("spark1", f"sudo -n kill -s KILL -- {worker.pid}")


async def test_over_ssh_arguments_stay_arguments(
    sshd: Sshd, ssh: SshExecutor, tmp_path: Path
) -> None:
    marker = tmp_path / "injected"
    argv = ["printf", "%s", f"a; touch {marker}", f"$(touch {marker})"]
    outcome = await act("shell", context(ssh, host=sshd.host), argv=argv)
    assert outcome.ok, outcome.summary
    assert outcome.commands[0].stdout == f"a; touch {marker}$(touch {marker})"
    assert not marker.exists()
