"""A load that fails when a person's request arrives is heard on the journal stream (issue 36):
the lines are the lab servers' own (Ollama's memory refusal, llama-swap's upstream that never got
healthy), written as journald would export them for the server's unit; a load that only takes
long is no event; the daemon makes the endpoint whose model failed to load down at once, with
the server's line as the incident's cause, and leaves the router's other models alone."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from fleet_lab.vllm_sim.ondemand import GIB, OllamaModel, OllamaOnDemand
from fleet_lab.vllm_sim.swap import LlamaSwap, SimUpstream, SwapModel
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.core.events import UnitSignal
from supervisor.hear.streams.events import EventKind, UnitEvent
from supervisor.hear.streams.journal import parse_entry
from supervisor.hear.streams.recognise import Recognised, Recogniser
from supervisor.hear.units import signal_of
from supervisor.judge.machine import State
from supervisor.record.timeline.state import Transition
from supervisor.record.timeline.unit import UnitHeard
from tests.helpers import eventually, write_fleet

OLLAMA_UNIT = "ollama.service"
SWAP_UNIT = "llama-swap.service"
WARN = (
    'level=WARN source=server.go:1012 msg="model request too large for system" '
    'requested="65.0 GiB" available="30.4 GiB" total="30.4 GiB" free="30.4 GiB" swap="0 B"'
)
SWAP_FAILED = "[INFO] <slow> process exited but not StateStopping, current state: starting"


def journal(unit: str, lines: Sequence[str]) -> list[Recognised]:
    """`lines` as the unit's own journal entries (`journalctl -o json`), fed to a recogniser
    that watches `unit`: the events they make."""
    recogniser = Recogniser((unit,))
    found = []
    for number, line in enumerate(lines, 1):
        exported = {
            "__CURSOR": f"s=1;i={number}",
            "__REALTIME_TIMESTAMP": str(1795590955551314 + number),
            "MESSAGE": line,
            "_PID": "4242",
            "_SYSTEMD_UNIT": unit,
        }
        entry = parse_entry(json.dumps(exported))
        assert entry is not None
        if (event := recogniser.feed(entry)) is not None:
            found.append(event)
    return found


def ask(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": False}


async def swap_in(*, load_s: float, health_check_timeout: float) -> tuple[LlamaSwap, int, str]:
    """A request for model `slow` (loading `load_s`) at a llama-swap router: the router (stopped
    after), the answer's status and text."""
    slow = {"slow": SwapModel(upstream=SimUpstream("slow", load_s=load_s))}
    async with (
        LlamaSwap(slow, health_check_timeout=health_check_timeout) as router,
        aiohttp.ClientSession() as http,
        http.post(router.url + "/v1/chat/completions", json=ask("slow")) as answer,
    ):
        return router, answer.status, await answer.text()


async def test_ollamas_memory_refusal_is_a_load_failed_event() -> None:
    big = OllamaModel(name="gpt-oss:120b", size=65 * GIB)
    async with (
        OllamaOnDemand([big], memory=int(30.4 * GIB)) as ollama,
        aiohttp.ClientSession() as http,
        http.post(ollama.url + "/api/chat", json=ask("gpt-oss:120b")) as answer,
    ):
        assert answer.status == 500
        assert (await answer.json())["error"] == (
            "model requires more system memory (65.0 GiB) than is available (30.4 GiB)"
        )
    (line,) = [line for line in ollama.log if "level=WARN" in line]
    assert line.endswith(WARN)
    (event,) = journal(OLLAMA_UNIT, ollama.log)
    assert (event.kind, event.result, event.model, event.message) == (
        EventKind.LOAD_FAILED,
        "out-of-memory",
        "",
        line,
    )
    assert event.lines == tuple(ollama.log[: ollama.log.index(line) + 1])
    assert not event.kind.down  # the unit runs on: nothing to confirm with systemctl


