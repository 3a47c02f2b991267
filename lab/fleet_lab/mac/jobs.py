"""STAND-IN, NOT macOS: the job state and launchd's part as a job's parent, for the lab's
`launchctl` stand-in (`fleet_lab.mac.launchctl`).

Each job is a JSON file under `$FLEET_LAB_LAUNCHD` (default /var/lib/lab/launchd), changed under
one lock file. Starting a job forks a small runner (detached from the caller, e.g. an SSH
session) that starts the program with the plist's log files, environment and working directory,
waits for it and records how it ended: the exit code, or the signal (negative status). With
KeepAlive (true, or its SuccessfulExit / Crashed conditions) the runner waits out the throttle
(`ThrottleInterval`, default 10 s, less the time the run lasted), marked `spawn_scheduled`, and
starts the program again, unless the job was stopped by launchctl, booted out or kickstarted
meanwhile.
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


def _popen(job: Job) -> subprocess.Popen[bytes]:
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": os.environ.get("HOME", "/root"),
        "XPC_SERVICE_NAME": job["label"],
        **job["env"],
    }
    with (
        open(job["stdout"] or os.devnull, "ab") as out,
        open(job["stderr"] or os.devnull, "ab") as err,
    ):
        return subprocess.Popen(
            job["arguments"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=job["cwd"] or "/",
            env=env,
            close_fds=True,
        )


def kept_alive(job: Job, status: int) -> bool:
    """Whether launchd starts the job again after a run that ended with `status` (negative: a
    signal): KeepAlive true, or its conditions (launchd.plist(5): SuccessfulExit, Crashed; the
    others, which watch paths and other jobs, count as always)."""
    keep = job.get("keep_alive", False)
    if not isinstance(keep, dict):
        return keep is True
    if "SuccessfulExit" in keep:
        return bool(keep["SuccessfulExit"]) == (status == 0)
    if "Crashed" in keep:
        return bool(keep["Crashed"]) == (status < 0)
    return bool(keep)


def _run(job: Job, write: int) -> None:
    """launchd's part: start the program, record how it ended; with KeepAlive wait out the
    throttle (`spawn scheduled`) and start it again, until it is stopped or booted out."""
    if os.fork() != 0:  # the first half ends; the grandchild (launchd's stand-in) carries on
        return
    try:
        child = _popen(job)
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
                os._exit(0)
            current["pid"] = 0
            current["last"] = {"signal": -status} if status < 0 else {"code": status}
            stopped = current.pop("stopping", None) == child.pid
            again = not stopped and kept_alive(current, status)
            wait = max(0.0, float(current.get("throttle", 10.0)) - (time.monotonic() - began))
            token = f"{child.pid}:{time.time()}"
            current["spawn_scheduled"] = token if again else None
            save(current)
        if not again:
            os._exit(0)
        time.sleep(wait)
        with locked():
            current = load(job["domain"], job["label"])
            if current is None or current.get("spawn_scheduled") != token:
                os._exit(0)  # booted out, or started meanwhile (a kickstart)
            try:
                child = _popen(current)
            except OSError:
                current["spawn_scheduled"] = None
                save(current)
                os._exit(0)
            _started(current, child.pid)
            job = current


def _started(job: Job, pid: int) -> None:
    job["pid"] = pid
    job["runs"] = job.get("runs", 0) + 1
    job["spawned_at"] = time.time()
    job["spawn_scheduled"] = None
    save(job)


def start(job: Job) -> int:
    pid = _spawn(job)
    _started(job, pid)
    return pid


def stop(domain: str, label: str) -> None:
    """TERM the running program, KILL it after the job's exit timeout; return once it ended."""
    with locked():
        job = load(domain, label)
    if job is None or not job.get("pid"):
        return
    pid = int(job["pid"])
    with locked():  # launchd does not start again a job it stops itself (KeepAlive or not)
        job = load(domain, label)
        if job is None or job.get("pid") != pid:
            return
        job["stopping"] = pid
        save(job)
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
