"""The fleet in the lab: the units, containers and launch scripts that mirror the real one.

- spark1 (127.0.0.11): `vllm-ds4-head.service` runs `docker exec vllm_ds4 bash
  /workspace/vllm-head.sh`: binds the rendezvous port 29501 and serves DeepSeek (the vLLM sim)
  on :8000; `vllm-qwen.service`, a single-node model on :8001 whose unit runs a launch script on
  the host (`/var/lib/lab/scripts/vllm-qwen.sh`, a known-good copy under
  `/var/lib/lab/known-good/`: no container); the hung-engine fault gives it systemd's default
  stop timeout (90 s) with a drop-in; its engine's death ends its server with exit 0 (vLLM
  0.32), as the head's does. `ollama.service`: Ollama loading `qwen3:8b` on demand on :11434
  (`fleet_lab.vllm_sim.loaders`), its free memory read from the host's `/proc/meminfo` (which
  the lab writes: the vLLM neighbour's share).
- spark2 (127.0.0.12): `vllm-ds4-worker.service` runs `docker exec vllm_ds4 bash
  /workspace/vllm-worker.sh` (a headless worker that joins the head's 29501);
  `ollama.service` (the sim as Ollama on :11434) and `parakeet.service` (health only, :8765);
  `llama-swap.service`, a llama-swap-shaped router on :8080 in front of spark1's single node
  (model `qwen`).

- m3ultra (127.0.0.13): the Mac, a stand-in with no macOS (see `fleet_lab.mac.host`): Kimi's
  launchd job `com.fleet.mlx-kimi` runs the sim as mlx_lm on :8013.

Both `vllm_ds4` trees hold the launch scripts, a known-good copy under `/workspace/known-good/`
and vLLM's `mxfp4.py` (with the GPU-cache patch applied once) at the path the shipped rule greps.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from fleet_lab import account
from fleet_lab.boot import INSIDE
from fleet_lab.containers import write_tree
from fleet_lab.host import LabHost
from fleet_lab.lab import ADDRESSES, Lab, LabError
from fleet_lab.launch import DROP_CACHES, MXFP4
from fleet_lab.mac import host as mac_host

DS4_MODEL = "deepseek-v4-flash"
CONTAINER = "vllm_ds4"
HEAD_SCRIPT = "/workspace/vllm-head.sh"
WORKER_SCRIPT = "/workspace/vllm-worker.sh"
KNOWN_GOOD = "/workspace/known-good"
COLD_START = "1s"
QWEN_MODEL = "qwen"
QWEN_UNIT = "vllm-qwen.service"
QWEN_SCRIPT = f"{INSIDE}/scripts/vllm-qwen.sh"
QWEN_KNOWN_GOOD = f"{INSIDE}/known-good/vllm-qwen.sh"
#: The single node's control file (`fleet_lab.vllm_sim.control`): a drill saturates or hangs it
#: without restarting the unit. In the host's own folder.
QWEN_CONTROL = "qwen-control.json"
#: Spark 1's Ollama, loading its model on demand (`fleet_lab.vllm_sim.loaders ollama`).
OLLAMA_UNIT = "ollama.service"
OLLAMA_MODEL = "qwen3:8b"
OLLAMA_PORT = 11434
#: The llama-swap-shaped router on spark2, in front of the single node (`loaders llama-swap`).
SWAP_UNIT = "llama-swap.service"
SWAP_PORT = 8080
#: The host's GPU (see `launch.claim_gpu`): a file in the host's own folder.
GPU = f"{INSIDE}/gpu"
#: What the launch scripts give the vLLM-shaped server: vLLM 0.32's exit 0 after engine death,
#: 1.5 s after it (measured: 1.5-4.5 s): a probe can see /health 503 while the unit still runs.
EXIT_DELAY = "1.5s"
SIM_FLAGS = f"--cold-start {COLD_START} --exit-on-engine-death --exit-delay {EXIT_DELAY}"

#: vLLM's mxfp4 post-load step, cut down to the part the fleet patched (2 lines say empty_cache).
MXFP4_TEXT = '''\
"""vLLM mxfp4 MoE quantization (lab copy: the post-load step only)."""

import gc


def _setup_kernel(w13: bytearray, w2: bytearray) -> bytes:
    return bytes(w13[:8]) + bytes(w2[:8])


def process_weights_after_loading() -> bytes:
    w13 = bytearray(4096)
    w2 = bytearray(4096)
    kernel = _setup_kernel(w13, w2)
    # GPU-cache fix: drop the unpadded weights, then torch.cuda.empty_cache()
    del w13, w2
    gc.collect()  # stands in for torch.cuda.empty_cache()
    return kernel
'''

#: A healthy GB10's memory: 119.67 GiB total, 116 GiB free.
MEMINFO_HEALTHY = "MemTotal:       125483008 kB\nMemFree:        121634816 kB\n"

#: A GB10 starved by the page cache (FAILURES.md): 4.75 of 119.67 GiB free, ~110 GiB cached
#: by earlier model loads. `echo 3 > /proc/sys/vm/drop_caches` gives it back (see launch).
MEMINFO_STARVED = (
    "MemTotal:       125483008 kB\n"
    "MemFree:          4980736 kB\n"
    "MemAvailable:     5505024 kB\n"
    "Buffers:          1048576 kB\n"
    "Cached:         114294784 kB\n"
)

#: A GB10 whose vLLM neighbour holds its unified memory (0.80 of it, and growing): 3.0 GiB
#: available, little page cache (nothing `drop_caches` could give back): a 6 GiB model does not
#: fit.
MEMINFO_NEIGHBOUR_FULL = (
    "MemTotal:       125483008 kB\n"
    "MemFree:          2936012 kB\n"
    "MemAvailable:     3145728 kB\n"
    "Buffers:           104857 kB\n"
    "Cached:           1258291 kB\n"
)


def _python() -> str:
    return sys.executable


def _launch_script(role: str, address: str, extra: str = "") -> str:
    title = "exec"
    return (
        "#!/bin/bash\n"
        f"# known-good launch of the DeepSeek {role} (lab)\n"
        f"{title} {_python()} -m fleet_lab.launch {role} --host {address} "
        f"--head-address {ADDRESSES['spark1']} --port 8000 --model {DS4_MODEL} "
        f"--mxfp4 {MXFP4} --drop-caches {DROP_CACHES} --gpu {GPU}{extra} -- {SIM_FLAGS}\n"
    )


#: This checkout's lab package and runtime, first on a unit's path: the venv's editable install
#: may be another checkout's (a worktree's lab runs its own simulators).
CHECKOUT_PATH = f"{Path(__file__).resolve().parents[1]}:{Path(__file__).resolve().parents[2]}"


def _unit(
    description: str, exec_start: str, *, stop_timeout: str | None = "5", own_path: bool = False
) -> str:
    """A model unit; `stop_timeout` None leaves systemd's own TimeoutStopSec (90 s);
    `own_path` runs this checkout's code (`CHECKOUT_PATH`)."""
    stop = f"TimeoutStopSec={stop_timeout}\n" if stop_timeout is not None else ""
    env = f"Environment=PYTHONPATH={CHECKOUT_PATH}\n" if own_path else ""
    return (
        f"[Unit]\nDescription={description}\nStartLimitIntervalSec=0\n\n"
        f"[Service]\n{env}ExecStart={exec_start}\nRestart=on-failure\nRestartSec=3\n"
        f"KillMode=control-group\n{stop}"
    )


