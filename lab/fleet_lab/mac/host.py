"""The lab's Mac: host m3ultra (127.0.0.13), a STAND-IN for the M3 Ultra that runs Kimi K2.6 under
launchd. No macOS runs here: it is a lab host like the Sparks (its own namespaces and sshd, so
the daemon reaches it over real SSH), whose PATH starts with stand-ins for macOS's tools
(`launchctl`: `fleet_lab.mac.launchctl`; `lsof`, `memory_pressure`, `vm_stat`, `sysctl`, `plutil`,
`stat -f`: `fleet_lab.mac.tools`). systemd is only the host's init here (it runs sshd and the
"login" below); nothing of the Mac's endpoint is a systemd unit.

The job: `com.fleet.mlx-kimi` in `gui/501`, the domain of the Mac's user `fleet` (uid 501, home
`/Users/fleet`: `fleet_lab.account`), a real XML plist in its `~/Library/LaunchAgents` running
the lab's mlx_lm-shaped server (`fleet_lab.vllm_sim --flavour mlx`) on 127.0.0.13:8013, its
stderr in `~/Library/Logs/mlx-kimi.err.log`, RunAtLoad, no KeepAlive. The "login"
(`lab-mac-login.service`, and `reset` before every drill) installs the stand-ins in
/usr/local/bin (as root), then as the user copies the plist and bootstraps it unless launchd's
stand-in already holds it: the job and the stand-in's state are the user's, as a LaunchAgent's
are, so the daemon logging in as that user acts on it without sudo.

The server's zombie mode (mlx_lm's generation thread died: `/health` and `/v1/models` answer,
every completion hangs) is its `engine_hung` behaviour, set through its control file for the
process that runs now only (`pid`): a restart really cures it, as it does mlx_lm's.
"""

from __future__ import annotations

import json
import os
import plistlib
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx

from fleet_lab import network
from fleet_lab.account import Account
from fleet_lab.boot import INSIDE
from fleet_lab.lab import Lab, LabError, LabHost
from supervisor.playbook.evidence.launchctl import parse_print
from supervisor.probe.wire import default_tls

HOST = "m3ultra"
#: The Macs of the lab and their addresses (the Sparks' are `fleet_lab.lab.ADDRESSES`).
ADDRESSES: Mapping[str, str] = {HOST: network.address(13)}
PORT = 8013
MODEL = "kimi-k2.6"
LABEL = "com.fleet.mlx-kimi"
DOMAIN = "gui/501"
JOB = f"{DOMAIN}/{LABEL}"
#: The Mac's user: `gui/501` is its domain.
ACCOUNT = Account.mac()
#: As the fleet config names it: `~/` is the SSH user's home on the Mac.
PLIST = f"~/Library/LaunchAgents/{LABEL}.plist"
HOME = ACCOUNT.home
ERR_LOG = f"{HOME}/Library/Logs/mlx-kimi.err.log"
CONTROL = f"{INSIDE}/mlx-kimi.control.json"
LAUNCHCTL = "/usr/local/bin/launchctl"
LOGIN_UNIT = "lab-mac-login.service"
TOOLS = ("lsof", "memory_pressure", "vm_stat", "sysctl", "stat", "plutil")

#: A 512 GB M3 Ultra with Kimi loaded: plenty free.
MEMINFO = (
    "MemTotal:       536870912 kB\n"
    "MemFree:        125829120 kB\n"
    "MemAvailable:   167772160 kB\n"
    "Active:          41943040 kB\n"
    "Inactive:        20971520 kB\n"
    "Cached:          20971520 kB\n"
)

#: Installs the stand-ins of macOS's tools (as root).
TOOLS_INSTALL = f"install -m 755 {INSIDE}/macos/bin/* /usr/local/bin/"

LOGIN = f"""\
#!/bin/bash
# fleet lab host {HOST}: a STAND-IN for a Mac's login (no macOS here): install the stand-ins of
# bootstrap the user's LaunchAgents launchd does not hold yet (run as the user).
set -euo pipefail
mkdir -p {HOME}/Library/LaunchAgents {HOME}/Library/Logs
cp {INSIDE}/macos/LaunchAgents/*.plist {HOME}/Library/LaunchAgents/
for plist in {HOME}/Library/LaunchAgents/*.plist; do
  label=$(basename "$plist" .plist)
  {LAUNCHCTL} print "{DOMAIN}/$label" > /dev/null 2>&1 || {LAUNCHCTL} bootstrap {DOMAIN} "$plist"
done
"""

LOGIN_SERVICE = f"""\
[Unit]
Description=the Mac's login (stand-in): bootstrap the user's LaunchAgents
After=lab-sshd.service

[Service]
Type=oneshot
RemainAfterExit=yes
KillMode=process
User={ACCOUNT.name}
Environment=HOME={HOME}
ExecStartPre=+/bin/sh -c "{TOOLS_INSTALL}"
ExecStart=/bin/bash {INSIDE}/macos/login.sh
"""


def _wrapper(tool: str, module: str, *first: str) -> str:
    args = " ".join([*first, '"$@"'])
    return (
        "#!/bin/sh\n"
        f"# STAND-IN, not macOS: the fleet lab's imitation of macOS's `{tool}` ({module})\n"
        f"export FLEET_LAB_LAUNCHD={INSIDE}/launchd\n"
        f"exec {sys.executable} -m {module} {args}\n"
    )


