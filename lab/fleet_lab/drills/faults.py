"""The faults the drills inject into the running lab, each from its real cause, and how each is
undone. The DeepSeek pair's faults end with the head (re)started into them (a relaunch is when
the fleet met each of them), but the hang (`ssh-lost`), which freezes spark1 instead; the single
node's (`qwen`) come from its unit (a drop-in, a kill) or from its server's control file (load,
a hung engine, failing completions), the Mac's from its launchd job; Spark 1's Ollama fails a
person's load for memory, and the llama-swap router (`swap`) or its backend (`qwen`) dies under
a route (`qwen-via-swap`) that the drill then holds to being blocked, not an incident. A fault
with a `then` changes once the endpoint is escalated: what it hears next is new evidence."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import httpx

from fleet_lab import fleet
from fleet_lab.drills import drifts
from fleet_lab.drills.steps import (
    CONTAINER,
    HEAD_SCRIPT,
    HEAD_UNIT,
    WORKER_SCRIPT,
    WORKER_UNIT,
    mxfp4_path,
    restart_head,
    restart_pair,
    run,
    script_path,
    spawn_titled,
    wait,
    write_dropin,
    write_head_script,
)
from fleet_lab.host import SSHD_UNIT
from fleet_lab.lab import ADDRESSES, Lab, LabError, LabHost
from fleet_lab.launch import RENDEZVOUS_PORT
from fleet_lab.mac import host as mac_host

__all__ = ["CONTAINER", "HEAD_SCRIPT", "HEAD_UNIT", "WORKER_SCRIPT", "WORKER_UNIT", "restart_pair"]

#: The ghost: a drop-in from an upgrade that repoints ExecStart at a script the image lacks. Its
#: name sorts before the supervisor's own drop-in (50-...), as an older override would.
GHOST_SCRIPT = "/workspace/vllm-head-090.sh"
GHOST_DROPIN = f"/etc/systemd/system/{HEAD_UNIT}.d/20-vllm-090.conf"
FIX_DROPIN = "50-fleet-supervisor-execstart.conf"
#: The same ghost for the single node, whose unit runs a script on the host: a missing script
#: (bash exits 127), or a missing binary (systemd's 203/EXEC).
QWEN_GHOST_DROPIN = f"/etc/systemd/system/{fleet.QWEN_UNIT}.d/20-vllm-090.conf"
QWEN_GHOST_SCRIPT = fleet.QWEN_SCRIPT.replace("vllm-qwen.sh", "vllm-qwen-090.sh")
QWEN_GHOST_BINARY = "/opt/vllm-090/bin/vllm"

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

#: The head's launch delayed like a real 9-minute load: several probe intervals, inside the
#: startup grace the drills configure (20s).
LONG_COLD_START = "6s"

#: A launch failure no rule knows: a pre-start step of the head exits 1 with a text no rule
#: matches. (Not the launch script itself: a unit looping on a script that exits 1 at once is
#: `active/running` for a few ms of every cycle, and the shipped cold-start rule matches a
#: sample taken then; a failing ExecStartPre never reaches `running`.)
UNKNOWN_TEXT = "RuntimeError: lab preflight: the accelerator refused the context (code 0x5eed)"
UNKNOWN_DROPIN = f"/etc/systemd/system/{HEAD_UNIT}.d/30-lab-preflight.conf"
UNKNOWN_CONF = f"""[Service]\nExecStartPre=/bin/sh -c "echo '{UNKNOWN_TEXT}' >&2; exit 1"\n"""
#: The same unknown failure for the single node (its preflight exits `status`).
QWEN_UNKNOWN_DROPIN = f"/etc/systemd/system/{fleet.QWEN_UNIT}.d/30-lab-preflight.conf"


def _qwen_unknown_conf(status: int) -> str:
    return f"""[Service]\nExecStartPre=/bin/sh -c "echo '{UNKNOWN_TEXT}' >&2; exit {status}"\n"""


#: The GPU-cache block of the lab's mxfp4.py (applied once: 2 lines say empty_cache).
MXFP4_BLOCK = (
    "    # GPU-cache fix: drop the unpadded weights, then torch.cuda.empty_cache()\n"
    "    del w13, w2\n"
    "    gc.collect()  # stands in for torch.cuda.empty_cache()\n"
)


def inject_ghost(lab: Lab) -> None:
    command = f"/usr/bin/docker exec {CONTAINER} bash {GHOST_SCRIPT}"
    write_dropin(lab, GHOST_DROPIN, f"[Service]\nExecStart=\nExecStart={command}\n")
    restart_head(lab)


def inject_stale_listener(lab: Lab) -> None:
    """A leftover worker of the previous run holds 29501 when the head relaunches: the head is
    stopped, the stale `VLLM::Worker_TP0` binds and listens, then the head starts into it and
    loops (exit 1, `Restart=on-failure`) with torch's EADDRINUSE text in its journal."""
    host = lab.host("spark1")
    run(host, "systemctl", "stop", HEAD_UNIT)
    spawn_titled(host, STALE_UNIT, "VLLM::Worker_TP0", STALE_CODE)
    listening = f"{ADDRESSES['spark1']}:{RENDEZVOUS_PORT}"
    wait(
        lambda: (
            "VLLM::Worker" in host.nsenter("ss", "-Hltnp", f"sport = :{RENDEZVOUS_PORT}").stdout
            and listening in host.nsenter("ss", "-Hltn", f"sport = :{RENDEZVOUS_PORT}").stdout
        ),
        10,
        "the stale worker to listen on 29501",
    )
    run(host, "systemctl", "start", "--no-block", HEAD_UNIT)


