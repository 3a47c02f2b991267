"""`deploy/install.sh` as a real install (no --root) in a fresh lab host, twice: the first run
creates the user, the venv, the config and state dirs and the unit, enables and starts the
service under the host's real systemd; the second changes nothing and restarts nothing.

The host is this module's own (`forge` on .21 of the lab's net, 127.0.0.21 on net 0; its folder
under /var/lib, its cgroup `forge` beside the net's hosts), never the session lab's. It runs
among the other specs, not the lab's: their workers keep the machine's network, which pip
needs (the lab's workers have a namespace of their own, `fleet_lab.netns`). The checkout
is copied into the host's folder (seen inside as /var/lib/lab/checkout). install.sh runs as `sudo`
would run it: a clean environment with sudo's PATH (so the venv is made from /usr/bin/python3, not
from an interpreter under /root that the unit's ProtectHome=yes hides), plus this machine's PIP_*
and proxy settings, so pip reaches the index this machine's pip is configured for (a machine
without one cannot run this spec).

The fleet.yaml is written before the install, as an operator would (install.sh never overwrites
it): the shipped example probes the real fleet's 192.168.1.x addresses, and lab traffic stays on
loopback. The example itself, as installed, is checked with `fleet-supervisor check`.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_lab import network
from fleet_lab.lab import Lab, LabError, LabHost, check_root

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: boots a lab host (systemd as PID 1)"),
]

REPO = Path(__file__).resolve().parent.parent
UNIT = "fleet-supervisor.service"
USER = "fleet-supervisor"
OPT = "/opt/fleet-supervisor"
INSTALL = "/var/lib/lab/checkout/deploy/install.sh"
SUDO_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED_ON = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
INSTALL_WITHIN_S = 600.0

FLEET = """\
store: {{path: /var/lib/fleet-supervisor/supervisor.db}}
playbook: {{path: {opt}/playbooks}}
http: {{enabled: true, listen: "127.0.0.1:{port}"}}
hosts:
  forge: {{local: true}}
endpoints:
  asr: {{kind: health, url: "http://127.0.0.1:9/health", host: forge}}
"""

#: What install.sh leaves, and how (mode, owner, group), besides the venv.
MODES = {
    "/etc/fleet-supervisor": f"750 root {USER}",
    "/etc/fleet-supervisor/fleet.yaml": f"640 root {USER}",
    "/etc/fleet-supervisor/env": f"640 root {USER}",
    "/var/lib/fleet-supervisor": f"750 {USER} {USER}",
    f"/etc/systemd/system/{UNIT}": "644 root root",
    f"{OPT}/playbooks": "755 root root",
    f"{OPT}/docs/fleet.example.yaml": "644 root root",
}


@pytest.fixture(scope="module")
def forge() -> Iterator[LabHost]:
    """A fresh lab host `forge`, booted for this module only, then stopped and removed."""
    try:
        check_root()
    except LabError as exc:
        pytest.skip(str(exc))
    folder = Path(f"/var/lib/fleet-lab-install-{os.getpid()}")
    lab = Lab.create(folder, addresses={"forge": network.address(21)})
    try:
        lab.up()
        yield lab.host("forge")
    finally:
        lab.down()
        shutil.rmtree(folder)


@pytest.fixture(scope="module")
def install_sh(forge: LabHost) -> str:
    """install.sh of a copy of this checkout in `forge`'s folder, as the host sees it."""
    _copy_checkout(forge.folder / "checkout")
    return INSTALL


