"""`fleet-supervisor demo`: as root on Linux, the lab demo (`fleet_lab.demo.lab`: real
systemd hosts, the four headline failures healed). Otherwise, or with `--loopback`: the daemon
supervising real vLLM-shaped servers on loopback while the demo injects faults one after another
and, once the supervisor has detected each, undoes it itself (the supervisor runs observe-only
here); narrated in plain words, ending with the incident timelines and what each side did, as the
store recorded it (`fleet_lab.demo.summary`). Everything it starts lives in a
temporary folder and this process, and is cleaned up on exit and on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from fleet_lab.demo.interrupts import Interrupts
from fleet_lab.demo.summary import SceneResult, attempts_phrase, summary
from fleet_lab.lab import LabError, check_root
from fleet_lab.vllm_sim.server import Flavour, SimBehaviour, VllmSim
from supervisor.app.root import Supervisor
from supervisor.cli.incidents import entry_lines
from supervisor.config.loader import load_config
from supervisor.core import logs
from supervisor.core.aio import poll
from supervisor.judge.machine import State
from supervisor.record.store.records import AttemptRow
from supervisor.worker import EndpointWorker

MODELS: dict[str, tuple[str, Flavour]] = {
    "ds4": ("deepseek-v4-flash", "vllm"),
    "kimi": ("kimi-k2.6", "mlx"),
}


@dataclass
class Scene:
    title: str
    explain: str
    inject: Callable[[dict[str, VllmSim]], Awaitable[None]]
    endpoint: str
    expect: State
    repair: Callable[[dict[str, VllmSim]], Awaitable[None]]


async def _stop(sims: dict[str, VllmSim], name: str) -> None:
    await sims[name].stop()


async def _start_again(sims: dict[str, VllmSim], name: str) -> None:
    sim = sims[name]
    await sim.start("127.0.0.1", int(sim.url.rsplit(":", 1)[1]))


def _set(name: str, **changes: object) -> Callable[[dict[str, VllmSim]], Awaitable[None]]:
    async def apply(sims: dict[str, VllmSim]) -> None:
        for key, value in changes.items():
            setattr(sims[name].behaviour, key, value)

    return apply


SCENES = (
    Scene(
        "the DeepSeek server process exits",
        "vLLM 0.32 exits with code 0 after its engine dies, so systemd's Restart=on-failure "
        "never brings it back.",
        lambda sims: _stop(sims, "ds4"),
        "ds4",
        State.DOWN,
        lambda sims: _start_again(sims, "ds4"),
    ),
    Scene(
        "Kimi answers, but without reasoning text",
        "A launch that lost its reasoning-parser flag still answers /v1/models and chats: only "
        "the real completion shows the reasoning is gone.",
        _set("kimi", reasoning_field=None),
        "kimi",
        State.DEGRADED,
        _set("kimi", reasoning_field="reasoning"),
    ),
    Scene(
        "the DeepSeek server hangs",
        "It still accepts connections but never answers: only a probe with a deadline notices, "
        "a port check would call it alive.",
        _set("ds4", hang=True),
        "ds4",
        State.DOWN,
        _set("ds4", hang=False),
    ),
)


class Narrator:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:5.1f}s] {text}", flush=True)


def _fleet_file(folder: Path, sims: dict[str, VllmSim]) -> Path:
    endpoints = {
        name: {
            "kind": "openai",
            "url": sims[name].url,
            "model": MODELS[name][0],
            "expect_reasoning": True,
            "host": "forge",
        }
        for name in sims
    }
    document = {
        "store": {"path": "state/supervisor.db"},
        "defaults": {
            "probe": {
                "liveness_interval": "1s",
                "completion_interval": "2s",
                "timeout": "2s",
                "failures_to_down": 2,
                "jitter": "0s",
            },
            "startup_grace": "0s",
            # each fault is its own incident here; a real fleet keeps a flap in one (10m)
            "reopen_within": "0s",
        },
        "remediation": {"dry_run": True},
        "hosts": {"forge": {"local": True}},
        "endpoints": endpoints,
    }
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def _reach(
    worker: EndpointWorker, state: State, *, incident_open: bool, narrator: Narrator, within: float
) -> bool:
    """Poll until the endpoint is in `state` with (or without) an open incident."""

    def reached() -> bool:
        if _INTERRUPTS.heard is not None:
            return True
        return worker.state is state and (worker.record.incident_id is not None) is incident_open

    if await poll(reached, within, every=0.05):
        if _INTERRUPTS.heard is not None:  # its cancellation was swallowed on the way (a
            raise asyncio.CancelledError  # server's stop, a timeout ending at the same time)
        return True
    narrator.say(f"{worker.name} did not become {state} within {within:.0f}s")
    return False


async def run_demo(folder: Path) -> int:
    narrator = Narrator()
    sims: dict[str, VllmSim] = {}
    for name, (model, flavour) in MODELS.items():
        sims[name] = VllmSim(SimBehaviour(tok_s=400.0), model=model, flavour=flavour)
        await sims[name].start("127.0.0.1", 0)
        narrator.say(f"started a {flavour}-shaped server for {name} ({model}) at {sims[name].url}")
    daemon = Supervisor(load_config(_fleet_file(folder, sims)))
    results: list[SceneResult] = []
    try:
        await daemon.start()
        narrator.say("the supervisor is running: liveness every 1s, a real completion every 2s")
        workers = daemon.workers
        for name, worker in workers.items():
            if await _reach(
                worker, State.HEALTHY, incident_open=False, narrator=narrator, within=20
            ):
                ttft, tok_s = worker.record.last_ttft_s or 0, worker.record.last_tok_s or 0
                narrator.say(
                    f"{name} is healthy: reasoning text came back, "
                    f"ttft {ttft:.2f}s, {tok_s:.0f} tok/s"
                )
        for number, scene in enumerate(SCENES, 1):
            print()
            results.append(await _play(daemon, number, scene, sims, narrator))
        print()
        await _print_timelines(daemon)
    finally:
        await daemon.stop()
        for sim in sims.values():
            await sim.stop()
    print()
    print("\n".join(summary(results, dry_run=daemon.config.remediation.dry_run)))
    done = all(r.incident is not None and r.recovered for r in results)
    return 0 if done else 1


async def _play(
    daemon: Supervisor, number: int, scene: Scene, sims: dict[str, VllmSim], narrator: Narrator
) -> SceneResult:
    """One fault: the demo injects it, the supervisor detects it, the demo undoes it, the
    supervisor sees the endpoint recover; the supervisor's repair attempts, from the store."""
    worker = daemon.workers[scene.endpoint]
    narrator.say(f"the demo injects fault {number}: {scene.title}. {scene.explain}")
    await scene.inject(sims)
    detected = await _reach(worker, scene.expect, incident_open=True, narrator=narrator, within=30)
    incident = worker.record.incident_id if detected else None
    if detected:
        await _say_opened(daemon, scene.endpoint, incident, narrator)
    narrator.say(f"the demo undoes fault {number} itself")
    await scene.repair(sims)
    healthy = await _reach(worker, State.HEALTHY, incident_open=False, narrator=narrator, within=30)
    recovered = healthy and incident is not None
    attempts = await _attempts(daemon, scene.endpoint, incident)
    if recovered:
        narrator.say(
            f"{scene.endpoint} passed a real completion again: the supervisor closed incident "
            f"#{incident} (it made {attempts_phrase(len(attempts))})"
        )
    return SceneResult(
        endpoint=scene.endpoint, incident=incident, recovered=recovered, attempts=attempts
    )


