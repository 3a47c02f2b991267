"""`fleet-supervisor doctor` against the lab: real systemd hosts over the real sshd, their
units, the `vllm_ds4` containers, the vLLM-shaped servers and a real sudo. All ok for the lab
as it is; each of five broken configs (a missing sudo right, a misspelt unit, a missing
container, a model that is not served, a /metrics without the progress series) fails with its
fix, exit 1; every run well under 10 s. The hosts log in as the lab's unprivileged user with
the sudoers file `sudoers --host H` generates for the config (`install_sudoers`)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet_lab import fleet
from fleet_lab.drills.config import ENDPOINTS, PLAYBOOK, completes, install_sudoers
from fleet_lab.lab import Lab
from supervisor import cli
from supervisor.config.loader import load_config

pytestmark = pytest.mark.slow

#: a user whose sudoers lacks one command a rule runs (`systemctl stop vllm-qwen.service`)
SHORT = "fleetless"
MISSING = "/usr/bin/systemctl ^stop vllm-qwen\\.service$"
WITHIN_S = 10.0


def _document(lab: Lab, folder: Path) -> dict[str, Any]:
    hosts: dict[str, Any] = {"forge": {"local": True}}
    for name in ("spark1", "spark2"):
        host = lab.fleet_host(name)
        hosts[name] = {
            "address": host.address,
            "user": host.user,
            "key": str(host.key),
            "known_hosts": str(host.known_hosts),
        }
    endpoints: dict[str, Any] = {}
    for name in ("ds4", "qwen"):
        spec = ENDPOINTS[name]
        units = []
        for unit in spec.units:
            entry = {"host": unit.host, "unit": unit.unit, "known_good": unit.known_good}
            if unit.container:
                entry["container"] = unit.container
            units.append(entry)
        endpoints[name] = {
            "kind": "openai", "url": spec.url, "model": spec.model,
            "expect_reasoning": True, "units": units,
        }  # fmt: skip
    return {
        "store": {"path": str(folder / "state/supervisor.db")},
        "playbook": {"path": str(PLAYBOOK)},
        "http": {"enabled": False},
        "hosts": hosts,
        "endpoints": endpoints,
    }


def _write(folder: Path, document: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def _doctor(lab: Lab, config: Path, *, install: bool = True) -> tuple[int, dict[str, Any], float]:
    """`doctor --json` on `config`; first (unless not `install`) every host gets the sudoers
    file generated for it, as an operator installs it for the config doctor then checks."""
    if install:
        install_sudoers(lab, load_config(config))
    started = time.monotonic()
    code, out = _cli("--config", str(config), "doctor", "--json")
    return code, json.loads(out), time.monotonic() - started


def _row(document: dict[str, Any], subject: str, check: str) -> tuple[str, str, str]:
    found = [
        (f["status"], f["detail"], f["fix"])
        for f in document["findings"]
        if (f["subject"], f["check"]) == (subject, check)
    ]
    assert len(found) == 1, (subject, check, document["findings"])
    return found[0]


def _sudoers_without_one_right(lab: Lab, folder: Path) -> str:
    """The sudoers the rules need on spark1 for SHORT, less the line that grants MISSING."""
    document = _document(lab, folder)
    document["hosts"]["spark1"]["user"] = SHORT
    code, text = _cli(
        "--config", str(_write(folder / "short", document)), "sudoers", "--host", "spark1"
    )
    assert code == 0
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.endswith(f"NOPASSWD: {MISSING}"))
    start = index
    while start > 0 and lines[start - 1].startswith("# rule"):
        start -= 1
    return "\n".join(lines[:start] + lines[index + 1 :]) + "\n"


@pytest.fixture(scope="module")
def doctor_lab(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The lab ready for doctor: served, and on spark1 a user SHORT with a sudoers file that
    lacks one right (in the host's own overlay: nothing lands on this machine)."""
    folder = tmp_path_factory.mktemp("doctor")
    fleet.prepare(lab)
    for name in ("ds4", "qwen"):
        deadline = time.monotonic() + 40
        while not completes(name):
            assert time.monotonic() < deadline, f"{name} does not serve"
            time.sleep(0.2)
    text = _sudoers_without_one_right(lab, folder)
    spark1 = lab.host("spark1")
    (spark1.folder / "short.sudoers").write_text(text)
    script = (
        f"id {SHORT} >/dev/null 2>&1 || useradd -m -s /bin/bash {SHORT}; "
        f"usermod -p '*' {SHORT}; "
        "visudo -c -q -f /var/lib/lab/short.sudoers && "
        f"install -m 0440 /var/lib/lab/short.sudoers /etc/sudoers.d/{SHORT}"
    )
    made = spark1.nsenter("sh", "-c", script)
    assert made.returncode == 0, made.stderr
    yield folder
    spark1.nsenter("sh", "-c", f"rm -f /etc/sudoers.d/{SHORT}")


