"""The daemon as a systemd service under the lab's real systemd: `Type=notify` reaches `active`
only after READY=1, and the watchdog kills and restarts it when its event loop hangs.

The unit is the shipped `deploy/fleet-supervisor.service` with the lines a test host needs
changed (root, this checkout's interpreter, a 2 s watchdog, a fast restart); its hardening is
checked separately by `systemd-analyze verify` (tests/test_ops_deploy.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from fleet_lab.lab import Lab

pytestmark = pytest.mark.slow

UNIT = "fleet-supervisor-test.service"
HOME = "/run/fleet-supervisor-test"
SHIPPED = Path(__file__).parent.parent.parent / "deploy" / "fleet-supervisor.service"

FLEET = f"""\
store: {{path: {HOME}/supervisor.db}}
playbook: {{path: {HOME}/playbooks}}
http: {{enabled: false}}
defaults:
  probe: {{liveness_interval: 1s, completion_interval: 5s, timeout: 1s, jitter: 0s}}
hosts:
  forge: {{local: true}}
endpoints:
  asr: {{kind: health, url: "http://127.0.0.1:9/health", host: forge}}
"""


def _unit() -> str:
    """The shipped unit, its service section kept, with the test host's changes."""
    changes = {
        "User": "root",
        "Group": "root",
        "WatchdogSec": "2",
        "RestartSec": "200ms",
        "ExecStart": f"{sys.executable} -m supervisor --config {HOME}/fleet.yaml run "
        "--log-format json",
        "WorkingDirectory": HOME,
        "EnvironmentFile": "-/dev/null",
        "Environment": f"FLEET_SUPERVISOR_TEST_HANG_FILE={HOME}/hang",
    }
    kept = []
    section = ""
    for line in SHIPPED.read_text().splitlines():
        if line.startswith("["):
            section = line
        key = line.split("=", 1)[0]
        if section == "[Service]" and key in changes:
            kept.append(f"{key}={changes.pop(key)}")
        elif (
            section == "[Service]"
            and "=" in line
            and key not in ("Type", "NotifyAccess", "Restart", "ExecReload", "UMask")
        ):
            continue  # hardening and state directories: verified by systemd-analyze, not here
        else:
            kept.append(line)
    assert not changes, f"the shipped unit lost {sorted(changes)}"
    return "\n".join(kept) + "\n"


def _write(lab: Lab, path: str, text: str) -> None:
    host = lab.host("spark1")
    result = host.nsenter(
        "sh", "-c", 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1"', "sh", path, text
    )
    assert result.returncode == 0, result.stderr


def _wait(predicate: object, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        time.sleep(0.1)


def test_the_service_is_active_after_ready_and_the_watchdog_restarts_a_hung_loop(lab: Lab) -> None:
    host = lab.host("spark1")
    _write(lab, f"{HOME}/fleet.yaml", FLEET)
    _write(lab, f"/etc/systemd/system/{UNIT}", _unit())
    assert host.systemctl("daemon-reload").returncode == 0
    try:
        started = host.systemctl("start", UNIT)  # Type=notify: returns once READY=1 arrived
        assert started.returncode == 0, (
            started.stderr + host.nsenter("journalctl", "-u", UNIT, "-n", "30", "--no-pager").stdout
        )
        assert host.state(UNIT) == "active/running"
        assert host.show(UNIT, "NRestarts")["NRestarts"] == "0"
        # hang the loop: the pings stop, systemd aborts it (watchdog) and starts it again
        _write(lab, f"{HOME}/hang", "x")
        _wait(lambda: host.show(UNIT, "NRestarts")["NRestarts"] == "1", 20, "a watchdog restart")
        host.nsenter("rm", "-f", f"{HOME}/hang")
        host.wait_active(UNIT, within=20)
        journal = host.nsenter("journalctl", "-u", UNIT, "--no-pager").stdout
        assert "Watchdog timeout" in journal, journal[-2000:]
    finally:
        host.nsenter("rm", "-f", f"{HOME}/hang")
        host.systemctl("stop", UNIT)
