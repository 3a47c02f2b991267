"""Simulated hosts: a real systemd as PID 1 in its own namespaces, reached with nsenter and over
its own real sshd, fenced off from the machine, and gone without a trace after `down`."""

from __future__ import annotations

import asyncio
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest

from fleet_lab import account, boot, fleet, procs
from fleet_lab.drills.config import install_sudoers, write_config
from fleet_lab.lab import Lab, LabError, LabHost
from supervisor.config.loader import load_config
from supervisor.execute.ssh import SshExecutor

pytestmark = pytest.mark.slow

SECOND = timedelta(seconds=10)


def test_each_host_runs_systemd_as_pid_1_with_its_sshd_and_the_masks(lab: Lab) -> None:
    for name, host in lab.hosts.items():
        assert host.nsenter("cat", "/proc/1/comm").stdout == "systemd\n"
        assert host.state("lab-sshd.service") == "active/running"
        host.wait_active("lab.target", within=30)  # the Mac's login (a oneshot) may still run
        assert host.state("lab.target") == "active/active"
        shown = host.show("systemd-tmpfiles-setup.service", "LoadState", "ActiveState")
        assert shown == {"LoadState": "masked", "ActiveState": "inactive"}
        assert host.nsenter("hostname").stdout == f"{name}\n"
    assert socket.gethostname() not in lab.hosts  # the machine keeps its own name


async def test_the_daemon_logs_in_as_an_unprivileged_user_with_the_host_key_checked(
    lab: Lab,
) -> None:
    executor = SshExecutor()
    try:
        for name in lab.hosts:
            result = await executor.run(
                lab.fleet_host(name), ["systemctl", "is-active", "lab-sshd.service"], timeout=SECOND
            )
            assert (result.exit_status, result.stdout, result.error) == (0, "active\n", "")
            who = await executor.run(lab.fleet_host(name), ["id", "-u", "-n"], timeout=SECOND)
            assert who.stdout == f"{account.USER}\n"
            uid = await executor.run(lab.fleet_host(name), ["id", "-u"], timeout=SECOND)
            assert uid.stdout == f"{account.UID}\n"
    finally:
        await executor.close()


async def test_its_systemctl_show_needs_the_system_bus_and_sudo_only_what_is_generated(
    lab: Lab, tmp_path: Path
) -> None:
    """Unprivileged, `systemctl show` asks systemd over the system bus (root's `systemctl`
    uses systemd's private socket): without dbus it cannot. Its sudo rights are exactly the
    generated file's: a command the rules name is allowed, another refused."""
    spark1 = lab.host("spark1")
    host = lab.fleet_host("spark1")
    show = ["systemctl", "show", "lab-sshd.service", "-p", "ActiveState"]
    executor = SshExecutor()
    try:
        config = load_config(write_config(lab, tmp_path, endpoint="qwen"))
        await asyncio.to_thread(install_sudoers, lab, config)
        shown = await executor.run(host, show, timeout=SECOND)
        assert shown.stdout == "ActiveState=active\n"
        spark1.systemctl("stop", "dbus.socket", "dbus.service")
        try:
            shown = await executor.run(host, show, timeout=SECOND)
            # its socket file left behind: refused; removed: no such file
            assert shown.stderr.startswith("Failed to connect to bus: "), shown.stderr
            as_root = await executor.run(host, show, timeout=SECOND, sudo=True)
            assert as_root.stderr == "sudo: a password is required\n"
        finally:
            spark1.systemctl("start", "dbus.socket")
        allowed = ["systemctl", "stop", "vllm-qwen.service"]
        listed = await executor.run(host, ["sudo", "-n", "-l", "--", *allowed], timeout=SECOND)
        assert (listed.exit_status, listed.stdout) == (
            0,
            "/usr/bin/systemctl stop vllm-qwen.service\n",
        )
        other = ["systemctl", "stop", "lab-sshd.service"]
        refused = await executor.run(host, ["sudo", "-n", "-l", "--", *other], timeout=SECOND)
        assert refused.exit_status == 1
        installed = spark1.nsenter("stat", "-c", "%U %a", account.SUDOERS).stdout
        assert installed == "root 440\n"
    finally:
        await executor.close()


