"""The llama-swap-shaped router: swaps a model in on demand (stopping the one running), ttl reset
by every proxied request, `/running`, `/unload`, `/upstream/<model>/...`, `apiKeys`; and the
counters later specs read. Its upstreams are real vLLM-shaped sims on loopback."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from fleet_lab.vllm_sim.chat import CONTENT_TEXT, REASONING_TEXT
from fleet_lab.vllm_sim.clock import ManualClock
from fleet_lab.vllm_sim.ondemand import Cause
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from fleet_lab.vllm_sim.swap import (
    LlamaSwap,
    RunningUpstream,
    SimUpstream,
    Start,
    Stop,
    Swap,
    SwapGroup,
    SwapModel,
    TtlReset,
)
from tests.helpers import eventually

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
FAST = SimBehaviour(tok_s=0)
UA = "fleet-supervisor/0.1"
PROBE = {"X-Fleet-Client": "probe", "User-Agent": UA}
BY_PROBE = Cause(path="/v1/chat/completions", client="probe", user_agent="fleet-supervisor/0.1")


def ask(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "17 + 25?"}], **extra}


def upstream(model: str, load_s: float = 0.1, **kwargs: Any) -> SimUpstream:
    return SimUpstream(model, load_s=load_s, behaviour=FAST, **kwargs)


def router(models: dict[str, SwapModel], clock: ManualClock, **kwargs: Any) -> LlamaSwap:
    return LlamaSwap(models, clock=clock, first_check_s=0, health_interval_s=0.02, **kwargs)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


@pytest.fixture
async def pair(clock: ManualClock) -> AsyncIterator[LlamaSwap]:
    """Two models in llama-swap's default group (swap: only one runs), qwen with a 60 s ttl."""
    models = {
        "qwen": SwapModel(upstream=upstream("qwen"), ttl=60, name="Qwen3 8B"),
        "gemma": SwapModel(upstream=upstream("gemma"), description="small"),
    }
    async with router(models, clock) as swap:
        yield swap


async def chat(
    http: aiohttp.ClientSession, url: str, model: str, **headers: str
) -> tuple[int, Any]:
    async with http.post(
        url + "/v1/chat/completions", json=ask(model), headers=headers or PROBE
    ) as response:
        return response.status, await response.json(content_type=None)


async def running(http: aiohttp.ClientSession, swap: LlamaSwap) -> list[tuple[str, str, int]]:
    async with http.get(swap.url + "/running") as response:
        assert response.status == 200
        return [(r["model"], r["state"], r["ttl"]) for r in (await response.json())["running"]]


# -- swapping ------------------------------------------------------------------------------------


async def test_a_request_for_a_model_not_running_starts_it_and_waits(
    pair: LlamaSwap, http: aiohttp.ClientSession
) -> None:
    assert await running(http, pair) == []
    status, body = await chat(http, pair.url, "qwen")
    assert status == 200
    assert body["choices"][0]["message"]["content"] == CONTENT_TEXT
    assert body["choices"][0]["message"]["reasoning"] == REASONING_TEXT
    assert await running(http, pair) == [("qwen", "ready", 60)]
    assert pair.starts == [Start(model="qwen", at=T0, cause=BY_PROBE)]
    assert pair.swaps == []
    qwen_url = pair.models["qwen"].upstream.sims[0].url  # type: ignore[attr-defined]
    assert pair.log == [f"[INFO] <qwen> Health check passed on {qwen_url}/health"]  # no failure
    async with http.get(pair.url + "/running") as response:
        (entry,) = (await response.json())["running"]
    qwen_sim = pair.models["qwen"].upstream.sims[0]  # type: ignore[attr-defined]
    assert entry == {
        "model": "qwen",
        "state": "ready",
        "cmd": "python -m fleet_lab.vllm_sim --model qwen --cold-start 0.1s",
        "proxy": qwen_sim.url,
        "ttl": 60,
        "name": "Qwen3 8B",
        "description": "",
    }


async def test_a_request_for_another_model_swaps_it_in(
    pair: LlamaSwap, http: aiohttp.ClientSession
) -> None:
    await chat(http, pair.url, "qwen", **{"User-Agent": "open-webui"})
    status, _ = await chat(http, pair.url, "gemma")
    assert status == 200
    assert await running(http, pair) == [("gemma", "ready", 0)]
    assert pair.swaps == [Swap(model="gemma", unloaded=("qwen",), at=T0, cause=BY_PROBE)]
    assert pair.stops == [Stop(model="qwen", at=T0, reason="swap", cause=BY_PROBE)]
    assert [(s.model, s.cause.user_agent) for s in pair.starts] == [
        ("qwen", "open-webui"),
        ("gemma", "fleet-supervisor/0.1"),
    ]
    qwen_sim: VllmSim = pair.models["qwen"].upstream.sims[0]  # type: ignore[attr-defined]
    with pytest.raises(aiohttp.ClientConnectionError):
        await http.get(qwen_sim.url + "/health")  # really stopped: its port is closed


