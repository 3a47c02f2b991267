"""The faults the drills inject into the running lab, each from its real cause, and how each is
undone. Every fault ends with the DeepSeek head restarted into it (a relaunch is when the fleet
met each of them)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from supervisor.lab import fleet
from supervisor.lab.lab import ADDRESSES, Lab, LabError, LabHost
from supervisor.lab.launch import MXFP4, RENDEZVOUS_PORT

CONTAINER = fleet.CONTAINER
HEAD_UNIT = "vllm-ds4-head.service"
WORKER_UNIT = "vllm-ds4-worker.service"
HEAD_SCRIPT = fleet.HEAD_SCRIPT
WORKER_SCRIPT = fleet.WORKER_SCRIPT

#: The ghost: a drop-in from an upgrade that repoints ExecStart at a script the image lacks. Its
#: name sorts before the supervisor's own drop-in (50-...), as an older override would.
GHOST_SCRIPT = "/workspace/vllm-head-090.sh"
GHOST_DROPIN = f"/etc/systemd/system/{HEAD_UNIT}.d/20-vllm-090.conf"
FIX_DROPIN = "50-fleet-supervisor-execstart.conf"

#: A leftover vLLM worker of an earlier run, still listening on the rendezvous port.
STALE_UNIT = "vllm-stale-worker.service"
STALE_CODE = f"""\
import ctypes, signal, socket, time
ctypes.CDLL(None).prctl(15, b"VLLM::Worker_TP", 0, 0, 0)
while True:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("{ADDRESSES["spark1"]}", {RENDEZVOUS_PORT}))
        break
    except OSError:
        s.close()
        time.sleep(0.005)
s.listen(16)
signal.pause()
"""

#: The GPU-cache block of the lab's mxfp4.py (applied once: 2 lines say empty_cache).
MXFP4_BLOCK = (
    "    # GPU-cache fix: drop the unpadded weights, then torch.cuda.empty_cache()\n"
    "    del w13, w2\n"
    "    gc.collect()  # stands in for torch.cuda.empty_cache()\n"
)


def _run(host: LabHost, *argv: str) -> str:
    result = host.nsenter(*argv)
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        raise LabError(
            f"{' '.join(argv[:3])} on {host.name} failed ({result.returncode}): "
            f"{said[-1] if said else 'no output'}"
        )
    return result.stdout


def _wait(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {within:g}s waiting for {what}")
        time.sleep(0.05)


def _restart_head(lab: Lab) -> None:
    _run(lab.host("spark1"), "systemctl", "restart", "--no-block", HEAD_UNIT)


def restart_pair(lab: Lab) -> None:
    """Restart the pair in order: the worker, then the head."""
    _run(lab.host("spark2"), "systemctl", "restart", WORKER_UNIT)
    _run(lab.host("spark1"), "systemctl", "restart", HEAD_UNIT)


def _mxfp4_path(host: LabHost) -> Path:
    return host.folder / "containers" / CONTAINER / MXFP4.lstrip("/")


def inject_ghost(lab: Lab) -> None:
    command = f"/usr/bin/docker exec {CONTAINER} bash {GHOST_SCRIPT}"
    text = f"[Service]\nExecStart=\nExecStart={command}\n"
    write = 'mkdir -p "${1%/*}" && printf %s "$2" > "$1"'
    host = lab.host("spark1")
    _run(host, "sh", "-c", write, "sh", GHOST_DROPIN, text)
    _run(host, "systemctl", "daemon-reload")
    _restart_head(lab)


def inject_stale_listener(lab: Lab) -> None:
    """A leftover worker that grabs 29501 while the head restarts (it keeps trying to bind, so it
    wins the gap between the old head's exit and the new one's bind), then the head loops."""
    host = lab.host("spark1")
    launch = 'exec -a VLLM::Worker_TP0 "$1" -c "$2"'
    _run(
        host,
        "systemd-run",
        f"--unit={STALE_UNIT}",
        "--collect",
        "--quiet",
        "bash",
        "-c",
        launch,
        "bash",
        sys.executable,
        STALE_CODE,
    )
    _restart_head(lab)
    listening = f"{ADDRESSES['spark1']}:{RENDEZVOUS_PORT}"
    _wait(
        lambda: (
            "VLLM::Worker" in host.nsenter("ss", "-Hltnp", f"sport = :{RENDEZVOUS_PORT}").stdout
            and listening in host.nsenter("ss", "-Hltn", f"sport = :{RENDEZVOUS_PORT}").stdout
        ),
        10,
        "the stale worker to listen on 29501",
    )


def inject_starvation(lab: Lab) -> None:
    folder = lab.host("spark1").folder
    (folder / "drop_caches").write_text("")
    (folder / "meminfo").write_text(fleet.MEMINFO_STARVED)  # in place: bound at /proc/meminfo
    _restart_head(lab)


def inject_duplicate_patch(lab: Lab) -> None:
    path = _mxfp4_path(lab.host("spark1"))
    text = path.read_text()
    path.write_text(text.replace(MXFP4_BLOCK, MXFP4_BLOCK * 2, 1))
    _restart_head(lab)


def reset(lab: Lab) -> None:
    """Undo every fault: drop-ins, the stale listener, meminfo and drop_caches, mxfp4.py."""
    for name, host in lab.hosts.items():
        unit = HEAD_UNIT if name == "spark1" else WORKER_UNIT
        paths = [GHOST_DROPIN, f"/etc/systemd/system/{unit}.d/{FIX_DROPIN}"]
        if host.nsenter("ls", *paths).stdout.strip():
            _run(host, "rm", "-f", *paths)
            _run(host, "systemctl", "daemon-reload")
            _run(host, "systemctl", "restart", "--no-block", unit)
        if name == "spark1":
            host.nsenter("systemctl", "stop", STALE_UNIT)
            if host.systemctl("is-active", "--quiet", HEAD_UNIT).returncode != 0:
                _run(host, "systemctl", "start", "--no-block", HEAD_UNIT)
        if (host.folder / "meminfo").read_text() != fleet.MEMINFO_HEALTHY:
            (host.folder / "meminfo").write_text(fleet.MEMINFO_HEALTHY)
        (host.folder / "drop_caches").write_text("")
        path = _mxfp4_path(host)
        if path.read_text() != fleet.MXFP4_TEXT:
            path.write_text(fleet.MXFP4_TEXT)


@dataclass(frozen=True)
class Fault:
    """A drill's fault: `inject` it into the running lab; `rule` is the rule that must fix it."""

    name: str
    rule: str
    inject: Callable[[Lab], None]

    def clean(self, lab: Lab) -> None:
        reset(lab)


FAULTS: Mapping[str, Fault] = {
    f.name: f
    for f in (
        Fault("ghost-execstart", "ghost-execstart", inject_ghost),
        Fault("eaddrinuse-29501", "eaddrinuse-29501", inject_stale_listener),
        Fault("page-cache-starvation", "page-cache-starvation", inject_starvation),
        Fault("duplicated-mxfp4-patch", "duplicated-mxfp4-patch", inject_duplicate_patch),
    )
}


def get(name: str) -> Fault:
    """The fault called `name`; `LabError` naming the known drills otherwise."""
    try:
        return FAULTS[name]
    except KeyError:
        raise LabError(f"no drill {name!r} (drills: {', '.join(FAULTS)})") from None
