"""STAND-IN, NOT macOS: the lab's `launchctl`, for the Mac lab host (m3ultra) on Linux.

macOS cannot run in the lab, so this answers `print`, `kickstart [-k] [-p]`, `bootstrap` and
`bootout` in the shapes launchctl(1) documents and the captures under tests/data/evidence/macos/
record, and really starts and stops the job's program (the lab's mlx_lm-shaped server):

- `bootstrap DOMAIN PLIST` reads a real XML plist (Label, ProgramArguments, StandardOutPath,
  StandardErrorPath, WorkingDirectory, EnvironmentVariables, RunAtLoad, ExitTimeOut) and loads
  the job; RunAtLoad starts it. Already loaded: `Bootstrap failed: 5: Input/output error`, exit 5.
- `kickstart [-k] [-p] DOMAIN/LABEL` starts the job if it is not running; `-k` first stops a
  running one (TERM, then KILL after the exit timeout); `-p` prints the pid.
- `bootout DOMAIN/LABEL` stops the job the same way and unloads it; not loaded:
  `Boot-out failed: 3: No such process`, exit 3.
- `print DOMAIN/LABEL`: the job's top-level keys (state, pid, runs, last exit code or last
  terminating signal, program, arguments, log paths); a label the domain lacks: exit 113,
  `Could not find service "LABEL" in domain for ...`.

What launchd does and this does not: KeepAlive (a job that dies stays dead: the lab's plists have
no KeepAlive), sockets, throttling, `spawn scheduled`. launchd is the parent of its jobs; here a
small runner process (`--run-job`) stands in for it: it starts the program, waits for it and
records how it ended (exit code, or the signal as macOS's strsignal names it). Job state lives in
JSON files under `$FLEET_LAB_LAUNCHD` (default /var/lib/lab/launchd), one per job, changed under
one lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import plistlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STATE = Path(os.environ.get("FLEET_LAB_LAUNCHD", "/var/lib/lab/launchd"))
NOT_FOUND = 113
USAGE = 64
DEFAULT_EXIT_TIMEOUT_S = 5.0
DEFAULT_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
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

Job = dict[str, Any]


class RefusedError(Exception):
    """launchctl's answer to a request it cannot do: the text for stderr and the exit status."""

    def __init__(self, text: str, status: int) -> None:
        super().__init__(text)
        self.text = text
        self.status = status


@contextmanager
def _locked() -> Iterator[None]:
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _path(domain: str, label: str) -> Path:
    return STATE / domain.replace("/", "_") / f"{label}.json"


def _load(domain: str, label: str) -> Job | None:
    try:
        job: Job = json.loads(_path(domain, label).read_text())
    except FileNotFoundError:
        return None
    return job


def _save(job: Job) -> None:
    path = _path(job["domain"], job["label"])
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(job, indent=1))
    scratch.replace(path)


def _target(text: str) -> tuple[str, str]:
    domain, _, label = text.rpartition("/")
    if not _DOMAIN.match(domain) or not label:
        raise RefusedError(f"Unrecognized target specifier: {text}", USAGE)
    return domain, label


def _not_found(domain: str, label: str) -> RefusedError:
    kind, _, uid = domain.partition("/")
    where = "system" if kind == "system" else f"user {kind}: {uid}"
    return RefusedError(
        f'Bad request.\nCould not find service "{label}" in domain for {where}', 113
    )


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# -- the runner: launchd's part as the job's parent ----------------------------------------


def _spawn(job: Job) -> int:
    """Start the job's program under a runner that records how it ends; return its pid."""
    read, write = os.pipe()
    runner = os.fork()
    if runner == 0:  # the runner: detached from launchctl's caller (an SSH session)
        try:
            os.close(read)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            # the lock file's descriptor too: a lock shared with the runner would never end
            os.closerange(3, write)
            os.closerange(write + 1, os.sysconf("SC_OPEN_MAX"))
            _run(job, write)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read().strip()
    os.waitpid(runner, 0)  # the runner forks once more and its first half ends at once
    if not said.isdigit():
        raise RefusedError(f"Could not start {job['label']}: {said or 'no pid'}", 5)
    return int(said)