async def test_requests_that_arrive_during_a_start_share_it(
    pair: LlamaSwap, http: aiohttp.ClientSession
) -> None:
    answers = await asyncio.gather(*(chat(http, pair.url, "qwen") for _ in range(3)))
    assert [status for status, _ in answers] == [200, 200, 200]
    assert len(pair.starts) == 1


async def test_a_group_without_swap_runs_its_members_together(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    models = {name: SwapModel(upstream=upstream(name)) for name in ("a", "b", "c")}
    groups = {
        "both": SwapGroup(members=("a", "b"), swap=False, exclusive=True),
        "alone": SwapGroup(members=("c",), exclusive=False),
    }
    async with router(models, clock, groups=groups) as swap:
        await chat(http, swap.url, "a")
        await chat(http, swap.url, "b")
        assert swap.running == ["a", "b"]
        await chat(http, swap.url, "c")  # not exclusive: the others stay
        assert swap.running == ["a", "b", "c"]
        await chat(http, swap.url, "a")  # exclusive: c's group is stopped
        assert swap.running == ["a", "b"]
        assert swap.swaps == [Swap(model="a", unloaded=("c",), at=T0, cause=BY_PROBE)]
        assert [(s.model, s.reason) for s in swap.stops] == [("c", "exclusive")]


async def test_a_start_that_never_gets_healthy_is_a_502(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    models = {"slow": SwapModel(upstream=upstream("slow", load_s=30))}
    async with router(models, clock, health_check_timeout=0.3) as swap:
        async with http.post(swap.url + "/v1/chat/completions", json=ask("slow")) as response:
            assert response.status == 502
            assert await response.text() == (
                "unable to start process: health check timed out after 0.3s\n"
            )
        assert swap.running == []
        assert [s.error for s in swap.starts] == ["health check timed out after 0.3s"]
        # llama-swap's own line (`waitForCmd`): what the journal stream hears
        assert swap.log == [
            "[INFO] <slow> process exited but not StateStopping, current state: starting"
        ]


# -- ttl -------------------------------------------------------------------------------------------


async def test_every_proxied_request_resets_the_ttl(
    pair: LlamaSwap, clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    await chat(http, pair.url, "qwen")
    clock.advance(59)
    await chat(http, pair.url, "qwen")
    clock.advance(59)
    assert await running(http, pair) == [("qwen", "ready", 60)]
    assert pair.ttl_resets == [
        TtlReset(model="qwen", at=T0, cause=BY_PROBE),
        TtlReset(model="qwen", at=T0 + timedelta(seconds=59), cause=BY_PROBE),
    ]
    clock.advance(1)
    await eventually(lambda: pair.running == [], within=5, what="qwen unloaded by its ttl")
    assert pair.stops == [Stop(model="qwen", at=T0 + timedelta(seconds=119), reason="ttl")]


async def test_a_ttl_of_zero_never_unloads(
    pair: LlamaSwap, clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    await chat(http, pair.url, "gemma")
    clock.advance(86400)
    assert await running(http, pair) == [("gemma", "ready", 0)]


# -- its own API -----------------------------------------------------------------------------------


async def test_upstream_swaps_the_model_in_and_resets_its_ttl(
    pair: LlamaSwap, http: aiohttp.ClientSession
) -> None:
    await chat(http, pair.url, "gemma")
    async with http.get(pair.url + "/upstream/qwen/health", headers=PROBE) as response:
        assert (response.status, await response.read()) == (200, b"")
    assert pair.running == ["qwen"]
    upstream_cause = Cause(
        path="/upstream/qwen/health", client="probe", user_agent=PROBE["User-Agent"]
    )
    assert pair.swaps[-1] == Swap(model="qwen", unloaded=("gemma",), at=T0, cause=upstream_cause)
    assert pair.ttl_resets[-1] == TtlReset(model="qwen", at=T0, cause=upstream_cause)
    async with http.get(pair.url + "/upstream/qwen/v1/models") as response:
        assert (await response.json())["data"][0]["id"] == "qwen"
    async with http.get(pair.url + "/upstream/qwen", allow_redirects=False) as response:
        assert (response.status, response.headers["Location"]) == (301, "/upstream/qwen/")
    async with http.post(pair.url + "/upstream/qwen", allow_redirects=False) as response:
        assert (response.status, response.headers["Location"]) == (308, "/upstream/qwen/")
    async with http.get(pair.url + "/upstream/llama/health") as response:
        assert (response.status, await response.text()) == (400, "model id required in path")


async def test_unload_stops_everything_and_says_ok(
    pair: LlamaSwap, http: aiohttp.ClientSession
) -> None:
    await chat(http, pair.url, "qwen")
    async with http.get(pair.url + "/unload", headers=PROBE) as response:
        assert (response.status, await response.text()) == (200, "OK")
    assert await running(http, pair) == []
    by = Cause(path="/unload", client="probe", user_agent=PROBE["User-Agent"])
    assert pair.stops == [Stop(model="qwen", at=T0, reason="unload", cause=by)]


async def test_models_health_and_routing_errors(
    pair: LlamaSwap, http: aiohttp.ClientSession
) -> None:
    async with http.get(pair.url + "/v1/models") as response:
        data = (await response.json())["data"]
    created = int(T0.timestamp())
    assert data == [
        {
            "id": "gemma",
            "object": "model",
            "created": created,
            "owned_by": "llama-swap",
            "description": "small",
        },
        {
            "id": "qwen",
            "object": "model",
            "created": created,
            "owned_by": "llama-swap",
            "name": "Qwen3 8B",
        },
    ]
    async with http.get(pair.url + "/health") as response:
        assert (response.status, await response.text()) == (200, "OK")
    for body, text in (
        ({"messages": []}, "missing or invalid 'model' key"),
        (ask("llama"), "could not find suitable inference handler for llama"),
    ):
        async with http.post(pair.url + "/v1/chat/completions", json=body) as response:
            assert (response.status, await response.text()) == (400, text)
        headers = {"Accept": "application/json"}
        async with http.post(
            pair.url + "/v1/chat/completions", json=body, headers=headers
        ) as response:
            assert (response.status, await response.json()) == (400, {"error": text})
    assert pair.starts == []


async def test_a_stream_passes_through_unbuffered(
    pair: LlamaSwap, http: aiohttp.ClientSession
) -> None:
    async with http.post(
        pair.url + "/v1/chat/completions", json=ask("qwen", stream=True)
    ) as response:
        assert response.headers["X-Accel-Buffering"] == "no"
        lines = [line.decode().strip() async for line in response.content]
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    deltas = [json.loads(d)["choices"][0]["delta"] for d in data[:-1]]
    assert "".join(d.get("content") or "" for d in deltas) == CONTENT_TEXT


# -- apiKeys ---------------------------------------------------------------------------------------


async def test_api_keys_guard_every_route_but_health(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    models = {"qwen": SwapModel(upstream=upstream("qwen", load_s=0))}
    async with router(models, clock, api_keys=["sk-lab", "sk-other"]) as swap:
        for path in ("/v1/models", "/running", "/unload", "/upstream/qwen/health"):
            async with http.get(swap.url + path) as response:
                assert response.status == 401
                assert await response.text() == "unauthorized: invalid or missing API key"
                assert response.headers["WWW-Authenticate"] == 'Basic realm="llama-swap"'
        json_please = {"Accept": "application/json", "Authorization": "Bearer sk-wrong"}
        async with http.post(
            swap.url + "/v1/chat/completions", json=ask("qwen"), headers=json_please
        ) as response:
            assert (response.status, await response.json()) == (
                401,
                {"error": "unauthorized: invalid or missing API key"},
            )
        assert swap.starts == []
        basic = base64.b64encode(b"anyone:sk-other").decode()
        for headers in (
            {"Authorization": "Bearer sk-lab"},
            {"x-api-key": "sk-other"},
            {"Authorization": f"Basic {basic}"},
        ):
            status, body = await chat(http, swap.url, "qwen", **headers)
            assert (status, body["choices"][0]["message"]["content"]) == (200, CONTENT_TEXT)
        async with http.get(swap.url + "/health") as response:
            assert (response.status, await response.text()) == (200, "OK")
        async with http.get(swap.url + "/nowhere") as response:
            assert response.status == 404  # no route: not behind the key in llama-swap either


async def test_the_key_is_not_passed_upstream(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    """A vLLM started with the same `--api-key` behind the router refuses what the router
    forwards: llama-swap strips `Authorization` and `x-api-key`."""
    guarded = SimUpstream("qwen", behaviour=FAST, api_key="sk-lab")
    async with router({"qwen": SwapModel(upstream=guarded)}, clock, api_keys=["sk-lab"]) as swap:
        status, body = await chat(http, swap.url, "qwen", Authorization="Bearer sk-lab")
        assert (status, body) == (401, {"error": "Unauthorized"})
        assert swap.running == ["qwen"]  # its /health is open, so it started


async def test_an_upstream_already_running(clock: ManualClock, http: aiohttp.ClientSession) -> None:
    async with VllmSim(FAST, model="ext") as sim:
        models = {"ext": SwapModel(upstream=RunningUpstream(sim.url), ttl=5)}
        async with router(models, clock) as swap:
            status, _ = await chat(http, swap.url, "ext")
            assert (status, swap.running) == (200, ["ext"])
            clock.advance(5)
            await eventually(lambda: swap.running == [], within=5, what="ext unloaded")
            assert sim.requests["/v1/chat/completions"] == 1