def test_the_lab_as_it_is_is_all_ok(lab: Lab, doctor_lab: Path) -> None:
    code, document, took = _doctor(lab, _write(doctor_lab / "ok", _document(lab, doctor_lab)))
    bad = [f for f in document["findings"] if f["status"] != "ok"]
    assert (code, bad) == (0, [])
    assert lab.user == "fleet"
    status, detail, _ = _row(document, "spark1", "sudoers")
    assert status == "ok", detail
    assert took < WITHIN_S, took
    assert _row(document, "ds4", "unit vllm-ds4-head.service@spark1")[1] == (
        "active (running); ExecStart /usr/bin/docker exec vllm_ds4 bash /workspace/vllm-head.sh "
        "(/workspace/vllm-head.sh in vllm_ds4 exists)"
    )
    assert _row(document, "ds4", "container vllm_ds4@spark2") == ("ok", "running", "")
    assert _row(document, "qwen", "completion")[1] == "reasoning came back in `reasoning`"
    print(f"doctor, the lab all ok: {took:.2f}s ({document['summary']})")


def test_a_missing_sudo_right_fails_with_its_fix(lab: Lab, doctor_lab: Path) -> None:
    document = _document(lab, doctor_lab)
    document["hosts"]["spark1"]["user"] = SHORT
    code, found, took = _doctor(lab, _write(doctor_lab / "short", document), install=False)
    assert code == 1
    assert took < WITHIN_S, took
    refused = [
        (f["check"], f["detail"], f["fix"])
        for f in found["findings"]
        if f["subject"] == "qwen" and f["check"].startswith("rule ") and f["status"] == "fail"
    ]
    assert refused, found["findings"]
    for rule, detail, fix in refused:
        assert detail.startswith("may not run `systemctl stop vllm-qwen.service` on spark1"), rule
        assert fix == "install `fleet-supervisor sudoers --host spark1` there"
    status, detail, fix = _row(found, "spark1", "sudoers")
    assert (status, fix) == (
        "fail",
        "install `fleet-supervisor sudoers --host spark1` (deploy/install.sh --sudoers FILE)",
    )
    assert detail.startswith(f"{SHORT} lacks 1 of the ")
    print(f"doctor, a missing sudo right: {took:.2f}s")


Change = Callable[[dict[str, Any]], object]
BROKEN: dict[str, tuple[Change, tuple[str, str], tuple[str, str, str]]] = {
    "misspelt unit": (
        lambda d: d["endpoints"]["qwen"]["units"][0].update(unit="vllm-qwne.service"),
        ("qwen", "unit vllm-qwne.service@spark1"),
        (
            "fail",
            "no unit vllm-qwne.service on spark1 (not-found)",
            "check endpoints.qwen.units[].unit (`systemctl list-units --all 'vllm*'` on spark1)",
        ),
    ),
    "missing container": (
        lambda d: d["endpoints"]["ds4"]["units"][1].update(container="vllm_ds5"),
        ("ds4", "container vllm_ds5@spark1"),
        (
            "fail",
            "Error: No such object: vllm_ds5",
            "check endpoints.ds4.units[].container (`docker ps -a` on spark1)",
        ),
    ),
    "wrong model": (
        lambda d: d["endpoints"]["qwen"].update(model="qwen3"),
        ("qwen", "model"),
        ("fail", "qwen3 is not served (served: qwen)", "set endpoints.qwen.model to one of: qwen"),
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_config_fails_with_its_fix(lab: Lab, doctor_lab: Path, case: str) -> None:
    change, (subject, check), expected = BROKEN[case]
    document = _document(lab, doctor_lab)
    change(document)
    code, found, took = _doctor(lab, _write(doctor_lab / case.replace(" ", "-"), document))
    assert code == 1
    assert _row(found, subject, check) == expected
    assert took < WITHIN_S, took
    print(f"doctor, {case}: {took:.2f}s")


def test_metrics_without_the_progress_series_fail_with_the_fix(lab: Lab, doctor_lab: Path) -> None:
    control = lab.host("spark1").folder / fleet.QWEN_CONTROL
    control.write_text(json.dumps({"progress_metrics": False}))
    try:
        time.sleep(0.1)  # the sim re-reads its control file on its next request
        code, found, took = _doctor(lab, _write(doctor_lab / "metrics", _document(lab, doctor_lab)))
    finally:
        control.unlink(missing_ok=True)
    assert code == 1
    assert _row(found, "qwen", "metrics") == (
        "fail",
        "/metrics (vLLM 0.32.0) has no vllm:generation_tokens_total and no "
        "vllm:num_requests_running: busy cannot be told from hung",
        "run a vLLM that exports them (>= 0.6), or set probe.progress_window: 0s to judge by time",
    )
    assert took < WITHIN_S, took
    print(f"doctor, /metrics without the series: {took:.2f}s")


def test_nothing_it_ran_changed_a_unit(lab: Lab, doctor_lab: Path) -> None:
    """Read-only: the units doctor looked at kept their main process through every run."""
    spark1 = lab.host("spark1")
    before = spark1.show("vllm-qwen.service", "MainPID", "NRestarts")
    _doctor(lab, _write(doctor_lab / "ok", _document(lab, doctor_lab)))
    assert spark1.show("vllm-qwen.service", "MainPID", "NRestarts") == before
