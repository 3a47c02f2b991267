"""SIGKILL of the daemon process in the middle of a repair, then a restart: the incident stays
open, the interrupted attempt is recorded as such, no step runs twice unasked, and the repair
escalates (its budget is spent by the interrupted attempt) or runs again as a new attempt."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from supervisor.record.store.errors import StoreError
from supervisor.record.store.records import AttemptRow, SubjectKind
from supervisor.record.store.store import Store
from supervisor.record.timeline.repair import INTERRUPTED, AttemptFinished
from tests.helpers import eventually, spawn_daemon, write_fleet
from tests.ports import free_port

pytestmark = pytest.mark.slow

SLOW_RULE = """\
id: slow-fix
title: a repair that takes a while
severity: warning
applies_to: {{states: [down]}}
when:
  all:
    - {{fact: probe.reason, op: eq, value: connection refused}}
actions:
  - action: shell
    on: host
    params: {{argv: [sh, -c, "echo ran >> {marker}; sleep 2"]}}
verify: {{within: 300ms}}
mode: auto
budget: {{attempts: {attempts}, window: 1h}}
"""


async def _read(db: Path) -> tuple[str, list[AttemptRow]]:
    try:
        store = await Store.open(db, create=False)
    except StoreError:
        return "", []
    try:
        snap = await store.snapshot(SubjectKind.ENDPOINT, "m")
        return ("" if snap is None else snap.state), await store.attempts("m")
    finally:
        await store.close()


def _runs(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


@pytest.mark.parametrize(
    ("attempts", "outcomes", "runs"),
    [
        (1, ["interrupted"], 1),  # the interrupted attempt spent the budget: a person is called
        (2, ["interrupted", "not verified within 300ms"], 2),  # one new attempt, then escalated
    ],
)
async def test_sigkill_in_the_middle_of_a_repair(
    tmp_path: Path, attempts: int, outcomes: list[str], runs: int
) -> None:
    marker = tmp_path / "ran.txt"
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    (playbook / "slow.yaml").write_text(SLOW_RULE.format(marker=marker, attempts=attempts))
    url = f"http://127.0.0.1:{free_port()}"
    config = write_fleet(
        tmp_path,
        {"m": {"kind": "openai", "url": url, "model": "m", "host": "forge"}},
        remediation={"verify_every": "100ms"},
        playbook=str(playbook),
    )
    db, log = tmp_path / "state" / "supervisor.db", tmp_path / "daemon.log"
    first = await spawn_daemon(config, log)
    try:
        await eventually(lambda: _runs(marker) == 1, within=20, what="the step running")
    finally:
        first.kill()  # SIGKILL while the step sleeps
        await first.wait()
    assert first.returncode == -signal.SIGKILL
    state, rows = await _read(db)
    assert state == "remediating"
    assert [(a.rule_id, a.finished_at, a.outcome) for a in rows] == [("slow-fix", None, None)]

    second = await spawn_daemon(config, log)
    try:
        await eventually(lambda: _is_escalated(db), within=20, what="escalated after the restart")
    finally:
        second.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(second.wait(), timeout=15)
    assert code == 0, log.read_text()[-2000:]
    assert _runs(marker) == runs  # the interrupted step was not run again by itself
    store = await Store.open(db, create=False)
    try:
        incidents = await store.incidents(subject="m")
        timeline = await store.timeline(incidents[0].id)
        rows = await store.attempts("m")
    finally:
        await store.close()
    assert [(i.is_open, i.last_state) for i in incidents] == [(True, "escalated")]
    assert [a.outcome for a in rows] == outcomes
    ended = [r.record for r in timeline if isinstance(r.record, AttemptFinished)]
    assert (ended[0].attempt, ended[0].outcome) == (rows[0].id, INTERRUPTED)
    assert ended[0].summary == (
        f"attempt {rows[0].id} (slow-fix) was interrupted: the daemon stopped while it ran; "
        "its steps are not resumed"
    )
    # the step the kill cut off has its entry (written before it ran), its outcome unknown
    cut = next(i for i, r in enumerate(timeline) if r.type == "attempt_finished")
    assert [r.summary for r in timeline[:cut] if r.type in ("step_started", "step")] == [
        "step 1 shell on forge: started"
    ]
    # the last escalation says why (escalated, the endpoint may still look again at new
    # evidence before the stop: a 'still escalated' decision may follow it)
    escalations = [r.summary for r in timeline if r.type == "escalation"]
    assert escalations[-1] == (
        f"escalated: budget spent: slow-fix ran {attempts} of {attempts} times in 1h"
    )


async def _is_escalated(db: Path) -> bool:
    return (await _read(db))[0] == "escalated"
