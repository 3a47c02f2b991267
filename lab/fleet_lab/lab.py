"""The lab: a few simulated hosts (spark1 on 127.0.0.11, spark2 on 127.0.0.12, ...), one SSH
client key for all of them, a host key each and a known_hosts naming them.

Layout of a lab folder (absolute path, no spaces; kept out of /tmp by the CLI):

```
FOLDER/ssh/client_ed25519[.pub]   the key the daemon logs in with
FOLDER/ssh/known_hosts            every host's key at its address
FOLDER/ssh/user                   the user it logs in as (`root`, or an unprivileged account
                                  every host makes at boot: see `fleet_lab.account`)
FOLDER/hosts/NAME/                one host: boot scripts, units, sshd files, meminfo, containers
```
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from fleet_lab import account, network
from fleet_lab.host import SSH_PORT, LabError, LabHost
from supervisor.config.supervised import Host

#: The fleet's hosts and their lab addresses (on net 0: 127.0.0.11 and 127.0.0.12, see
#: `fleet_lab.network`).
ADDRESSES: Mapping[str, str] = {"spark1": network.address(11), "spark2": network.address(12)}

MEMINFO = Path("/proc/meminfo")


def _key_pair(path: Path) -> tuple[bytes, str]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    private = key.export_private_key("openssh")
    public = key.export_public_key("openssh").decode().strip()
    if path.name:
        path.write_bytes(private)
        path.chmod(0o600)
        path.with_suffix(".pub").write_text(public + "\n")
    return private, public


def check_root() -> None:
    """Raise `LabError` unless this is Linux and we are root (namespaces and mounts need it)."""
    if not Path("/proc/self/ns/pid").exists():
        raise LabError("the lab needs Linux (PID and mount namespaces)")
    if os.geteuid() != 0:
        raise LabError("the lab needs root: it mounts filesystems and starts systemd")


@dataclass
class Lab:
    """Simulated hosts under `folder`; `hosts` maps names to addresses."""

    folder: Path
    hosts: Mapping[str, LabHost] = field(default_factory=dict)
    user: str = "root"  #: who the daemon logs in as on every host

    @classmethod
    def create(
        cls,
        folder: Path,
        addresses: Mapping[str, str] = ADDRESSES,
        units: Mapping[str, Mapping[str, str]] | None = None,
        wants: Mapping[str, Iterable[str]] | None = None,
        user: str = "root",
        accounts: Mapping[str, account.Account] | None = None,
    ) -> Lab:
        """Write a new lab's folder: keys, known_hosts and every host's files (boots nothing).
        The daemon logs in as `user`; `accounts` are the unprivileged accounts hosts make at
        boot (host -> account; a `user` other than root needs one on every host)."""
        check_root()
        lacking = [h for h in addresses if user != "root" and (accounts or {}).get(h) is None]
        if lacking:
            raise LabError(f"no account {user!r} on {', '.join(lacking)}: it cannot log in there")
        folder = folder.absolute()
        ssh = folder / "ssh"
        ssh.mkdir(parents=True, exist_ok=True)
        _, client_public = _key_pair(ssh / "client_ed25519")
        meminfo = MEMINFO.read_text()
        known: list[str] = []
        hosts: dict[str, LabHost] = {}
        for name, address in addresses.items():
            host = LabHost(
                name=name,
                address=address,
                folder=folder / "hosts" / name,
                units=dict((units or {}).get(name, {})),
                wants=list((wants or {}).get(name, [])),
                account=(accounts or {}).get(name),
            )
            host.folder.mkdir(parents=True, exist_ok=True)
            host_private, host_public = _key_pair(Path())
            host.write(host_private, client_public + "\n", meminfo)
            known.append(f"{address} {host_public}")
            hosts[name] = host
        (ssh / "known_hosts").write_text("\n".join(known) + "\n")
        (ssh / "user").write_text(user + "\n")
        return cls(folder=folder, hosts=hosts, user=user)

    @classmethod
    def load(cls, folder: Path) -> Lab:
        """The lab written earlier under `folder` (e.g. by another process's `lab up`)."""
        folder = folder.absolute()
        hosts: dict[str, LabHost] = {}
        for config in sorted((folder / "hosts").glob("*/sshd/sshd_config")):
            listen = config.read_text().splitlines()[0].split()[1]
            host_folder = config.parent.parent
            hosts[host_folder.name] = LabHost(
                name=host_folder.name, address=listen, folder=host_folder
            )
        if not hosts:
            raise LabError(f"no lab in {folder}: run `fleet-supervisor lab up` first")
        user_file = folder / "ssh" / "user"
        user = user_file.read_text().strip() if user_file.exists() else "root"
        return cls(folder=folder, hosts=hosts, user=user)

    @property
    def client_key(self) -> Path:
        return self.folder / "ssh" / "client_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "ssh" / "known_hosts"

    def host(self, name: str) -> LabHost:
        try:
            return self.hosts[name]
        except KeyError:
            known = ", ".join(self.hosts)
            raise LabError(f"no lab host {name!r} (hosts: {known})") from None

    def fleet_host(self, name: str) -> Host:
        """The fleet config's view of host `name`: the lab's user over SSH, host key checked."""
        host = self.host(name)
        return Host(
            name=name,
            address=host.address,
            port=host.port,
            user=self.user,
            key=self.client_key,
            known_hosts=self.known_hosts,
        )

    def up(self) -> None:
        """Boot every host; if one fails, stop those already up and raise."""
        started: list[LabHost] = []
        try:
            for host in self.hosts.values():
                host.up()
                started.append(host)
        except BaseException:
            for host in started:
                host.down()
            raise

    def down(self) -> None:
        """Stop every host (those not running are skipped)."""
        for host in self.hosts.values():
            host.down()

    def running(self) -> dict[str, int | None]:
        """Each host's PID 1 (None when it is not running)."""
        return {name: host.pid for name, host in self.hosts.items()}


__all__ = ["ADDRESSES", "SSH_PORT", "Lab", "LabError", "LabHost", "check_root"]
