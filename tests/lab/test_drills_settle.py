"""Drills of issue 19: the diagnosis waits for the restart systemd is about to make, and reads
the attempt after it. The single node's unit (`Restart=on-failure`, `RestartSec=3`) has its
ExecStart repointed at a missing script (the next start exits 127) or binary (203/EXEC), then
its running server is SIGKILLed: the death says `signal 9`, the reason it cannot come back is
the next start's. The real lab: systemd as PID 1 and sshd on each host, the daemon in-process."""

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

pytestmark = pytest.mark.slow

QWEN = "vllm-qwen.service@spark1"


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


async def test_an_escalated_endpoint_whose_evidence_changes_to_a_known_rule_heals(
    lab: Lab, tmp_path: Path
) -> None:
    """unknown-failure spent its one restart and called a person; then the preflight is gone and
    ExecStart names a missing script: the next death says status=127, ghost-execstart-host
    matches with its budget left, and the endpoint is repaired without a person."""
    report = await drills.run_drill(lab, "escalated-then-ghost", folder=tmp_path)
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
    # the look was made for the new death (status=127), or for the /metrics verdict that
    # changed with it when that was heard first: either way ghost-execstart-host matched on 127
    assert back[0].note.startswith(
        ("new evidence: systemd: vllm-qwen.service ", "new evidence: /metrics: ")
    ), back[0].note
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
    assert told[0].endswith("; repairing without a person")
    assert "✅ qwen repair: verified: ghost-execstart-host healed it" in texts


async def test_an_escalated_endpoint_whose_evidence_changes_nothing_stays_escalated(
    lab: Lab, tmp_path: Path
) -> None:
    """The preflight now exits 2: new evidence, looked at once, and unknown-failure (spent)
    is still all that matches: no attempt, no second call for a person."""
    report = await drills.run_drill(lab, "escalated-other-status", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.passed
    assert report.final_state == "escalated"
    records = [row.record for row in report.timeline]
    assert [r.rule for r in records if isinstance(r, AttemptStarted)] == ["unknown-failure"]
    still = [r for r in records if isinstance(r, Decision) and r.outcome is Outcome.STILL_ESCALATED]
    # looked at again (the new status=2 death, or the /metrics verdict that changed with it when
    # that came first: a look while one runs is not queued) and the same rule matched
    assert any(d.why.endswith("; unknown-failure matches again") for d in still), [
        d.summary for d in still
    ]
    assert len(still) <= 3  # at most MAX_LOOKS looks per incident
    assert not [r for r in records if isinstance(r, Transition) and r.trigger == "reconsider"]
    assert len([r for r in records if isinstance(r, Escalation) and not r.dry_run]) == 1
    asks = [t for t in report.notified.texts if t.startswith("🆘")]
    assert len(asks) == 1, report.notified.texts
