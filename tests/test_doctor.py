"""`fleet-supervisor doctor` against real servers: vLLM-shaped sims on loopback for the
endpoint checks, the real OpenSSH server for the host checks, a real SQLite store for the
record. (Units, containers and sudo rights: tests/lab/test_doctor.py, against the lab.)"""

from __future__ import annotations

import asyncio
import io
import json
import os
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from fleet_lab.vllm_sim.ondemand import OllamaModel, OllamaOnDemand
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from fleet_lab.vllm_sim.swap import LlamaSwap, SimUpstream, SwapModel
from supervisor import cli
from supervisor.record.store.doctor import last_doctor_run
from supervisor.record.store.store import Store
from tests.conftest import FAST_TOK_S, SimFactory
from tests.helpers import write_fleet
from tests.sshd import Sshd

pytestmark = pytest.mark.slow


def _doctor(config: Path, *names: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(["--config", str(config), "doctor", "--json", *names])
    try:
        return code, json.loads(out.getvalue())
    except ValueError:
        raise AssertionError(f"not JSON (exit {code}): {out.getvalue()!r}") from None


def _rows(document: dict[str, Any], subject: str) -> dict[str, tuple[str, str, str]]:
    return {
        f["check"]: (f["status"], f["detail"], f["fix"])
        for f in document["findings"]
        if f["subject"] == subject
    }


def _endpoint(server: VllmSim, model: str = "sim-model") -> dict[str, Any]:
    return {
        "kind": "openai",
        "url": server.url,
        "model": model,
        "expect_reasoning": True,
        "host": "forge",
    }


def _config(tmp_path: Path, endpoints: dict[str, Any], hosts: dict[str, Any] | None = None) -> Path:
    playbook = tmp_path / "playbooks"
    playbook.mkdir(exist_ok=True)
    return write_fleet(tmp_path, endpoints, hosts=hosts, playbook=str(playbook))


async def test_a_served_model_with_its_series_is_all_ok(
    tmp_path: Path, sim_factory: SimFactory
) -> None:
    good = await sim_factory()
    older = await sim_factory(SimBehaviour(tok_s=FAST_TOK_S, reasoning_field="reasoning_content"))
    config = _config(tmp_path, {"good": _endpoint(good), "older": _endpoint(older)})
    code, document = await asyncio.to_thread(_doctor, config)
    assert code == 0, document
    assert _rows(document, "good") == {
        "liveness": ("ok", f"{good.url} answers", ""),
        "completion": ("ok", "reasoning came back in `reasoning`", ""),
        "model": ("ok", "sim-model is served", ""),
        "metrics": (
            "ok",
            "vllm:generation_tokens_total and vllm:num_requests_running (vLLM 0.32.0)",
            "",
        ),
    }
    assert _rows(document, "older")["completion"] == (
        "ok",
        "reasoning came back in `reasoning_content`",
        "",
    )


async def test_a_model_that_is_not_served_and_metrics_without_the_series_fail_with_the_fix(
    tmp_path: Path, sim_factory: SimFactory
) -> None:
    server = await sim_factory()
    bare = await sim_factory(SimBehaviour(tok_s=FAST_TOK_S, progress_metrics=False))
    config = _config(tmp_path, {"typo": _endpoint(server, "sim-modle"), "bare": _endpoint(bare)})
    code, document = await asyncio.to_thread(_doctor, config)
    assert code == 1
    typo = _rows(document, "typo")
    assert typo["model"] == (
        "fail",
        "sim-modle is not served (served: sim-model)",
        "set endpoints.typo.model to one of: sim-model",
    )
    assert typo["completion"][0] == "fail"
    assert _rows(document, "bare")["metrics"] == (
        "fail",
        "/metrics (vLLM 0.32.0) has no vllm:generation_tokens_total and no "
        "vllm:num_requests_running: busy cannot be told from hung",
        "run a vLLM that exports them (>= 0.6), or set probe.progress_window: 0s to judge by time",
    )


async def test_ssh_says_exactly_why_it_cannot_log_in(
    tmp_path: Path, sim_factory: SimFactory, sshd: Sshd
) -> None:
    server = await sim_factory()
    host = sshd.host
    stranger = tmp_path / "stranger_ed25519"
    (tmp_path / "empty_known_hosts").write_text("")
    base = {"address": host.address, "port": host.port, "user": host.user}
    hosts = {
        "forge": {"local": True},
        "good": {**base, "key": str(host.key), "known_hosts": str(host.known_hosts)},
        "nokey": {**base, "key": str(host.key), "known_hosts": str(tmp_path / "empty_known_hosts")},
    }
    import asyncssh

    stranger.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    stranger.chmod(0o600)
    hosts["stranger"] = {**base, "key": str(stranger), "known_hosts": str(host.known_hosts)}
    endpoint = {**_endpoint(server), "host": "good"}
    config = _config(tmp_path, {"e": endpoint}, hosts)
    code, document = await asyncio.to_thread(_doctor, config)
    assert code == 1
    where = f"({host.address}:{host.port})"
    assert _rows(document, "good")["ssh"][:2] == ("ok", _rows(document, "good")["ssh"][1])
    assert _rows(document, "good")["ssh"][1].startswith(f"logged in as {host.user}: Linux ")
    assert _rows(document, "good")["manager"][0] == "ok"
    assert _rows(document, "good")["clock"][0] == "ok"
    assert _rows(document, "stranger")["ssh"] == (
        "fail",
        f"authentication failed for {host.user}@stranger {where}",
        f"try `ssh -i {stranger} -p {host.port} {host.user}@{host.address} true`; "
        "check hosts.stranger.user, key and known_hosts",
    )
    status, detail, _ = _rows(document, "nokey")["ssh"]
    assert status == "fail"
    assert detail.startswith(f"host key of nokey {where} is not trusted")


async def test_the_run_is_kept_in_the_store_and_status_shows_it(
    tmp_path: Path, sim_factory: SimFactory
) -> None:
    server = await sim_factory()
    config = _config(tmp_path, {"e": _endpoint(server)})
    (tmp_path / "state").mkdir(exist_ok=True)
    store = await Store.open(tmp_path / "state/supervisor.db")
    await store.close()
    code, document = await asyncio.to_thread(_doctor, config, "e")
    assert code == 0
    store = await Store.open(tmp_path / "state/supervisor.db", create=False)
    try:
        record = await last_doctor_run(store)
    finally:
        await store.close()
    assert record is not None
    assert (record.ok, record.summary) == (True, document["summary"])
    out = io.StringIO()
    with redirect_stdout(out):
        assert await asyncio.to_thread(cli.main, ["--config", str(config), "status"]) == 0
    assert f"last doctor run {record.at:%Y-%m-%d %H:%M} UTC: {record.summary}" in out.getvalue()


def test_an_unknown_name_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["--config", "deploy/fleet.example.yaml", "doctor", "nope"])
    assert code == 2
    assert capsys.readouterr().err == (
        "fleet-supervisor: no endpoint or host 'nope' (known: ds4, kimi, embed, rerank, ollama, "
        "asr, tts, spark1, spark2, m3ultra, m5max, forge)\n"
    )


