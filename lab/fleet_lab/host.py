"""One simulated host: a real systemd as PID 1 in its own namespaces, with a real sshd unit.

`LabHost.up()` writes the host's folder (boot scripts, units, sshd config, the meminfo and
drop_caches files), runs `setsid -f unshare --pid --fork --mount-proc --mount --propagation
private STAGE1`, finds the namespace's PID 1 (the child of that `unshare`) and waits until its
sshd unit is active and accepts TCP. `down()` kills PID 1 (the kernel then kills everything in the
namespace), kills whatever is left in the host's cgroup and removes the cgroup.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fleet_lab import boot, containers, procs
from fleet_lab.account import Account

SSHD_UNIT = "lab-sshd.service"
SSH_PORT = 22
UP_WITHIN_S = 30.0
DOWN_WITHIN_S = 10.0

SSHD_SERVICE = f"""\
[Unit]
Description=OpenSSH server of the lab host

[Service]
ExecStartPre=/usr/sbin/sshd -t -f {boot.INSIDE}/sshd/sshd_config
ExecStart=/usr/sbin/sshd -D -e -f {boot.INSIDE}/sshd/sshd_config
ExecReload=/bin/kill -HUP $MAINPID
KillMode=process
Restart=on-failure
RuntimeDirectory=sshd
RuntimeDirectoryMode=0755
"""


class LabError(RuntimeError):
    """The lab could not do what was asked; the message says what and why, in one line."""


def _sshd_config(address: str, port: int) -> str:
    return "\n".join(
        [
            f"ListenAddress {address}",
            f"Port {port}",
            f"HostKey {boot.INSIDE}/sshd/ssh_host_ed25519_key",
            f"AuthorizedKeysFile {boot.INSIDE}/sshd/authorized_keys",
            "PidFile /run/sshd.pid",
            "StrictModes no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "MaxStartups 100",
            "LogLevel VERBOSE",
            "",
        ]
    )


@dataclass
class LabHost:
    """A simulated host `name` answering SSH on `address:port`, its files in `folder`.

    `units` maps unit file names to their text (copied into the host's `/etc/systemd/system`);
    `wants` are the units `lab.target` starts besides journald and sshd; `account`, the
    unprivileged user the host makes at boot (None: the daemon logs in as root).
    """

    name: str
    address: str
    folder: Path
    port: int = SSH_PORT
    units: dict[str, str] = field(default_factory=dict)
    wants: list[str] = field(default_factory=list)
    account: Account | None = None
    #: (the `unshare` process, the host's PID 1) as last found: checked, not searched for again
    _found: tuple[int, int] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def stage1(self) -> Path:
        return self.folder / "stage1.sh"

    @property
    def boot_argv(self) -> list[str]:
        """The `unshare` command line that runs this host (how `up` finds it again)."""
        return [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--mount",
            "--propagation",
            "private",
            str(self.stage1),
        ]

    @property
    def pid(self) -> int | None:
        """The host's PID 1 as the machine sees it, or None while it is not running. The one
        found last is checked first (three reads); only when it is gone is every process's
        command line read again (a few ms on a busy machine, at each `nsenter`)."""
        if self._found is not None and self._still(*self._found):
            return self._found[1]
        self._found = None
        for parent in procs.find(self.boot_argv):
            for child in procs.children(parent):
                if procs.alive(child):
                    self._found = (parent, child)
                    return child
        return None

    def _still(self, parent: int, child: int) -> bool:
        """Whether `parent` still runs this host and `child` is still its live PID 1."""
        return (
            procs.cmdline(parent) == self.boot_argv
            and child in procs.children(parent)
            and procs.alive(child)
        )

    def write(self, host_key: bytes, authorized_keys: str, meminfo: str) -> None:
        """Write the host's folder: boot scripts, units and masks, sshd files, meminfo."""
        folder = str(self.folder)
        if " " in folder or not self.folder.is_absolute():
            raise LabError(f"a lab folder must be an absolute path without spaces: {folder!r}")
        units = self.folder / "units"
        if units.exists():
            shutil.rmtree(units)
        units.mkdir(parents=True)
        for masked in boot.MASKED:
            (units / masked).symlink_to("/dev/null")
        all_units: Mapping[str, str] = {SSHD_UNIT: SSHD_SERVICE, **self.units}
        for unit, text in all_units.items():
            (units / unit).write_text(text)
        (units / "lab.target").write_text(boot.lab_target([SSHD_UNIT, *self.wants]))
        sshd = self.folder / "sshd"
        sshd.mkdir(exist_ok=True)
        key = sshd / "ssh_host_ed25519_key"
        key.write_bytes(host_key)
        key.chmod(0o600)
        (sshd / "authorized_keys").write_text(authorized_keys)
        (sshd / "sshd_config").write_text(_sshd_config(self.address, self.port))
        (self.folder / "meminfo").write_text(meminfo)
        (self.folder / "drop_caches").write_text("")
        (self.folder / "containers").mkdir(exist_ok=True)
        containers.write_tools(self.folder)
        self.stage1.write_text(boot.stage1(self.name, folder))
        shared = boot.hidden(boot.python_roots())
        made = ""
        if self.account is not None:
            made = self.account.boot_lines() + boot.traversable(boot.interpreter())
        stage2 = boot.stage2(self.name, folder, shared, made, address=self.address)
        (self.folder / "stage2.sh").write_text(stage2)
        self.stage1.chmod(0o755)
        (self.folder / "stage2.sh").chmod(0o755)

    def up(self, within: float = UP_WITHIN_S) -> None:
        """Boot the host (already written by `write`) and return once its sshd accepts TCP."""
        if self.pid is not None:
            return
        log = self.folder / "boot.log"
        with log.open("ab") as out:
            subprocess.run(
                ["setsid", "-f", *self.boot_argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                check=True,
            )
        deadline = time.monotonic() + within
        while not self._accepts():
            if time.monotonic() > deadline:
                tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
                state = self._sshd_state()
                self.down()
                raise LabError(
                    f"host {self.name} did not answer SSH on {self.address}:{self.port} "
                    f"within {within:g}s (sshd: {state}; boot log: {tail or 'empty'})"
                )
            time.sleep(0.05)

    def _sshd_state(self) -> str:
        return self.state(SSHD_UNIT) if self.pid is not None else "systemd not running"

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.address, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def down(self, within: float = DOWN_WITHIN_S) -> None:
        """Kill the host's PID 1 and everything left in its cgroup; remove the cgroup."""
        pid = self.pid
        if pid is not None:
            procs.kill(pid)
        procs.cgroup_kill(self.name)
        deadline = time.monotonic() + within
        while (
            (pid is not None and procs.alive(pid))
            or procs.find(self.boot_argv)
            or not procs.cgroup_remove(self.name)
        ):
            if time.monotonic() > deadline:
                raise LabError(f"host {self.name} did not stop within {within:g}s")
            time.sleep(0.02)

    def nsenter(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside the host (its mount, PID, UTS and IPC namespaces); never raises on exit
        code."""
        pid = self.pid
        if pid is None:
            raise LabError(f"host {self.name} is not running")
        return subprocess.run(
            ["nsenter", "-t", str(pid), "-m", "-p", "-u", "-i", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.nsenter("systemctl", "--no-pager", *args)

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        """`systemctl show UNIT -p P...` as a mapping."""
        result = self.systemctl("show", unit, *(f"--property={p}" for p in properties))
        shown: dict[str, str] = {}
        for line in result.stdout.splitlines():
            key, _, value = line.partition("=")
            shown[key] = value
        return shown

    def state(self, unit: str) -> str:
        """`ActiveState/SubState` of `unit`, e.g. `active/running`."""
        shown = self.show(unit, "ActiveState", "SubState")
        return f"{shown.get('ActiveState', '?')}/{shown.get('SubState', '?')}"

    def wait_active(self, unit: str, within: float = 10.0) -> None:
        """Return once `unit` is active; raise `LabError` with its state after `within` s."""
        deadline = time.monotonic() + within
        while self.systemctl("is-active", "--quiet", unit).returncode != 0:
            if time.monotonic() > deadline:
                raise LabError(
                    f"{unit} on {self.name} is not active after {within:g}s: {self.state(unit)}"
                )
            time.sleep(0.05)
