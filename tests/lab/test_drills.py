"""Drills: each catalogue failure injected into the real lab from its real cause; the daemon, run
in-process, must detect it, match the right rule, repair it over SSH against the lab's systemd,
prove the repair with a real completion, and record it all in the incident's timeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.lab import drills, faults
from supervisor.lab.lab import Lab, LabError

pytestmark = pytest.mark.slow

HEAD = "vllm-ds4-head.service@spark1"


@pytest.mark.parametrize(
    ("drill", "actions"),
    [
        ("ghost-execstart", [f"1 write_execstart_dropin on {HEAD}", "2 restart_units on ds4"]),
        ("eaddrinuse-29501", ["1 kill_processes on spark1", "2 restart_units on ds4"]),
        (
            "page-cache-starvation",
            [
                "1 drop_page_cache on spark2",
                "1 drop_page_cache on spark1",
                "2 restart_units on ds4",
            ],
        ),
        ("duplicated-mxfp4-patch", [f"1 dedupe_block on {HEAD}", "2 restart_units on ds4"]),
    ],
)
async def test_the_daemon_heals_a_real_fault_in_the_lab(
    lab: Lab, tmp_path: Path, drill: str, actions: list[str]
) -> None:
    report = await drills.run_drill(lab, drill, folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.diagnosis == f"ds4 (down): {drill} matched on {HEAD}"
    done = [s.summary.split(":")[0] for s in report.steps]
    assert done == [f"step {action}" for action in actions]
    assert all(": ok: " in s.summary for s in report.steps)
    assert all(s.exit_statuses and set(s.exit_statuses) == {0} for s in report.steps)
    assert report.outcome == "healed"
    assert report.healed
    assert report.passed
    assert report.detect_s is not None
    assert 0 < report.detect_s < 20
    assert report.heal_s is not None
    assert 0 < report.heal_s < 60


async def test_a_cold_start_inside_the_grace_is_left_alone(lab: Lab, tmp_path: Path) -> None:
    """The head relaunches with a 6s cold start (12 liveness intervals, 3 completion intervals,
    inside the 20s grace): cold-start matches, no step runs, ds4 comes back on its own."""
    report = await drills.run_drill(lab, "cold-start", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.diagnosis == f"ds4 (down): cold-start matched on {HEAD}"
    assert report.steps == ()
    assert report.escalation == ""
    assert report.attempts == 1  # cold-start's wait: no step, then a passing completion
    assert report.outcome == "healed"
    assert report.detect_s is not None
    assert 0 < report.detect_s < 10
    assert report.heal_s is not None
    assert float(faults.LONG_COLD_START.rstrip("s")) - 2 < report.heal_s < 20
    assert report.passed


async def test_a_host_that_stops_answering_ssh_escalates_without_acting(
    lab: Lab, tmp_path: Path
) -> None:
    """spark1 hangs (sshd gone, the head frozen): a host incident opens, ds4 goes unreachable
    then escalated via gsp-firmware-hang, and no step runs."""
    report = await drills.run_drill(lab, "ssh-lost", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.host_incident is not None
    assert report.incident is None  # the host's incident is the one cause
    assert report.steps == ()
    assert report.outcome is None  # no repair attempt at all
    assert report.attempts == 0
    assert report.final_state == "escalated"
    assert report.detect_s is not None
    # the host is seen lost within a second; ds4's own transition waits behind the probes of
    # the frozen head queued before it (each runs into its 2s timeout): 5-9s here
    assert 0 < report.detect_s < 20
    # no incident of its own: its diagnosis and escalation are told in the host's incident
    assert report.diagnosis.startswith("ds4 (unreachable): gsp-firmware-hang matched")
    assert "(the host's incident names it)" in report.escalation
    assert report.escalate_s is not None
    assert 0 <= report.escalate_s < 10
    assert report.passed


async def test_an_unknown_fault_gets_one_restart_then_a_person(lab: Lab, tmp_path: Path) -> None:
    """The head's start exits 1 with a text no rule knows: unknown-failure restarts the pair
    once; the fault persists (the head's start fails again), a person is called, and nothing
    more runs (still escalated, no second attempt, a few probe rounds later)."""
    report = await drills.run_drill(lab, "unknown-failure", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.diagnosis == (
        f"ds4 (down): unknown-failure matched on vllm-ds4-worker.service@spark2, {HEAD}"
    )
    failed = (
        "systemctl start vllm-ds4-head.service on spark1 failed: exit 1: Job for "
        "vllm-ds4-head.service failed because the control process exited with error code."
    )
    assert [s.summary for s in report.steps] == [f"step 1 restart_units on ds4: failed: {failed}"]
    assert report.steps[0].exit_statuses[-1] == 1
    assert report.attempts == 1
    assert report.outcome == f"failed: step 1 (restart_units on ds4): {failed}"
    assert report.escalation == (
        f"step 1 (restart_units on ds4): {failed} (runbook: runbooks/unknown-failure.md)"
    )
    assert report.final_state == "escalated"
    assert report.detect_s is not None
    assert 0 < report.detect_s < 10
    assert report.escalate_s is not None
    assert 0 < report.escalate_s < 20
    assert report.passed


def test_an_unknown_drill_is_one_plain_line() -> None:
    with pytest.raises(LabError) as caught:
        faults.get("nope")
    assert str(caught.value) == (
        "no drill 'nope' (drills: ghost-execstart, eaddrinuse-29501, page-cache-starvation, "
        "duplicated-mxfp4-patch, cold-start, ssh-lost, unknown-failure)"
    )
