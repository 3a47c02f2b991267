"""An SSH host that hangs: it accepts the TCP connection and then never sends its banner, or it
lets the daemon log in and then never answers a command (a real OpenSSH server whose every
command blocks). Each evidence collector gives up within `remediation.evidence_timeout` with a
plain error naming what hung, the diagnosis still finishes and is recorded in the incident, and
meanwhile the daemon keeps probing another endpoint on time."""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.record.store.records import TimelineRow
from supervisor.record.timeline.base import EntryKind
from supervisor.record.timeline.repair import Evidence
from tests.conftest import SimFactory
from tests.helpers import eventually, write_fleet
from tests.ports import free_port
from tests.sshd import ADDRESS, SSHD, Sshd, descendants, kill_trees

pytestmark = pytest.mark.slow

EVIDENCE_TIMEOUT = timedelta(seconds=2)
#: a probe that waited behind a hung collector waits its whole timeout: every gap between the
#: other endpoint's probes is shorter (a loaded machine's scheduling is a fraction of it)
GAP_BOUND_S = EVIDENCE_TIMEOUT.total_seconds()
LIVENESS_INTERVAL_S = 0.1

#: one collector per rule, so every one of them runs whatever the others find
RULES = {
    "journal": "{id: log, collect: journal, params: {lines: 50}}",
    "unit": "{id: st, collect: unit_status}",
    "memory": "{id: mem, collect: meminfo}",
}
RULE = """\
id: needs-{name}
title: something the host must tell
severity: critical
applies_to: {{states: [down]}}
evidence:
  - {item}
when:
  all:
    - {{fact: {fact}, op: exists, value: true}}
actions:
  - action: restart_units
mode: auto
budget: {{attempts: 1, window: 1h}}
"""
FACTS = {"journal": "log.lines", "unit": "st.active_state", "memory": "mem.mem_total_gib"}


@asynccontextmanager
async def silent_listener() -> AsyncIterator[int]:
    """Accepts TCP connections on ADDRESS and never writes a byte (no SSH banner)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the client gives up and closes
        writer.close()

    server = await asyncio.start_server(hold, ADDRESS, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in held:
            writer.close()
        await server.wait_closed()


def _fleet(tmp_path: Path, host: Mapping[str, Any], good_url: str) -> Path:
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    for name, item in RULES.items():
        text = RULE.format(name=name, item=item, fact=FACTS[name])
        (playbook / f"{name}.yaml").write_text(text)
    return write_fleet(
        tmp_path,
        {
            "bad": {
                "kind": "openai",
                "url": f"http://127.0.0.1:{free_port('127.0.0.1')}",  # nothing listens
                "model": "m",
                "units": [{"host": "spark1", "unit": "vllm-m.service"}],
            },
            # no tok/s baseline: on a loaded machine the sim streams slower (a spec ran 198.7
            # tok/s against 500), which says nothing of the hung host; the probes' gaps do
            # and its own timeout: a loaded run's 500 ms completion of the good sim timed out,
            # which says nothing of the hung host either
            "good": {"kind": "openai", "url": good_url, "model": "m", "probe": {"timeout": "5s"}},
        },
        hosts={"forge": {"local": True}, "spark1": dict(host)},
        probe={"timeout": "500ms", "liveness_interval": f"{int(LIVENESS_INTERVAL_S * 1000)}ms"},
        remediation={"dry_run": True, "evidence_timeout": "2s"},
        playbook=str(playbook),
    )


async def _diagnose_while_hung(config: Path) -> tuple[list[TimelineRow], list[float]]:
    """Run the daemon until `bad`'s diagnosis is recorded; return its incident's timeline and
    the gaps (seconds) between `good`'s liveness probes meanwhile."""
    daemon = Supervisor(load_config(config))
    await daemon.start()
    try:
        assert daemon.store is not None
        store, bad = daemon.store, daemon.workers["bad"]
        await eventually(lambda: bad.record.incident_id is not None, within=10, what="an incident")
        incident = bad.record.incident_id
        assert incident is not None

        async def diagnosed() -> bool:
            return any(r.kind is EntryKind.DIAGNOSIS for r in await store.timeline(incident))

        await eventually(diagnosed, within=15, what="the diagnosis recorded")
        timeline = await store.timeline(incident)
        samples = await store.samples("good", limit=1000)
    finally:
        await daemon.stop()
    opened = timeline[0].at
    # from the incident on, while `bad`'s host hangs (before it, a first probe on a loaded
    # machine may time out as the daemon starts)
    meanwhile = [s for s in samples if s.at >= opened]
    liveness = sorted(s.at for s in meanwhile if s.tier == "liveness")
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(liveness)]
    assert all(s.outcome == "ok" for s in meanwhile), [s.reason for s in meanwhile]
    return timeline, gaps


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _evidence(timeline: list[TimelineRow]) -> dict[str, str]:
    return {r.record.collector: r.record.error for r in timeline if isinstance(r.record, Evidence)}


