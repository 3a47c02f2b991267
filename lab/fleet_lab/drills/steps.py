"""What the drills' faults do to the running lab, in small steps: run a command inside a host,
wait for a condition, restart the DeepSeek head or the pair, write the head's launch script or a
drop-in, start a process that outlives its unit."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from fleet_lab import fleet
from fleet_lab.lab import Lab, LabError, LabHost
from fleet_lab.launch import MXFP4

CONTAINER = fleet.CONTAINER
HEAD_UNIT = "vllm-ds4-head.service"
WORKER_UNIT = "vllm-ds4-worker.service"
HEAD_SCRIPT = fleet.HEAD_SCRIPT
WORKER_SCRIPT = fleet.WORKER_SCRIPT


def run(host: LabHost, *argv: str) -> str:
    result = host.nsenter(*argv)
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        raise LabError(
            f"{' '.join(argv[:3])} on {host.name} failed ({result.returncode}): "
            f"{said[-1] if said else 'no output'}"
        )
    return result.stdout


def wait(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {within:g}s waiting for {what}")
        time.sleep(0.05)


def restart_head(lab: Lab) -> None:
    run(lab.host("spark1"), "systemctl", "restart", "--no-block", HEAD_UNIT)


def restart_pair(lab: Lab) -> None:
    """Restart the pair in order: the worker, then the head."""
    run(lab.host("spark2"), "systemctl", "restart", WORKER_UNIT)
    run(lab.host("spark1"), "systemctl", "restart", HEAD_UNIT)


def mxfp4_path(host: LabHost) -> Path:
    return host.folder / "containers" / CONTAINER / MXFP4.lstrip("/")


def script_path(host: LabHost, script: str) -> Path:
    return host.folder / "containers" / CONTAINER / script.lstrip("/")


def write_head_script(lab: Lab, text: str) -> None:
    path = script_path(lab.host("spark1"), HEAD_SCRIPT)
    path.write_text(text)  # in place: the container's /workspace is a bind of this tree


def write_dropin(lab: Lab, path: str, text: str) -> None:
    write = 'mkdir -p "${1%/*}" && printf %s "$2" > "$1"'
    host = lab.host("spark1")
    run(host, "sh", "-c", write, "sh", path, text)
    run(host, "systemctl", "daemon-reload")


def spawn_titled(host: LabHost, unit: str, title: str, code: str) -> None:
    """Run Python `code` on `host` as transient unit `unit`, its command line reading `title`
    (as vLLM renames its processes): outside the units the drills watch, as a process left in a
    container's cgroup outlives the unit that ran `docker exec`."""
    run(
        host,
        "systemd-run",
        f"--unit={unit}",
        # argv[0] is the title, so Python cannot find its stdlib from it: say where
        f"--setenv=PYTHONHOME={sys.base_prefix}",
        "--collect",
        "--quiet",
        "bash",
        "-c",
        f'exec -a {title} "$1" -c "$2"',
        "bash",
        sys.executable,
        code,
    )