def inject_cold_start(lab: Lab) -> None:
    """Relaunch the head with a long cold start: active/running, its port refusing meanwhile."""
    text = fleet.containers("spark1")[HEAD_SCRIPT]
    slow = text.replace(f"--cold-start {fleet.COLD_START}", f"--cold-start {LONG_COLD_START}")
    if slow == text:
        raise LabError("the head's launch script does not set --cold-start")
    write_head_script(lab, slow)
    restart_head(lab)


def inject_ghost_without_known_good(lab: Lab) -> None:
    """The ghost drop-in, and the known-good launch script is gone from the container too."""
    script_path(lab.host("spark1"), HEAD_SCRIPT).unlink()
    inject_ghost(lab)


def _qwen_ghost(lab: Lab, command: str) -> None:
    write_dropin(lab, QWEN_GHOST_DROPIN, f"[Service]\nExecStart=\nExecStart={command}\n")
    run(lab.host("spark1"), "systemctl", "restart", "--no-block", fleet.QWEN_UNIT)


def inject_host_ghost(lab: Lab) -> None:
    _qwen_ghost(lab, f"/bin/bash {QWEN_GHOST_SCRIPT}")


def inject_missing_binary(lab: Lab) -> None:
    _qwen_ghost(lab, f"{QWEN_GHOST_BINARY} serve qwen --port 8001")


def _kill_into(lab: Lab, command: str) -> None:
    """ExecStart repointed (a drop-in, daemon-reload, no restart), then the running server is
    SIGKILLed: systemd restarts it after RestartSec into the ghost (issue 19's sequences)."""
    write_dropin(lab, QWEN_GHOST_DROPIN, f"[Service]\nExecStart=\nExecStart={command}\n")
    run(lab.host("spark1"), "systemctl", "kill", "--signal=SIGKILL", fleet.QWEN_UNIT)


def inject_kill_into_ghost(lab: Lab) -> None:
    """The next start exits 127 (bash: no such script)."""
    _kill_into(lab, f"/bin/bash {QWEN_GHOST_SCRIPT}")


def inject_kill_into_missing_binary(lab: Lab) -> None:
    """The next start fails 203/EXEC (no such binary)."""
    _kill_into(lab, f"{QWEN_GHOST_BINARY} serve qwen --port 8001")


def inject_qwen_unknown(lab: Lab) -> None:
    """The single node's start fails (its preflight exits 1 with a text no rule knows), on every
    relaunch: one plain restart, then a person."""
    write_dropin(lab, QWEN_UNKNOWN_DROPIN, _qwen_unknown_conf(1))
    run(lab.host("spark1"), "systemctl", "restart", "--no-block", fleet.QWEN_UNIT)


def then_ghost(lab: Lab) -> None:
    """While escalated: the preflight is gone, ExecStart now names a missing script (systemd's
    next automatic restart exits 127): a rule in force knows this one."""
    run(lab.host("spark1"), "rm", "-f", QWEN_UNKNOWN_DROPIN)
    write_dropin(
        lab, QWEN_GHOST_DROPIN, f"[Service]\nExecStart=\nExecStart=/bin/bash {QWEN_GHOST_SCRIPT}\n"
    )


