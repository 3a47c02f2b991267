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
from supervisor.record.timeline import AttemptStarted, Diagnosis, Settled

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
    assert report.detect_s is not None
    assert report.detect_s < 2  # heard at once: the wait is the diagnosis's, not the detection's