def _run(job: Job, write: int) -> None:
    if os.fork() != 0:  # the first half ends; the grandchild (launchd's stand-in) carries on
        return
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": os.environ.get("HOME", "/root"),
        "XPC_SERVICE_NAME": job["label"],
        **job["env"],
    }
    try:
        out = open(job["stdout"] or os.devnull, "ab")  # noqa: SIM115
        err = open(job["stderr"] or os.devnull, "ab")  # noqa: SIM115
        child = subprocess.Popen(
            job["arguments"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=job["cwd"] or "/",
            env=env,
            close_fds=True,
        )
    except OSError as exc:
        os.write(write, str(exc).encode())
        os.close(write)
        os._exit(0)
    os.write(write, str(child.pid).encode())
    os.close(write)
    status = child.wait()
    with _locked():
        current = _load(job["domain"], job["label"])
        if current is not None and current.get("pid") == child.pid:
            current["pid"] = 0
            current["last"] = {"signal": -status} if status < 0 else {"code": status}
            _save(current)
    os._exit(0)


def _start(job: Job) -> int:
    pid = _spawn(job)
    job["pid"] = pid
    job["runs"] = job.get("runs", 0) + 1
    _save(job)
    return pid


def _stop(domain: str, label: str) -> None:
    """TERM the running program, KILL it after the job's exit timeout; return once it ended."""
    with _locked():
        job = _load(domain, label)
    if job is None or not job.get("pid"):
        return
    pid = int(job["pid"])
    for sig, within in ((signal.SIGTERM, job["exit_timeout"]), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with _locked():
                now = _load(domain, label)
            if now is None or now.get("pid") != pid:
                return
            time.sleep(0.02)


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
    with _locked():
        if _load(domain, label) is not None:
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
            "runs": 0,
            "pid": 0,
            "last": None,
        }
        _save(job)
        if job["run_at_load"]:
            _start(job)
    return ""


def kickstart(target: str, kill: bool, show_pid: bool) -> str:
    domain, label = _target(target)
    with _locked():
        job = _load(domain, label)
    if job is None:
        raise _not_found(domain, label)
    if kill:
        _stop(domain, label)
    with _locked():
        job = _load(domain, label)
        if job is None:
            raise _not_found(domain, label)
        pid = int(job["pid"]) if job.get("pid") and _alive(int(job["pid"])) else _start(job)
    return f"service spawned with pid: {pid}\n" if show_pid else ""


def bootout(target: str) -> str:
    domain, label = _target(target)
    with _locked():
        if _load(domain, label) is None:
            raise RefusedError("Boot-out failed: 3: No such process", 3)
    _stop(domain, label)
    with _locked():
        _path(domain, label).unlink(missing_ok=True)
    return ""


def _last(job: Job) -> str:
    last = job.get("last")
    if not last:
        return "last exit code = (never exited)"
    if "signal" in last:
        number = int(last["signal"])
        return f"last terminating signal = {SIGNAL_NAMES.get(number, 'Signal')}: {number}"
    return f"last exit code = {last['code']}"


def render(job: Job) -> str:
    """`launchctl print` of a loaded job, in the shape of macOS's (see the module docstring)."""
    pid = int(job.get("pid") or 0)
    running = pid > 0 and _alive(pid)
    domain = job["domain"]
    kind = "LaunchDaemon" if domain == "system" else "LaunchAgent"
    lines = [
        f"{domain}/{job['label']} = {{",
        f"\tactive count = {1 if running else 0}",
        f"\tpath = {job['plist']}",
        f"\ttype = {kind}",
        f"\tstate = {'running' if running else 'not running'}",
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
    lines += [f"\tdomain = {domain}", "\tminimum runtime = 10"]
    lines += [f"\texit timeout = {job['exit_timeout']:g}", f"\truns = {job.get('runs', 0)}"]
    lines += [f"\tpid = {pid}", "\timmediate reason = non-ipc demand"] if running else []
    lines += [f"\t{_last(job)}", "", "\tspawn type = daemon (3)"]
    properties = ["runatload"] if job["run_at_load"] else []
    lines += [f"\tproperties = {' | '.join([*properties, 'inferred program'])}", "}", ""]
    return "\n".join(lines)


def print_job(target: str) -> str:
    domain, label = _target(target)
    with _locked():
        job = _load(domain, label)
    if job is None:
        raise _not_found(domain, label)
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