def then_other_status(lab: Lab) -> None:
    """While escalated: the preflight now exits 2 (new evidence, still no rule knows it)."""
    write_dropin(lab, QWEN_UNKNOWN_DROPIN, _qwen_unknown_conf(2))


def inject_ssh_loss(lab: Lab) -> None:
    """spark1 hangs (the GSP-hang class): its sshd stops answering and the head's processes
    freeze (SIGSTOP: the kernel still accepts on :8000, nothing answers), as when the GPU
    firmware takes the box with it."""
    host = lab.host("spark1")
    run(host, "systemctl", "kill", "--signal=SIGSTOP", HEAD_UNIT)
    run(host, "systemctl", "stop", SSHD_UNIT)


def inject_unknown(lab: Lab) -> None:
    """The head's start fails with exit 1 and a text no rule knows, on every relaunch."""
    write_dropin(lab, UNKNOWN_DROPIN, UNKNOWN_CONF)
    restart_head(lab)


def inject_starvation(lab: Lab) -> None:
    folder = lab.host("spark1").folder
    (folder / "drop_caches").write_text("")
    (folder / "meminfo").write_text(fleet.MEMINFO_STARVED)  # in place: bound at /proc/meminfo
    restart_head(lab)


def inject_duplicate_patch(lab: Lab) -> None:
    path = mxfp4_path(lab.host("spark1"))
    text = path.read_text()
    path.write_text(text.replace(MXFP4_BLOCK, MXFP4_BLOCK * 2, 1))
    restart_head(lab)


def _reset_qwen(host: LabHost) -> None:
    paths = [
        QWEN_GHOST_DROPIN,
        QWEN_UNKNOWN_DROPIN,
        QWEN_STOP_DROPIN,
        f"/etc/systemd/system/{fleet.QWEN_UNIT}.d/{FIX_DROPIN}",
    ]
    if host.nsenter("ls", *paths).stdout.strip():
        run(host, "rm", "-f", *paths)
        run(host, "systemctl", "daemon-reload")
        run(host, "systemctl", "restart", "--no-block", fleet.QWEN_UNIT)
    elif host.systemctl("is-active", "--quiet", fleet.QWEN_UNIT).returncode != 0:
        run(host, "systemctl", "start", "--no-block", fleet.QWEN_UNIT)


#: Other users' load on the single node: 48 running, 20 waiting, 940 tok/s, and a new request
#: queued for a minute (longer than the probe's 30 s timeout): an ordinary afternoon.
SATURATED = {"load_running": 48, "load_waiting": 20, "load_tok_s": 940.0, "queue_s": 60.0}


def _control(lab: Lab, overrides: Mapping[str, object]) -> None:
    """The single node's sim takes `overrides` (re-read on change; no restart)."""
    (lab.host("spark1").folder / fleet.QWEN_CONTROL).write_text(json.dumps(dict(overrides)))


def qwen_main_pid(lab: Lab) -> str:
    return lab.host("spark1").show(fleet.QWEN_UNIT, "MainPID").get("MainPID", "")


def inject_saturation(lab: Lab) -> None:
    _control(lab, SATURATED)


#: The single node's unit as a user writes it for the hung-engine fault: systemd's default stop
#: timeout (90 s), which a hung vLLM runs out (its SIGTERM waits for requests the frozen engine
#: never finishes). The lab's own 5 s keeps the other drills' kills from waiting on it.
QWEN_STOP_DROPIN = f"/etc/systemd/system/{fleet.QWEN_UNIT}.d/40-default-stop-timeout.conf"


def _hang_engine(lab: Lab) -> None:
    """The single node's engine stops stepping (3 requests stuck), in the process running now
    only: a restart of the unit ends it (as a real engine's hang)."""
    _control(lab, {"engine_hung": True, "load_running": 3, "pid": int(qwen_main_pid(lab))})


def inject_hung_engine(lab: Lab) -> None:
    """The engine stops stepping: 3 requests stuck, /health and /v1/models still 200. Only this
    process hangs: a restart of the unit ends it (as a real engine's hang)."""
    write_dropin(lab, QWEN_STOP_DROPIN, "[Service]\nTimeoutStopSec=90s\n")
    _hang_engine(lab)


