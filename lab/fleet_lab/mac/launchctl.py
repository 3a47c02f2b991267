"""STAND-IN, NOT macOS: the lab's `launchctl`, for the Mac lab host (m3ultra) on Linux.

macOS cannot run in the lab, so this answers `print`, `kickstart [-k] [-p]`, `bootstrap`,
`bootout` and `kill` in the shapes launchctl(1) documents and the captures under
tests/data/evidence/macos/ record, and really starts and stops the job's program (the lab's
mlx_lm-shaped server):

- `bootstrap DOMAIN PLIST` reads a real XML plist (Label, ProgramArguments, StandardOutPath,
  StandardErrorPath, WorkingDirectory, EnvironmentVariables, RunAtLoad, ExitTimeOut) and loads
  the job; RunAtLoad starts it. Already loaded: `Bootstrap failed: 5: Input/output error`, exit 5.
- `kickstart [-k] [-p] DOMAIN/LABEL` starts the job if it is not running (a job waiting out
  its KeepAlive throttle too); `-k` first stops a
  running one (TERM, then KILL after the exit timeout); `-p` prints the pid.
- `bootout DOMAIN/LABEL` stops the job the same way and unloads it; not loaded:
  `Boot-out failed: 3: No such process`, exit 3.
- `kill SIGNAL DOMAIN/LABEL` (a name, `SIGKILL` or `KILL`, or a number) signals the running
  job's program; a job that runs nothing: `Could not kill service: 3: No such process`, exit 3.
- `print DOMAIN/LABEL`: the job's top-level keys (state, pid, runs, last exit code or last
  terminating signal, program, arguments, log paths); a label the domain lacks: exit 113,
  `Bad request.` then `Could not find service "LABEL" in domain for ...` (the other subcommands
  answer that line alone).
- KeepAlive (true, or SuccessfulExit / Crashed) and ThrottleInterval: a run that ends is started
  again after the throttle, `state = spawn scheduled` meanwhile (the lab's own plists have no
  KeepAlive: their jobs stay dead). The first moments of a run show `state = xpcproxy` with the
  pid, as launchd does while it spawns a job (`$FLEET_LAB_XPCPROXY_S`, default 0.5 s).

What launchd does and this does not: sockets, WatchPaths, calendar intervals, the
`minimum runtime` rule beyond the throttle. launchd is the parent of its jobs; here a
small runner process stands in for it (`fleet_lab.mac.jobs`, which also keeps the job
state in files): it starts the program, waits for it and records how it ended (exit code, or the
signal, which `print` names as macOS's strsignal does).
"""

from __future__ import annotations

import os
import plistlib
import re
import signal
import sys
import time

from fleet_lab.mac.jobs import (
    DEFAULT_EXIT_TIMEOUT_S,
    DEFAULT_PATH,
    USAGE,
    Job,
    RefusedError,
    alive,
    load,
    locked,
    path_of,
    save,
    start,
    stop,
)

DEFAULT_THROTTLE_S = 10.0  #: launchd.plist(5): ThrottleInterval's default
DEFAULT_XPCPROXY_S = 0.5
SPAWNING = "xpcproxy"
_DOMAIN = re.compile(r"^(system|gui/\d+|user/\d+)$")
#: macOS's strsignal(3) names of the signals a job commonly ends with
SIGNAL_NAMES = {
    1: "Hangup",
    2: "Interrupt",
    3: "Quit",
    4: "Illegal instruction",
    6: "Abort trap",
    9: "Killed",
    11: "Segmentation fault",
    13: "Broken pipe",
    15: "Terminated",
}


def _target(text: str) -> tuple[str, str]:
    domain, _, label = text.rpartition("/")
    if not _DOMAIN.match(domain) or not label:
        raise RefusedError(f"Unrecognized target specifier: {text}", USAGE)
    return domain, label


def _not_found(domain: str, label: str, *, bad_request: bool = False) -> RefusedError:
    """launchctl's answer for a label the domain does not hold: exit 113, one line; `print`
    alone writes `Bad request.` before it (DeterminateSystems/nix-installer issue 960 shows
    `kickstart -k system/LABEL` answering only the line)."""
    kind, _, uid = domain.partition("/")
    where = "system" if kind == "system" else f"user {kind}: {uid}"
    text = f'Could not find service "{label}" in domain for {where}'
    return RefusedError(f"Bad request.\n{text}" if bad_request else text, 113)


