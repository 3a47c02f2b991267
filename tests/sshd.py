"""A real OpenSSH server for tests: `/usr/sbin/sshd -D -e` on a loopback address, all in tmp.

Everything it needs lives in one folder: a generated ed25519 host key, a generated client key
authorised for the current user, a known_hosts file naming the host key, the config, a pid file
and the log (sshd's `-e` output, one line per event). `stop()` kills sshd and every process it
started (connection handlers and the commands they run), so nothing outlives a test.
"""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest

from supervisor.config.supervised import Host
from tests.ports import free_port

SSHD = Path("/usr/sbin/sshd")


def skip_unless_sshd_runs() -> None:
    """Skip the calling spec where a test sshd cannot start: not installed, or not root."""
    if not SSHD.exists():
        pytest.skip(f"the OpenSSH server is not installed ({SSHD}): run scripts/setup.sh as root")
    if os.geteuid() != 0:
        pytest.skip("the sshd tests start sshd, which needs root")


PRIVSEP_DIR = Path("/run/sshd")
ADDRESS = "127.0.0.21"
START_WITHIN_S = 10.0


class SshdError(RuntimeError):
    """sshd would not start; the message holds the end of its log."""


def _write_key_pair(path: Path) -> str:
    """Write a new ed25519 private key (mode 0600) and its `.pub`; return the public line."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.write_bytes(key.export_private_key("openssh"))
    path.chmod(0o600)
    public = key.export_public_key("openssh").decode().strip()
    path.with_suffix(".pub").write_text(public + "\n")
    return public


def _children() -> dict[int, list[int]]:
    """Every process's children, read from /proc (parent pid -> child pids)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so split after it.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    """`pid`'s descendants, parents before children."""
    tree = _children()
    found: list[int] = []
    todo = list(tree.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo.extend(tree.get(child, []))
    return found


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signum)


def kill_trees(roots: list[int]) -> None:
    """SIGKILL `roots` and all their descendants. The trees are frozen (SIGSTOP) first, so no
    process can start a child that would escape."""
    frozen: list[int] = []
    while True:
        pids = [*roots, *(child for root in roots for child in descendants(root))]
        fresh = [pid for pid in pids if pid not in frozen]
        if not fresh:
            break
        _signal_all(fresh, signal.SIGSTOP)
        frozen.extend(fresh)
    _signal_all(frozen, signal.SIGKILL)
    _signal_all(frozen, signal.SIGCONT)


@dataclass
class Sshd:
    """One sshd listening on `address:port`; `start()`/`stop()` may be repeated (same port)."""

    folder: Path
    address: str = ADDRESS
    port: int = 0
    name: str = "spark1"
    user: str = field(default_factory=getpass.getuser)
    options: tuple[str, ...] = ()  #: more sshd_config lines (`MaxSessions 2`)
    _process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port(self.address)
        host_public = _write_key_pair(self.host_key)
        client_public = _write_key_pair(self.client_key)
        self.authorized_keys.write_text(client_public + "\n")
        self.known_hosts.write_text(f"[{self.address}]:{self.port} {host_public}\n")
        self.config.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.address}",
                    f"Port {self.port}",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.folder / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    "StrictModes no",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "LogLevel VERBOSE",
                    # Debian's bash, started by sshd, reads the user's ~/.bashrc unless it is a
                    # nested shell (SHLVL): root's here runs `pyenv init`, whose rehash holds a
                    # lock file, and a spec that cuts a session off mid-login left it behind:
                    # every later login waited 60 s for it. The commands under test never need it.
                    "SetEnv SHLVL=1",
                    *self.options,
                    "",
                ]
            )
        )

    @property
    def host_key(self) -> Path:
        return self.folder / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.folder / "client_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.folder / "authorized_keys"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    @property
    def config(self) -> Path:
        return self.folder / "sshd_config"

    @property
    def log(self) -> Path:
        return self.folder / "sshd.log"

    @property
    def host(self) -> Host:
        """The fleet's view of this server: key and known_hosts set, host key checked."""
        return Host(
            name=self.name,
            address=self.address,
            port=self.port,
            user=self.user,
            key=self.client_key,
            known_hosts=self.known_hosts,
        )

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def logins(self) -> int:
        """How many SSH logins sshd has accepted so far (one per client connection)."""
        if not self.log.exists():
            return 0
        return self.log.read_text(errors="replace").count("Accepted publickey for ")

    def start(self) -> None:
        """Start sshd and return once it accepts TCP connections (or raise `SshdError`)."""
        if self._process is not None:
            return
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_WITHIN_S
        while not self._accepts():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
                raise SshdError("sshd did not start: " + " | ".join(tail))
            time.sleep(0.01)

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.address, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Kill sshd and everything it started; return once sshd has exited."""
        process, self._process = self._process, None
        if process is None:
            return
        kill_trees([process.pid])
        process.wait(timeout=10)

    def drop_connections(self) -> int:
        """Kill the processes serving client connections (and the commands they run), as if
        the link died; sshd itself keeps listening. Returns how many connections there were."""
        if self._process is None:
            return 0
        handlers = _children().get(self._process.pid, [])
        kill_trees(handlers)
        return len(handlers)
