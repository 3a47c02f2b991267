"""A real LiteLLM proxy for specs: the release pinned in `tests/data/litellm/`, from the venv
`scripts/setup.sh` makes for it alone (`.venv-litellm`; never the runtime's `.venv`), started as
a process of its own on a free loopback port in front of our simulators, ready once its
`/health/readiness` answers 200, stopped at the end.

Nothing is fetched at its start: `LITELLM_LOCAL_MODEL_COST_MAP=True` makes it read the model
price map it ships instead of downloading it. Its environment is ours to give, not the
machine's: no provider keys, no database; any HTTP(S) client in it that honours the proxy
variables meets `OutsideTrap`, which records every attempt (a spec asserts there was none).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

from supervisor.core.aio import poll
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-litellm"
LITELLM = VENV / "bin" / "litellm"
REQUIREMENTS = ROOT / "tests" / "data" / "litellm" / "requirements.txt"
RELEASE = "1.81.16"
READY_WITHIN_S = 90.0
"""Its start takes 6 s on 2 idle cores (docs/lab.md); a busy run gets far more."""


def unavailable() -> str | None:
    """Why a spec cannot start LiteLLM here (None when it can)."""
    if not LITELLM.exists():
        return "needs .venv-litellm: scripts/setup.sh installs LiteLLM there"
    return None


class OutsideTrap:
    """A loopback 'proxy' the LiteLLM process is told to use for anything not on loopback: it
    answers nothing and records the first line of every request that reached it."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            self.seen.append((await reader.readline()).decode("latin-1").strip())
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@dataclass(kw_only=True)
class LiteLLMProxy:
    url: str
    master_key: str
    log: Path
    trap: OutsideTrap
    started_in_s: float = 0.0
    config: dict[str, object] = field(default_factory=dict)


def config_for(
    backends: Mapping[str, str], master_key: str, backend_key: str = "none"
) -> dict[str, object]:
    """LiteLLM's config: each model name routed to the vLLM-shaped server at that base URL
    (which asks for `backend_key` when it was started with `--api-key`)."""
    model_list = [
        {
            "model_name": name,
            "litellm_params": {
                "model": f"hosted_vllm/{name}",
                "api_base": f"{base}/v1",
                "api_key": backend_key,
            },
        }
        for name, base in backends.items()
    ]
    return {"model_list": model_list, "general_settings": {"master_key": master_key}}


def _write_config(folder: Path, config: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "litellm.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextlib.asynccontextmanager
async def litellm_proxy(
    folder: Path,
    backends: Mapping[str, str],
    *,
    master_key: str = "sk-fleet-master",
    backend_key: str = "none",
    port: int | None = None,
) -> AsyncIterator[LiteLLMProxy]:
    """Start LiteLLM in front of `backends` (model name -> base URL) and wait until it is
    ready; stop it (SIGTERM, then SIGKILL after 10 s) on the way out."""
    config = config_for(backends, master_key, backend_key)
    config_path = _write_config(folder, config)
    trap = OutsideTrap()
    await trap.start()
    port = port or free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
        "HTTP_PROXY": trap.url,
        "HTTPS_PROXY": trap.url,
        "http_proxy": trap.url,
        "https_proxy": trap.url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    log = folder / "litellm.log"
    argv = [str(LITELLM), "--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
    loop = asyncio.get_running_loop()
    began = loop.time()
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, env=env
        )
    proxy = LiteLLMProxy(
        url=f"http://127.0.0.1:{port}", master_key=master_key, log=log, trap=trap, config=config
    )
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:

            async def ready() -> bool:
                if process.returncode is not None:
                    raise RuntimeError(f"litellm exited {process.returncode}: {log.read_text()}")
                try:
                    async with http.get(proxy.url + "/health/readiness") as answer:
                        return answer.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    return False

            if not await poll(ready, READY_WITHIN_S, every=0.1, at_most=0.5):
                raise RuntimeError(f"litellm not ready in {READY_WITHIN_S:g} s: {log.read_text()}")
        proxy.started_in_s = loop.time() - began
        yield proxy
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        await trap.stop()
