"""vLLM's `--api-key` on the vLLM-shaped sim: /v1 wants `Authorization: Bearer KEY`, answered
401 `{"error": "Unauthorized"}` otherwise; /health, /metrics and /version stay open."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator

import aiohttp
import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from tests.ports import free_port

ASK = {"model": "sim-model", "messages": [{"role": "user", "content": "17 + 25?"}]}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


@pytest.fixture
async def keyed() -> AsyncIterator[VllmSim]:
    async with VllmSim(SimBehaviour(tok_s=0), api_key="sk-vllm") as sim:
        yield sim


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer sk-wrong"},
        {"Authorization": "sk-vllm"},
        {"x-api-key": "sk-vllm"},
    ],
)
async def test_v1_without_the_key_is_401(
    headers: dict[str, str], keyed: VllmSim, http: aiohttp.ClientSession
) -> None:
    async with http.post(keyed.url + "/v1/chat/completions", json=ASK, headers=headers) as answer:
        assert (answer.status, await answer.json()) == (401, {"error": "Unauthorized"})
    async with http.get(keyed.url + "/v1/models", headers=headers) as answer:
        assert (answer.status, await answer.json()) == (401, {"error": "Unauthorized"})
    assert keyed.metrics.generation_tokens == 0


async def test_the_key_opens_v1_and_the_rest_is_open(
    keyed: VllmSim, http: aiohttp.ClientSession
) -> None:
    for scheme in ("Bearer", "bearer"):
        headers = {"Authorization": f"{scheme} sk-vllm"}
        async with http.post(
            keyed.url + "/v1/chat/completions", json=ASK, headers=headers
        ) as answer:
            assert answer.status == 200
    for path in ("/health", "/metrics", "/version"):
        async with http.get(keyed.url + path) as answer:
            assert answer.status == 200


def test_the_standalone_sim_takes_api_key() -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "fleet_lab.vllm_sim", "--port", str(port), "--model", "m",
         "--api-key", "sk-vllm"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == f"READY http://127.0.0.1:{port}\n"
        refused = subprocess.run(
            ["curl", "-s", f"http://127.0.0.1:{port}/v1/models"],
            capture_output=True, text=True, check=True, timeout=10,
        )  # fmt: skip
        assert refused.stdout == '{"error": "Unauthorized"}'
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
        process.stdout.close()  # type: ignore[union-attr]