# -- the subcommands -----------------------------------------------------------------------


def bootstrap(domain: str, plist: str) -> str:
    if not _DOMAIN.match(domain):
        raise RefusedError(f"Unrecognized target specifier: {domain}", USAGE)
    try:
        with open(plist, "rb") as handle:
            data = plistlib.load(handle)
    except FileNotFoundError:
        raise RefusedError("Bootstrap failed: 2: No such file or directory", 2) from None
    except (OSError, plistlib.InvalidFileException, ValueError):
        raise RefusedError("Bootstrap failed: 5: Input/output error", 5) from None
    label = data.get("Label")
    arguments = data.get("ProgramArguments") or ([data["Program"]] if "Program" in data else [])
    if not isinstance(label, str) or not arguments:
        raise RefusedError("Bootstrap failed: 5: Input/output error", 5)
    with locked():
        if load(domain, label) is not None:
            raise RefusedError("Bootstrap failed: 5: Input/output error", 5)
        job: Job = {
            "domain": domain,
            "label": label,
            "plist": plist,
            "arguments": [str(a) for a in arguments],
            "stdout": data.get("StandardOutPath", ""),
            "stderr": data.get("StandardErrorPath", ""),
            "cwd": data.get("WorkingDirectory", ""),
            "env": {str(k): str(v) for k, v in data.get("EnvironmentVariables", {}).items()},
            "exit_timeout": float(data.get("ExitTimeOut", DEFAULT_EXIT_TIMEOUT_S)),
            "run_at_load": bool(data.get("RunAtLoad", False)),
            "keep_alive": _keep_alive(data.get("KeepAlive", False)),
            "throttle": float(data.get("ThrottleInterval", DEFAULT_THROTTLE_S)),
            "runs": 0,
            "pid": 0,
            "last": None,
        }
        save(job)
        if job["run_at_load"]:
            start(job)
    return ""


def kickstart(target: str, kill: bool, show_pid: bool) -> str:
    domain, label = _target(target)
    with locked():
        job = load(domain, label)
    if job is None:
        raise _not_found(domain, label)
    if kill:
        stop(domain, label)
    with locked():
        job = load(domain, label)
        if job is None:
            raise _not_found(domain, label)
        pid = int(job["pid"]) if job.get("pid") and alive(int(job["pid"])) else start(job)
    return f"service spawned with pid: {pid}\n" if show_pid else ""


def bootout(target: str) -> str:
    domain, label = _target(target)
    with locked():
        if load(domain, label) is None:
            raise RefusedError("Boot-out failed: 3: No such process", 3)
    stop(domain, label)
    with locked():
        path_of(domain, label).unlink(missing_ok=True)
    return ""


def _signal(text: str) -> int:
    if text.isdigit():
        return int(text)
    name = text.upper() if text.upper().startswith("SIG") else f"SIG{text.upper()}"
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise RefusedError(f"Unrecognized signal name: {text}", USAGE) from None


def kill(name: str, target: str) -> str:
    number = _signal(name)
    domain, label = _target(target)
    with locked():
        job = load(domain, label)
    if job is None:
        raise _not_found(domain, label)
    pid = int(job.get("pid") or 0)
    if pid <= 0 or not alive(pid):
        raise RefusedError("Could not kill service: 3: No such process", 3)
    os.kill(pid, number)
    return ""


def _last(job: Job) -> str:
    last = job.get("last")
    if not last:
        return "last exit code = (never exited)"
    if "signal" in last:
        number = int(last["signal"])
        return f"last terminating signal = {SIGNAL_NAMES.get(number, 'Signal')}: {number}"
    return f"last exit code = {last['code']}"


def _keep_alive(value: object) -> bool | dict[str, bool]:
    if isinstance(value, dict):
        return {str(k): bool(v) for k, v in value.items()}
    return value is True


