"""A real LiteLLM proxy, from its own venv, in front of a vLLM-shaped simulator: the master key
opens it, no key is 401, nothing left loopback, and the runtime's venv has no LiteLLM."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from fleet_lab.vllm_sim.chat import CONTENT_TEXT, REASONING_TEXT
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from tests import litellm

ROOT = Path(__file__).resolve().parents[1]
ASK = {"model": "qwen", "messages": [{"role": "user", "content": "What is 17 + 25?"}]}
NO_KEY = {
    "error": {
        "message": "Authentication Error, No api key passed in.",
        "type": "auth_error",
        "param": "None",
        "code": "401",
    }
}


@pytest.fixture
async def backend() -> AsyncIterator[VllmSim]:
    async with VllmSim(SimBehaviour(tok_s=0), model="qwen") as sim:
        yield sim


def test_the_runtime_venv_has_no_litellm() -> None:
    ran = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-c", "import litellm"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 1
    assert ran.stderr.rstrip().endswith("ModuleNotFoundError: No module named 'litellm'")


def test_its_own_venv_holds_the_pinned_release() -> None:
    if reason := litellm.unavailable():
        pytest.skip(reason)
    version = "import importlib.metadata as m; print(m.version('litellm'))"
    ran = subprocess.run(
        [str(litellm.VENV / "bin" / "python"), "-c", version],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout == f"{litellm.RELEASE}\n"
    assert f"litellm=={litellm.RELEASE} \\\n" in litellm.REQUIREMENTS.read_text()


@pytest.mark.slow
async def test_a_completion_through_litellm_needs_the_master_key(
    backend: VllmSim, tmp_path: Path
) -> None:
    if reason := litellm.unavailable():
        pytest.skip(reason)
    async with (
        litellm.litellm_proxy(tmp_path, {"qwen": backend.url}) as proxy,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
    ):
        url = proxy.url + "/v1/chat/completions"
        async with http.post(url, json=ASK) as answer:
            assert (answer.status, await answer.json()) == (401, NO_KEY)
        assert backend.requests["/v1/chat/completions"] == 0
        key = {"Authorization": f"Bearer {proxy.master_key}"}
        async with http.post(url, json=ASK, headers=key) as answer:
            assert answer.status == 200
            message = (await answer.json())["choices"][0]["message"]
        # LiteLLM renames vLLM's `reasoning` to `reasoning_content` (API-FACTS.md)
        assert (message["content"], message["reasoning_content"]) == (CONTENT_TEXT, REASONING_TEXT)
        assert backend.requests["/v1/chat/completions"] == 1
    assert proxy.trap.seen == []
    print(f"litellm {litellm.RELEASE} ready in {proxy.started_in_s:.1f} s")