def inject_qwen_failing_completions(lab: Lab) -> None:
    """Every completion of the single node answers HTTP 500 (/health and /v1/models still 200,
    nothing running: `/metrics` says idle), in this process and every restarted one: no rule
    knows it, so unknown-failure's one restart fails and a person is called. The unit never
    dies."""
    _control(lab, {"fail_status": 500})


def then_hung(lab: Lab) -> None:
    """While escalated: the running process's engine hangs instead (its completions now get no
    token; `/metrics` says hung). The unit stays active and dies no death: only `/metrics`
    changed, and hung-engine knows this one."""
    _hang_engine(lab)


def inject_ollama_out_of_memory(lab: Lab) -> None:
    """Spark 1's vLLM neighbour has taken the unified memory (the host's meminfo: 3.0 GiB
    available, in place), Ollama's `qwen3:8b` is not loaded (its keep-alive ran out: unloaded
    here as Ollama's API does it, `keep_alive` 0), and a person's request for it arrives: the
    load fails at once (500, Ollama's `model request too large for system` in its journal)."""
    url = f"http://{ADDRESSES['spark1']}:{fleet.OLLAMA_PORT}"
    unload = {"model": fleet.OLLAMA_MODEL, "keep_alive": 0}
    _ollama(f"{url}/api/generate", unload, 200)
    (lab.host("spark1").folder / "meminfo").write_text(fleet.MEMINFO_NEIGHBOUR_FULL)
    asked = {
        "model": fleet.OLLAMA_MODEL,
        "messages": [{"role": "user", "content": "Summarise the meeting notes, please."}],
        "stream": False,
    }
    _ollama(f"{url}/api/chat", asked, 500)


def _ollama(url: str, body: Mapping[str, object], status: int) -> None:
    answer = httpx.post(url, json=dict(body), timeout=10)
    if answer.status_code != status:
        said = f"{answer.status_code} {answer.text.strip()}"
        raise LabError(f"Ollama answered {said} to {url}, not {status}")


def inject_backend_death(lab: Lab) -> None:
    """The router's backend, the single node, loses its engine (SIGUSR1: vLLM's EngineCore
    killed): /health 503, then its server exits 0, so `Restart=on-failure` leaves it dead. The
    router on spark2 runs on, its `qwen` route answering 502."""
    run(lab.host("spark1"), "systemctl", "kill", "--kill-whom=main", "--signal=SIGUSR1",
        fleet.QWEN_UNIT)  # fmt: skip


def inject_router_death(lab: Lab) -> None:
    """llama-swap's process ends cleanly (a SIGTERM from outside its unit, as a `kill` by hand
    or a package script's): exit 0, so `Restart=on-failure` leaves the router dead and every
    route through it refused; its backend serves on."""
    run(lab.host("spark2"), "systemctl", "kill", "--kill-whom=main", "--signal=SIGTERM",
        fleet.SWAP_UNIT)  # fmt: skip


def reset(lab: Lab) -> None:
    """Undo every fault: sshd, drop-ins, the stale listener and the orphan, the head's launch
    script, meminfo and drop_caches, mxfp4.py; and empty the journal (the shipped rules read a
    unit's last lines, which would otherwise still hold an earlier drill's error)."""
    for name, host in lab.hosts.items():
        if host.systemctl("is-active", "--quiet", SSHD_UNIT).returncode != 0:
            run(host, "systemctl", "start", SSHD_UNIT)
        if name in mac_host.ADDRESSES:
            mac_host.reset(host)
            continue
        unit = HEAD_UNIT if name == "spark1" else WORKER_UNIT
        paths = [GHOST_DROPIN, UNKNOWN_DROPIN, f"/etc/systemd/system/{unit}.d/{FIX_DROPIN}"]
        if host.nsenter("ls", *paths).stdout.strip():
            run(host, "rm", "-f", *paths)
            run(host, "systemctl", "daemon-reload")
            run(host, "systemctl", "restart", "--no-block", unit)
        if name == "spark1":
            (host.folder / fleet.QWEN_CONTROL).unlink(missing_ok=True)
            _reset_qwen(host)
            host.nsenter("systemctl", "kill", "--signal=SIGCONT", HEAD_UNIT)
            host.nsenter("systemctl", "stop", STALE_UNIT, drifts.ORPHAN_UNIT)
            script = script_path(host, HEAD_SCRIPT)
            if not script.exists() or script.read_text() != fleet.containers(name)[HEAD_SCRIPT]:
                script.write_text(fleet.containers(name)[HEAD_SCRIPT])
                script.chmod(0o755)
                run(host, "systemctl", "restart", "--no-block", HEAD_UNIT)
            if host.systemctl("is-active", "--quiet", HEAD_UNIT).returncode != 0:
                run(host, "systemctl", "start", "--no-block", HEAD_UNIT)
        for unit in {"spark1": [fleet.OLLAMA_UNIT], "spark2": [fleet.SWAP_UNIT]}.get(name, []):
            if host.systemctl("is-active", "--quiet", unit).returncode != 0:
                run(host, "systemctl", "start", "--no-block", unit)
        if (host.folder / "meminfo").read_text() != fleet.MEMINFO_HEALTHY:
            (host.folder / "meminfo").write_text(fleet.MEMINFO_HEALTHY)
        (host.folder / "drop_caches").write_text("")
        path = mxfp4_path(host)
        if path.read_text() != fleet.MXFP4_TEXT:
            path.write_text(fleet.MXFP4_TEXT)
        # each drill reads only its own fault's lines: the journal starts afresh
        host.nsenter("sh", "-c", "journalctl --rotate && journalctl --vacuum-time=1s")