def test_a_host_cannot_change_the_machine(lab: Lab, tmp_path: Path) -> None:
    host = lab.host("spark1")
    marker = tmp_path / "written-inside"
    in_checkout = Path(__file__).with_name("written-inside")
    # The host's /tmp is its own tmpfs; the checkout and the rest of the disk are its overlay,
    # except a checkout a private folder would hide (under /tmp), bound in read-only
    for path, bound in ((marker, False), (in_checkout, bool(boot.hidden([str(in_checkout)])))):
        script = f"mkdir -p {path.parent} && echo x > {path} && cat {path}"
        result = host.nsenter("sh", "-c", script)
        if bound:
            assert "Read-only file system" in result.stderr, result
        else:
            assert result.stdout == "x\n", result
        assert not path.exists()
    sysctl = host.nsenter("sh", "-c", "echo 1 > /proc/sys/vm/swappiness")
    assert "Read-only file system" in sysctl.stderr
    devices = {"fd", "full", "null", "ptmx", "pts", "random", "shm", "tty", "urandom", "zero"}
    streams = {"stdin", "stdout", "stderr"}  # systemd's own links, in the host's tmpfs /dev
    assert set(host.nsenter("ls", "/dev").stdout.split()) == devices | streams


def test_drop_caches_and_meminfo_are_the_hosts_own_files(lab: Lab) -> None:
    host = lab.host("spark2")
    (host.folder / "meminfo").write_text("MemTotal: 131072000 kB\nMemFree: 4980000 kB\n")
    assert host.nsenter("grep", "MemFree", "/proc/meminfo").stdout == "MemFree: 4980000 kB\n"
    host.nsenter("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches")
    assert (host.folder / "drop_caches").read_text() == "3\n"


def test_wait_active_names_the_unit_and_its_state(lab: Lab) -> None:
    with pytest.raises(LabError) as caught:
        lab.host("spark1").wait_active("nothing-here.service", within=0.2)
    assert str(caught.value) == (
        "nothing-here.service on spark1 is not active after 0.2s: inactive/dead"
    )


def test_a_lab_leaves_nothing_behind_and_the_tmp_canary_survives(tmp_path: Path) -> None:
    canary = Path("/tmp") / f"fleet-lab-canary-{os.getpid()}"
    canary.write_text("alive\n")
    mounts_before = Path("/proc/self/mountinfo").read_text()
    hostname = socket.gethostname()
    try:
        lab = Lab.create(tmp_path / "lab", {"canary1": "127.0.0.31"})
        host = lab.host("canary1")
        lab.up()
        pid = host.pid
        assert pid is not None
        inside = [p for p in procs.pids() if procs.cgroup_of("canary1").name in _cgroup(p)]
        assert pid in inside
        assert len(inside) >= 3  # systemd, journald, sshd
        assert lab.running() == {"canary1": pid}  # the one found before, checked
        lab.down()
        assert lab.running() == {"canary1": None}  # the one found before is gone: not kept
        assert [p for p in inside if procs.alive(p)] == []
        assert procs.find(host.boot_argv) == []
        assert not procs.cgroup_of("canary1").exists()
        assert Path("/proc/self/mountinfo").read_text() == mounts_before
        assert canary.read_text() == "alive\n"
        assert socket.gethostname() == hostname
        assert not Path("/dev/log").exists()
    finally:
        canary.unlink()


def _cgroup(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: Lab.load(p), "no lab in {p}: run `fleet-supervisor lab up` first"),
        (
            lambda p: Lab(folder=p).host("spark9"),
            "no lab host 'spark9' (hosts: )",
        ),
        (
            lambda p: LabHost("a", "127.0.0.41", p / "with space").write(b"", "", ""),
            "a lab folder must be an absolute path without spaces: '{p}/with space'",
        ),
        (
            lambda p: LabHost("a", "127.0.0.41", p).nsenter("true"),
            "host a is not running",
        ),
    ],
)
def test_lab_errors_are_one_plain_line(tmp_path: Path, make: object, message: str) -> None:
    with pytest.raises(LabError) as caught:
        make(tmp_path)  # type: ignore[operator]
    assert str(caught.value) == message.format(p=tmp_path)


def test_the_lab_logs_in_as_fleet_or_as_root_and_a_loaded_lab_remembers_which(
    tmp_path: Path,
) -> None:
    """Writes the lab's folders only (boots nothing)."""
    unprivileged = fleet.create(tmp_path / "fleet")
    assert unprivileged.fleet_host("spark1").user == "fleet"
    assert Lab.load(unprivileged.folder).fleet_host("m3ultra").user == "fleet"
    stage2 = (unprivileged.folder / "hosts" / "spark2" / "stage2.sh").read_text()
    assert (
        'useradd --root "$R" --uid 501 --user-group --create-home --home-dir /home/fleet '
        "--shell /bin/bash --password '*' fleet\n" in stage2
    )
    mac = (unprivileged.folder / "hosts" / "m3ultra" / "stage2.sh").read_text()
    assert "--home-dir /Users/fleet" in mac
    as_root = fleet.create(tmp_path / "root", user="root")
    assert Lab.load(as_root.folder).fleet_host("spark1").user == "root"
    with pytest.raises(LabError) as refused:
        fleet.create(tmp_path / "bob", user="bob")
    assert str(refused.value) == "the lab logs in as root or fleet, not 'bob'"
