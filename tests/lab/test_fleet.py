"""The fleet's units in the lab: the DeepSeek pair through `docker exec` over a container tree,
the rendezvous really bound on 29501, real completions; and the ghost-ExecStart causes for real."""

from __future__ import annotations

import time

import httpx
import pytest

from fleet_lab import fleet, network
from fleet_lab.lab import Lab, LabHost
from supervisor.core.tls import default_tls

SPARK1, SPARK2 = network.address(11), network.address(12)  #: on this process's lab net

pytestmark = pytest.mark.slow


def _poll(predicate: object, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        time.sleep(0.05)


def _completion(url: str, model: str) -> dict[str, object] | None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    try:
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, verify=default_tls(), timeout=5)
    except httpx.HTTPError:
        return None
    data: dict[str, object] = reply.json()
    return data if reply.status_code == 200 else None


def _serves(url: str, model: str) -> bool:
    return _completion(url, model) is not None


def test_the_fleet_units_run_and_the_head_serves_a_real_completion(lab: Lab) -> None:
    for name, units in fleet.units().items():
        for unit in units:
            lab.host(name).wait_active(unit, within=15)
    _poll(lambda: _serves(f"http://{SPARK1}:8000", fleet.DS4_MODEL), 20, "the head to serve")
    reply = _completion(f"http://{SPARK1}:8000", fleet.DS4_MODEL)
    assert reply is not None
    message = reply["choices"][0]["message"]  # type: ignore[index]
    assert message["reasoning"]
    _poll(lambda: _serves(f"http://{SPARK1}:8001", "qwen"), 20, "the single node to serve")
    _poll(lambda: _get(f"http://{SPARK2}:11434/api/tags"), 20, "ollama")
    _poll(lambda: _get(f"http://{SPARK2}:8765/health"), 20, "the health-only endpoint")


def test_the_head_holds_29501_and_the_worker_joined_it(lab: Lab) -> None:
    head, worker = lab.host("spark1"), lab.host("spark2")
    head.wait_active("vllm-ds4-head.service", within=15)
    worker.wait_active("vllm-ds4-worker.service", within=15)
    pid = head.show("vllm-ds4-head.service", "MainPID")["MainPID"]
    listeners = head.nsenter("ss", "-Hltnp", "sport = :29501").stdout
    assert f"{SPARK1}:29501" in listeners
    assert f"pid={pid}," in listeners
    _poll(  # as long as the worker itself tries (`launch.py --connect-within`: a loaded run
        # with three labs booting saw it take over 20 s)
        lambda: f"{SPARK1}:29501" in worker.nsenter("ss", "-Htn", "dport = :29501").stdout,
        60,
        "the worker's connection",
    )
    assert "VLLM::Worker_TP" in worker.nsenter("ps", "-eo", "comm").stdout.split()


def _get(url: str) -> bool:
    try:
        return httpx.get(url, verify=default_tls(), timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _restarts(host: LabHost, unit: str) -> int:
    return int(host.show(unit, "NRestarts")["NRestarts"] or 0)


def test_a_missing_launch_script_is_exit_127_restarting(lab: Lab) -> None:
    host, unit = lab.host("spark1"), "vllm-ds4-head.service"
    script = host.folder / "containers" / fleet.CONTAINER / fleet.HEAD_SCRIPT.lstrip("/")
    text = script.read_text()
    script.unlink()
    try:
        host.systemctl("restart", unit)
        failed = {"ExecMainStatus": "127", "Result": "exit-code"}
        _poll(lambda: host.show(unit, *failed) == failed, 10, "exit 127")
        first = _restarts(host, unit)
        _poll(lambda: _restarts(host, unit) >= first + 2, 10, "restarts climbing")
        journal = host.nsenter("journalctl", "-u", unit, "--no-pager", "-n", "20").stdout
        assert f"bash: {fleet.HEAD_SCRIPT}: No such file or directory" in journal
    finally:
        script.write_text(text)
        script.chmod(0o755)
    host.systemctl("restart", unit)
    host.wait_active(unit, within=10)
    _poll(lambda: _serves(f"http://{SPARK1}:8000", fleet.DS4_MODEL), 20, "the head again")


def test_a_missing_execstart_binary_is_203_exec(lab: Lab) -> None:
    host, unit = lab.host("spark2"), "vllm-ds4-worker.service"
    host.nsenter("mv", "/usr/bin/docker", "/usr/bin/docker.away")
    try:
        host.systemctl("restart", unit)
        _poll(lambda: host.show(unit, "ExecMainStatus")["ExecMainStatus"] == "203", 10, "203")
        assert host.show(unit, "Result") == {"Result": "exit-code"}
    finally:
        host.nsenter("mv", "/usr/bin/docker.away", "/usr/bin/docker")
    host.systemctl("restart", unit)
    host.wait_active(unit, within=10)
