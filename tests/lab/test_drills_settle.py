"""Drills of issue 19: the diagnosis waits for the restart systemd is about to make, and reads
the attempt after it. The single node's unit (`Restart=on-failure`, `RestartSec=3`) has its
ExecStart repointed at a missing script (the next start exits 127) or binary (203/EXEC), then
its running server is SIGKILLed: the death says `signal 9`, the reason it cannot come back is
the next start's.

Escalated is not deaf (issue 34): once the single node is escalated, new evidence makes the
daemon look again, and each way it can hear that evidence is pinned by a spec of its own. A
unit's death from systemd's event stream: those drills run with `progress_window: 0s`, so the
worker never reads `/metrics` and only the unit event can trigger the look. A changed `/metrics`
verdict: the unit stays active and dies no death while escalated, so only `/metrics` can. The
real lab: systemd as PID 1 and sshd on each host, the daemon in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_lab.drills import run as drills
from fleet_lab.lab import Lab
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.record.timeline.repair import (
    AttemptStarted,
    Diagnosis,
    Escalation,
    Evidence,
    Settled,
)
from supervisor.record.timeline.state import Transition
from supervisor.record.timeline.unit import UnitHeard
from tests.lab.test_drills import told_repaired

pytestmark = pytest.mark.slow

QWEN = "vllm-qwen.service@spark1"
#: The worker never reads `/metrics` (its verdict stays `unknown`, as it was when the endpoint
#: was escalated): only a unit event from systemd can be new evidence.
NO_METRICS = {"progress_window": "0s"}
#: How a look made for a unit event of the single node begins (`supervisor.worker.unit_heard`).
BY_UNIT = "new evidence: systemd: vllm-qwen.service "


@pytest.mark.parametrize(("drill", "status"), [("ghost-kill-127", 127), ("ghost-kill-203", 203)])
async def test_a_kill_into_a_ghost_is_diagnosed_from_the_next_start(
    lab: Lab, tmp_path: Path, drill: str, status: int
) -> None:
    report = await drills.run_drill(lab, drill, folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    records = [row.record for row in report.timeline]
    diagnoses = [r for r in records if isinstance(r, Diagnosis)]
    assert diagnoses[0].rule == "ghost-execstart-host", diagnoses[0].lines
    assert [r.rule for r in records if isinstance(r, AttemptStarted)] == ["ghost-execstart-host"]
    waited = [r for r in records if isinstance(r, Settled)]
    assert [(w.scope, w.outcome) for w in waited][:1] == [(QWEN, "failed again")]
    assert waited[0].before.startswith("signal 9, ")
    assert waited[0].after.startswith(f"status={status}, ")
    assert report.outcome == "healed"
    assert report.passed, report.lines()
    # no timeline carries a collector that does not apply to its host (launchd, a container)
    gathered = [r for r in records if isinstance(r, Evidence)]
    assert gathered
    assert not [e.summary for e in gathered if e.collector.startswith(("launchd", "mac_"))]
    assert not [e.summary for e in gathered if "no container" in e.error]
    assert report.detect_s is not None
    # heard at once: the wait is the diagnosis's, not the detection's (a detection that waited
    # for systemd's restart into the ghost, RestartSec=3, would be past 3 s)
    assert report.detect_s < 3


async def test_an_escalated_endpoint_whose_unit_dies_anew_heals_by_the_unit_event(
    lab: Lab, tmp_path: Path
) -> None:
    """unknown-failure spent its one restart and called a person; then the preflight is gone and
    ExecStart names a missing script: the next death says status=127, ghost-execstart-host
    matches with its budget left, and the endpoint is repaired without a person. `/metrics` is
    never read: the unit event is what made the daemon look again."""
    report = await drills.run_drill(lab, "escalated-then-ghost", folder=tmp_path, probe=NO_METRICS)
    print("\n".join(report.lines()))
    assert report.problem == ""
    records = [row.record for row in report.timeline]
    assert [r.rule for r in records if isinstance(r, AttemptStarted)] == [
        "unknown-failure",
        "ghost-execstart-host",
    ]
    moves = [r for r in records if isinstance(r, Transition)]
    back = [t for t in moves if t.trigger == "reconsider"]
    assert [(t.source, t.dest, t.rule) for t in back] == [
        ("escalated", "down", "ghost-execstart-host")
    ]
    assert back[0].note.startswith(BY_UNIT), back[0].note
    assert "status=127" in back[0].note, back[0].note
    assert back[0].note.endswith(
        "; ghost-execstart-host now matches (was escalated: unknown-failure)"
    )
    ghost = [r for r in records if isinstance(r, Diagnosis) and r.rule == "ghost-execstart-host"]
    assert ghost, [r.summary for r in records]
    assert "127" in str(ghost[0].facts), ghost[0].facts
    assert report.outcome == "healed"
    assert report.healed
    texts = report.notified.texts
    assert any(t.startswith("🆘 <b>a person is needed</b> on qwen: ") for t in texts), texts
    told = [t for t in texts if t.startswith("🔁 qwen: new evidence: ")]
    assert len(told) == 1, texts
    assert told[0].startswith(f"🔁 qwen: {BY_UNIT}"), told[0]
    assert told[0].endswith("; repairing without a person")
    assert told_repaired(texts, "qwen", "ghost-execstart-host"), texts


async def test_an_escalated_endpoint_whose_metrics_turn_hung_heals_by_the_metrics_verdict(
    lab: Lab, tmp_path: Path
) -> None:
    """Every completion answered HTTP 500 with nothing running (`/metrics`: idle): unknown-failure
    spent its one restart and called a person. Then the running engine hangs: the unit stays
    active and dies no death, `/metrics` turns hung, hung-engine matches with its budget left,
    and the endpoint is repaired without a person."""
    report = await drills.run_drill(lab, "escalated-then-hung", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    records = [row.record for row in report.timeline]
    assert [r.rule for r in records if isinstance(r, AttemptStarted)] == [
        "unknown-failure",
        "hung-engine",
    ]
    moves = [r for r in records if isinstance(r, Transition)]
    back = [t for t in moves if t.trigger == "reconsider"]
    assert [(t.source, t.dest, t.rule) for t in back] == [("escalated", "down", "hung-engine")]
    assert back[0].note.startswith("new evidence: /metrics: hung: "), back[0].note
    assert back[0].note.endswith("; hung-engine now matches (was escalated: unknown-failure)")
    # the unit event cannot be what made it look: systemd said nothing about the unit from the
    # escalation to the look (no death, not even a start)
    escalated = next(
        i for i, r in enumerate(records) if isinstance(r, Transition) and r.dest == "escalated"
    )
    looked = records.index(back[0])
    assert [r.line for r in records[escalated:looked] if isinstance(r, UnitHeard)] == []
    hung = [r for r in records if isinstance(r, Diagnosis) and r.rule == "hung-engine"]
    assert hung, [r.summary for r in records]
    assert report.outcome == "healed"
    assert report.healed
    texts = report.notified.texts
    assert any(t.startswith("🆘 <b>a person is needed</b> on qwen: ") for t in texts), texts
    told = [t for t in texts if t.startswith("🔁 qwen: new evidence: ")]
    assert len(told) == 1, texts
    assert told[0].startswith("🔁 qwen: new evidence: /metrics: hung: "), told[0]
    assert told[0].endswith("; repairing without a person")
    assert told_repaired(texts, "qwen", "hung-engine"), texts


async def test_an_escalated_endpoint_whose_evidence_changes_nothing_stays_escalated(
    lab: Lab, tmp_path: Path
) -> None:
    """The preflight now exits 2: new evidence, looked at once, and unknown-failure (spent)
    is still all that matches: no attempt, no second call for a person. `/metrics` is never
    read: the unit event (the status=2 death) is what made the daemon look again."""
    report = await drills.run_drill(
        lab, "escalated-other-status", folder=tmp_path, probe=NO_METRICS
    )
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.passed
    assert report.final_state == "escalated"
    records = [row.record for row in report.timeline]
    assert [r.rule for r in records if isinstance(r, AttemptStarted)] == ["unknown-failure"]
    still = [r for r in records if isinstance(r, Decision) and r.outcome is Outcome.STILL_ESCALATED]
    # looked again for the new status=2 death (a crash loop of status 1 before it may have been
    # looked at too) and the same rule matched
    again = [d.why for d in still if "status=2" in d.why]
    assert again, [d.summary for d in still]
    assert again[0].startswith(BY_UNIT), again[0]
    assert again[0].endswith("; unknown-failure matches again"), again[0]
    assert len(still) <= 3  # at most MAX_LOOKS looks per incident
    assert not [r for r in records if isinstance(r, Transition) and r.trigger == "reconsider"]
    assert len([r for r in records if isinstance(r, Escalation) and not r.dry_run]) == 1
    asks = [t for t in report.notified.texts if t.startswith("🆘")]
    assert len(asks) == 1, report.notified.texts