#: macOS's launchctl when nobody is logged in at the screen (a stand-in: no macOS here)
NO_GUI = """\
#!/bin/sh
case "$1" in
  version) echo "Darwin Bootstrapper Version 7.0.0: root:libxpc-2462" ;;
  print) echo "Could not find domain for user gui: 501" >&2; exit 113 ;;
  *) exit 64 ;;
esac
"""


async def test_a_gui_domain_nobody_is_logged_in_to_says_what_to_do(
    tmp_path: Path, sim_factory: SimFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await sim_factory(flavour="mlx")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "launchctl").write_text(NO_GUI)
    (tools / "launchctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    unit = {"host": "mac", "unit": "com.fleet.mlx-kimi", "domain": "gui/501", "plist": "~/x.plist"}
    endpoint = {**_endpoint(server), "units": [unit], "expect_reasoning": False}
    del endpoint["host"]
    hosts = {"mac": {"local": True, "service_manager": "launchd"}}
    config = _config(tmp_path, {"kimi": endpoint}, hosts)
    code, document = await asyncio.to_thread(_doctor, config)
    assert code == 1
    assert _rows(document, "mac")["manager"][:2] == (
        "ok",
        "launchd: Darwin Bootstrapper Version 7.0.0: root:libxpc-2462",
    )
    assert _rows(document, "kimi")["job com.fleet.mlx-kimi@mac"] == (
        "fail",
        "Could not find domain for user gui: 501: nobody is logged in at mac's screen, "
        "so gui/501 does not exist",
        "turn on automatic login for that user on the Mac (or make it a LaunchDaemon: domain "
        "system)",
    )
    assert _rows(document, "kimi")["metrics"] == (
        "ok",
        "no /metrics (mlx_lm exports none): busy and hung are told by time only",
        "",
    )


async def test_the_key_check_names_the_key_source_to_fix(tmp_path: Path) -> None:
    """A server started with `--api-key`: the doctor reads each endpoint's key as the daemon
    would, a key it cannot read is a finding (the other checks still run), and the server's
    answer to the key is the verdict."""
    for name, text in (("right.key", "sk-doctor\n"), ("wrong.key", "sk-nope\n"), ("empty.key", "")):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o600)
    async with VllmSim(SimBehaviour(tok_s=FAST_TOK_S), api_key="sk-doctor") as server:
        endpoints = {
            name: {**_endpoint(server), **source}
            for name, source in (
                ("right", {"api_key_file": "right.key"}),
                ("wrong", {"api_key_file": "wrong.key"}),
                ("empty", {"api_key_file": "empty.key"}),
                ("env", {"api_key_env": "FLEET_DOCTOR_SPEC_KEY"}),
                ("none", {}),
            )
        }
        config = _config(tmp_path, endpoints)
        assert "FLEET_DOCTOR_SPEC_KEY" not in os.environ
        code, document = await asyncio.to_thread(_doctor, config)
    assert code == 1
    keys = {name: _rows(document, name).get("key") for name in endpoints}
    wrong = tmp_path / "wrong.key"
    assert keys == {
        "right": ("ok", f"the server takes the key from {tmp_path / 'right.key'}", ""),
        "wrong": (
            "fail",
            f"the server refused the key from {wrong} (HTTP 401)",
            f"put the key the server expects in {wrong}",
        ),
        "empty": (
            "fail",
            f"{tmp_path / 'empty.key'} is empty",
            f"fix {tmp_path / 'empty.key'} for the daemon's user",
        ),
        "env": (
            "fail",
            "$FLEET_DOCTOR_SPEC_KEY is not set in the daemon's environment",
            "set $FLEET_DOCTOR_SPEC_KEY in the daemon's unit (Environment= or EnvironmentFile=)",
        ),
        "none": None,
    }
    assert _rows(document, "right")["completion"][0] == "ok"
    assert _rows(document, "none")["completion"][1] == (
        "the server asks for a key (HTTP 401): set endpoints.none.api_key_file"
    )
    assert "sk-doctor" not in json.dumps(document)