class Expect(StrEnum):
    """What the daemon must do about a fault."""

    HEAL = "heal"  #: repair it over SSH and prove it with a real completion
    LEAVE_ALONE = "leave alone"  #: run no action step; the endpoint comes back on its own
    ESCALATE = "escalate"  #: call a person (after at most the rule's budget of steps)
    BUSY = "busy"  #: shown busy while the fault lasts: no action, the unit left running


@dataclass(frozen=True)
class Fault:
    """A drill's fault: `inject` it into the running lab; `rule` is the rule that must match,
    `expect` what the daemon must then do, `startup_grace` the drill config's grace, `endpoint`
    the endpoint it hits (`ds4`, the pair; `qwen`, the single node)."""

    name: str
    rule: str
    inject: Callable[[Lab], None]
    expect: Expect = Expect.HEAL
    startup_grace: str = "20s"
    endpoint: str = "ds4"
    #: the drill's own probe settings over `drill_config.PROBE` (none: PROBE as it is)
    probe: Mapping[str, object] = field(default_factory=dict)
    notify: Mapping[str, object] = field(default_factory=dict)  #: over the bot's notify section
    hold_s: float = 0.0  #: how long the fault lasts before it is judged (a saturation)
    #: once the endpoint is escalated (and quiet), this changes the fault; `expect` is then
    #: what must follow (heal without a person, or stay escalated with nothing more done)
    then: Callable[[Lab], None] | None = None
    within: float | None = None  #: how long the drill waits for each phase (None: its default)
    #: what the fault needs in place before the daemon starts (and the endpoint serves again
    #: when it returns): the lab as a user had it before the failure
    prepare: Callable[[Lab], None] | None = None
    #: routes the fault blocks (in the config with their router and backend): each must be
    #: shown blocked by the fault's endpoint, with no incident of its own, and healthy again
    routes: tuple[str, ...] = ()

    def clean(self, lab: Lab) -> None:
        reset(lab)


