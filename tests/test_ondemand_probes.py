"""Probes that cause no load, against the lab's Ollama that loads on demand and its llama-swap
router: a simulated day at production intervals (liveness every 60 s, a real check every 300 s,
the simulators' keep-alive and ttl on a clock the spec moves). The daemon's real checks in a calm
state (`Endpoint.without_loading`) never load a model, never move an Ollama model's
`expires_at`, and never swap a llama-swap model in; a person's requests load as they always do."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleet_lab.vllm_sim.clock import ManualClock
from fleet_lab.vllm_sim.ondemand import CLIENT_HEADER, OllamaModel, OllamaOnDemand
from fleet_lab.vllm_sim.server import SimBehaviour
from fleet_lab.vllm_sim.swap import LlamaSwap, SimUpstream, SwapModel
from supervisor.config.loader import parse_config
from supervisor.config.supervised import Endpoint
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.probe import run_probe
from tests.helpers import eventually, spawn_daemon, write_fleet
from tests.ports import free_port

DAY_MINUTES = 24 * 60
DEEP_EVERY_MINUTES = 5
PERSON = {CLIENT_HEADER: "a person"}


class SimTime:
    """The probes' clock on the simulators' manual one (a request takes no simulated time)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock

    def now(self) -> datetime:
        return self.clock.now()

    def monotonic(self) -> float:
        return time.monotonic()


def endpoint(url: str, model: str, kind: str, extra: str = "") -> Endpoint:
    text = f"""
endpoints:
  ep:
    kind: {kind}
    url: {url}
    model: "{model}"
{extra}"""
    return parse_config(text, source="fleet.yaml", base_dir=Path("/etc/fleet")).endpoints["ep"]