async def _attempts(daemon: Supervisor, name: str, incident: int | None) -> tuple[AttemptRow, ...]:
    if daemon.store is None or incident is None:
        return ()
    return tuple(a for a in await daemon.store.attempts(name) if a.incident_id == incident)


async def _say_opened(
    daemon: Supervisor, name: str, incident_id: int | None, narrator: Narrator
) -> None:
    incident = None
    if daemon.store is not None and incident_id is not None:
        incident = await daemon.store.incident(incident_id)
    cause = incident.cause if incident else "?"
    state = daemon.workers[name].state
    narrator.say(
        f"the supervisor detected it: {name} is {state}: {cause} (incident #{incident_id} opened)"
    )


async def _print_timelines(daemon: Supervisor) -> None:
    store = daemon.store
    assert store is not None
    for incident in reversed(await store.incidents()):
        lasted = incident.duration.total_seconds() if incident.duration else 0.0
        print(f"incident #{incident.id} {incident.subject}: {incident.cause} ({lasted:.1f}s)")
        for row in await store.timeline(incident.id):
            print("\n".join(entry_lines(row)))
        if incident.resolution:
            print(f"  resolved: {incident.resolution}")


def main(*, loopback: bool = False, lab: Path | None = None) -> int:
    """The lab demo as root on Linux (`lab`: in that running lab), else, or with `loopback`,
    the loopback demo."""
    logs.silence()
    if not loopback:
        try:
            check_root()
        except LabError as exc:
            if lab is not None:
                raise
            print(f"the lab demo needs root on Linux ({exc}): running the loopback demo instead")
        else:
            from fleet_lab.demo.lab import main as lab_demo

            return lab_demo(lab)
    interrupts = _INTERRUPTS
    interrupts.install()  # Ctrl-C and SIGTERM end it with 130, even a SIGINT inherited as ignored
    with tempfile.TemporaryDirectory(prefix="fleet-supervisor-demo-") as folder:
        try:
            return asyncio.run(_interruptible(run_demo(Path(folder)), interrupts))
        except KeyboardInterrupt:
            print("\ninterrupted: everything the demo started is stopped", file=sys.stderr)
            return 130
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip clean-up
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


#: The demo's signals: its waits stop at once when one came, also if the task's cancellation
#: was swallowed by what it was awaiting then.
_INTERRUPTS = Interrupts()


async def _interruptible(demo: Awaitable[int], interrupts: Interrupts) -> int:
    """`demo`, cancelled by the first signal (its clean-up runs), then `KeyboardInterrupt`."""
    interrupts.attach()
    try:
        done = await demo
    except asyncio.CancelledError:
        if interrupts.heard is None:
            raise
        raise KeyboardInterrupt from None
    finally:
        interrupts.detach()
    interrupts.check()  # its cancellation swallowed on the way: interrupted all the same
    return done