def _check_timing(timeline: list[TimelineRow], gaps: list[float]) -> None:
    for row in timeline:
        if row.kind is EntryKind.EVIDENCE:
            commands = row.data["commands"]
            assert isinstance(commands, list), row.summary
            assert commands, row.summary
            for command in commands:
                assert isinstance(command, dict)
                took = command["duration_s"]
                assert isinstance(took, float)
                # the timeout ended it (a hung command would run its whole 600 s sleep)
                assert took < 2 * EVIDENCE_TIMEOUT.total_seconds(), (row.summary, took)
    diagnosis = [r for r in timeline if r.kind is EntryKind.DIAGNOSIS]
    assert [r.summary for r in diagnosis] == ["bad (down): no rule matched"]
    assert len(gaps) >= 10, "the other endpoint was hardly probed while the host hung"
    assert max(gaps) < GAP_BOUND_S, gaps


async def test_a_host_that_never_sends_its_banner(tmp_path: Path, sim_factory: SimFactory) -> None:
    good = await sim_factory(model="m")
    async with silent_listener() as port:
        host = {"address": ADDRESS, "port": port, "check_host_key": False}
        timeline, gaps = await _diagnose_while_hung(_fleet(tmp_path, host, good.url))
    hung = f"cannot connect to spark1 ({ADDRESS}:{port}): timed out after 2s"
    assert _evidence(timeline) == {
        "journal": f"journalctl failed: {hung}",
        "unit_status": f"systemctl show failed: {hung}",
        "meminfo": f"cat failed: {hung}",
    }
    _check_timing(timeline, gaps)


async def test_a_host_that_logs_in_and_never_answers_a_command(
    tmp_path: Path, sim_factory: SimFactory
) -> None:
    if not SSHD.exists() or os.geteuid() != 0:
        pytest.skip("needs the OpenSSH server and root (see tests/conftest.py::sshd)")
    sshd = Sshd(tmp_path / "sshd")
    token = f"600.{secrets.randbelow(10**9)}"  # names this test's hung commands
    with sshd.config.open("a") as config:
        config.write(f"ForceCommand exec sleep {token}\n")  # every command blocks
    sshd.start()
    try:
        good = await sim_factory(model="m")
        host = sshd.host
        spec = {
            "address": host.address,
            "port": host.port,
            "user": host.user,
            "key": str(host.key),
            "known_hosts": str(host.known_hosts),
        }
        timeline, gaps = await _diagnose_while_hung(_fleet(tmp_path, spec, good.url))
        assert sshd.logins() >= 1  # it did log in: the commands are what hung
    finally:
        sshd.stop()
        # sshd lets a command outlive its closed session; end ours (and only ours)
        kill_trees([p for p in descendants(1) if _cmdline(p) == ["sleep", token]])
    assert _evidence(timeline) == {
        "journal": "journalctl failed: timed out after 2s",
        "unit_status": "systemctl show failed: timed out after 2s",
        "meminfo": "cat failed: timed out after 2s",
    }
    _check_timing(timeline, gaps)
