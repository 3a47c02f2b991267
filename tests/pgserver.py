"""A real PostgreSQL server for the tests: a temporary cluster (Debian's `postgresql` package),
made with initdb and started with pg_ctl on a free loopback port, as an unprivileged user (the
`postgres` system user via runuser when the tests run as root). Trust auth on 127.0.0.1 only; no
TLS (a client's default, `prefer`, asks for it and goes on without).

`PgServer.database()` makes a fresh database per test, starting the server again first when a
spec stopped it and failed before it started it (one failed chaos spec must not fail every later
spec); `restart()` stops and starts the server (the chaos specs); `close()` at the end of the
session.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from supervisor.record.store.target import PgTarget
from tests.ports import free_port

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
RUN_AS = "postgres"


def unavailable() -> str | None:
    """Why a PostgreSQL server cannot be started here, or None when it can."""
    if not PG_BIN_DIRS or not (PG_BIN_DIRS[0] / "initdb").exists():
        return "PostgreSQL is not installed (/usr/lib/postgresql/*/bin): run scripts/setup.sh"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root and there is no {RUN_AS} user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and runuser (util-linux) is missing"
    return None


class PgServer:
    def __init__(self) -> None:
        self.bin = PG_BIN_DIRS[0]
        self.root = Path(tempfile.mkdtemp(prefix="fleet-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._names = itertools.count(1)
        self.running = False
        if os.geteuid() == 0:
            user = pwd.getpwnam(RUN_AS)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "fleet", "--auth=trust", "-E", "UTF8")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", RUN_AS, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr or done.stdout}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")
        self.running = False

    def restart(self) -> None:
        self.stop()
        self.start()

    def url(self, database: str) -> str:
        """The database's store URL as a user writes it, with no `ssl`: asyncpg's default
        (`prefer`) first asks the server for TLS, which it has not, and goes on without. The
        chaos specs stop the server during that question too; what an attempt given up there
        left behind is mended in the product (`supervisor.record.store.pgengine.mend_tls_probe`,
        tests/test_store_pg_tls.py)."""
        return f"postgresql+asyncpg://fleet@127.0.0.1:{self.port}/{database}"

    def database(self) -> PgTarget:
        """A new, empty database and the target naming it."""
        if not self.running:
            self.start()
        name = f"t{os.getpid()}_{next(self._names)}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "fleet", name)
        return PgTarget(url=self.url(name))

    def close(self) -> None:
        try:
            if self.running:
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
