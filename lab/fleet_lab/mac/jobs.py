"""STAND-IN, NOT macOS: the job state and launchd's part as a job's parent, for the lab's
`launchctl` stand-in (`fleet_lab.mac.launchctl`).

Each job is a JSON file under `$FLEET_LAB_LAUNCHD` (default /var/lib/lab/launchd), changed under
one lock file. Starting a job forks a small runner (detached from the caller, e.g. an SSH
session) that starts the program with the plist's log files, environment and working directory,
waits for it and records how it ended: the exit code, or the signal (negative status). A job
whose plist says KeepAlive is started again by the same runner once its ThrottleInterval since
the last start has passed (`spawn scheduled` meanwhile), unless it was stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STATE = Path(os.environ.get("FLEET_LAB_LAUNCHD", "/var/lib/lab/launchd"))
USAGE = 64
DEFAULT_EXIT_TIMEOUT_S = 5.0
DEFAULT_THROTTLE_S = 10.0  #: launchd.plist(5) ThrottleInterval
DEFAULT_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
Job = dict[str, Any]


class RefusedError(Exception):
    """launchctl's answer to a request it cannot do: the text for stderr and the exit status."""

    def __init__(self, text: str, status: int) -> None:
        super().__init__(text)
        self.text = text
        self.status = status


@contextmanager
def locked() -> Iterator[None]:
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def path_of(domain: str, label: str) -> Path:
    return STATE / domain.replace("/", "_") / f"{label}.json"


def load(domain: str, label: str) -> Job | None:
    try:
        job: Job = json.loads(path_of(domain, label).read_text())
    except FileNotFoundError:
        return None
    return job


def save(job: Job) -> None:
    path = path_of(job["domain"], job["label"])
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(job, indent=1))
    scratch.replace(path)


def alive(pid: int) -> bool:
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


def keeps_alive(job: Job, status: int) -> bool:
    """launchd.plist(5) KeepAlive: `true` restarts whatever the exit; `{SuccessfulExit: false}`
    only after an unsuccessful one (a signal, or a non-zero exit)."""
    keep = job.get("keep_alive", False)
    if isinstance(keep, dict):
        return "SuccessfulExit" in keep and bool(keep["SuccessfulExit"]) == (status == 0)
    return bool(keep)


def _run(job: Job, write: int) -> None:
    """launchd's part: start the program, record how it ended; with KeepAlive, `spawn
    scheduled` until the throttle interval since its start has passed, then start it again."""
    if os.fork() != 0:  # the first half ends; the grandchild (launchd's stand-in) carries on
        return
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": os.environ.get("HOME", "/root"),
        "XPC_SERVICE_NAME": job["label"],
        **job["env"],
    }
    try:
        child = _popen(job, env)
    except OSError as exc:
        os.write(write, str(exc).encode())
        os.close(write)
        os._exit(0)
    os.write(write, str(child.pid).encode())
    os.close(write)
    while True:
        began = time.monotonic()
        status = child.wait()
        with locked():
            current = load(job["domain"], job["label"])
            if current is None or current.get("pid") != child.pid:
                os._exit(0)  # booted out, or another start took over
            current["pid"] = 0
            current["last"] = {"signal": -status} if status < 0 else {"code": status}
            again = keeps_alive(current, status) and not current.get("stopping")
            current["scheduled"] = again
            save(current)
        if not again:
            os._exit(0)
        throttle = float(current.get("throttle", DEFAULT_THROTTLE_S))
        time.sleep(max(0.0, throttle - (time.monotonic() - began)))
        with locked():
            current = load(job["domain"], job["label"])
            if current is None or not current.get("scheduled") or current.get("pid"):
                os._exit(0)  # booted out, stopped, or kickstarted meanwhile
            try:
                child = _popen(current, env)
            except OSError:
                current["scheduled"] = False
                save(current)
                os._exit(0)
            current["pid"] = child.pid
            current["runs"] = current.get("runs", 0) + 1
            current["scheduled"] = False
            save(current)


def _popen(job: Job, env: dict[str, str]) -> subprocess.Popen[bytes]:
    out = open(job["stdout"] or os.devnull, "ab")  # noqa: SIM115
    err = open(job["stderr"] or os.devnull, "ab")  # noqa: SIM115
    return subprocess.Popen(
        job["arguments"],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        cwd=job["cwd"] or "/",
        env=env,
        close_fds=True,
    )


def start(job: Job) -> int:
    pid = _spawn(job)
    job["pid"] = pid
    job["runs"] = job.get("runs", 0) + 1
    job["scheduled"] = job["stopping"] = False
    save(job)
    return pid


def stop(domain: str, label: str) -> None:
    """TERM the running program, KILL it after the job's exit timeout; return once it ended."""
    with locked():
        job = load(domain, label)
    if job is None or not job.get("pid"):
        return
    pid = int(job["pid"])
    with locked():  # a stop is no death KeepAlive answers
        current = load(domain, label)
        if current is not None:
            current["stopping"] = True
            save(current)
    for sig, within in ((signal.SIGTERM, job["exit_timeout"]), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with locked():
                now = load(domain, label)
            if now is None or now.get("pid") != pid:
                return
            time.sleep(0.02)
