"""Shared fixtures: in-process vLLM-shaped servers on 127.0.0.1, stopped at teardown; and the one
line the run ends with when it skipped something (`tests.skips`)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from fleet_lab import netns
from fleet_lab.vllm_sim.server import Flavour, SimBehaviour, VllmSim
from supervisor.core.httpclient import HttpClient
from supervisor.record.store.target import StoreTarget
from tests.pgserver import PgServer
from tests.pgserver import unavailable as pg_unavailable
from tests.skips import reason, skip_line, strict_line
from tests.sshd import Sshd, skip_unless_sshd_runs

FAST_TOK_S = 2000.0


class SimFactory(Protocol):
    async def __call__(
        self,
        behaviour: SimBehaviour | None = None,
        *,
        model: str = "sim-model",
        flavour: Flavour = "vllm",
        port: int = 0,
    ) -> VllmSim: ...


def _lab_net_of_this_worker() -> None:
    """A pytest-xdist worker boots its labs on a net of its own (`fleet_lab.network`: worker gwN
    on net N + 1, after any net set for the run), so the lab specs split across workers run
    side by side. Before any spec module imports `fleet_lab.network`, which reads it once."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if "fleet_lab.network" in sys.modules:
        raise RuntimeError("tests/conftest.py sets the lab net before fleet_lab.network is read")
    if worker.startswith("gw") and worker[2:].isdigit():
        base = int(os.environ.get(LAB_NET, "0") or 0)
        os.environ[LAB_NET] = str(base + int(worker[2:]) + 1)


LAB_NET = "FLEET_LAB_NET"
_lab_net_of_this_worker()


def _own_network_namespace() -> None:
    """With `FLEET_LAB_NETNS=1` (scripts/test.sh sets it, as root, for the lab's workers), this
    process moves into a network namespace of its own before any spec opens a socket, so that
    its lab and another worker's do not see each other's listeners (`fleet_lab.netns`)."""
    if netns.wanted() and os.geteuid() == 0:
        try:
            netns.enter_own()
        except netns.NetnsError as exc:
            raise pytest.UsageError(str(exc)) from None


_own_network_namespace()


@pytest.fixture
async def sim_factory() -> AsyncIterator[SimFactory]:
    """Start more sims (fast tok/s, reasoning on unless `behaviour` says otherwise)."""
    started: list[VllmSim] = []

    async def make(
        behaviour: SimBehaviour | None = None,
        *,
        model: str = "sim-model",
        flavour: Flavour = "vllm",
        port: int = 0,
    ) -> VllmSim:
        server = VllmSim(behaviour or SimBehaviour(tok_s=FAST_TOK_S), model=model, flavour=flavour)
        started.append(server)
        await server.start("127.0.0.1", port)
        return server

    yield make
    for server in started:
        await server.stop()


@pytest.fixture
async def sim(sim_factory: SimFactory) -> VllmSim:
    """An in-process vLLM sim on 127.0.0.1 (port 0): model `sim-model`, reasoning on, fast."""
    return await sim_factory()


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    """A real OpenSSH server on 127.0.0.21 (free port), everything in `tmp_path / "sshd"`:
    `.host` logs in as the current user with a generated key and checks the host key."""
    skip_unless_sshd_runs()
    server = Sshd(tmp_path / "sshd")
    server.start()
    yield server
    server.stop()


@functools.cache
def sudo_refused() -> str | None:
    """Why `sudo -n` cannot run commands here (None when it can: root, or passwordless sudo)."""
    if os.geteuid() == 0:
        return None
    try:
        ran = subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False, timeout=10)
    except FileNotFoundError:
        return "needs sudo -n: sudo is not installed"
    return None if ran.returncode == 0 else "needs sudo -n: sudo asks this user for a password"


WAIT_FIRST = (
    "tests/test_leadership_chaos.py",
    "tests/test_leadership_fence.py",
    "tests/test_install.py",
    "tests/test_demo.py",
    "tests/test_ops_deploy.py",
    "tests/test_busy.py",
    "tests/test_web_page.py",
    "tests/test_bench_smoke.py",  # not beside the chaos specs: its own leadership run times out
)
"""The modules whose specs mostly wait (a 60 s database outage or freeze, lease expiries, a fresh
host's install, the demos, the benchmarks' smoke runs; 20-85 s each), in this order before all
others. On workers (scripts/test.sh: `--dist load --maxschedchunk 1` hands each worker two specs,
then one more each time it finishes one) they start first and side by side, so that none is left
running alone at the end of the run."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        where = item.nodeid.split("::", 1)[0]
        return WAIT_FIRST.index(where) if where in WAIT_FIRST else len(WAIT_FIRST)

    items.sort(key=rank)  # stable: each module's specs keep their order


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A spec marked `sudo` skips, with its one reason, where `sudo -n` cannot run commands."""
    if item.get_closest_marker("sudo") is not None and (why := sudo_refused()) is not None:
        pytest.skip(why)


def _skips(config: pytest.Config) -> list[str]:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter is not None else {}
    return [reason(r) for r in stats.get("skipped", []) if not hasattr(r, "wasxfail")]


def _strict_line(config: pytest.Config) -> str | None:
    strict = os.environ.get("FLEET_STRICT_SKIPS") == "1"
    return strict_line(_skips(config), os.geteuid(), platform=sys.platform, strict=strict)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """As root on Linux under the test command, a skip `tests.skips.ALLOWED` does not cover
    fails the run (a worker's reports reach the controller, which decides)."""
    if hasattr(session.config, "workerinput"):
        return
    if _strict_line(session.config) is not None and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    line = skip_line(_skips(terminalreporter.config), os.geteuid())
    if line is not None:
        terminalreporter.write_line(line)
    strict = _strict_line(terminalreporter.config)
    if strict is not None:
        terminalreporter.write_line(strict, red=True, bold=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server for the session (a temporary cluster, see `tests.pgserver`)."""
    why = pg_unavailable()
    if why is not None:
        pytest.skip(why)
    server = PgServer()
    yield server
    server.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> StoreTarget:
    """Where a store spec's store lives: a real SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "state" / "supervisor.db"
    server: PgServer = request.getfixturevalue("pg_server")
    return server.database()


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    """A probe client (`supervisor.core.httpclient`), closed after the spec."""
    async with HttpClient() as http:
        yield http
