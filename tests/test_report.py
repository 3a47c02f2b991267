"""`fleet-supervisor report`: an observe-only period summarised from a real store. A real
daemon in dry run (real SQLite file, a real closed port) leaves what it would have done and
what needed a person; a busy spell and a root command the sudoers does not allow are read from
the same store."""

from __future__ import annotations

import asyncio
import io
import json
import re
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from supervisor import cli
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.judge.machine import State, Trigger
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.parts import CommandRun
from supervisor.record.timeline.repair import StepRan
from supervisor.record.timeline.state import Transition
from supervisor.trust.needs import Needs
from supervisor.trust.report import build_report
from tests.helpers import eventually, write_fleet
from tests.ports import free_port

pytestmark = pytest.mark.slow

RESTART = """\
id: restart-it
title: restart it
severity: warning
applies_to: {endpoints: [m], states: [down]}
when: {all: [{fact: probe.reason, op: eq, value: connection refused}]}
actions:
  - action: shell
    on: host
    params: {argv: [systemctl, restart, vllm-m.service], sudo: true}
mode: auto
"""
ASK = """\
id: ask-someone
title: a person looks
severity: warning
applies_to: {endpoints: [n], states: [down]}
when: {all: [{fact: probe.reason, op: eq, value: connection refused}]}
actions:
  - action: ask_person
    params: {message: 'look at {endpoint.name}'}
mode: manual
"""


def _main(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


@pytest.fixture
async def observed(tmp_path: Path) -> Path:
    """A config whose store holds a dry run's week: m down (a rule would restart it), n down
    (its rule is manual)."""
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    (playbook / "restart.yaml").write_text(RESTART)
    (playbook / "ask.yaml").write_text(ASK)
    spec = {"kind": "openai", "model": "m", "host": "forge"}
    config = write_fleet(
        tmp_path,
        {
            "m": {**spec, "url": f"http://127.0.0.1:{free_port()}"},
            "n": {**spec, "url": f"http://127.0.0.1:{free_port()}"},
        },
        hosts={"forge": {"local": True, "user": "supervisor"}},
        remediation={"dry_run": True},
        playbook=str(playbook),
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    try:
        assert daemon.remediator is not None
        remediator = daemon.remediator
        await eventually(lambda: remediator.started("m"), what="m's dry run")
        await eventually(lambda: remediator.started("n"), what="n's dry run")
        await remediator.wait()
    finally:
        await daemon.stop()
    return config


async def test_report_lists_what_the_dry_run_would_have_done(observed: Path) -> None:
    code, out = await asyncio.to_thread(_main, "--config", str(observed), "report", "--since", "7d")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("Observe-only report, last 7d (since ")
    assert lines[0].endswith("): 2 incidents, 2 still open")
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    would = lines[lines.index("WOULD HAVE DONE") + 1]
    assert re.fullmatch(
        rf"  #\d m  {when}  rule restart-it: shell on forge: "
        r"sudo -n systemctl restart vllm-m\.service",
        would,
    ), would
    could_not = lines[
        lines.index("COULD NOT HAVE DONE") + 1 : lines.index("BUSY (load, never repaired)") - 1
    ]
    assert len(could_not) == 1
    assert re.fullmatch(
        rf"  #\d n  {when}  rule ask-someone: a person needed: .*look at n.*", could_not[0]
    ), could_not[0]
    assert lines[-1] == "  never"
    code, text = await asyncio.to_thread(_main, "--config", str(observed), "report", "--json")
    document = json.loads(text)
    assert sorted((i["subject"], i["cause"]) for i in document["incidents"]) == [
        ("m", "restart-it: restart it"),
        ("n", "ask-someone: a person looks"),
    ]
    assert [w["text"] for w in document["would_have_done"]] == [
        "rule restart-it: shell on forge: sudo -n systemctl restart vllm-m.service"
    ]


async def test_report_counts_busy_spells_and_refuses_what_sudoers_would_not_allow(
    observed: Path,
) -> None:
    config = load_config(observed)
    store = await Store.open(config.store.path, create=False)
    start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

    async def move(source: str, dest: str, at: datetime, cause: str | None = None) -> int | None:
        snapshot = Snapshot(
            kind=SubjectKind.ENDPOINT, name="b", state=dest, since=at, updated_at=at
        )
        record = Transition(source=State(source), dest=State(dest), trigger=Trigger.PASS, note=dest)
        entry = TimelineEntry(at=at, subject="b", record=record)
        done = "passed" if dest == "healthy" else None
        return await store.transition(
            snapshot=snapshot, entry=entry, open_cause=cause, close_resolution=done
        )

    try:
        incident = await move("healthy", "busy", start, cause="48 running, tokens flow")
        await move("busy", "healthy", start + timedelta(minutes=9))
        await move("healthy", "busy", start + timedelta(hours=1), cause="busy again")
        assert incident is not None
        await move("busy", "healthy", start + timedelta(hours=1, minutes=5))
        step = StepRan(
            index=0, action="shell", target="forge", ok=True, planned=True,
            commands=(
                CommandRun(host="forge", command="sudo -n rm -rf /srv", exit_status=None,
                           duration_s=0.0, dry_run=True),
            ),
        )  # fmt: skip
        await store.append(incident, TimelineEntry(at=start, subject="b", record=step))
        report = await build_report(
            store,
            since=start - timedelta(days=1),
            until=start + timedelta(days=1),
            needs=Needs(needs=(), unknown=()),
            roots=frozenset(),
        )
    finally:
        await store.close()
    assert [(b.subject, b.spells, b.total, b.longest) for b in report.busy] == [
        ("b", 2, timedelta(minutes=14), timedelta(minutes=9))
    ]
    assert [line.text for line in report.could_not if line.subject == "b"] == [
        "`rm -rf /srv` on forge as root: not in the sudoers the rules generate "
        "(fleet-supervisor sudoers)"
    ]