def _sim(address: str, port: int, model: str, flags: str = "") -> str:
    return (
        f"{_python()} -m fleet_lab.vllm_sim --host {address} --port {port} "
        f"--model {model} --cold-start {COLD_START}{flags}"
    )


def units() -> dict[str, dict[str, str]]:
    """Every lab host's units (file name -> text)."""
    spark2 = ADDRESSES["spark2"]
    return {
        "spark1": {
            "vllm-ds4-head.service": _unit(
                "vLLM DeepSeek V4 head", f"/usr/bin/docker exec {CONTAINER} bash {HEAD_SCRIPT}"
            ),
            # the hung-engine fault raises its stop timeout to systemd's default (90 s) with a
            # drop-in (`fleet_lab.drills.faults.QWEN_STOP_DROPIN`)
            QWEN_UNIT: _unit("vLLM single node", f"/bin/bash {QWEN_SCRIPT}"),
            OLLAMA_UNIT: _unit("Ollama (models on demand)", _ollama(), own_path=True),
        },
        "spark2": {
            "vllm-ds4-worker.service": _unit(
                "vLLM DeepSeek V4 worker", f"/usr/bin/docker exec {CONTAINER} bash {WORKER_SCRIPT}"
            ),
            "ollama.service": _unit("Ollama", _sim(spark2, 11434, "gemma", " --flavour ollama")),
            "parakeet.service": _unit("Parakeet ASR (health only)", _sim(spark2, 8765, "asr")),
            SWAP_UNIT: _unit("llama-swap (router)", _swap(), own_path=True),
        },
        mac_host.HOST: mac_host.units(),
    }


def _ollama() -> str:
    return (
        f"{_python()} -m fleet_lab.vllm_sim.loaders ollama --host {ADDRESSES['spark1']} "
        f"--port {OLLAMA_PORT} --model {OLLAMA_MODEL} --size 6 --load-s 1 --meminfo /proc/meminfo"
    )


def _swap() -> str:
    qwen = f"http://{ADDRESSES['spark1']}:8001"
    return (
        f"{_python()} -m fleet_lab.vllm_sim.loaders llama-swap --host {ADDRESSES['spark2']} "
        f"--port {SWAP_PORT} --upstream {QWEN_MODEL}={qwen}"
    )


