"""The lab's stand-ins for macOS's tools (fleet_lab.mac.launchctl, fleet_lab.mac.tools) answer in
the shapes the supervisor's parsers read from recorded macOS output, and really start and stop a
job's program: here the mlx_lm-shaped server, on loopback, as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import plistlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.httpclient import HttpClient
from supervisor.core.tls import default_tls
from supervisor.execute.base import CommandResult
from supervisor.playbook.evidence.base import CollectContext, Scope
from supervisor.playbook.evidence.launchctl import (
    is_not_found,
    job_facts,
    keep_alive,
    parse_print,
)
from supervisor.playbook.evidence.macos import parse_lsof, parse_memory_pressure, parse_vm_stat
from supervisor.playbook.evidence.restarts import Restart, RestartOutcome, wait_for_restarts
from tests.ports import free_port

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data" / "evidence" / "macos"
JOB = "gui/501/com.fleet.mlx-kimi"


class Mac:
    def __init__(self, folder: Path, port: int) -> None:
        self.folder = folder
        self.port = port
        self.env = {**os.environ, "FLEET_LAB_LAUNCHD": str(folder / "launchd")}

    def run(self, module: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", module, *argv],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def launchctl(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.run("fleet_lab.mac.launchctl", *argv)

    def tool(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.run("fleet_lab.mac.tools", *argv)

    def plist(
        self,
        *,
        run_at_load: bool,
        keep_alive: bool = False,
        throttle: int = 10,
        arguments: list[str] | None = None,
    ) -> Path:
        path = self.folder / "com.fleet.mlx-kimi.plist"
        arguments = arguments or [
            sys.executable, "-m", "fleet_lab.vllm_sim", "--flavour", "mlx", "--host",
            "127.0.0.1", "--port", str(self.port), "--model", "kimi",
            "--control-file", str(self.folder / "control.json"),
        ]  # fmt: skip
        document: dict[str, object] = {
            "Label": "com.fleet.mlx-kimi",
            "ProgramArguments": arguments,
            "StandardErrorPath": str(self.folder / "err.log"),
            "RunAtLoad": run_at_load,
        }
        if keep_alive:
            document |= {"KeepAlive": True, "ThrottleInterval": throttle}
        path.write_bytes(plistlib.dumps(document))
        return path

    def facts(self) -> dict[str, object]:
        done = self.launchctl("print", JOB)
        assert done.returncode == 0, done.stderr
        return dict(job_facts(parse_print(done.stdout)))

    def serving(self) -> bool:
        try:
            return httpx.get(
                f"http://127.0.0.1:{self.port}/v1/models", verify=default_tls(), timeout=2
            ).is_success
        except httpx.HTTPError:
            return False


@pytest.fixture
def mac(tmp_path: Path) -> Iterator[Mac]:
    standin = Mac(tmp_path, free_port())
    yield standin
    standin.launchctl("bootout", JOB)


def _until(predicate: object, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_job_that_never_ran_then_runs_then_ends_by_a_signal(mac: Mac) -> None:
    assert mac.launchctl("bootstrap", "gui/501", str(mac.plist(run_at_load=False))).returncode == 0
    never = mac.facts()
    assert {k: never[k] for k in ("loaded", "state", "running", "runs", "never_exited")} == {
        "loaded": True,
        "state": "not running",
        "running": False,
        "runs": 0,
        "never_exited": True,
    }
    assert never["last_exit"] == "never exited"
    mac.env["FLEET_LAB_XPCPROXY_S"] = "3"  # launchd spawning it: a moment on a Mac
    started = mac.launchctl("kickstart", "-p", JOB)
    pid = int(started.stdout.rsplit(" ", 1)[1])
    assert started.stdout == f"service spawned with pid: {pid}\n"
    spawning = mac.facts()
    assert (spawning["state"], spawning["pid"], spawning["runs"]) == ("xpcproxy", pid, 1)
    assert (spawning["running"], spawning["spawning"]) == (True, True)  # not dead
    assert _until(lambda: mac.facts()["state"] == "running")
    running = mac.facts()
    assert (running["pid"], running["runs"], running["spawning"]) == (pid, 1, False)
    assert _until(mac.serving)
    assert "Starting httpd at 127.0.0.1 on port" in (mac.folder / "err.log").read_text()
    os.kill(pid, signal.SIGKILL)
    assert _until(lambda: mac.facts()["state"] == "not running")
    killed = mac.facts()
    assert (killed["last_signal"], killed["last_signal_number"]) == ("Killed: 9", 9)
    assert killed["last_exit"] == "signal Killed: 9"


def test_term_ends_the_server_with_exit_0_and_kickstart_k_replaces_it(mac: Mac) -> None:
    assert mac.launchctl("bootstrap", "gui/501", str(mac.plist(run_at_load=True))).returncode == 0
    first = int(mac.facts()["pid"])  # type: ignore[call-overload]
    assert _until(mac.serving)
    assert mac.launchctl("kickstart", "-k", JOB).returncode == 0
    second = mac.facts()
    assert second["pid"] != first
    assert (second["runs"], second["last_exit_code"], second["running"]) == (2, 0, True)


def test_the_zombie_mode_is_the_process_s_own_and_a_restart_cures_it(mac: Mac) -> None:
    mac.launchctl("bootstrap", "gui/501", str(mac.plist(run_at_load=True)))
    assert _until(mac.serving)
    pid = mac.facts()["pid"]
    (mac.folder / "control.json").write_text(json.dumps({"engine_hung": True, "pid": pid}))
    assert mac.serving()  # the listing answers (and the server took the control file)
    url = f"http://127.0.0.1:{mac.port}/v1/chat/completions"
    body = {"model": "kimi", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url, json=body, verify=default_tls(), timeout=1.5)
    mac.launchctl("kickstart", "-k", JOB)
    assert _until(mac.serving)
    assert httpx.post(url, json=body, verify=default_tls(), timeout=5).status_code == 200


def test_launchctl_refuses_as_macos_does(mac: Mac) -> None:
    missing = mac.launchctl("print", JOB)
    assert (missing.returncode, missing.stdout) == (113, "")
    assert missing.stderr == (DATA / "launchctl-print-not-found.stderr").read_text()
    assert is_not_found(missing.returncode, missing.stderr)
    gone = mac.launchctl("bootout", JOB)
    assert (gone.returncode, gone.stderr) == (3, "Boot-out failed: 3: No such process\n")
    plist = str(mac.plist(run_at_load=False))
    assert mac.launchctl("bootstrap", "gui/501", plist).returncode == 0
    again = mac.launchctl("bootstrap", "gui/501", plist)
    assert (again.returncode, again.stderr) == (5, "Bootstrap failed: 5: Input/output error\n")
    assert mac.launchctl("kickstart", "-x", JOB).returncode == 64
    mac.launchctl("bootout", JOB)
    for argv in (("kickstart", "-k", JOB), ("kickstart", JOB)):  # only print says Bad request.
        unloaded = mac.launchctl(*argv)
        assert (unloaded.returncode, unloaded.stdout, unloaded.stderr) == (
            113,
            "",
            'Could not find service "com.fleet.mlx-kimi" in domain for user gui: 501\n',
        )
    system = mac.launchctl("kickstart", "-k", "system/com.fleet.mlx-rerank")
    assert (system.returncode, system.stderr) == (
        113,
        (DATA / "launchctl-kickstart-not-found-system.stderr").read_text(),
    )
    assert is_not_found(system.returncode, system.stderr)


def _crasher(mac: Mac, keep_alive: object, code: int = 1) -> Path:
    """A job whose program ends with `code` at once; KeepAlive as given, a 1 s throttle."""
    path = mac.folder / "com.fleet.crasher.plist"
    document = {
        "Label": "com.fleet.crasher",
        "ProgramArguments": [sys.executable, "-c", f"raise SystemExit({code})"],
        "RunAtLoad": True,
        "KeepAlive": keep_alive,
        "ThrottleInterval": 1,
    }
    path.write_bytes(plistlib.dumps(document))
    return path


CRASHER = "gui/501/com.fleet.crasher"


def _crasher_facts(mac: Mac) -> dict[str, object]:
    done = mac.launchctl("print", CRASHER)
    assert done.returncode == 0, done.stderr
    return dict(job_facts(parse_print(done.stdout)))


def test_keep_alive_starts_a_dying_job_again_after_the_throttle(mac: Mac) -> None:
    plist = _crasher(mac, True)
    try:
        assert mac.launchctl("bootstrap", "gui/501", str(plist)).returncode == 0
        assert _until(lambda: _crasher_facts(mac)["state"] == "spawn scheduled")
        waiting = _crasher_facts(mac)
        assert (waiting["running"], waiting["pid"], waiting["last_exit_code"]) == (False, 0, 1)
        assert _until(lambda: int(_crasher_facts(mac)["runs"]) >= 3)  # type: ignore[call-overload]
        printed = mac.launchctl("print", CRASHER).stdout
        assert "\tproperties = keepalive | runatload | inferred program\n" in printed
        xml = mac.tool("plutil", "-convert", "xml1", "-o", "-", str(plist))
        assert (xml.returncode, keep_alive(xml.stdout)) == (0, True)
    finally:
        assert mac.launchctl("bootout", CRASHER).returncode == 0
    time.sleep(1.5)  # past the throttle: booted out, it is not started again
    assert mac.launchctl("print", CRASHER).returncode == 113


def test_without_keep_alive_a_dying_job_stays_dead(mac: Mac) -> None:
    plist = _crasher(mac, {"SuccessfulExit": True})  # again only after a clean exit: not here
    try:
        assert mac.launchctl("bootstrap", "gui/501", str(plist)).returncode == 0
        assert _until(lambda: _crasher_facts(mac)["last_exit"] == "exit 1")
        time.sleep(1.5)  # past the throttle: launchd would have started it again by now
        ended = _crasher_facts(mac)
        assert (ended["state"], ended["runs"], ended["running"]) == ("not running", 1, False)
        xml = mac.tool("plutil", "-convert", "xml1", "-o", "-", str(plist))
        assert keep_alive(xml.stdout) is True  # conditions: it would for a clean exit
        missing = mac.tool("plutil", "-convert", "xml1", "-o", "-", str(mac.folder / "no.plist"))
        assert (missing.returncode, missing.stderr) == (
            1,
            f"{mac.folder / 'no.plist'}: file does not exist or is not readable or is not a "
            "regular file\n",
        )
    finally:
        mac.launchctl("bootout", CRASHER)


def test_a_kept_alive_job_stopped_by_kickstart_k_is_replaced_once(mac: Mac) -> None:
    path = mac.plist(run_at_load=True)
    document = plistlib.loads(path.read_bytes())
    path.write_bytes(plistlib.dumps({**document, "KeepAlive": True, "ThrottleInterval": 1}))
    assert mac.launchctl("bootstrap", "gui/501", str(path)).returncode == 0
    assert _until(mac.serving)
    first = mac.facts()["pid"]
    assert mac.launchctl("kickstart", "-k", JOB).returncode == 0
    time.sleep(1.5)  # past the throttle: the TERMed run is not started a second time
    after = mac.facts()
    assert (after["runs"], after["running"], after["last_signal"]) == (2, True, "")
    assert after["pid"] != first
    os.kill(int(after["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    assert _until(lambda: mac.facts()["runs"] == 3 and mac.facts()["running"])  # launchd's part


def test_lsof_names_the_job_s_pid_as_the_listener(mac: Mac) -> None:
    quiet = mac.tool("lsof", "-nP", f"-iTCP:{mac.port}", "-sTCP:LISTEN")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, "", "")
    mac.launchctl("bootstrap", "gui/501", str(mac.plist(run_at_load=True)))
    assert _until(mac.serving)
    found = mac.tool("lsof", "-nP", f"-iTCP:{mac.port}", "-sTCP:LISTEN")
    assert found.returncode == 0
    header = (DATA / "lsof-listen-8013-others.txt").read_text().splitlines()[0]
    assert found.stdout.splitlines()[0] == header
    assert found.stdout.splitlines()[1].endswith(f" TCP 127.0.0.1:{mac.port} (LISTEN)")
    sockets = parse_lsof(found.stdout)
    assert [pid for pid, _, _ in sockets] == [mac.facts()["pid"]]


def test_memory_and_stat_in_the_shapes_macos_prints(mac: Mac, tmp_path: Path) -> None:
    pressure = mac.tool("memory_pressure", "-Q")
    facts = parse_memory_pressure(pressure.stdout)
    assert set(facts) == {"free_percent", "total_gib"}
    vm = parse_vm_stat(mac.tool("vm_stat").stdout)
    assert vm["page_size"] == 16384
    assert {"free_gib", "active_gib", "inactive_gib", "wired_gib"} <= set(vm)
    level = mac.tool("sysctl", "-n", "kern.memorystatus_vm_pressure_level")
    assert level.stdout in ("1\n", "2\n", "4\n")
    unknown = mac.tool("sysctl", "-n", "kern.nope")
    assert (unknown.returncode, unknown.stderr) == (1, "sysctl: unknown oid 'kern.nope'\n")
    path = tmp_path / "log"
    path.write_text("x")
    os.utime(path, (1_700_000_000, 1_700_000_000))
    assert mac.tool("stat", "-f", "%m", "--", str(path)).stdout == "1700000000\n"
    missing = mac.tool("stat", "-f", "%m", "--", str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert missing.stderr == f"stat: {tmp_path / 'nope'}: stat: No such file or directory\n"


# --- KeepAlive: launchd starts a dead job again after its throttle interval --------------------


@dataclass
class StandinExecutor:
    """Runs `launchctl ...` as the stand-in on this machine (the supervisor's executor seam)."""

    mac: Mac

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
        assert argv[0] == "launchctl"
        done = await asyncio.to_thread(self.mac.launchctl, *argv[1:])
        return CommandResult(
            host=host.name,
            command=" ".join(argv),
            exit_status=done.returncode,
            stdout=done.stdout,
            stderr=done.stderr,
            duration_s=0.0,
        )

    async def close(self) -> None:
        return None


MAC_HOST = Host(name="m3ultra", local=True, service_manager="launchd")
KIMI_JOB = UnitRef(host="m3ultra", unit="com.fleet.mlx-kimi", domain="gui/501")


async def _settle(mac: Mac) -> tuple[Restart, ...]:
    endpoint = Endpoint(
        name="kimi", kind="openai", url=f"http://127.0.0.1:{mac.port}", model="kimi",
        units=(KIMI_JOB,),
    )  # fmt: skip
    async with HttpClient() as http:
        ctx = CollectContext(
            scope=Scope(endpoint=endpoint, host=MAC_HOST, unit=KIMI_JOB),
            executor=StandinExecutor(mac),
            timeout=timedelta(seconds=10),
            http=http,
        )
        return await wait_for_restarts([ctx])


async def test_keepalive_restarts_a_killed_job_and_the_diagnosis_waits_for_it(mac: Mac) -> None:
    plist = mac.plist(run_at_load=True, keep_alive=True, throttle=2)
    assert mac.launchctl("bootstrap", "gui/501", str(plist)).returncode == 0
    assert await asyncio.to_thread(_until, mac.serving)
    os.kill(int(mac.facts()["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    assert await asyncio.to_thread(_until, lambda: mac.facts()["state"] == "spawn scheduled")
    found = await _settle(mac)
    assert [(r.outcome, r.before) for r in found] == [
        (RestartOutcome.RUNNING, "signal Killed: 9, spawn scheduled, 1 runs")
    ]
    assert found[0].after.endswith(", running, 2 runs")
    assert found[0].bound_s == 5.0  # the job's throttle 2 + settle 2 + slack 1
    assert await asyncio.to_thread(_until, mac.serving)


async def test_keepalive_restarts_a_failing_job_and_the_diagnosis_reads_the_next_exit(
    mac: Mac,
) -> None:
    failing = ["/bin/sh", "-c", "sleep 0.3; exit 1"]
    plist = mac.plist(run_at_load=True, keep_alive=True, throttle=2, arguments=failing)
    assert mac.launchctl("bootstrap", "gui/501", str(plist)).returncode == 0
    assert await asyncio.to_thread(_until, lambda: mac.facts()["state"] == "spawn scheduled")
    found = await _settle(mac)
    assert [r.outcome for r in found] == [RestartOutcome.FAILED], found
    assert found[0].before == "exit 1, spawn scheduled, 1 runs"
    assert found[0].after.startswith("exit 1, ")
    assert found[0].after.endswith(", 2 runs")