FAULTS: Mapping[str, Fault] = {
    f.name: f
    for f in (
        Fault("ghost-execstart", "ghost-execstart", inject_ghost),
        Fault("eaddrinuse-29501", "eaddrinuse-29501", inject_stale_listener),
        Fault("page-cache-starvation", "page-cache-starvation", inject_starvation),
        Fault("duplicated-mxfp4-patch", "duplicated-mxfp4-patch", inject_duplicate_patch),
        Fault("cold-start", "cold-start", inject_cold_start, Expect.LEAVE_ALONE),
        Fault("ssh-lost", "gsp-firmware-hang", inject_ssh_loss, Expect.ESCALATE),
        Fault("unknown-failure", "unknown-failure", inject_unknown, Expect.ESCALATE, "8s"),
        Fault("ghost-execstart-host", "ghost-execstart-host", inject_host_ghost, endpoint="qwen"),
        Fault(
            "ghost-execstart-203", "ghost-execstart-host", inject_missing_binary, endpoint="qwen"
        ),
        # killed after ExecStart was repointed: the death says signal 9, the next start 127/203
        Fault("ghost-kill-127", "ghost-execstart-host", inject_kill_into_ghost, endpoint="qwen"),
        Fault(
            "ghost-kill-203",
            "ghost-execstart-host",
            inject_kill_into_missing_binary,
            endpoint="qwen",
        ),
        # escalated (unknown-failure spent its one restart), then the evidence changes
        Fault(
            "escalated-then-ghost",
            "ghost-execstart-host",
            inject_qwen_unknown,
            startup_grace="8s",
            endpoint="qwen",
            then=then_ghost,
        ),
        # escalated, then only `/metrics` changes (the unit dies no death meanwhile); every
        # failed real check reads /metrics over the progress window (here 1 s, not the default
        # 5 s: the stand-in's counters stand still when it hangs and move each token when it
        # works, so a second tells them apart; escalating took ~45 s at 5 s): a generous
        # ceiling per phase
        Fault(
            "escalated-then-hung",
            "hung-engine",
            inject_qwen_failing_completions,
            startup_grace="8s",
            endpoint="qwen",
            then=then_hung,
            within=120,
            probe={"progress_window": "1s"},
        ),
        Fault(
            "escalated-other-status",
            "unknown-failure",
            inject_qwen_unknown,
            Expect.ESCALATE,
            startup_grace="8s",
            endpoint="qwen",
            then=then_other_status,
        ),
        Fault("engine-death-clean-exit", "engine-death-clean-exit", drifts.inject_engine_death),
        Fault("orphan-enginecore", "orphan-enginecore", drifts.inject_orphan),
        Fault(
            "ghost-execstart-no-known-good",
            "ghost-execstart-no-known-good",
            inject_ghost_without_known_good,
            Expect.ESCALATE,
        ),
        Fault("fork-shm-ringbuffer", "fork-shm-ringbuffer", drifts.inject_fork, Expect.ESCALATE),
        Fault(
            "mamba-block-size", "mamba-block-size", drifts.inject_prefix_caching, Expect.ESCALATE
        ),
        Fault(
            "silent-degradation",
            "silent-degradation",
            drifts.inject_no_reasoning,
            Expect.ESCALATE,
            # the relaunch (a Python start, 0.5-2 s on a loaded machine) stays under the failures
            # that make it down: with 2 (1 s) a slow one was a cold start first
            probe={"failures_to_down": 6},
        ),
        Fault(
            "saturated",
            "",
            inject_saturation,
            Expect.BUSY,
            endpoint="qwen",
            # production-like: the default 30 s timeout, a real check every 30 s
            probe={"liveness_interval": "5s", "completion_interval": "30s", "timeout": "30s"},
            notify={"busy_after": "45s"},
            hold_s=120.0,
        ),
        Fault("hung-engine", "hung-engine", inject_hung_engine, endpoint="qwen"),
        # a hang is seen only through the completion timeout: a generous ceiling per phase
        Fault("mlx-zombie", "mlx-zombie", mac_host.inject_zombie, endpoint="kimi", within=120),
        Fault("launchd-job-dead", "launchd-job-dead", mac_host.inject_bootout, endpoint="kimi"),
        # kept alive by launchd, dying at every start: a person's, after launchd's next try
        Fault(
            "launchd-job-crashloop",
            "launchd-job-crashloop",
            mac_host.inject_crashloop,
            Expect.ESCALATE,
            endpoint="kimi",
            prepare=mac_host.reload_kept_alive,
        ),
        # issue 36: a load that fails when a person asks; a dead backend or router under a route
        Fault(
            "ondemand-load-fails",
            "ollama-out-of-memory",
            inject_ollama_out_of_memory,
            Expect.ESCALATE,
            endpoint="ollama",
        ),
        Fault(
            "router-backend-dead",
            "engine-death-clean-exit",
            inject_backend_death,
            endpoint="qwen",
            routes=("qwen-via-swap",),
        ),
        Fault(
            "router-dead",
            "engine-death-clean-exit",
            inject_router_death,
            endpoint="swap",
            routes=("qwen-via-swap",),
        ),
    )
}


def get(name: str) -> Fault:
    """The fault called `name`; `LabError` naming the known drills otherwise."""
    try:
        return FAULTS[name]
    except KeyError:
        raise LabError(f"no drill {name!r} (drills: {', '.join(FAULTS)})") from None
