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

The crash loop (`reload_kept_alive`, then `inject_crashloop`): the job reloaded from a plist with
KeepAlive whose launcher serves only while the model folder is there; the folder goes and the
server is killed, and from then on every start dies at once: launchd starts it again after each
throttle (10 s), `spawn scheduled` meanwhile.
"""

from __future__ import annotations

import json
import os
import plistlib
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from fleet_lab import network
from fleet_lab.account import Account
from fleet_lab.boot import INSIDE
from fleet_lab.lab import Lab, LabError, LabHost
from supervisor.core.tls import default_tls
from supervisor.playbook.evidence.launchctl import parse_print

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


#: Kimi's job as reloaded for the crash loop: its plist (KeepAlive), its launcher, and the model
#: folder the launcher needs (the user's: `reload_kept_alive` makes it, `inject_crashloop` removes
#: it)
KEPT_ALIVE = f"{INSIDE}/macos/kept-alive"
KEPT_ALIVE_PLIST = f"{KEPT_ALIVE}/{LABEL}.plist"
LAUNCHER = f"{KEPT_ALIVE}/mlx-kimi.sh"
MODEL_FOLDER = f"{HOME}/models/Kimi-K2.6-DQ3"
#: what a start without the model folder writes last (mlx_lm's error when it loads the model)
MISSING_MODEL = (
    f"FileNotFoundError: [Errno 2] No such file or directory: '{MODEL_FOLDER}/config.json'"
)
#: launchd's default throttle (ThrottleInterval), which the kept-alive plist keeps
THROTTLE_S = 10

LAUNCHER_TEXT = f"""\
#!/bin/sh
# fleet lab host {HOST}: a STAND-IN for Kimi's launcher (no mlx_lm here): the lab's mlx_lm-shaped
# server while its model folder holds config.json; without it, it dies at start as mlx_lm does
# when it cannot load the model (exit 1, the error in its log).
if [ -e {MODEL_FOLDER}/config.json ]; then
  exec {sys.executable} -m fleet_lab.vllm_sim "$@"
fi
now=$(date '+%Y-%m-%d %H:%M:%S,%3N')
echo "$now - INFO - Starting httpd at {ADDRESSES[HOST]} on port {PORT}..." >&2
echo "{MISSING_MODEL}" >&2
exit 1
"""


def kept_alive_plist() -> bytes:
    """Kimi's job as a person reloads it to be kept alive: KeepAlive, the default throttle, the
    launcher in front of the server; its stderr log only (what the server prints on stdout is
    dropped, as launchd drops it without StandardOutPath)."""
    document = plistlib.loads(plist())
    document["ProgramArguments"] = [LAUNCHER, *SERVER_FLAGS]
    document["KeepAlive"] = True
    del document["StandardOutPath"]
    return plistlib.dumps(document)


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
    kept = macos / "kept-alive"
    kept.mkdir(exist_ok=True)
    (kept / f"{LABEL}.plist").write_bytes(kept_alive_plist())
    (kept / "mlx-kimi.sh").write_text(LAUNCHER_TEXT)
    (kept / "mlx-kimi.sh").chmod(0o755)
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
    """The job loaded and running in its normal mode: no control file, its own plist (not the
    kept-alive one of the crash loop), logged in again."""
    control_path(host).unlink(missing_ok=True)
    status, text = launchctl(host, "print", JOB)
    if status == 0 and parse_print(text).keys.get("path") == KEPT_ALIVE_PLIST:
        launchctl(host, "bootout", JOB)
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


def _serves() -> bool:
    """Kimi answers a real chat completion now."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    try:
        reply = httpx.post(
            f"{url()}/v1/chat/completions", json=body, verify=default_tls(), timeout=5
        )
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


def _lived_s(host: LabHost, pid: int) -> int:
    """How many whole seconds the process `pid` of the host has run (ps's etimes), 0 if gone."""
    done = host.nsenter("ps", "-o", "etimes=", "-p", str(pid))
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else 0


def reload_kept_alive(lab: Lab) -> None:
    """Before the crash loop's drill: Kimi's job reloaded from the kept-alive plist, its model
    folder in place. Returns once it serves a real completion and its server has lived longer
    than the throttle (a death then is started again at once: `inject_crashloop`)."""
    host = lab.host(HOST)
    made = as_user(
        host, "sh", "-c", f"mkdir -p {MODEL_FOLDER} && echo '{{}}' > {MODEL_FOLDER}/config.json"
    )
    if made.returncode != 0:
        raise LabError(f"the model folder on {HOST} was not made: {made.stderr.strip()}")
    launchctl(host, "bootout", JOB)
    status, said = launchctl(host, "bootstrap", DOMAIN, KEPT_ALIVE_PLIST)
    if status != 0:
        raise LabError(f"launchctl bootstrap {DOMAIN} {KEPT_ALIVE_PLIST} on {HOST} failed: {said}")
    deadline = time.monotonic() + 30
    while not _serves():
        if time.monotonic() > deadline:
            raise LabError(f"{LABEL} on {HOST} does not serve a completion 30 s after its reload")
        time.sleep(0.2)
    pid = job_pid(host)
    deadline = time.monotonic() + THROTTLE_S + 30
    while _lived_s(host, pid) <= THROTTLE_S:
        if time.monotonic() > deadline:
            raise LabError(f"{LABEL} on {HOST} (pid {pid}) did not live past its throttle")
        time.sleep(0.2)


def inject_crashloop(lab: Lab) -> None:
    """The kept-alive job's model folder goes (a clean-up) and its server is killed (SIGKILL,
    as memory pressure kills it): launchd starts it again at once (it ran longer than its
    throttle), and that start and every later one die (exit 1, the folder is gone), each
    followed by a throttle in `spawn scheduled`. From the kill on, launchd holds the job, and
    only for the few ms of that first start does it show it otherwise than `spawn scheduled`;
    its runs are 2 (the server's, the first start's), then one more every throttle."""
    host = lab.host(HOST)
    gone = as_user(host, "rm", "-rf", MODEL_FOLDER)
    if gone.returncode != 0:
        raise LabError(f"the model folder on {HOST} was not removed: {gone.stderr.strip()}")
    status, said = launchctl(host, "kill", "SIGKILL", JOB)
    if status != 0:
        raise LabError(f"launchctl kill SIGKILL {JOB} on {HOST} failed: {said.strip()}")