def host_scripts(host: str) -> Mapping[str, str]:
    """Launch scripts on host `host` itself (path inside the host -> text)."""
    if host != "spark1":
        return {}
    text = f"#!/bin/bash\n# known-good launch of the single node (lab)\nexec {_qwen()}\n"
    return {QWEN_SCRIPT: text, QWEN_KNOWN_GOOD: text}


def _qwen() -> str:
    flags = f" --control-file {INSIDE}/{QWEN_CONTROL} --exit-on-engine-death --exit-delay 1.5s"
    return _sim(ADDRESSES["spark1"], 8001, QWEN_MODEL, flags)


def containers(host: str) -> Mapping[str, str]:
    """The files of host `host`'s `vllm_ds4` tree (path inside the container -> text)."""
    address = ADDRESSES[host]
    role, script = ("head", HEAD_SCRIPT) if host == "spark1" else ("worker", WORKER_SCRIPT)
    text = _launch_script(role, address)
    name = script.rsplit("/", 1)[1]
    return {script: text, f"{KNOWN_GOOD}/{name}": text, MXFP4: MXFP4_TEXT}


FRESH_BASHRC = "# fleet lab host: the shell start-up of a fresh box"


def prepare(lab: Lab) -> None:
    """Fix-ups a running host needs before the daemon talks to it (idempotent; they land in the
    host's in-memory overlay, never on the machine's disk):

    - the lab's `docker` must be the one every PATH finds, sudo's secure_path included: boot
      installs it as /usr/bin/docker only, and a real docker client in /usr/local/bin would
      shadow it (a link to it, so sudoers' `/usr/bin/docker` matches either path);
    - the host's name must resolve (its address in /etc/hosts), else sudo warns on stderr
      ("unable to resolve host") and the collectors read the warning as a failed command;
    - root's shell start-up is a fresh box's, not this machine's: bash reads `~/.bashrc` for
      every SSH command, and a machine's personal one (here: `pyenv init`, which rehashes under
      a lock file on every start) makes each command slow, and one killed mid-rehash leaves the
      lock behind, so every later command waits 60s for it.
    """
    for host in lab.hosts.values():
        if host.pid is None or not _fenced(host):
            continue
        script = (
            '[ "$(readlink /usr/local/bin/docker)" = /usr/bin/docker ] || '
            "ln -sf /usr/bin/docker /usr/local/bin/docker; "
            f'grep -qw "{host.name}" /etc/hosts || '
            f'echo "{host.address} {host.name}" >> /etc/hosts; '
            f"grep -qx '{FRESH_BASHRC}' /root/.bashrc || echo '{FRESH_BASHRC}' > /root/.bashrc; "
            "rm -f /root/.pyenv/shims/.pyenv-shim"
        )
        host.nsenter("sh", "-c", script)


def _fenced(host: LabHost, within: float = 30.0) -> bool:
    """Wait until the host's root is its own overlay, not the machine's: a host still in its
    boot stages (before `pivot_root`), seen through `nsenter`, writes to the machine's own
    files. False when the host stopped meanwhile; `LabError` past `within`."""
    machine = os.stat("/").st_dev
    deadline = time.monotonic() + within
    while True:
        pid = host.pid
        if pid is None:
            return False
        try:
            if os.stat(f"/proc/{pid}/root/").st_dev != machine:
                return True
        except OSError:
            pass  # it exited meanwhile: look again
        if time.monotonic() > deadline:
            raise LabError(f"host {host.name} has no root of its own after {within:g}s")
        time.sleep(0.05)


def create(folder: Path, user: str = account.USER) -> Lab:
    """Write the fleet lab under `folder` (boots nothing): hosts, units, containers, meminfo.
    Every host makes the unprivileged account `account.USER` at boot (on the Mac, the owner of
    the job's `gui/501` domain); the daemon logs in as `user` (that account, or `root`)."""
    all_units = units()
    addresses = {**ADDRESSES, **mac_host.ADDRESSES}
    accounts = {name: account.Account.linux() for name in ADDRESSES}
    accounts |= dict.fromkeys(mac_host.ADDRESSES, mac_host.ACCOUNT)
    if user not in ("root", account.USER):
        raise LabError(f"the lab logs in as root or {account.USER}, not {user!r}")
    lab = Lab.create(
        folder,
        addresses,
        all_units,
        {h: list(u) for h, u in all_units.items()},
        user=user,
        accounts=accounts,
    )
    for name, host in lab.hosts.items():
        if name in mac_host.ADDRESSES:
            mac_host.write(host)
            continue
        write_tree(host.folder, CONTAINER, dict(containers(name)))
        (host.folder / "meminfo").write_text(MEMINFO_HEALTHY)
        for inside, text in host_scripts(name).items():
            path = host.folder / inside.removeprefix(f"{INSIDE}/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o755)
    return lab