#: the mlx_lm-shaped server's flags (its control file: the zombie mode, see `inject_zombie`)
SERVER_FLAGS = (
    *("--flavour", "mlx", "--host", ADDRESSES[HOST], "--port", str(PORT), "--model", MODEL),
    *("--cold-start", "1s", "--control-file", CONTROL),
)


def plist() -> bytes:
    """Kimi's LaunchAgent, as a Mac's ~/Library/LaunchAgents holds it."""
    return plistlib.dumps(
        {
            "Label": LABEL,
            "ProgramArguments": [sys.executable, "-m", "fleet_lab.vllm_sim", *SERVER_FLAGS],
            "EnvironmentVariables": {"PYTHONUNBUFFERED": "1"},
            "WorkingDirectory": HOME,
            "StandardOutPath": f"{HOME}/Library/Logs/mlx-kimi.out.log",
            "StandardErrorPath": ERR_LOG,
            "RunAtLoad": True,
            "ExitTimeOut": 5,
        }
    )


def units() -> dict[str, str]:
    return {LOGIN_UNIT: LOGIN_SERVICE}


def write(host: LabHost) -> None:
    """The Mac's files in its host folder (bound at /var/lib/lab inside)."""
    macos = host.folder / "macos"
    (macos / "bin").mkdir(parents=True, exist_ok=True)
    (macos / "LaunchAgents").mkdir(exist_ok=True)
    scripts = {"launchctl": _wrapper("launchctl", "fleet_lab.mac.launchctl")}
    scripts |= {tool: _wrapper(tool, "fleet_lab.mac.tools", tool) for tool in TOOLS}
    for name, text in scripts.items():
        (macos / "bin" / name).write_text(text)
        (macos / "bin" / name).chmod(0o755)
    (macos / "LaunchAgents" / f"{LABEL}.plist").write_bytes(plist())
    (macos / "login.sh").write_text(LOGIN)
    (host.folder / "meminfo").write_text(MEMINFO)
    state = host.folder / "launchd"  # the stand-in's job files: the user's, as its jobs are
    state.mkdir(exist_ok=True)
    for path in (state, *state.iterdir()):
        os.chown(path, ACCOUNT.uid, ACCOUNT.uid)


def as_user(host: LabHost, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run `argv` inside the host as the Mac's user, in its home."""
    return host.nsenter(
        "runuser", "-u", ACCOUNT.name, "--", "env", f"HOME={HOME}", f"USER={ACCOUNT.name}", *argv
    )


def url() -> str:
    return f"http://{ADDRESSES[HOST]}:{PORT}"


def control_path(host: LabHost) -> Path:
    return host.folder / CONTROL.removeprefix(f"{INSIDE}/")


def launchctl(host: LabHost, *argv: str) -> tuple[int, str]:
    """Run the stand-in `launchctl` inside the host: (exit status, stdout + stderr)."""
    done = as_user(host, LAUNCHCTL, *argv)
    return done.returncode, done.stdout + done.stderr


def job_pid(host: LabHost) -> int:
    """The pid `launchctl print` gives the job (0: not running or not loaded)."""
    status, text = launchctl(host, "print", JOB)
    return parse_print(text).pid if status == 0 else 0


def reset(host: LabHost) -> None:
    """The job loaded and running in its normal mode: no control file, logged in again."""
    control_path(host).unlink(missing_ok=True)
    (host.folder / "meminfo").write_text(MEMINFO)
    tools = host.nsenter("sh", "-c", TOOLS_INSTALL)
    script = f"{INSIDE}/macos/login.sh"
    login = tools if tools.returncode != 0 else as_user(host, "/bin/bash", script)
    if login.returncode != 0:
        raise LabError(f"the login on {host.name} failed: {login.stderr.strip()}")
    if job_pid(host) == 0:
        status, said = launchctl(host, "kickstart", JOB)
        if status != 0:
            raise LabError(f"launchctl kickstart {JOB} on {host.name} failed: {said.strip()}")


def inject_zombie(lab: Lab) -> None:
    """mlx_lm's generation thread dies in the running server: its listing and /health still
    answer, every completion hangs. The server takes it from its control file at its next
    request (made here, so the fault is in place when this returns)."""
    host = lab.host(HOST)
    pid = job_pid(host)
    if pid == 0:
        raise LabError(f"{LABEL} does not run on {HOST}: nothing to hang")
    control_path(host).write_text(json.dumps({"engine_hung": True, "pid": pid}))
    try:
        httpx.get(f"{url()}/v1/models", verify=default_tls(), timeout=5)
    except httpx.HTTPError as exc:
        raise LabError(f"{url()}/v1/models did not answer: {exc}") from None


def inject_bootout(lab: Lab) -> None:
    """The job is booted out (a person, an upgrade script, a logout): launchd stops it and no
    longer holds it."""
    host = lab.host(HOST)
    status, said = launchctl(host, "bootout", JOB)
    if status != 0:
        raise LabError(f"launchctl bootout {JOB} on {HOST} failed: {said.strip()}")