async def test_a_load_that_only_takes_long_is_no_event() -> None:
    async with (
        OllamaOnDemand([OllamaModel(name="qwen3:8b")], load_s=0.3) as ollama,
        aiohttp.ClientSession() as http,
        http.post(ollama.url + "/api/chat", json=ask("qwen3:8b")) as answer,
    ):
        assert answer.status == 200
    assert any('msg="llama runner started in' in line for line in ollama.log)
    assert journal(OLLAMA_UNIT, ollama.log) == []
    router, status, _ = await swap_in(load_s=0.3, health_check_timeout=5)
    assert status == 200
    assert [line.split(" on ")[0] for line in router.log] == ["[INFO] <slow> Health check passed"]
    assert journal(SWAP_UNIT, router.log) == []


async def test_llama_swaps_upstream_that_never_got_healthy_is_a_load_failed_event() -> None:
    router, status, text = await swap_in(load_s=30, health_check_timeout=0.3)
    assert (status, text) == (502, "unable to start process: health check timed out after 0.3s\n")
    assert router.log == [SWAP_FAILED]
    (event,) = journal(SWAP_UNIT, router.log)
    assert (event.kind, event.result, event.model) == (
        EventKind.LOAD_FAILED,
        "upstream-start-failed",
        "slow",
    )
    # a running model's upstream that died is not a failed load
    died = "[INFO] <slow> process exited but not StateStopping, current state: ready"
    assert journal(SWAP_UNIT, [died]) == []


def _signal(endpoint: str, *, model: str = "", unit: str = OLLAMA_UNIT) -> UnitSignal:
    message = SWAP_FAILED.replace("slow", model) if model else f"time=... {WARN}"
    event = UnitEvent(
        host="forge",
        unit=unit,
        kind=EventKind.LOAD_FAILED,
        message=message,
        at=datetime.now(UTC),
        cursor="s=1;i=9",
        lines=(message,),
        result="upstream-start-failed" if model else "out-of-memory",
        model=model,
    )
    return signal_of(endpoint, event)


async def test_the_endpoint_whose_load_failed_is_down_at_once(tmp_path: Path) -> None:
    """Ollama's endpoint is idle (nothing loaded; no probe loads it); the refusal heard makes it
    down at once, its incident's cause the server's words; a line that names another model
    changes nothing."""
    qwen = OllamaModel(name="qwen3:8b")
    async with OllamaOnDemand([qwen]) as ollama:
        units = [{"host": "forge", "unit": OLLAMA_UNIT}]
        spec = {"kind": "ollama", "url": ollama.url, "model": "qwen3:8b", "units": units}
        probe = {"liveness_interval": "60s", "completion_interval": "300s"}
        config = write_fleet(tmp_path, {"spark-ollama": spec}, probe=probe)
        daemon = Supervisor(load_config(config))
        await daemon.start()
        worker = daemon.workers["spark-ollama"]
        try:
            await eventually(lambda: worker.state is State.IDLE, what="idle")
            assert daemon.daemon is not None
            assert daemon.store is not None
            daemon.daemon.submit(_signal("spark-ollama", model="gemma3:4b", unit=OLLAMA_UNIT))
            await eventually(lambda: worker.idle.is_set(), what="judged")
            assert (worker.state, worker.record.incident_id) == (State.IDLE, None)
            daemon.daemon.submit(_signal("spark-ollama"))
            await eventually(lambda: worker.record.incident_id is not None, what="an incident")
            assert worker.state is State.DOWN
            incident = worker.record.incident_id or 0
            store = daemon.store

            async def heard() -> bool:
                rows = await store.timeline(incident)
                return any(isinstance(r.record, UnitHeard) for r in rows)

            await eventually(heard, what="the line in the timeline")
            rows = await store.timeline(incident)
            (found,) = [i for i in await store.incidents() if i.id == incident]
        finally:
            await daemon.stop()
        assert ollama.loads == []  # the supervisor loaded nothing before the failure
    down = rows[0].record
    assert isinstance(down, Transition)
    assert (down.source, down.dest) == ("idle", "down")
    assert down.note == (f"{OLLAMA_UNIT} load_failed (out-of-memory): time=... {WARN}")
    assert found.cause == f"a load failed (out-of-memory): time=... {WARN}"
    (unit_heard,) = [r.record for r in rows if isinstance(r.record, UnitHeard)]
    assert unit_heard.lines == (f"time=... {WARN}",)