async def test_on_demand_and_a_route_are_checked_without_loading_anything(tmp_path: Path) -> None:
    """An Ollama model that is not loaded is reported so (the doctor does not load it); a route
    behind llama-swap is checked against the router's model list."""
    ollama = OllamaOnDemand([OllamaModel(name="qwen3:8b")])
    upstream = SimUpstream("qwen", behaviour=SimBehaviour(tok_s=FAST_TOK_S))
    router = LlamaSwap({"qwen": SwapModel(upstream=upstream)}, first_check_s=0)
    async with ollama, router:
        routed = {"url": router.url, "via": "swap", "on_demand": "llama-swap"}
        endpoints: dict[str, dict[str, str]] = {
            "spark-ollama": {"kind": "ollama", "url": ollama.url, "model": "qwen3:8b"},
            "swap": {"kind": "health", "url": f"{router.url}/health"},
            "qwen": {"kind": "openai", "model": "qwen", **routed},
            "typo": {"kind": "openai", "model": "qwne", **routed},
        }
        config = _config(tmp_path, {n: {**e, "host": "forge"} for n, e in endpoints.items()})
        _, document = await asyncio.to_thread(_doctor, config)
    assert _rows(document, "spark-ollama")["completion"] == (
        "ok",
        "on demand: qwen3:8b is not loaded (loaded: nothing); the probe leaves it so "
        "(`probe spark-ollama` loads it)",
        "",
    )
    assert ollama.loads == []
    assert _rows(document, "qwen")["route"] == ("ok", "via swap: the router lists qwen", "")
    assert _rows(document, "typo")["route"] == (
        "fail",
        "the router does not list qwne (it lists: qwen)",
        "add qwne to the router's models",
    )
    assert router.starts == []  # listing models starts none, nor does the real check