def _copy_checkout(dest: Path) -> None:
    """What install.sh needs of this checkout, without caches (like tests/test_ops_deploy.py)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    for name in ("supervisor", "deploy", "docs", "playbooks", "runbooks"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))


def _free_port() -> int:
    """A loopback port free now (the lab host shares this machine's network namespace)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _install(host: LabHost, script: str, *extra: str) -> tuple[int, str, str]:
    """Run install.sh in `host` as `sudo` would (plus pip's settings and `extra` NAME=VALUE)."""
    passed = [f"{k}={v}" for k, v in os.environ.items() if k.startswith("PIP_") or k in PASSED_ON]
    env = ["env", "-i", f"PATH={SUDO_PATH}", "HOME=/root", "LANG=C.UTF-8", *passed, *extra]
    result = host.nsenter(*env, "sh", script, timeout=INSTALL_WITHIN_S)
    return result.returncode, result.stdout, result.stderr


def _inside(host: LabHost, *argv: str) -> str:
    result = host.nsenter(*argv)
    assert result.returncode == 0, f"{argv}: {result.stderr}"
    return result.stdout


def _journal(host: LabHost) -> str:
    return host.nsenter("journalctl", "-u", UNIT, "-n", "40", "--no-pager").stdout


def _installed_files(host: LabHost) -> str:
    """Every file install.sh manages (venv included, state dir not): path, mode, owner, mtime."""
    return _inside(
        host,
        "find", "/etc/fleet-supervisor", OPT, f"/etc/systemd/system/{UNIT}",
        "/etc/systemd/system/multi-user.target.wants",
        "-printf", "%p %m %u %g %s %T@\n",
    )  # fmt: skip


def test_install_twice_in_a_fresh_host_runs_the_service_and_changes_nothing_the_second_time(
    forge: LabHost, install_sh: str
) -> None:
    port = _free_port()
    fleet = FLEET.format(opt=OPT, port=port)
    _inside(forge, "mkdir", "-p", "/etc/fleet-supervisor")
    _inside(forge, "sh", "-c", 'printf %s "$1" >/etc/fleet-supervisor/fleet.yaml', "sh", fleet)

    code, out, err = _install(forge, install_sh)
    assert code == 0, out + err
    lines = out.splitlines()
    for line in [
        f"install.sh: created user {USER}",
        f"install.sh: created the venv {OPT}/venv",
        f"install.sh: installed fleet-supervisor from /var/lib/lab/checkout into {OPT}/venv",
        f"install.sh: wrote /etc/systemd/system/{UNIT}",
        f"install.sh: enabled {UNIT}",
        f"install.sh: started {UNIT}",
    ]:
        assert line in lines, out
    assert "install.sh: wrote /etc/fleet-supervisor/fleet.yaml" not in lines  # the operator's
    assert lines[-1].endswith(" changes")

    # Type=notify: `systemctl start` returned and the unit is running, so READY=1 came
    shown = forge.show(UNIT, "MainPID", "NRestarts", "StatusText", "UnitFileState")
    assert forge.state(UNIT) == "active/running", _journal(forge)
    assert shown["NRestarts"] == "0"
    assert shown["UnitFileState"] == "enabled"
    assert shown["StatusText"] == "supervising 1 endpoint", _journal(forge)
    main_pid = shown["MainPID"]
    assert _inside(forge, "stat", "-c", "%U", f"/proc/{main_pid}") == f"{USER}\n"
    health = _inside(forge, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                     f"http://127.0.0.1:{port}/healthz")  # fmt: skip
    assert health == "200"
    assert "playbook problem" not in _journal(forge)

    account = _inside(forge, "getent", "passwd", USER).strip().split(":")
    assert (account[5], account[6]) == ("/var/lib/fleet-supervisor", "/usr/sbin/nologin")
    assert int(account[2]) < 1000  # a system user
    for path, want in MODES.items():
        assert _inside(forge, "stat", "-c", "%a %U %G", path) == f"{want}\n", path
    # the daemon wrote its state under its umask (UMask=0027)
    db = "/var/lib/fleet-supervisor/supervisor.db"
    assert _inside(forge, "stat", "-c", "%a %U", db) == f"640 {USER}\n"

    # the example as installed: valid, and its playbook is the installed rules, all of them
    rules = len(list((REPO / "playbooks").glob("*.yaml")))
    check = forge.nsenter(
        "runuser", "-u", USER, "--", f"{OPT}/venv/bin/fleet-supervisor",
        "--config", f"{OPT}/docs/fleet.example.yaml", "check",
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{OPT}/playbooks: ok ({rules} rules)" in check.stdout, check.stdout

    before = _installed_files(forge)
    code, out, err = _install(forge, install_sh)
    assert (code, out, err) == (0, "install.sh: no change\n", "")
    assert _installed_files(forge) == before
    again = forge.show(UNIT, "MainPID", "NRestarts")
    assert forge.state(UNIT) == "active/running"
    assert again == {"MainPID": main_pid, "NRestarts": "0"}


PROTECTED_PYTHON = "/root/lab-python/python3"
PARTIAL = "/var/lib/lab/partial"


@pytest.mark.parametrize(
    ("case", "error"),
    [
        (
            "an interpreter under /root",
            f"install.sh: {PROTECTED_PYTHON} is {PROTECTED_PYTHON}, which the unit's "
            "ProtectHome=yes hides from the service: run with PYTHON=/usr/bin/python3 "
            "(or sudo, whose PATH has it)",
        ),
        (
            "a checkout without playbooks",
            f"install.sh: {PARTIAL}/playbooks is missing: run install.sh from a full checkout",
        ),
    ],
    ids=["interpreter-under-root", "no-playbooks"],
)
def test_install_refuses_before_changing_anything(
    forge: LabHost, install_sh: str, case: str, error: str
) -> None:
    if case == "an interpreter under /root":
        # a copy, not a link: realpath must stay under /root (the host's overlay: in memory)
        _inside(forge, "mkdir", "-p", str(Path(PROTECTED_PYTHON).parent))
        _inside(forge, "cp", "/usr/bin/python3.11", PROTECTED_PYTHON)
        result = _install(forge, install_sh, f"PYTHON={PROTECTED_PYTHON}")
    else:
        partial = forge.folder / "partial"
        shutil.rmtree(partial, ignore_errors=True)
        _copy_checkout(partial)
        shutil.rmtree(partial / "playbooks")
        result = _install(forge, f"{PARTIAL}/deploy/install.sh")
    assert result == (1, "", error + "\n")  # no stdout: every change is told there
