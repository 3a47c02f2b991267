"""An endpoint that asks for a key: `api_key_file` (not readable by others) or `api_key_env`,
checked when the config loads, read by the commands that send it, sent as
`Authorization: Bearer` to vLLM's `--api-key`, llama-swap's `apiKeys` and a real LiteLLM's
master key; a 401 or 403 in plain words naming the key's source, never the key."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from fleet_lab.vllm_sim.chat import CONTENT_TEXT, REASONING_TEXT
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from fleet_lab.vllm_sim.swap import LlamaSwap, SimUpstream, SwapModel
from supervisor.config.errors import ConfigError
from supervisor.config.keys import read_keys, with_keys
from supervisor.config.loader import parse_config
from supervisor.config.models import FleetConfig
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.core.tls import default_tls
from supervisor.probe import run_probe
from tests import litellm, warmstart
from tests.helpers import eventually, spawn_daemon, write_fleet
from tests.ports import free_port

KEY = "sk-fleet-7f3a9c"


def fleet(folder: Path, url: str, extra: str, kind: str = "openai") -> str:
    return f"""
endpoints:
  spark:
    kind: {kind}
    url: {url}
    model: sim-model
{extra}"""


def key_file(folder: Path, text: str = KEY + "\n", mode: int = 0o640) -> Path:
    path = folder / "spark.key"
    path.write_text(text)
    path.chmod(mode)
    return path


def parse(text: str, folder: Path) -> FleetConfig:
    return parse_config(text, source="fleet.yaml", base_dir=folder)


def issues(text: str, folder: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(text, folder)
    return [str(issue) for issue in caught.value.issues]


@pytest.mark.parametrize(
    ("extra", "mode", "expected"),
    [
        (
            "    api_key_file: spark.key\n    api_key_env: SPARK_KEY\n",
            0o600,
            "fleet.yaml:8: endpoints.spark.api_key_env: give api_key_file or api_key_env, not both",
        ),
        (
            "    api_key_env: 9-lives\n",
            0o600,
            "fleet.yaml:7: endpoints.spark.api_key_env: expected a variable's name like "
            "FLEET_KEY, got '9-lives'",
        ),
        (
            "    api_key_file: spark.key\n",
            0o644,
            "fleet.yaml:7: endpoints.spark.api_key_file: {folder}/spark.key may be read by "
            "others (mode 0644): chmod o-rwx {folder}/spark.key",
        ),
        (
            "    api_key_file: absent.key\n",
            0o600,
            "fleet.yaml:7: endpoints.spark.api_key_file: cannot read {folder}/absent.key: "
            "No such file or directory",
        ),
        (
            "    api_key_file: .\n",
            0o600,
            "fleet.yaml:7: endpoints.spark.api_key_file: {folder} is not a file",
        ),
        (
            "    api_key_env: SPARK_KEY\n    headers: {Authorization: Bearer x}\n",
            0o600,
            "fleet.yaml:8: endpoints.spark.headers: an Authorization header and an API key: give "
            "one",
        ),
    ],
    ids=["both", "bad-env-name", "mode", "missing", "a-folder", "and-a-header"],
)
def test_a_key_source_that_cannot_serve_is_a_config_error(
    tmp_path: Path, extra: str, mode: int, expected: str
) -> None:
    key_file(tmp_path, mode=mode)
    text = fleet(tmp_path, "http://127.0.0.1:1", extra)
    assert issues(text, tmp_path) == [expected.format(folder=tmp_path)]


@pytest.mark.parametrize(
    ("extra", "content", "environ", "expected"),
    [
        (
            "    api_key_file: spark.key\n",
            "\n",
            {},
            "fleet.yaml:7: endpoints.spark.api_key_file: {folder}/spark.key is empty",
        ),
        (
            "    api_key_file: spark.key\n",
            "\udcff",
            {},
            "fleet.yaml:7: endpoints.spark.api_key_file: {folder}/spark.key is not UTF-8 text",
        ),
        (
            "    api_key_env: SPARK_KEY\n",
            KEY,
            {"OTHER": KEY},
            "fleet.yaml:7: endpoints.spark.api_key_env: $SPARK_KEY is not set in the daemon's "
            "environment",
        ),
    ],
    ids=["empty", "not-text", "env-unset"],
)
def test_a_key_that_cannot_be_read_stops_the_daemon_and_says_where(
    tmp_path: Path, extra: str, content: str, environ: dict[str, str], expected: str
) -> None:
    path = key_file(tmp_path)
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    config = parse(fleet(tmp_path, "http://127.0.0.1:1", extra), tmp_path)  # loads: no reading
    with pytest.raises(ConfigError) as caught:
        with_keys(config, environ)
    assert [str(issue) for issue in caught.value.issues] == [expected.format(folder=tmp_path)]
    keyed, problems = read_keys(config, environ)  # the doctor's: a finding, not an end
    assert keyed.endpoints["spark"].secret() == ""
    assert list(problems) == ["spark"]


def test_the_key_is_in_no_dump_repr_or_equal_copy(tmp_path: Path) -> None:
    key_file(tmp_path)
    config = parse(fleet(tmp_path, "http://127.0.0.1:1", "    api_key_file: spark.key\n"), tmp_path)
    keyed = with_keys(config, {})
    endpoint = keyed.endpoints["spark"]
    assert endpoint.request_headers() == {"Authorization": f"Bearer {KEY}"}
    assert endpoint.model_copy().secret() == KEY
    assert endpoint != config.endpoints["spark"]  # a new key is a change (a reload applies it)
    for shown in (repr(keyed), str(keyed), keyed.model_dump_json(), str(keyed.model_dump())):
        assert KEY not in shown
    from_env = parse(fleet(tmp_path, "http://x", "    api_key_env: K\n"), tmp_path)
    env = with_keys(from_env, {"K": KEY})
    assert env.endpoints["spark"].key_source == "$K"


async def probes(config: FleetConfig) -> list[ProbeResult]:
    endpoint = config.endpoints["spark"]
    async with HttpClient() as http:
        return [
            await run_probe(endpoint, tier, http, clock=SystemClock())
            for tier in (Tier.LIVENESS, Tier.DEEP)
        ]


def outcomes(results: list[ProbeResult]) -> list[tuple[ProbeOutcome, str]]:
    return [(result.outcome, result.reason) for result in results]


@pytest.fixture
async def vllm() -> AsyncIterator[VllmSim]:
    async with VllmSim(SimBehaviour(tok_s=0), api_key=KEY) as sim:
        yield sim


@pytest.fixture
async def router() -> AsyncIterator[LlamaSwap]:
    upstream = SimUpstream("sim-model", behaviour=SimBehaviour(tok_s=0))
    models = {"sim-model": SwapModel(upstream=upstream)}
    async with LlamaSwap(models, api_keys=[KEY], first_check_s=0, health_interval_s=0.02) as swap:
        yield swap


async def test_a_key_from_a_file_reaches_vllm_and_a_wrong_one_is_named(
    tmp_path: Path, vllm: VllmSim
) -> None:
    path = key_file(tmp_path)
    config = parse(fleet(tmp_path, vllm.url, "    api_key_file: spark.key\n"), tmp_path)
    assert outcomes(await probes(with_keys(config, {}))) == [(ProbeOutcome.OK, "")] * 2
    path.write_text("sk-wrong\n")
    refused = f"the server refused the key from {path} (HTTP 401)"
    assert outcomes(await probes(with_keys(config, {}))) == [(ProbeOutcome.FAIL, refused)] * 2
    unkeyed = parse(fleet(tmp_path, vllm.url, ""), tmp_path)
    asked = "the server asks for a key (HTTP 401): set endpoints.spark.api_key_file"
    assert outcomes(await probes(unkeyed)) == [(ProbeOutcome.FAIL, asked)] * 2


async def test_a_key_from_the_environment_reaches_llama_swap(
    tmp_path: Path, router: LlamaSwap
) -> None:
    config = parse(fleet(tmp_path, router.url, "    api_key_env: SWAP_KEY\n"), tmp_path)
    keyed = with_keys(config, {"SWAP_KEY": KEY})
    assert outcomes(await probes(keyed)) == [(ProbeOutcome.OK, "")] * 2
    wrong = with_keys(config, {"SWAP_KEY": "sk-wrong"})
    refused = "the server refused the key from $SWAP_KEY (HTTP 401)"
    assert outcomes(await probes(wrong)) == [(ProbeOutcome.FAIL, refused)] * 2


ASK = {"model": "sim-model", "messages": [{"role": "user", "content": "What is 17 + 25?"}]}
NO_KEY = {
    "error": {
        "message": "Authentication Error, No api key passed in.",
        "type": "auth_error",
        "param": "None",
        "code": "401",
    }
}


@pytest.mark.slow
@pytest.mark.skipif(litellm.unavailable() is not None, reason=str(litellm.unavailable()))
async def test_a_key_from_a_file_is_litellm_s_master_key(tmp_path: Path, vllm: VllmSim) -> None:
    # LiteLLM routes to vLLM with the backend's own key; the supervisor holds the master key
    backends = {"sim-model": vllm.url}
    async with litellm.litellm_proxy(
        tmp_path / "litellm", backends, master_key=KEY, backend_key=KEY
    ) as proxy:
        # the proxy itself: no key is its 401 and the backend is not asked; the master key gets
        # the backend's answer, `reasoning` renamed `reasoning_content` (API-FACTS.md)
        async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
            url = proxy.url + "/v1/chat/completions"
            answer = await http.post(url, json=ASK)
            assert (answer.status_code, answer.json()) == (401, NO_KEY)
            assert vllm.requests["/v1/chat/completions"] == 0
            key = {"Authorization": f"Bearer {KEY}"}
            answer = await http.post(url, json=ASK, headers=key)
            assert answer.status_code == 200
            message = answer.json()["choices"][0]["message"]
        assert (message["content"], message["reasoning_content"]) == (CONTENT_TEXT, REASONING_TEXT)
        assert vllm.requests["/v1/chat/completions"] == 1
        path = key_file(tmp_path)
        config = parse(fleet(tmp_path, proxy.url, "    api_key_file: spark.key\n"), tmp_path)
        assert outcomes(await probes(with_keys(config, {})))[1] == (ProbeOutcome.OK, "")
        # a key other than the master key is looked up in LiteLLM's database (none here)
        path.write_text("sk-wrong\n")
        other = (ProbeOutcome.FAIL, "HTTP 400: No connected db.")
        assert outcomes(await probes(with_keys(config, {})))[1] == other
        unkeyed = parse(fleet(tmp_path, proxy.url, ""), tmp_path)
        asked = "the server asks for a key (HTTP 401): set endpoints.spark.api_key_file"
        assert outcomes(await probes(unkeyed))[1] == (ProbeOutcome.FAIL, asked)
        assert proxy.trap.seen == []
    assert os.environ.get("LITELLM_MASTER_KEY") is None
    print(f"litellm {litellm.RELEASE} ready in {proxy.started_in_s:.1f} s")


WRONG = "sk-wrong-5e1d0b"


async def test_a_daemon_never_shows_or_stores_a_key(tmp_path: Path, vllm: VllmSim) -> None:
    """A real daemon with two keyed endpoints on one vLLM, one key right and one wrong: the
    wrong one is down naming its key file; neither key is in the store, the log, the page, the
    HTTP status or `status --json`."""
    for name, key in (("good.key", KEY), ("bad.key", WRONG)):
        (tmp_path / name).write_text(key + "\n")
        (tmp_path / name).chmod(0o600)
    port = free_port()
    spec = {"kind": "openai", "url": vllm.url, "model": "sim-model", "host": "forge"}
    config = write_fleet(
        tmp_path,
        {"good": {**spec, "api_key_file": "good.key"}, "bad": {**spec, "api_key_file": "bad.key"}},
        http={"listen": f"127.0.0.1:{port}"},
    )
    log = tmp_path / "daemon.log"
    process = await spawn_daemon(config, log)
    url = f"http://127.0.0.1:{port}"
    refused = f"the server refused the key from {tmp_path / 'bad.key'} (HTTP 401)"
    try:
        async with httpx.AsyncClient(verify=default_tls(), base_url=url) as client:

            async def both_judged() -> bool:
                try:
                    status = (await client.get("/status")).json()
                except httpx.HTTPError:
                    return False
                states = {e["name"]: e["state"] for e in status["endpoints"]}
                return states == {"good": "healthy", "bad": "down"}

            await eventually(both_judged, within=20, what="good healthy and bad down")
            shown = [
                (await client.get(path)).text
                for path in ("/status", "/", "/endpoints/good", "/endpoints/bad", "/metrics")
            ]
        shown.append(
            warmstart.run(["--config", str(config), "status", "--json"], timeout=30).stdout
        )
    finally:
        process.terminate()
        await process.wait()
    assert refused in shown[0]
    store = b"".join(
        path.read_bytes() for path in (tmp_path / "state").rglob("*") if path.is_file()
    )
    assert refused.encode() in store
    texts = {
        "log": log.read_text(),
        "store": store.decode("utf-8", "replace"),
        "shown": "".join(shown),
    }
    for secret in (KEY, WRONG):
        assert [where for where, text in texts.items() if secret in text] == []
