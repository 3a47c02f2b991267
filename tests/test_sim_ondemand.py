"""The on-demand Ollama simulator: loads on the first request, keep-alive as Ollama reads it,
unload at expiry, a load that fails for memory, and the counters later specs read."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from fleet_lab.vllm_sim.chat import CONTENT_TEXT, REASONING_TEXT, split_pieces
from fleet_lab.vllm_sim.clock import ManualClock
from fleet_lab.vllm_sim.keepalive import KeepAliveError, keep_alive_seconds, parse_go_duration
from fleet_lab.vllm_sim.ondemand import (
    GIB,
    Cause,
    ExpiryChange,
    Load,
    OllamaModel,
    OllamaOnDemand,
    Unload,
)
from tests.helpers import eventually

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
QWEN = OllamaModel(name="qwen3:8b", size=6 * GIB)
GEMMA = OllamaModel(name="gemma3", size=4 * GIB, thinking=False, family="gemma3")
ASK = [{"role": "user", "content": "What is 17 + 25?"}]
PROBE = {"X-Fleet-Client": "probe", "User-Agent": "fleet-supervisor/0.1"}
N_THINK, N_SAY = len(split_pieces(REASONING_TEXT)), len(split_pieces(CONTENT_TEXT))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


@pytest.fixture
async def ollama(clock: ManualClock) -> AsyncIterator[OllamaOnDemand]:
    async with OllamaOnDemand([QWEN, GEMMA], clock=clock, load_s=0.05) as server:
        yield server


async def post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str
) -> tuple[int, Any]:
    async with http.post(url, json=body, headers=headers or PROBE) as response:
        return response.status, await response.json(content_type=None)


async def get(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as response:
        assert response.status == 200
        return await response.json()


async def ps(http: aiohttp.ClientSession, server: OllamaOnDemand) -> list[tuple[str, str]]:
    models = (await get(http, server.url + "/api/ps"))["models"]
    return [(m["name"], m["expires_at"]) for m in models]


def chat(model: str = "qwen3:8b", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": ASK, "stream": False, **extra}


# -- what is on disk and what is loaded ---------------------------------------------------------


async def test_tags_list_the_disk_and_ps_is_empty_before_any_request(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    tags = (await get(http, ollama.url + "/api/tags"))["models"]
    assert [(t["name"], t["size"], t["capabilities"]) for t in tags] == [
        ("qwen3:8b", 6 * GIB, ["completion", "thinking"]),
        ("gemma3:latest", 4 * GIB, ["completion"]),
    ]
    assert await get(http, ollama.url + "/api/ps") == {"models": []}
    assert (await get(http, ollama.url + "/v1/models"))["data"][1] == {
        "id": "gemma3:latest",
        "object": "model",
        "created": int(datetime(2026, 1, 5, 10, 0).timestamp()),
        "owned_by": "library",
    }
    async with http.get(ollama.url + "/") as response:
        assert (response.status, await response.text()) == (200, "Ollama is running")
    assert ollama.loads == []


async def test_a_request_for_an_unloaded_model_waits_for_its_load_then_answers(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    async with OllamaOnDemand([QWEN], clock=clock, load_s=0.3) as ollama:
        started = time.monotonic()
        status, body = await post(http, ollama.url + "/api/chat", chat())
        took = time.monotonic() - started
        assert status == 200
        assert took >= 0.3
        assert body["message"] == {
            "role": "assistant",
            "content": CONTENT_TEXT,
            "thinking": REASONING_TEXT,
        }
        assert body["done_reason"] == "stop"
        assert body["load_duration"] >= 300_000_000
        cause = Cause(path="/api/chat", client="probe", user_agent="fleet-supervisor/0.1")
        assert ollama.loads == [Load(model="qwen3:8b", at=T0, cause=cause)]
        assert ollama.expiries == [
            ExpiryChange(model="qwen3:8b", expires_at=T0 + timedelta(minutes=5), at=T0, cause=cause)
        ]
        assert await ps(http, ollama) == [("qwen3:8b", "2026-11-28T12:05:00Z")]
        # loaded now: the next request neither loads nor waits
        status, body = await post(http, ollama.url + "/api/chat", chat())
        assert (status, body["load_duration"], len(ollama.loads)) == (200, 0, 1)
        runner_started = re.compile(
            r"time=2026-11-28T12:00:00\.000Z level=INFO source=server\.go:1289 "
            r'msg="llama runner started in 0\.[3-9]\d seconds"'
        )
        assert len([line for line in ollama.log if runner_started.fullmatch(line)]) == 1


async def test_requests_that_arrive_during_a_load_share_it(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    async with OllamaOnDemand([QWEN], clock=clock, load_s=0.2) as ollama:
        answers = await asyncio.gather(
            *(post(http, ollama.url + "/api/chat", chat()) for _ in range(3))
        )
        assert [status for status, _ in answers] == [200, 200, 200]
        assert len(ollama.loads) == 1
        assert len(ollama.expiries) == 1  # set once, when the last of the three finished


@pytest.mark.parametrize(
    ("keep_alive", "shown"),
    [
        ("10m", "2026-11-28T12:10:00Z"),
        ("1h30m", "2026-11-28T13:30:00Z"),
        (30, "2026-11-28T12:00:30Z"),
        (2.5, "2026-11-28T12:00:02.5Z"),
        ("-1s", "2319-03-10T11:47:16.854775Z"),
        (-1, "2319-03-10T11:47:16.854775Z"),
    ],
)
async def test_the_requests_keep_alive_sets_the_expiry(
    keep_alive: Any, shown: str, ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    status, _ = await post(http, ollama.url + "/api/chat", chat(keep_alive=keep_alive))
    assert status == 200
    assert await ps(http, ollama) == [("qwen3:8b", shown)]


async def test_the_model_unloads_when_its_keep_alive_runs_out(
    ollama: OllamaOnDemand, clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    request = {"model": "qwen3:8b", "prompt": "hi", "stream": False}
    await post(http, ollama.url + "/api/generate", request)
    clock.advance(299)
    assert await ps(http, ollama) == [("qwen3:8b", "2026-11-28T12:05:00Z")]
    clock.advance(1)
    assert await ps(http, ollama) == []
    assert ollama.unloads == [
        Unload(model="qwen3:8b", at=T0 + timedelta(minutes=5), reason="expired")
    ]
    # a later request loads it again, caused by whoever sent it
    await post(http, ollama.url + "/api/chat", chat(), **{"User-Agent": "curl/8.0"})
    assert [load.cause for load in ollama.loads] == [
        Cause(path="/api/generate", client="probe", user_agent="fleet-supervisor/0.1"),
        Cause(path="/api/chat", client=None, user_agent="curl/8.0"),
    ]


async def test_a_negative_keep_alive_keeps_it_loaded_for_ever(
    ollama: OllamaOnDemand, clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    await post(http, ollama.url + "/api/chat", chat(keep_alive=-1))
    clock.advance(10 * 365 * 86400)
    assert ollama.loaded == ["qwen3:8b"]


async def test_keep_alive_zero_unloads_after_the_answer(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    status, body = await post(http, ollama.url + "/api/chat", chat(keep_alive=0))
    assert (status, body["message"]["content"]) == (200, CONTENT_TEXT)
    assert await ps(http, ollama) == []
    assert [(u.model, u.reason) for u in ollama.unloads] == [("qwen3:8b", "keep_alive 0")]
    assert ollama.expiries == []


async def test_the_timer_unloads_on_the_real_clock_too(http: aiohttp.ClientSession) -> None:
    async with OllamaOnDemand([QWEN], keep_alive="200ms") as ollama:
        await post(http, ollama.url + "/api/chat", chat())
        assert ollama.loaded == ["qwen3:8b"]
        await eventually(lambda: [u.reason for u in ollama.unloads] == ["expired"], within=5)
        assert ollama.loaded == []


async def test_the_server_default_keep_alive_is_a_setting(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    async with OllamaOnDemand([QWEN], clock=clock, keep_alive="24h") as ollama:
        await post(http, ollama.url + "/api/chat", chat())
        assert await ps(http, ollama) == [("qwen3:8b", "2026-11-29T12:00:00Z")]
    async with OllamaOnDemand([QWEN], clock=clock, keep_alive="-1") as ollama:
        await post(http, ollama.url + "/api/chat", chat())
        assert ollama.expires_at("qwen3:8b") == datetime(
            2319, 3, 10, 11, 47, 16, 854775, tzinfo=UTC
        )


# -- empty prompts: load and unload without generating ------------------------------------------


async def test_an_empty_prompt_loads_the_model_without_generating(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    status, body = await post(http, ollama.url + "/api/generate", {"model": "qwen3:8b"})
    assert status == 200
    assert body == {
        "model": "qwen3:8b",
        "created_at": "2026-11-28T12:00:00Z",
        "response": "",
        "done": True,
        "done_reason": "load",
    }
    status, body = await post(http, ollama.url + "/api/chat", {"model": "gemma3", "messages": []})
    assert body == {
        "model": "gemma3",
        "created_at": "2026-11-28T12:00:00Z",
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "load",
    }
    assert ollama.loaded == ["gemma3:latest", "qwen3:8b"]
    assert [load.model for load in ollama.loads] == ["qwen3:8b", "gemma3:latest"]


async def test_an_empty_prompt_with_keep_alive_zero_unloads_and_loads_nothing(
    ollama: OllamaOnDemand, clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    unload = {"model": "qwen3:8b", "keep_alive": 0}
    status, body = await post(http, ollama.url + "/api/generate", unload)
    assert (status, body["done_reason"], ollama.loads) == (200, "unload", [])
    await post(http, ollama.url + "/api/chat", chat())
    clock.advance(10)
    status, body = await post(http, ollama.url + "/api/chat", {**unload, "messages": []})
    assert (status, body["done_reason"]) == (200, "unload")
    assert ollama.loaded == []
    cause = Cause(path="/api/chat", client="probe", user_agent="fleet-supervisor/0.1")
    at = T0 + timedelta(seconds=10)
    assert ollama.unloads == [Unload(model="qwen3:8b", at=at, reason="unload request", cause=cause)]
    assert ollama.expiries[-1] == ExpiryChange(model="qwen3:8b", expires_at=at, at=at, cause=cause)


# -- memory ---------------------------------------------------------------------------------------


async def test_a_model_that_does_not_fit_fails_with_ollamas_text(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    big = OllamaModel(name="gpt-oss:120b", size=65 * GIB)
    async with OllamaOnDemand([big], clock=clock, memory=int(30.4 * GIB)) as ollama:
        status, body = await post(http, ollama.url + "/api/chat", chat("gpt-oss:120b"))
        text = "model requires more system memory (65.0 GiB) than is available (30.4 GiB)"
        assert (status, body) == (500, {"error": text})
        status, body = await post(http, ollama.url + "/v1/chat/completions", chat("gpt-oss:120b"))
        assert (status, body) == (
            500,
            {"error": {"message": text, "type": "api_error", "param": None, "code": None}},
        )
        assert [load.error for load in ollama.loads] == [text, text]
        assert ollama.loaded == []
        warn = (
            "time=2026-11-28T12:00:00.000Z level=WARN source=server.go:1012 "
            'msg="model request too large for system" requested="65.0 GiB" '
            'available="30.4 GiB" total="30.4 GiB" free="30.4 GiB" swap="0 B"'
        )
        assert ollama.log.count(warn) == 2
        assert any(line.endswith('| POST    "/api/chat"') for line in ollama.log)


async def test_a_model_that_needs_room_unloads_the_idle_one(
    clock: ManualClock, http: aiohttp.ClientSession
) -> None:
    async with OllamaOnDemand([QWEN, GEMMA], clock=clock, memory=8 * GIB) as ollama:
        await post(http, ollama.url + "/api/chat", chat())
        await post(http, ollama.url + "/api/chat", chat("gemma3"), **{"X-Fleet-Client": "me"})
        assert ollama.loaded == ["gemma3:latest"]
        cause = Cause(path="/api/chat", client="me", user_agent=ollama.loads[1].cause.user_agent)
        assert ollama.unloads == [Unload(model="qwen3:8b", at=T0, reason="evicted", cause=cause)]


# -- the answers' shapes --------------------------------------------------------------------------


async def test_api_chat_streams_ndjson_thinking_then_content(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    body = {"model": "qwen3:8b", "messages": ASK}  # native routes stream unless told not to
    async with http.post(ollama.url + "/api/chat", json=body) as response:
        assert response.headers["Content-Type"] == "application/x-ndjson"
        records = [json.loads(line) async for line in response.content if line.strip()]
    thinking = [r["message"].get("thinking") for r in records[:N_THINK]]
    assert "".join(thinking) == REASONING_TEXT
    content = [r["message"]["content"] for r in records[N_THINK:-1]]
    assert "".join(content) == CONTENT_TEXT
    assert [r["done"] for r in records] == [False] * (N_THINK + N_SAY) + [True]
    last = records[-1]
    assert (last["message"], last["done_reason"]) == ({"role": "assistant", "content": ""}, "stop")
    assert (last["eval_count"], last["prompt_eval_count"]) == (N_THINK + N_SAY, 9)


async def test_think_false_and_a_model_that_does_not_think(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    _, body = await post(http, ollama.url + "/api/chat", chat(think=False))
    assert body["message"] == {"role": "assistant", "content": CONTENT_TEXT}
    _, body = await post(http, ollama.url + "/api/chat", chat("gemma3"))
    assert body["message"] == {"role": "assistant", "content": CONTENT_TEXT}
    status, body = await post(http, ollama.url + "/api/chat", chat("gemma3", think=True))
    assert (status, body) == (400, {"error": '"gemma3" does not support thinking'})


async def test_api_generate_whole_and_num_predict(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    request = {"model": "qwen3:8b", "prompt": "Why?", "stream": False}
    _, body = await post(http, ollama.url + "/api/generate", request)
    assert (body["thinking"], body["response"]) == (REASONING_TEXT, CONTENT_TEXT)
    assert (body["done"], body["done_reason"], len(body["context"])) == (
        True,
        "stop",
        5 + N_THINK + N_SAY,
    )
    _, body = await post(
        http, ollama.url + "/api/generate", {**request, "options": {"num_predict": 3}}
    )
    assert (body["response"], body["done_reason"], body["eval_count"]) == ("", "length", 3)
    assert body["thinking"] == "".join(split_pieces(REASONING_TEXT)[:3])


async def test_v1_chat_streams_reasoning_deltas_and_ignores_keep_alive(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    body = chat(stream=True, keep_alive=-1, stream_options={"include_usage": True})
    async with http.post(ollama.url + "/v1/chat/completions", json=body) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        lines = [line.decode().strip() async for line in response.content]
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks[: N_THINK + N_SAY]]
    assert "".join(d.get("reasoning", "") for d in deltas) == REASONING_TEXT
    assert "".join(d["content"] for d in deltas) == CONTENT_TEXT
    assert chunks[N_THINK + N_SAY]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 9,
        "completion_tokens": N_THINK + N_SAY,
        "total_tokens": 9 + N_THINK + N_SAY,
    }
    assert {c["system_fingerprint"] for c in chunks} == {"fp_ollama"}
    # /v1 has no keep_alive: the server's default (5 minutes) was set
    assert await ps(http, ollama) == [("qwen3:8b", "2026-11-28T12:05:00Z")]


async def test_v1_chat_whole_with_and_without_reasoning(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    _, body = await post(http, ollama.url + "/v1/chat/completions", chat())
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": CONTENT_TEXT,
        "reasoning": REASONING_TEXT,
    }
    _, body = await post(http, ollama.url + "/v1/chat/completions", chat(reasoning_effort="none"))
    assert body["choices"][0]["message"] == {"role": "assistant", "content": CONTENT_TEXT}


@pytest.mark.parametrize(
    ("path", "body", "status", "answer"),
    [
        ("/api/chat", chat("llama9"), 404, {"error": "model 'llama9' not found"}),
        ("/api/chat", {"messages": ASK}, 400, {"error": "model is required"}),
        ("/api/chat", chat(keep_alive="5"), 400, {"error": 'time: missing unit in duration "5"'}),
        ("/api/chat", chat(keep_alive="soon"), 400, {"error": 'time: invalid duration "soon"'}),
        (
            "/v1/chat/completions",
            chat("llama9"),
            404,
            {
                "error": {
                    "message": "model 'llama9' not found",
                    "type": "api_error",
                    "param": None,
                    "code": None,
                }
            },
        ),
    ],
)
async def test_errors_as_ollama_words_them(
    path: str,
    body: dict[str, Any],
    status: int,
    answer: Any,
    ollama: OllamaOnDemand,
    http: aiohttp.ClientSession,
) -> None:
    assert await post(http, ollama.url + path, body) == (status, answer)
    assert ollama.loads == []


async def test_a_route_ollama_lacks_is_gos_404(
    ollama: OllamaOnDemand, http: aiohttp.ClientSession
) -> None:
    async with http.get(ollama.url + "/api/embeddingz") as response:
        assert (response.status, await response.text()) == (404, "404 page not found")
    assert ollama.log[-1].endswith('| GET     "/api/embeddingz"')
    assert " | 404 | " in ollama.log[-1]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300.0), ("1h30m", 5400.0), ("300ms", 0.3), ("1.5h", 5400.0), ("0", 0.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


def test_keep_alive_types() -> None:
    assert keep_alive_seconds(-5) == float("inf")
    with pytest.raises(KeepAliveError, match=r"^time: unknown unit \"d\" in duration \"1d\"$"):
        keep_alive_seconds("1d")
    with pytest.raises(KeepAliveError, match=r"^Unsupported type: 'bool'$"):
        keep_alive_seconds(True)
