"""The faults that come with a relaunch of the DeepSeek head or a death of its engine (see
`fleet_lab.drills.faults` for the registry and the undoing): a launch script that drifted from the
known-good one (fork multiproc method, prefix caching on a hybrid model, no reasoning parser), an
EngineCore that outlived its parent and pins the GPU, and an engine that dies so that vLLM's API
server exits 0."""

from __future__ import annotations

from collections.abc import Callable

from fleet_lab import fleet
from fleet_lab.drills.steps import (
    HEAD_SCRIPT,
    HEAD_UNIT,
    restart_head,
    run,
    spawn_titled,
    wait,
    write_head_script,
)
from fleet_lab.lab import Lab, LabError

#: An EngineCore of an earlier run that survived its parent: it still holds the GPU (the lock
#: that stands for its memory, see `launch.claim_gpu`) in a scope of its own, as a process left
#: in the container's cgroup outlives the unit that ran `docker exec`.
ORPHAN_UNIT = "vllm-orphan-enginecore.service"
ORPHAN_CODE = f"""\
import ctypes, fcntl, os, signal
ctypes.CDLL(None).prctl(15, b"VLLM::EngineCore", 0, 0, 0)
fd = os.open("{fleet.GPU}", os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
open("{fleet.GPU}.held", "w").close()
signal.pause()
"""

#: Launch-script drifts (each a line the known-good script lacks).
FORK_LINE = "export VLLM_WORKER_MULTIPROC_METHOD=fork\n"
PREFIX_CACHING = " --enable-prefix-caching"
NO_REASONING = " --reasoning-field none"


def _drift_head_script(lab: Lab, change: Callable[[str], str]) -> None:
    text = fleet.containers("spark1")[HEAD_SCRIPT]
    drifted = change(text)
    if drifted == text:
        raise LabError("the head's launch script did not change")
    write_head_script(lab, drifted)
    restart_head(lab)


def _before_exec(line: str) -> Callable[[str], str]:
    return lambda text: text.replace("\nexec ", f"\n{line}exec ", 1)


def _launch_flag(flag: str) -> Callable[[str], str]:
    return lambda text: text.replace(" -- ", f"{flag} -- ", 1)


def inject_fork(lab: Lab) -> None:
    """The launch drifted to the fork multiproc method: the engine's start fails with vLLM's
    ShmRingBuffer AttributeError on every relaunch."""
    _drift_head_script(lab, _before_exec(FORK_LINE))


def inject_prefix_caching(lab: Lab) -> None:
    """Prefix caching switched on with the default --max-num-batched-tokens (2048): the lab's
    hybrid model fails vLLM's Mamba align-mode check (block size 2128) on every relaunch."""
    _drift_head_script(lab, _launch_flag(PREFIX_CACHING))


def inject_no_reasoning(lab: Lab) -> None:
    """The head relaunches without its reasoning parser: it serves, but no reasoning text. (The
    relaunch is quick, under the drill's six failures (3 s): a slower one is a cold start
    first, see the report.)"""
    quick = f"--cold-start {fleet.COLD_START}", "--cold-start 0s"
    _drift_head_script(lab, lambda text: text.replace(*quick).rstrip("\n") + NO_REASONING + "\n")


def inject_engine_death(lab: Lab) -> None:
    """The head's engine dies (SIGUSR1 to the server: vLLM's EngineCore killed): /health 503,
    then the API server exits 0 by itself, so `Restart=on-failure` leaves the unit dead."""
    host = lab.host("spark1")
    run(host, "systemctl", "kill", "--kill-whom=main", "--signal=SIGUSR1", HEAD_UNIT)


def inject_orphan(lab: Lab) -> None:
    """An EngineCore of the last run survived its parent and pins the GPU: the head is stopped,
    the orphan takes the GPU, then the head starts into it and runs out of memory (exit 1)."""
    host = lab.host("spark1")
    run(host, "systemctl", "stop", HEAD_UNIT)
    held = host.folder / "gpu.held"
    held.unlink(missing_ok=True)
    spawn_titled(host, ORPHAN_UNIT, "VLLM::EngineCore", ORPHAN_CODE)
    wait(held.exists, 10, "the orphaned EngineCore to hold the GPU")
    run(host, "systemctl", "start", "--no-block", HEAD_UNIT)