async def ask(http: aiohttp.ClientSession, url: str, model: str) -> None:
    """A person's chat request, as their client sends it (Ollama's default keep-alive)."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(f"{url}/v1/chat/completions", json=body, headers=PERSON) as answer:
        assert answer.status == 200, await answer.text()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


def ours(user_agent: str | None) -> bool:
    return (user_agent or "").startswith("fleet-supervisor/")


async def test_a_day_of_probes_loads_no_ollama_model_and_keeps_none(
    http: aiohttp.ClientSession,
) -> None:
    clock = ManualClock()
    person_minutes = set(range(9 * 60, 9 * 60 + 12, 3)) | {14 * 60}  # a session, one question
    async with OllamaOnDemand([OllamaModel(name="qwen3:8b")], clock=clock) as ollama:
        gentle = endpoint(ollama.url, "qwen3:8b", "ollama").without_loading()
        assert not gentle.may_load
        deep: list[tuple[int, ProbeResult]] = []
        moved: list[int] = []
        async with HttpClient() as probe_http:
            for minute in range(DAY_MINUTES):
                if minute in person_minutes:
                    await ask(http, ollama.url, "qwen3:8b")
                live = await run_probe(gentle, Tier.LIVENESS, probe_http, clock=SimTime(clock))
                assert live.outcome is ProbeOutcome.OK, live.reason
                if minute % DEEP_EVERY_MINUTES == 0:
                    before = ollama.expires_at("qwen3:8b")
                    found = await run_probe(gentle, Tier.DEEP, probe_http, clock=SimTime(clock))
                    deep.append((minute, found))
                    if ollama.expires_at("qwen3:8b") != before:
                        moved.append(minute)
                clock.advance(60)
    assert [load.cause.client for load in ollama.loads] == ["a person", "a person"]
    assert [load for load in ollama.loads if ours(load.cause.user_agent)] == []
    assert moved == []
    loaded = [minute for minute, found in deep if found.outcome is ProbeOutcome.OK]
    # loaded from 09:00 until 5 minutes after the session's last question (09:09); 14:00
    assert loaded == [540, 545, 550, 840]
    idle = [found for _, found in deep if found.outcome is ProbeOutcome.IDLE]
    assert len(idle) == len(deep) - len(loaded)
    assert idle[0].reason == "qwen3:8b is not loaded (loaded: nothing); the probe leaves it so"
    # the loaded model's real checks set its expiry back each time (each its own change)
    restored = [change for change in ollama.expiries if ours(change.cause.user_agent)]
    assert len(restored) == 2 * len(loaded)
    assert [load for load in ollama.unloads if load.reason != "expired"] == []


async def test_a_model_that_may_load_is_loaded_and_keep_warm_keeps_it(
    http: aiohttp.ClientSession,
) -> None:
    """What the daemon's real checks do outside a calm state (a repair's proof), what
    `probe` does for a person, and what `keep_warm: true` asks for."""
    clock = ManualClock()
    async with OllamaOnDemand([OllamaModel(name="qwen3:8b")], clock=clock) as ollama:
        plain = endpoint(ollama.url, "qwen3:8b", "ollama")
        warm = endpoint(ollama.url, "qwen3:8b", "ollama", "    keep_warm: true\n")
        assert (plain.may_load, warm.without_loading().may_load) == (True, True)
        async with HttpClient() as probe_http:
            proof = await run_probe(plain, Tier.DEEP, probe_http, clock=SimTime(clock))
            assert proof.outcome is ProbeOutcome.OK, proof.reason
            clock.advance(6 * 60)  # expired
            kept = await run_probe(
                warm.without_loading(), Tier.DEEP, probe_http, clock=SimTime(clock)
            )
            assert kept.outcome is ProbeOutcome.OK, kept.reason
    assert [ours(load.cause.user_agent) for load in ollama.loads] == [True, True]


async def test_a_router_s_models_are_never_swapped_in_by_a_probe(
    http: aiohttp.ClientSession,
) -> None:
    clock = ManualClock()
    models = {
        name: SwapModel(upstream=SimUpstream(name, behaviour=SimBehaviour(tok_s=0)), ttl=300)
        for name in ("qwen", "gemma")
    }
    async with LlamaSwap(models, clock=clock, first_check_s=0, health_interval_s=0.02) as router:
        probed = {
            name: endpoint(router.url, name, "openai", "    on_demand: llama-swap\n")
            for name in models
        }
        outcomes: dict[str, list[ProbeOutcome]] = {name: [] for name in models}
        async with HttpClient() as probe_http:
            for minute in range(0, DAY_MINUTES, DEEP_EVERY_MINUTES):
                if minute == 9 * 60:
                    await ask(http, router.url, "qwen")  # a person's model, swapped in
                if minute == 15 * 60:
                    await ask(http, router.url, "gemma")  # and another, swapping qwen out
                for name, ep in probed.items():
                    found = await run_probe(
                        ep.without_loading(), Tier.DEEP, probe_http, clock=SimTime(clock)
                    )
                    outcomes[name].append(found.outcome)
                clock.advance(DEEP_EVERY_MINUTES * 60)
    assert [swap for swap in router.swaps if ours(swap.cause.user_agent)] == []
    assert [start for start in router.starts if ours(start.cause.user_agent)] == []
    assert [(start.model, start.cause.client) for start in router.starts] == [
        ("qwen", "a person"),
        ("gemma", "a person"),
    ]
    # a loaded model gets its real check (which restarts its ttl: llama-swap has no route that
    # leaves it alone); one that is not loaded is idle
    at = {minute: index for index, minute in enumerate(range(0, DAY_MINUTES, DEEP_EVERY_MINUTES))}
    assert outcomes["qwen"][at[9 * 60]] is ProbeOutcome.OK
    assert outcomes["gemma"][at[15 * 60]] is ProbeOutcome.OK
    assert (outcomes["qwen"][0], outcomes["gemma"][0]) == (ProbeOutcome.IDLE, ProbeOutcome.IDLE)
    assert ProbeOutcome.FAIL not in outcomes["qwen"] + outcomes["gemma"]


@pytest.mark.slow
async def test_the_daemon_shows_an_unloaded_model_idle_and_never_loads_it(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """A real daemon on the lab's Ollama (real time, a keep-alive of 2 s): `idle` while nothing
    is loaded, on `/status`, the page and `/metrics`; `healthy` while a person's request keeps
    the model; `idle` again once it expired; the daemon loaded nothing."""
    async with OllamaOnDemand([OllamaModel(name="qwen3:8b")], keep_alive="2s") as ollama:
        port = free_port()
        config = write_fleet(
            tmp_path,
            {
                "spark-ollama": {
                    "kind": "ollama",
                    "url": ollama.url,
                    "model": "qwen3:8b",
                    "host": "forge",
                }
            },
            http={"listen": f"127.0.0.1:{port}"},
        )
        process = await spawn_daemon(config, tmp_path / "daemon.log")
        url = f"http://127.0.0.1:{port}"

        async def state() -> str:
            try:
                async with http.get(f"{url}/status") as answer:
                    return str((await answer.json())["endpoints"][0]["state"])
            except (aiohttp.ClientError, ValueError):
                return ""

        async def is_(wanted: str) -> bool:
            return await state() == wanted

        try:
            await eventually(lambda: is_("idle"), within=20, what="idle")
            async with http.get(f"{url}/metrics") as answer:
                metrics = await answer.text()
            async with http.get(f"{url}/") as answer:
                page = await answer.text()
            await ask(http, ollama.url, "qwen3:8b")
            await eventually(lambda: is_("healthy"), within=20, what="healthy while loaded")
            await eventually(lambda: is_("idle"), within=20, what="idle once it expired")
        finally:
            process.terminate()
            await process.wait()
    assert 'fleet_endpoint_state{endpoint="spark-ollama",state="idle"} 1.0' in metrics
    assert 'data-state="idle"' in page
    assert [load.cause.client for load in ollama.loads] == ["a person"]
    # nothing it did unloaded the model either (a keep-alive of 0 would have)
    assert [u for u in ollama.unloads if u.cause is not None and ours(u.cause.user_agent)] == []