def state_of(job: Job, running: bool) -> str:
    """`running`; `xpcproxy` in the first moments of a run (launchd spawning it: the stand-in
    says so for `$FLEET_LAB_XPCPROXY_S`, default 0.5 s); `spawn scheduled` while KeepAlive waits
    out the throttle; else `not running`."""
    if running:
        spawned = float(job.get("spawned_at") or 0.0)
        return SPAWNING if time.time() - spawned < _xpcproxy_s() else "running"
    return "spawn scheduled" if job.get("spawn_scheduled") else "not running"


def _xpcproxy_s() -> float:
    try:
        return float(os.environ.get("FLEET_LAB_XPCPROXY_S", DEFAULT_XPCPROXY_S))
    except ValueError:
        return DEFAULT_XPCPROXY_S


def render(job: Job) -> str:
    """`launchctl print` of a loaded job, in the shape of macOS's (see the module docstring)."""
    pid = int(job.get("pid") or 0)
    running = pid > 0 and alive(pid)
    domain = job["domain"]
    kind = "LaunchDaemon" if domain == "system" else "LaunchAgent"
    lines = [
        f"{domain}/{job['label']} = {{",
        f"\tactive count = {1 if running else 0}",
        f"\tpath = {job['plist']}",
        f"\ttype = {kind}",
        f"\tstate = {state_of(job, running)}",
        "",
        f"\tprogram = {job['arguments'][0]}",
        "\targuments = {",
        *(f"\t\t{argument}" for argument in job["arguments"]),
        "\t}",
        "",
    ]
    if job["cwd"]:
        lines += [f"\tworking directory = {job['cwd']}", ""]
    lines += [f"\tstdout path = {job['stdout']}"] if job["stdout"] else []
    lines += [f"\tstderr path = {job['stderr']}"] if job["stderr"] else []
    lines += ["\tdefault environment = {", f"\t\tPATH => {DEFAULT_PATH}", "\t}", ""]
    env = {**job["env"], "XPC_SERVICE_NAME": job["label"]}
    lines += ["\tenvironment = {", *(f"\t\t{k} => {v}" for k, v in env.items()), "\t}", ""]
    throttle = float(job.get("throttle", DEFAULT_THROTTLE_S))
    lines += [f"\tdomain = {domain}", f"\tminimum runtime = {throttle:g}"]
    lines += [f"\texit timeout = {job['exit_timeout']:g}", f"\truns = {job.get('runs', 0)}"]
    lines += [f"\tpid = {pid}", "\timmediate reason = non-ipc demand"] if running else []
    lines += [f"\t{_last(job)}", "", "\tspawn type = daemon (3)"]
    properties = ["keepalive"] if job.get("keep_alive") else []
    properties += ["runatload"] if job["run_at_load"] else []
    lines += [f"\tproperties = {' | '.join([*properties, 'inferred program'])}", "}", ""]
    return "\n".join(lines)


def print_job(target: str) -> str:
    domain, label = _target(target)
    with locked():
        job = load(domain, label)
    if job is None:
        raise _not_found(domain, label, bad_request=True)
    return render(job)


def answer(argv: list[str]) -> str:
    """What `launchctl ARGV` prints; `RefusedError` for what it refuses."""
    command, *rest = argv or [""]
    if command == "print" and len(rest) == 1:
        return print_job(rest[0])
    if command == "bootstrap" and len(rest) == 2:
        return bootstrap(rest[0], rest[1])
    if command == "bootout" and len(rest) == 1:
        return bootout(rest[0])
    if command == "kill" and len(rest) == 2:
        return kill(rest[0], rest[1])
    if command == "kickstart" and rest:
        flags = "".join(a.lstrip("-") for a in rest[:-1] if a.startswith("-"))
        if set(flags) <= {"k", "p", "s"} and not rest[-1].startswith("-"):
            return kickstart(rest[-1], "k" in flags, "p" in flags)
    raise RefusedError(f"Unrecognized subcommand: {' '.join(argv)} (fleet lab stand-in)", USAGE)


def main(argv: list[str]) -> int:
    try:
        sys.stdout.write(answer(argv))
    except RefusedError as refused:
        print(refused.text, file=sys.stderr)
        return refused.status
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
