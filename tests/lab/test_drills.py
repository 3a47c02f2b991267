"""Drills: each catalogue failure injected into the real lab from its real cause; the daemon, run
in-process, must detect it, match the right rule, repair it over SSH against the lab's systemd
(or, for the rules that are a person's job, call one and do nothing), prove the repair with a
real completion, record it all in the incident's timeline, and tell Telegram (the real
python-telegram-bot client against the Bot API stub the drill serves)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet_lab import fleet, network
from fleet_lab.drills import faults
from fleet_lab.drills import run as drills
from fleet_lab.drills.report import DrillReport
from fleet_lab.lab import Lab, LabError
from fleet_lab.mac import host as mac_host
from supervisor.record.timeline.repair import AttemptStarted, Diagnosis, Settled

pytestmark = pytest.mark.slow

HEAD = "vllm-ds4-head.service@spark1"
ASK = "🆘 <b>a person is needed</b> on ds4: "


#: What a drill's fault may rightly be taken for first, before its own rule matches. The orphan's
#: head is started into the held GPU and runs until it runs out of memory: a cold start until
#: then (active, running, port refused, never restarted), which `cold-start` waits out.
WAITED = {"orphan-enginecore": ("cold-start",)}


def _opened(report: DrillReport, state: str = "down", why: str = "connection refused") -> str:
    return f"🔴 <b>ds4</b> is {state}: {why}\nincident #{report.incident}"


#: What the first message may say a drill's endpoint does, when it is not refused connections.
SYMPTOMS = {
    # caught in the seconds between the engine's death (/health 503) and the server's exit
    "engine-death-clean-exit": ("connection refused", "HTTP 503 from /health"),
}


def _told_the_diagnosis_first(report: DrillReport, state: str = "down") -> tuple[str, ...]:
    texts = report.notified.texts
    default = "connection refused" if state == "down" else "no reasoning text"
    opened = {_opened(report, state, why) for why in SYMPTOMS.get(report.drill, (default,))}
    assert texts[0] in opened, texts
    assert texts[1] == f"🔎 ds4 diagnosis: {report.diagnosis}", texts
    return texts


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
        ("engine-death-clean-exit", ["1 restart_units on ds4"]),
        ("orphan-enginecore", ["1 kill_processes on spark1", "2 restart_units on ds4"]),
    ],
)
async def test_the_daemon_heals_a_real_fault_in_the_lab(
    lab: Lab, tmp_path: Path, drill: str, actions: list[str]
) -> None:
    report = await drills.run_drill(lab, drill, folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.acted_on == f"ds4 (down): {drill} matched on {HEAD}"
    waited = [f"ds4 (down): {rule} matched on {HEAD}" for rule in WAITED.get(drill, ())]
    allowed = [(report.acted_on,), *((first, report.acted_on) for first in waited)]
    assert report.diagnoses in allowed, report.diagnoses
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
    texts = _told_the_diagnosis_first(report)
    assert told_repaired(texts, "ds4", drill), texts
    assert any(t.startswith("✅ <b>ds4</b> is healthy again after ") for t in texts), texts


@pytest.mark.parametrize(
    ("drill", "status"),
    [("ghost-execstart-host", "127"), ("ghost-execstart-203", "203")],
)
async def test_a_ghost_execstart_on_the_host_is_repointed_at_the_host_script(
    lab: Lab, tmp_path: Path, drill: str, status: str
) -> None:
    """The single node's unit runs a script on the host: a drop-in points it at a missing script
    (127) or binary (203/EXEC); ghost-execstart-host repoints it at the known-good host script."""
    report = await drills.run_drill(lab, drill, folder=tmp_path)
    print("\n".join(report.lines()))
    qwen = "vllm-qwen.service@spark1"
    assert report.problem == ""
    assert report.endpoint == "qwen"
    assert report.diagnosis == f"qwen (down): ghost-execstart-host matched on {qwen}"
    assert [s.summary.split(":")[0] for s in report.steps] == [
        f"step 1 write_execstart_dropin on {qwen}",
        "step 2 restart_units on qwen",
    ]
    assert f"(ExecStart=/bin/bash {fleet.QWEN_KNOWN_GOOD})" in report.steps[0].summary
    assert all(s.exit_statuses and set(s.exit_statuses) == {0} for s in report.steps)
    assert report.outcome == "healed"
    assert report.passed
    evidence = [r for r in report.timeline if r.summary.startswith("unit_status (status)")]
    assert f"ExecMainStatus={status}" in str(evidence[0].data)
    texts = report.notified.texts
    assert texts[:2] == (
        f"🔴 <b>qwen</b> is down: connection refused\nincident #{report.incident}",
        f"🔎 qwen diagnosis: {report.diagnosis}",
    )
    assert told_repaired(texts, "qwen", "ghost-execstart-host"), texts


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
    texts = _told_the_diagnosis_first(report)
    resolved = [t for t in texts if t.startswith("✅ <b>ds4</b> is healthy again after ")]
    assert len(resolved) == 1, texts
    assert resolved[0].endswith("\nfixed by: nothing we did: it recovered by itself")


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
    # the host is seen lost within a second, and its news goes ahead of ds4's queued probes
    assert 0 < report.detect_s < 20
    # no incident of its own: its diagnosis and escalation are told in the host's incident
    assert report.diagnosis.startswith("ds4 (unreachable): gsp-firmware-hang matched")
    assert "(the host's incident names it)" in report.escalation
    assert report.escalate_s is not None
    assert 0 <= report.escalate_s < 10
    assert report.passed
    # the host's incident speaks once, then asks for the power-cycle in its own thread
    texts = report.notified.texts
    assert texts[0] == (
        f"🔴 host <b>spark1</b> does not answer: connection refused on {network.address(11)}:22\n"
        "its endpoints are unreachable until it answers: ds4 (no alert per endpoint)\n"
        f"incident #{report.host_incident}"
    ), texts
    assert texts[1].startswith("🆘 <b>a person is needed</b> on ds4 (host spark1): "), texts
    assert texts[1].endswith(f"/ack {report.host_incident} stops the reminders"), texts
    assert len(texts) == 2, texts


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
    texts = _told_the_diagnosis_first(report)
    assert texts[-1].startswith(f"{ASK}step 1 (restart_units on ds4): systemctl start ")
    assert texts[-1].endswith(f"/ack {report.incident} stops the reminders")


@pytest.mark.parametrize(
    ("drill", "state", "matched_on", "runbook", "asked"),
    [
        (
            "ghost-execstart-no-known-good",
            "down",
            HEAD,
            "ghost-execstart",
            "vllm-ds4-head.service on spark1 runs /usr/bin/docker exec vllm_ds4 bash "
            "/workspace/vllm-head-090.sh, which does not exist, and no usable "
            "units[].known_good is configured: restore the launch script or set known_good.",
        ),
        (
            "fork-shm-ringbuffer",
            "down",
            HEAD,
            "fork-shm-ringbuffer",
            "vllm-ds4-head.service on spark1 fails with the ShmRingBuffer error: its launch "
            "(/usr/bin/docker exec vllm_ds4 bash /workspace/vllm-head.sh) drifted from the "
            "known-good script (fork multiproc method?). Relaunch from /workspace/vllm-head.sh "
            "and report the drift.",
        ),
        (
            "mamba-block-size",
            "down",
            HEAD,
            "mamba-block-size",
            "vllm-ds4-head.service on spark1 crash-loops on the Mamba block-size check: add "
            "--max-num-batched-tokens 8192 (at least the block size) to its launch script.",
        ),
        (
            "silent-degradation",
            "degraded",
            HEAD,
            "silent-degradation",
            # of the pair, the head serves: the message names its launch
            "ds4 is degraded (no reasoning text). vllm-ds4-head.service on spark1 runs: ",
        ),
    ],
)
async def test_a_persons_job_is_escalated_with_no_action(
    lab: Lab, tmp_path: Path, drill: str, state: str, matched_on: str, runbook: str, asked: str
) -> None:
    """A fault only a person can fix (a missing launch script with nothing known-good, a
    launch that drifted): the right manual rule matches, a person is called, nothing runs."""
    report = await drills.run_drill(lab, drill, folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.diagnosis == f"ds4 ({state}): {drill} matched on {matched_on}"
    assert report.steps == ()
    assert report.final_state == "escalated"
    assert report.escalation.startswith(asked)
    assert report.escalation.endswith(f" (runbook: runbooks/{runbook}.md)")
    assert report.detect_s is not None
    assert 0 < report.detect_s < 10
    assert report.escalate_s is not None
    # the settle waits for systemd's next restart (RestartSec=3) and its outcome (2 s), not for
    # the whole window (the start timeout plus 3 s past the restart: over 30 s); 10.4 s on 2 busy
    # cores
    assert 0 <= report.escalate_s < 20
    assert report.passed
    texts = _told_the_diagnosis_first(report, state)
    assert texts[-1].startswith(f"{ASK}{asked}")
    assert texts[-1].endswith(f"/ack {report.incident} stops the reminders")
    assert len(texts) == 3


def test_an_unknown_drill_is_one_plain_line() -> None:
    with pytest.raises(LabError) as caught:
        faults.get("nope")
    assert str(caught.value) == (
        "no drill 'nope' (drills: ghost-execstart, eaddrinuse-29501, page-cache-starvation, "
        "duplicated-mxfp4-patch, cold-start, ssh-lost, unknown-failure, ghost-execstart-host, "
        "ghost-execstart-203, ghost-kill-127, ghost-kill-203, escalated-then-ghost, "
        "escalated-then-hung, escalated-other-status, engine-death-clean-exit, orphan-enginecore, "
        "ghost-execstart-no-known-good, fork-shm-ringbuffer, mamba-block-size, "
        "silent-degradation, saturated, hung-engine, mlx-zombie, launchd-job-dead, "
        "launchd-job-crashloop, ondemand-load-fails, router-backend-dead, router-dead)"
    )


def told_repaired(texts: tuple[str, ...], endpoint: str, rule: str) -> bool:
    """Told that the repair worked: its own message, or, when a regular probe saw the endpoint
    healthy before the runner's verification was recorded (a quick heal), the all-clear's
    "fixed by" (a run of the mxfp4 drill and two of the Mac drills took that path)."""
    verified = f"✅ {endpoint} repair: verified: {rule} healed it"
    return verified in texts or f"\nfixed by: {rule} (" in texts[-1]


KIMI = "com.fleet.mlx-kimi@m3ultra"
JOB = "gui/501/com.fleet.mlx-kimi"
PRINT = f"[m3ultra] launchctl print {JOB}"


def _kimi_told(report: DrillReport, why: str) -> tuple[str, ...]:
    texts = report.notified.texts
    assert texts[:2] == (
        f"🔴 <b>kimi</b> is down: {why}\nincident #{report.incident}",
        f"🔎 kimi diagnosis: {report.diagnosis}",
    ), texts
    assert told_repaired(texts, "kimi", report.rule), texts
    return texts


async def test_a_zombie_mlx_lm_on_the_mac_gets_term_then_kickstart(
    lab: Lab, tmp_path: Path
) -> None:
    """Kimi's generation thread dies (the mlx_lm-shaped server on the Mac stand-in: /health and
    /v1/models answer, completions hang): mlx-zombie sends TERM to the job's pid, then
    kickstarts it through the stand-in launchctl; a real completion proves it."""
    report = await drills.run_drill(lab, "mlx-zombie", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.diagnosis == f"kimi (down): mlx-zombie matched on {KIMI}"
    first, second = report.steps
    pid = first.commands[1].rsplit(" ", 1)[1]
    assert first.summary == (
        f"step 1 stop_job_gracefully on kimi: ok: sent TERM to com.fleet.mlx-kimi on m3ultra "
        f"(pid {pid}); it ended"
    )
    assert first.commands == (PRINT, f"[m3ultra] kill -s TERM {pid}")
    assert second.summary.startswith("step 2 start_units on kimi: ok: ")
    assert second.commands == (PRINT, f"[m3ultra] launchctl kickstart {JOB}")
    assert first.exit_statuses == second.exit_statuses == (0, 0)
    assert report.outcome == "healed"
    assert report.passed
    assert report.detect_s is not None
    assert 0 < report.detect_s < 20
    assert report.heal_s is not None
    # ~45 s: every timeline entry of the diagnosis waits in the worker's queue behind a liveness
    # tick whose pass re-probes the hanging completion (2 s timeout)
    assert 0 < report.heal_s < 60
    evidence = [r for r in report.timeline if r.summary.startswith("launchd_job (job)")]
    assert "'pid': " + pid in str(evidence[0].data)
    _kimi_told(report, "timed out after 2s")


async def test_a_booted_out_launchd_job_is_bootstrapped_and_kickstarted(
    lab: Lab, tmp_path: Path
) -> None:
    """Kimi's job is booted out of gui/501 (the stand-in stops the server and forgets the job):
    launchd-job-dead bootstraps its plist from the SSH user's home, then kickstarts it."""
    report = await drills.run_drill(lab, "launchd-job-dead", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.diagnosis == f"kimi (down): launchd-job-dead matched on {KIMI}"
    (step,) = report.steps
    assert step.summary.startswith("step 1 start_units on kimi: ok: ")
    account = lab.hosts["m3ultra"].account
    home = account.home if lab.user != "root" and account is not None else "/root"
    assert step.commands == (
        PRINT,
        "[m3ultra] printenv HOME",
        f"[m3ultra] launchctl bootstrap gui/501 {home}/Library/LaunchAgents/{mac_host.LABEL}.plist",
        f"[m3ultra] launchctl kickstart {JOB}",
    )
    assert step.exit_statuses == (113, 0, 0, 0)  # 113: launchd does not hold the job
    assert report.outcome == "healed"
    assert report.passed
    assert report.detect_s is not None
    assert 0 < report.detect_s < 10
    assert report.heal_s is not None
    assert 0 < report.heal_s < 30
    _kimi_told(report, "connection refused")


#: mlx_lm's log time (`2026-11-28 16:51:32,737`), which the launcher writes as it starts
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"


async def test_a_kept_alive_job_that_keeps_dying_is_a_person_s(lab: Lab, tmp_path: Path) -> None:
    """Kimi's job, reloaded with KeepAlive, loses its model folder and is killed: launchd starts
    it again at once and every start dies (exit 1), 10 s apart in `spawn scheduled`. The
    diagnosis does not take the first death for an unknown failure: it waits for launchd's next
    start (runs 2 -> 3, failed again), then launchd-job-crashloop (KeepAlive, read from the
    plist) is the one rule that matches: no attempt, no step, and a person is told how the last
    run ended, what it logged and what it runs."""
    report = await drills.run_drill(lab, "launchd-job-crashloop", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    records = [row.record for row in report.timeline]
    waits = [r for r in records if isinstance(r, Settled)]
    assert [(w.scope, w.outcome, w.before, w.after, w.bound_s) for w in waits] == [
        (
            KIMI,
            "failed again",
            "exit 1, spawn scheduled, 2 runs",
            "exit 1, spawn scheduled, 3 runs",
            13.0,  # the throttle (`minimum runtime = 10`), 2 s to see a start live, 1 s slack
        )
    ]
    diagnoses = [r for r in records if isinstance(r, Diagnosis)]
    assert [d.rule for d in diagnoses] == ["launchd-job-crashloop"]
    assert records.index(waits[0]) < records.index(diagnoses[0])
    assert report.diagnoses == (f"kimi (down): launchd-job-crashloop matched on {KIMI}",)
    job = {k: v for k, v in diagnoses[0].facts[KIMI].items() if k.startswith("job.")}
    assert (job["job.state"], job["job.keep_alive"], job["job.runs"], job["job.last_exit"]) == (
        "spawn scheduled",
        True,
        3,
        "exit 1",
    )
    assert [r for r in records if isinstance(r, AttemptStarted)] == []
    assert (report.attempts, report.steps, report.outcome) == (0, (), None)
    assert report.final_state == "escalated"
    flags = " ".join(mac_host.SERVER_FLAGS)
    asked = (
        re.escape(f"{mac_host.LABEL} on m3ultra keeps dying: 3 runs, the last ended with exit 1. ")
        + re.escape("Its log says: ")
        + STAMP
        + re.escape(
            f" - INFO - Starting httpd at {mac_host.ADDRESSES['m3ultra']} on port 8013... | "
            f"{mac_host.MISSING_MODEL}. Run: {mac_host.LAUNCHER} {flags}"
        )
    )
    assert re.fullmatch(
        asked + re.escape(" (runbook: runbooks/launchd-job-dead.md)"), report.escalation
    ), report.escalation
    assert report.detect_s is not None
    assert 0 < report.detect_s < 10
    assert report.escalate_s is not None
    # launchd's next start comes a throttle (10 s) after the first death, less the detection
    assert 0 < report.escalate_s < 20
    assert report.passed
    texts = report.notified.texts
    assert texts[:2] == (
        f"🔴 <b>kimi</b> is down: connection refused\nincident #{report.incident}",
        f"🔎 kimi diagnosis: {report.diagnosis}",
    ), texts
    assert re.match(re.escape("🆘 <b>a person is needed</b> on kimi: ") + asked + "\n", texts[2])
    assert texts[2].endswith(f"/ack {report.incident} stops the reminders")
    assert len(texts) == 3, texts
